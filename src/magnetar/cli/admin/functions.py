"""``magnetar admin functions|sources|sinks ...`` and ``magnetar admin functions-worker ...``
(``/admin/v3/{functions|sources|sinks}`` and ``/admin/v2/worker``), spelled as pulsar-admin
spells them::

    magnetar admin functions create --tenant public --namespace default --name wc \\
        --py wordcount.py --classname wordcount.WordCount --inputs in --output out \\
        --parallelism 2
    magnetar admin functions status --fqfn public/default/wc
    magnetar admin functions stop --name wc --instance-id 1
    magnetar admin functions-worker get-cluster-leader

``--tenant``/``--namespace`` default to ``public``/``default``; ``--fqfn`` gives all three at
once. ``--output`` of ``create``/``update`` is the output topic, as in pulsar-admin (choose
the output format before the sub-command: ``magnetar admin --output json functions create``).
``querystate``/``putstate`` read and write a key of a function's state (Pulsar's
``FunctionState`` JSON); ``download`` fetches a function's package.
``--function-config-file`` (JSON) gives a whole definition; flags given beside it win.
Sources and sinks take the same flags, plus pulsar-admin's spellings ``--archive`` (the
package, or ``builtin://NAME`` for a built-in connector), ``--destination-topic-name`` (a
source's output), ``--source-type``/``--sink-type`` (a built-in connector's name) and ``--source-config``/``--sink-config`` (the connector's settings,
stored as the definition's ``userConfig``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click

from magnetar.cli.admin.context import rest
from magnetar.cli.admin.rest import AdminHttpError, FormPart
from magnetar.cli.command_group import SuggestingGroup
from magnetar.cli.output import fail, output_option, printer

_CONFIG_PART = {"functions": "functionConfig", "sources": "sourceConfig", "sinks": "sinkConfig"}
_TITLE = {"functions": "Function", "sources": "Source", "sinks": "Sink"}
BUILTIN_PREFIX = "builtin://"
PACKAGE_BYTES_MAX = 256 * 1024 * 1024
WATCH_INTERVAL_S = 1.0
"""How often ``querystate --watch`` reads the key again (pulsar-admin's pace)."""
NOT_FOUND = 404
"""The largest package the CLI reads into memory to upload (the worker has its own limit)."""


def _name_options(f: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(
        [
            click.option("--tenant", default=None, help="Default: public."),
            click.option("--namespace", default=None, help="Default: default."),
            click.option("--name", default=None),
            click.option("--fqfn", default=None, help="tenant/namespace/name at once."),
        ]
    ):
        f = option(f)
    return f


def _resolve_name(
    tenant: str | None, namespace: str | None, name: str | None, fqfn: str | None
) -> tuple[str, str, str]:
    if fqfn:
        parts = fqfn.split("/")
        if len(parts) != 3 or not all(parts):
            raise click.BadParameter("must be tenant/namespace/name", param_hint="--fqfn")
        return parts[0], parts[1], parts[2]
    if not name:
        raise click.UsageError("give --name (with --tenant and --namespace) or --fqfn")
    return tenant or "public", namespace or "default", name


def _path(kinds: str, tenant: str, namespace: str, name: str | None = None) -> str:
    path = f"/admin/v3/{kinds}/{quote(tenant, safe='')}/{quote(namespace, safe='')}"
    return path if name is None else f"{path}/{quote(name, safe='')}"


def _json_option(value: str | None, flag: str) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint=flag) from None


def _definition(kinds: str, opts: dict[str, Any]) -> dict[str, Any]:
    """The definition JSON from the config file and the flags (flags win)."""
    definition: dict[str, Any] = {}
    config_file = opts.get("function_config_file")
    if config_file is not None:
        try:
            loaded = json.loads(Path(config_file).read_text())
        except ValueError as exc:
            raise click.BadParameter(
                f"{config_file} is not JSON ({exc}); YAML is not supported",
                param_hint="--function-config-file",
            ) from None
        if not isinstance(loaded, dict):
            raise click.BadParameter(
                f"{config_file} must hold a JSON object", param_hint="--function-config-file"
            )
        definition.update(loaded)
    tenant, namespace, name = _resolve_name(
        opts["tenant"] or definition.get("tenant"),
        opts["namespace"] or definition.get("namespace"),
        opts["name"] or definition.get("name"),
        opts["fqfn"],
    )
    definition.update(tenant=tenant, namespace=namespace, name=name)
    class_name = opts.get("classname") or opts.get("connector_type")
    archive = opts.get("py")
    if class_name is None and archive is not None and archive.startswith(BUILTIN_PREFIX):
        class_name = archive  # pulsar-admin's `--archive builtin://datagen`
    simple = {
        "className": class_name,
        "output": opts.get("output"),
        "parallelism": opts.get("parallelism"),
        "processingGuarantees": opts.get("processing_guarantees"),
        "logTopic": opts.get("log_topic"),
        "deadLetterTopic": opts.get("dead_letter_topic"),
        "maxMessageRetries": opts.get("max_message_retries"),
        "subName": opts.get("subs_name"),
        "topicsPattern": opts.get("topics_pattern"),
    }
    definition.update({k: v for k, v in simple.items() if v is not None})
    if opts.get("inputs"):
        definition["inputs"] = [t.strip() for t in opts["inputs"].split(",") if t.strip()]
    user_config = _json_option(opts.get("user_config"), "--user-config")
    if user_config is not None:
        if not isinstance(user_config, dict):
            raise click.BadParameter("must be a JSON object", param_hint="--user-config")
        definition["userConfig"] = user_config
    if opts.get("auto_ack") is not None:
        definition["autoAck"] = opts["auto_ack"]
    return definition


def _upload(kinds: str, method: str, opts: dict[str, Any]) -> tuple[str, str]:
    definition = _definition(kinds, opts)
    tenant, namespace, name = definition["tenant"], definition["namespace"], definition["name"]
    parts = [FormPart(_CONFIG_PART[kinds], json.dumps(definition).encode())]
    package = opts.get("py")
    if package is not None and package.startswith(BUILTIN_PREFIX):
        if kinds == "functions":
            raise click.BadParameter("functions have no built-ins", param_hint="--py")
        package = None  # a built-in connector: nothing to upload
    if package is not None:
        path = Path(package)
        try:
            size = path.stat().st_size
            if size > PACKAGE_BYTES_MAX:
                fail(f"{package} is {size} bytes; at most {PACKAGE_BYTES_MAX} can be uploaded")
            data = path.read_bytes()
        except OSError as exc:
            fail(f"cannot read {package}: {exc.strerror or exc}")
        parts.append(FormPart("data", data, "application/octet-stream", path.name))
    rest().request(method, _path(kinds, tenant, namespace, name), form=parts)
    return f"{tenant}/{namespace}", name


def _definition_options(kinds: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    options = [
        click.option("--function-config-file", "function_config_file", default=None,
                     type=click.Path(exists=True, dir_okay=False),
                     help="The whole definition as JSON (FunctionConfig)."),
        click.option("--py", "--archive", "py", default=None,
                     help="The package: a .py file, a zip or a wheel; or builtin://NAME "
                          "(sources and sinks: a built-in connector)."),
        click.option("--classname", default=None, help="module.Class (or module.function)."),
        click.option("--inputs", default=None, help="Comma-separated input topics."),
        click.option("--topics-pattern", default=None, help="A regex of input topics."),
        click.option("--output", "--destination-topic-name", "output", default=None),
        click.option("--log-topic", default=None),
        click.option("--dead-letter-topic", default=None),
        click.option("--max-message-retries", type=int, default=None),
        click.option("--subs-name", default=None, help="The input subscription's name."),
        click.option("--parallelism", type=click.IntRange(min=1), default=None),
        click.option("--processing-guarantees", default=None,
                     type=click.Choice(["ATMOST_ONCE", "ATLEAST_ONCE", "EFFECTIVELY_ONCE",
                                        "MANUAL"], case_sensitive=False)),
        click.option("--user-config", "--source-config", "--sink-config", "user_config",
                     default=None, help="JSON object passed to the function as user config."),
        click.option("--auto-ack/--no-auto-ack", default=None),
    ]  # fmt: skip
    if kinds != "functions":
        options.append(
            click.option(
                "--source-type" if kinds == "sources" else "--sink-type",
                "connector_type",
                default=None,
                help="A built-in connector's name.",
            )
        )

    def apply(f: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            f = option(f)
        return _name_options(f)

    return apply


def _instance_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--instance-id", type=click.IntRange(min=0), default=None)(f)


def component_group(kinds: str) -> click.Group:
    """The ``functions``, ``sources`` or ``sinks`` group."""
    title = _TITLE[kinds]

    @click.group(
        kinds, cls=SuggestingGroup, help=f"{title}s of the Functions Worker (/admin/v3/{kinds})."
    )
    def group() -> None:
        pass

    @group.command("create", help=f"Create a {title.lower()} (uploads its package).")
    @_definition_options(kinds)
    def create(**opts: Any) -> None:
        ns, name = _upload(kinds, "POST", opts)
        printer().done(f"Created {name} successfully", namespace=ns, name=name)

    @group.command("update", help=f"Update a {title.lower()} (its instances restart).")
    @_definition_options(kinds)
    def update(**opts: Any) -> None:
        ns, name = _upload(kinds, "PUT", opts)
        printer().done(f"Updated {name} successfully", namespace=ns, name=name)

    @group.command("get", help=f"Show a {title.lower()}'s definition.")
    @_name_options
    @output_option
    def get(tenant: str | None, namespace: str | None, name: str | None, fqfn: str | None) -> None:
        printer().result(rest().get(_path(kinds, *_resolve_name(tenant, namespace, name, fqfn))))

    @group.command("list", help=f"List the {title.lower()}s of a namespace.")
    @click.option("--tenant", default="public", show_default=True)
    @click.option("--namespace", default="default", show_default=True)
    @output_option
    def list_(tenant: str, namespace: str) -> None:
        printer().result(rest().get(_path(kinds, tenant, namespace)))

    @group.command("delete", help=f"Delete a {title.lower()} (its instances stop).")
    @_name_options
    @output_option
    def delete(
        tenant: str | None, namespace: str | None, name: str | None, fqfn: str | None
    ) -> None:
        t, ns, n = _resolve_name(tenant, namespace, name, fqfn)
        rest().delete(_path(kinds, t, ns, n))
        printer().done(f"Deleted {n} successfully", namespace=f"{t}/{ns}", name=n)

    if kinds == "functions":

        @group.command("trigger", help="Publish a value to an input; print the function's output.")
        @_name_options
        @click.option("--trigger-value", default=None, help="The value to publish.")
        @click.option(
            "--trigger-file",
            default=None,
            type=click.Path(exists=True, dir_okay=False),
            help="A file whose bytes are the value.",
        )
        @click.option("--topic", default=None, help="The input (needed when there are several).")
        @output_option
        def trigger(
            tenant: str | None, namespace: str | None, name: str | None, fqfn: str | None,
            trigger_value: str | None, trigger_file: str | None, topic: str | None,
        ) -> None:  # fmt: skip
            if (trigger_value is None) == (trigger_file is None):
                raise click.UsageError("give exactly one of --trigger-value and --trigger-file")
            data = (
                trigger_value.encode() if trigger_value is not None
                else Path(str(trigger_file)).read_bytes()
            )  # fmt: skip
            parts = [FormPart("dataStream", data, "application/octet-stream", "value")]
            if topic is not None:
                parts.append(FormPart("topic", topic.encode(), "text/plain"))
            path = _path(kinds, *_resolve_name(tenant, namespace, name, fqfn)) + "/trigger"
            printer().result(rest().request("POST", path, form=parts))

        _add_state_commands(group)

    for verb in ("status", "stats"):
        _add_read(group, kinds, verb)
    for verb in ("start", "stop", "restart"):
        _add_control(group, kinds, verb)
    return group


def _add_read(group: click.Group, kinds: str, verb: str) -> None:
    @group.command(verb, help=f"The instances' {verb} (one with --instance-id).")
    @_name_options
    @_instance_option
    @output_option
    def read(
        tenant: str | None,
        namespace: str | None,
        name: str | None,
        fqfn: str | None,
        instance_id: int | None,
    ) -> None:
        base = _path(kinds, *_resolve_name(tenant, namespace, name, fqfn))
        if instance_id is None:
            printer().result(rest().get(f"{base}/{verb}"))
        else:
            printer().result(rest().get(f"{base}/{instance_id}/{verb}"))


def _add_control(group: click.Group, kinds: str, verb: str) -> None:
    @group.command(verb, help=f"{verb.capitalize()} every instance (or one: --instance-id).")
    @_name_options
    @_instance_option
    @output_option
    def control(
        tenant: str | None,
        namespace: str | None,
        name: str | None,
        fqfn: str | None,
        instance_id: int | None,
    ) -> None:
        t, ns, n = _resolve_name(tenant, namespace, name, fqfn)
        base = _path(kinds, t, ns, n)
        rest().post(f"{base}/{verb}" if instance_id is None else f"{base}/{instance_id}/{verb}")
        what = n if instance_id is None else f"{n} instance {instance_id}"
        past = {"start": "Started", "stop": "Stopped", "restart": "Restarted"}[verb]
        printer().done(f"{past} {what} successfully", name=n, instanceId=instance_id)


def _add_state_commands(group: click.Group) -> None:
    """``querystate``, ``putstate`` and ``download`` (functions only, as in pulsar-admin)."""

    @group.command("querystate", help="Show a key of a function's state (FunctionState JSON).")
    @_name_options
    @click.option("--key", "-k", required=True, help="The state key.")
    @click.option("--watch", "-w", is_flag=True, help="Show it again every second until Ctrl+C.")
    @output_option
    def querystate(
        tenant: str | None, namespace: str | None, name: str | None, fqfn: str | None,
        key: str, watch: bool,
    ) -> None:  # fmt: skip
        path = _path("functions", *_resolve_name(tenant, namespace, name, fqfn))
        path += f"/state/{quote(key, safe='')}"
        while True:
            try:
                printer().result(rest().get(path))
            except AdminHttpError as e:
                if not watch or e.status != NOT_FOUND:
                    raise
                click.echo(f"{e.reason or e}", err=True)  # not there yet: keep watching
            if not watch:
                return
            time.sleep(WATCH_INTERVAL_S)

    @group.command("putstate", help="Store a value in a function's state.")
    @_name_options
    @click.option(
        "--state", "-s", "state", required=True,
        help='FunctionState JSON: {"key": "k", "stringValue": "v"} (or "byteValue", base64).',
    )  # fmt: skip
    @output_option
    def putstate(
        tenant: str | None, namespace: str | None, name: str | None, fqfn: str | None, state: str
    ) -> None:
        try:
            doc = json.loads(state)
        except ValueError as e:
            raise click.BadParameter(f"not JSON: {e}", param_hint="--state") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("key"), str):
            raise click.BadParameter('a JSON object with a "key"', param_hint="--state")
        t, ns, n = _resolve_name(tenant, namespace, name, fqfn)
        path = f"{_path('functions', t, ns, n)}/state/{quote(doc['key'], safe='')}"
        rest().request("POST", path, form=[FormPart("state", state.encode())])
        printer().done(f"State of {n} updated for key {doc['key']}", name=n, key=doc["key"])

    @group.command("download", help="Download a function's package.")
    @_name_options
    @click.option(
        "--destination-file", "-d", required=True,
        type=click.Path(dir_okay=False, path_type=Path), help="Where to write the package.",
    )  # fmt: skip
    @output_option
    def download(
        tenant: str | None, namespace: str | None, name: str | None, fqfn: str | None,
        destination_file: Path,
    ) -> None:  # fmt: skip
        path = _path("functions", *_resolve_name(tenant, namespace, name, fqfn)) + "/download"
        answer = rest().request("GET", path, raw=True)
        destination_file.write_bytes(answer.body)
        printer().done(
            f"Downloaded successfully to {destination_file}",
            file=str(destination_file),
            sizeBytes=len(answer.body),
        )


functions = component_group("functions")
sources = component_group("sources")
sinks = component_group("sinks")


@click.group("functions-worker", cls=SuggestingGroup)
def functions_worker() -> None:
    """The Functions Worker cluster (/admin/v2/worker)."""


@functions_worker.command("get-cluster")
@output_option
def get_cluster() -> None:
    """The workers of the cluster (workerId, workerHostname, port)."""
    printer().result(rest().get("/admin/v2/worker/cluster"))


@functions_worker.command("get-cluster-leader")
@output_option
def get_cluster_leader() -> None:
    """The leader of the cluster."""
    printer().result(rest().get("/admin/v2/worker/cluster/leader"))


@functions_worker.command("rebalance")
@output_option
def rebalance() -> None:
    """Spread every instance anew over the workers."""
    rest().put("/admin/v2/worker/rebalance")
    printer().done("Rebalance triggered")


@functions_worker.command("drain")
@click.option("--worker-id", required=True)
@output_option
def drain(worker_id: str) -> None:
    """Move a worker's instances to the other workers."""
    rest().put("/admin/v2/worker/leader/drain", workerId=worker_id)
    printer().done(f"Drained {worker_id}", workerId=worker_id)
