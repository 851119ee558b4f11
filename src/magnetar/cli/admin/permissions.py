"""``magnetar admin namespaces|topics grant-permission|revoke-permission|permissions`` and
the subscription-level ``grant-subscription-permission|revoke-subscription-permission``,
as ``pulsar-admin`` spells them (REST: ``.../permissions[/{role}]``, see docs/security.md).

Importing this module adds the commands to the ``namespaces`` and ``topics`` groups.
"""

from __future__ import annotations

from urllib.parse import quote

import click

from magnetar.cli.admin.context import rest
from magnetar.cli.admin.names import TOPIC, Topic, namespace_path
from magnetar.cli.admin.namespaces import NAMESPACE, namespaces
from magnetar.cli.admin.topics import topics
from magnetar.cli.output import output_option, printer

ACTIONS = ("produce", "consume", "functions", "sources", "sinks", "packages")
ROLE = click.option("--role", required=True, help="The role (a token's subject, a user, a CN).")


def _actions(value: str) -> list[str]:
    actions = [a.strip().lower() for a in value.split(",") if a.strip()]
    unknown = [a for a in actions if a not in ACTIONS]
    if unknown or not actions:
        raise click.BadParameter(
            f"expected a comma-separated list of {', '.join(ACTIONS)}", param_hint="--actions"
        )
    return actions


ACTIONS_OPTION = click.option(
    "--actions", required=True, metavar="produce,consume,...", help=", ".join(ACTIONS)
)


def _role_path(base: str, role: str) -> str:
    return f"{base}/permissions/{quote(role, safe='')}"


@namespaces.command("grant-permission")
@NAMESPACE
@ROLE
@ACTIONS_OPTION
@output_option
def ns_grant(namespace: str, role: str, actions: str) -> None:
    """Let ROLE do ACTIONS on every topic of the namespace (replaces its earlier grant)."""
    rest().post(_role_path(namespace_path(namespace), role), _actions(actions))
    printer().done(f"Granted {actions} on {namespace} to {role}", namespace=namespace, role=role)


@namespaces.command("revoke-permission")
@NAMESPACE
@ROLE
@output_option
def ns_revoke(namespace: str, role: str) -> None:
    """Take back everything granted to ROLE on the namespace."""
    rest().delete(_role_path(namespace_path(namespace), role))
    printer().done(f"Revoked {role}'s permissions on {namespace}", namespace=namespace, role=role)


@namespaces.command("permissions")
@NAMESPACE
@output_option
def ns_permissions(namespace: str) -> None:
    """Roles and the actions granted to them on the namespace."""
    printer().result(rest().get(f"{namespace_path(namespace)}/permissions"))


@namespaces.command("grant-subscription-permission")
@NAMESPACE
@click.option("--subscription", "-s", required=True)
@click.option("--roles", required=True, metavar="ROLE,...")
@output_option
def ns_grant_subscription(namespace: str, subscription: str, roles: str) -> None:
    """Only ROLES (with consume) may consume from SUBSCRIPTION in the namespace."""
    names = [r.strip() for r in roles.split(",") if r.strip()]
    path = f"{namespace_path(namespace)}/permissions/subscription/{quote(subscription, safe='')}"
    rest().post(path, names)
    printer().done(f"Subscription {subscription} limited to {', '.join(names)}")


@namespaces.command("revoke-subscription-permission")
@NAMESPACE
@click.option("--subscription", "-s", required=True)
@ROLE
@output_option
def ns_revoke_subscription(namespace: str, subscription: str, role: str) -> None:
    """Remove ROLE from SUBSCRIPTION's allowed roles."""
    sub = quote(subscription, safe="")
    rest().delete(f"{namespace_path(namespace)}/permissions/{sub}/{quote(role, safe='')}")
    printer().done(f"Removed {role} from subscription {subscription}")


@topics.command("grant-permission")
@click.argument("topic", type=TOPIC)
@ROLE
@ACTIONS_OPTION
@output_option
def topic_grant(topic: Topic, role: str, actions: str) -> None:
    """Let ROLE do ACTIONS on TOPIC (replaces its earlier grant on the topic)."""
    rest().post(_role_path(topic.path, role), _actions(actions))
    printer().done(f"Granted {actions} on {topic.full} to {role}", topic=topic.full, role=role)


@topics.command("revoke-permission")
@click.argument("topic", type=TOPIC)
@ROLE
@output_option
def topic_revoke(topic: Topic, role: str) -> None:
    """Take back what was granted to ROLE on TOPIC (namespace grants stay)."""
    rest().delete(_role_path(topic.path, role))
    printer().done(f"Revoked {role}'s permissions on {topic.full}", topic=topic.full, role=role)


@topics.command("permissions")
@click.argument("topic", type=TOPIC)
@output_option
def topic_permissions(topic: Topic) -> None:
    """Roles and their actions on TOPIC, namespace grants included."""
    printer().result(rest().get(f"{topic.path}/permissions"))
