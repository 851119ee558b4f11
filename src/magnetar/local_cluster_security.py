"""The security settings ``magnetar local-cluster`` passes on to its brokers, and the token
key and super-user token a secured local cluster makes for itself.

The command takes the servers' security options (declared once in
:data:`magnetar.auth.server_options.SERVER_AUTH_OPTIONS`) and gives every broker those that
differ from their defaults (:func:`forwarded_args`). With token authentication on and no key
named (``--authentication-enabled --authentication-providers token``, no
``--token-secret-key``/``--token-public-key``), the cluster signs its own tokens
(:class:`ClusterTokens`), as a single-machine Pulsar set-up would be made by hand:

* ``DATA_DIR/secret.key``: an HS256 key (mode 0600), made at the first start and kept, so
  tokens made with it stay valid over restarts; every broker gets ``--token-secret-key``;
* ``DATA_DIR/super-user.token``: a token (no expiry, mode 0600) for the super user, the first
  of ``--super-user-roles`` (``admin`` when none is named, which then becomes the super-user
  role); the brokers present it on their calls to each other
  (``--broker-client-auth-plugin token``) unless ``--broker-client-auth-plugin`` is given,
  and a user hands it to the CLI (``client.conf`` in the data directory names it).
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from magnetar.auth.config import AuthConfigError, ProviderName, parse_provider_names
from magnetar.auth.server_options import (
    SERVER_AUTH_OPTIONS,
    OptionKind,
    ServerAuthError,
    server_auth_from,
)
from magnetar.auth.tokens import create_token, new_secret_key

SECRET_KEY_FILE = "secret.key"
SUPER_USER_TOKEN_FILE = "super-user.token"
DEFAULT_SUPER_USER = "admin"


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterTokens:
    """The cluster's own token key and super-user token (see the module docstring)."""

    super_user: str = DEFAULT_SUPER_USER
    broker_client: bool = True
    """Whether the brokers present the super-user token on their calls to each other."""

    @staticmethod
    def key_file(data_dir: Path) -> Path:
        return data_dir / SECRET_KEY_FILE

    @staticmethod
    def token_file(data_dir: Path) -> Path:
        return data_dir / SUPER_USER_TOKEN_FILE

    def ensure(self, data_dir: Path) -> None:
        """Make the key (unless there is one) and write the super user's token, both
        readable by their owner only. Raises ``OSError``."""
        key_file = self.key_file(data_dir)
        if not key_file.exists():
            _write_private(key_file, new_secret_key())
        token = create_token(self.super_user, secret_key=key_file.read_bytes())
        _write_private(self.token_file(data_dir), token.encode())

    def broker_args(self, data_dir: Path) -> tuple[str, ...]:
        args: tuple[str, ...] = ("--token-secret-key", self.key_file(data_dir).as_uri())
        if self.broker_client:
            args += (
                "--broker-client-auth-plugin", "token",
                "--broker-client-auth-params", self.token_file(data_dir).as_uri(),
            )  # fmt: skip
        return args


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def forwarded_args(values: Mapping[str, Any]) -> tuple[str, ...]:
    """The command-line options that give a server ``values`` (keyed by
    :attr:`~magnetar.auth.server_options.OptionSpec.key`): those that differ from their
    defaults, spelled as the servers take them."""
    args: list[str] = []
    for spec in SERVER_AUTH_OPTIONS:
        value = values.get(spec.key, spec.default)
        if value == spec.default:
            continue
        if spec.kind is OptionKind.SWITCH:
            args.append(f"--{spec.name}" if value else f"--no-{spec.name}")
        elif value is not None:
            args += [f"--{spec.name}", str(value)]
    return tuple(args)


def plan_security(values: Mapping[str, Any]) -> tuple[dict[str, Any], ClusterTokens | None]:
    """The settings every broker gets and, when the cluster signs its own tokens, its
    :class:`ClusterTokens`. The settings are checked as a broker would check them (keys
    and files loaded). Raises :class:`~magnetar.auth.server_options.ServerAuthError`,
    whose message names the option at fault."""
    settings = dict(values)
    try:
        providers = parse_provider_names(settings["authentication_providers"] or "")
    except AuthConfigError as exc:
        raise ServerAuthError(str(exc)) from None
    own_tokens = (
        bool(settings["authentication_enabled"])
        and ProviderName.TOKEN in providers
        and not settings["token_secret_key"]
        and not settings["token_public_key"]
    )
    if not own_tokens:
        server_auth_from(settings)
        return settings, None
    roles = [r.strip() for r in (settings["super_user_roles"] or "").split(",") if r.strip()]
    if not roles:
        settings["super_user_roles"] = DEFAULT_SUPER_USER
    tokens = ClusterTokens(
        super_user=roles[0] if roles else DEFAULT_SUPER_USER,
        broker_client=not settings["broker_client_auth_plugin"],
    )
    # Checked with a key and a token of the kind the cluster will make: the files are
    # written only once the data directory is locked for this cluster.
    key = new_secret_key()
    checked = dict(settings, token_secret_key="data:;base64," + base64.b64encode(key).decode())
    if tokens.broker_client:
        token = create_token(tokens.super_user, secret_key=key)
        checked.update(broker_client_auth_plugin="token", broker_client_auth_params=token)
    server_auth_from(checked)
    return settings, tokens
