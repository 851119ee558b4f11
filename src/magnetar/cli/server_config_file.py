"""``--config FILE`` of the server commands: Pulsar's ``broker.conf`` / ``standalone.conf`` /
``bookkeeper.conf`` (``key=value`` lines, ``#`` comments) read into the command's defaults.

Precedence, highest first: a flag on the command line; the environment (``MAGNETAR_<OPTION>``,
e.g. ``MAGNETAR_HTTP_PORT``: click's ``auto_envvar_prefix``); the file; the built-in default.
A key maps to the option of the same meaning (:data:`PULSAR_KEYS`), with Pulsar's unit
turned into the option's (``managedLedgerMinLedgerRolloverTimeMinutes`` → ms). An empty value
leaves the default (Pulsar's files list many keys without a value). Keys the command does not
take are named in one warning line on stderr and otherwise ignored, as Pulsar ignores them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import click

if TYPE_CHECKING:
    import argparse

ENV_PREFIX = "MAGNETAR"
"""``MAGNETAR_HTTP_PORT`` sets ``--http-port`` (see :func:`config_file_option`)."""

FILE_BYTES_MAX = 1024 * 1024


def _same(value: str) -> str:
    return value


def _ms_to_s(value: str) -> str:
    return str(float(value) / 1000)


def _minutes_to_ms(value: str) -> str:
    return str(int(float(value) * 60_000))


def _file_uri_path(value: str) -> str:
    """``file:///data/offload`` or a plain path → the path."""
    return value.removeprefix("file://")


PULSAR_KEYS: Final[Mapping[str, tuple[str, Callable[[str], str]]]] = {
    # broker.conf / standalone.conf
    "clusterName": ("cluster_name", _same),
    "bindAddress": ("host", _same),
    "brokerServicePort": ("port", _same),
    "brokerServicePortTls": ("tls_port", _same),
    "webServicePort": ("http_port", _same),
    "webServicePortTls": ("https_port", _same),
    "advertisedAddress": ("advertised_address", _same),
    "advertisedListeners": ("advertised_listeners", _same),
    "internalListenerName": ("internal_listener_name", _same),
    "metadataStoreUrl": ("metadata_url", _same),
    "metadataStoreSessionTimeoutMillis": ("session_timeout_s", _ms_to_s),
    "tlsCertificateFilePath": ("tls_cert_file", _same),
    "tlsKeyFilePath": ("tls_key_file", _same),
    "tlsTrustCertsFilePath": ("tls_trust_certs_file", _same),
    "tlsRequireTrustedClientCertOnConnect": ("tls_require_trusted_client_cert", _same),
    "authenticationEnabled": ("authentication_enabled", _same),
    "authenticationProviders": ("authentication_providers", _same),
    "anonymousUserRole": ("anonymous_user_role", _same),
    "tokenSecretKey": ("token_secret_key", _same),
    "tokenPublicKey": ("token_public_key", _same),
    "tokenAuthClaim": ("token_auth_claim", _same),
    "authenticationRefreshCheckSeconds": ("authentication_refresh_check_seconds", _same),
    "authorizationEnabled": ("authorization_enabled", _same),
    "superUserRoles": ("super_user_roles", _same),
    "proxyRoles": ("proxy_roles", _same),
    "brokerClientAuthenticationPlugin": ("broker_client_auth_plugin", _same),
    "brokerClientAuthenticationParameters": ("broker_client_auth_params", _same),
    "brokerDeduplicationEnabled": ("deduplication", _same),
    "brokerDeleteInactiveTopicsEnabled": ("broker_delete_inactive_topics_enabled", _same),
    "brokerDeleteInactiveTopicsFrequencySeconds": (
        "broker_delete_inactive_topics_frequency_seconds",
        _same,
    ),
    "brokerDeleteInactiveTopicsMode": ("broker_delete_inactive_topics_mode", _same),
    "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds": (
        "broker_delete_inactive_topics_max_inactive_duration_seconds",
        _same,
    ),
    "maxMessageSize": ("max_message_size", _same),
    "brokerMaxConnections": ("broker_max_connections", _same),
    "keepAliveIntervalSeconds": ("keep_alive_interval_seconds", _same),
    "brokerMaxConnectionsPerIp": ("broker_max_connections_per_ip", _same),
    "activeConsumerFailoverDelayTimeMillis": ("failover_delay_ms", _same),
    "managedLedgerDefaultEnsembleSize": ("ensemble_size", _same),
    "managedLedgerDefaultWriteQuorum": ("write_quorum", _same),
    "managedLedgerDefaultAckQuorum": ("ack_quorum", _same),
    "managedLedgerCacheSizeMB": ("managed_ledger_cache_size_mb", _same),
    "maxMessagePublishBufferSizeInMB": ("max_message_publish_buffer_size_mb", _same),
    "managedLedgerMaxEntriesPerLedger": ("managed_ledger_max_entries_per_ledger", _same),
    "managedLedgerMinLedgerRolloverTimeMinutes": (
        "managed_ledger_min_ledger_rollover_time_ms",
        _minutes_to_ms,
    ),
    "managedLedgerOffloadDriver": ("offload_driver", _same),
    "s3ManagedLedgerOffloadBucket": ("offload_bucket", _same),
    "s3ManagedLedgerOffloadRegion": ("offload_region", _same),
    "s3ManagedLedgerOffloadServiceEndpoint": ("offload_endpoint", _same),
    "fileSystemURI": ("offload_directory", _file_uri_path),
    "managedLedgerOffloadThresholdInBytes": ("offload_threshold_bytes", _same),
    "managedLedgerOffloadAutoTriggerSizeThresholdBytes": ("offload_threshold_bytes", _same),
    "managedLedgerOffloadDeletionLagMs": ("offload_deletion_lag_ms", _same),
    "managedLedgerDataReadPriority": ("offload_read_priority", _same),
    "loadBalancerBrokerOverloadedThresholdPercentage": (
        "overload_threshold_cpu_percent",
        _same,
    ),
    "bookkeeperClientRackawarePolicyEnabled": (
        "bookkeeper_client_rackaware_policy_enabled",
        _same,
    ),
    "bookkeeperClientRegionawarePolicyEnabled": (
        "bookkeeper_client_regionaware_policy_enabled",
        _same,
    ),
    "bookkeeperClientMinNumRacksPerWriteQuorum": (
        "bookkeeper_client_min_num_racks_per_write_quorum",
        _same,
    ),
    "bookkeeperClientEnforceMinNumRacksPerWriteQuorum": (
        "bookkeeper_client_enforce_min_num_racks_per_write_quorum",
        _same,
    ),
    "reppMinimumRegionsForDurability": ("repp_minimum_regions_for_durability", _same),
    "functionsWorkerEnabled": ("functions_worker", _same),
    "functionWorkerWebServiceURL": ("function_worker_web_service_url", _same),
    # proxy.conf
    "servicePort": ("port", _same),
    "servicePortTls": ("tls_port", _same),
    "brokerServiceURL": ("broker_service_url", _same),
    "brokerServiceURLTLS": ("broker_service_url_tls", _same),
    "brokerWebServiceURL": ("broker_web_service_url", _same),
    "forwardAuthorizationCredentials": ("forward_authorization_credentials", _same),
    "brokerProxyAllowedTargetPorts": ("broker_proxy_allowed_target_ports", _same),
    "maxConcurrentInboundConnections": ("max_concurrent_inbound_connections", _same),
    # functions_worker.yml (its flat ``key: value`` lines)
    "workerId": ("worker_id", _same),
    "workerHostname": ("host", _same),
    "workerPort": ("port", _same),
    "pulsarServiceUrl": ("service_url", _same),
    "pulsarWebServiceUrl": ("admin_url", _same),
    # bookkeeper.conf
    "bookiePort": ("port", _same),
    "metadataServiceUri": ("metadata_url", _same),
    "zkTimeout": ("session_timeout_s", _ms_to_s),
    "gcWaitTime": ("gc_interval_ms", _same),
    "flushInterval": ("checkpoint_interval_ms", _same),
    "logSizeLimit": ("entry_log_size_max_bytes", _same),
    "journalMaxGroupWaitMSec": ("journal_group_wait_ms", _same),
    "autoRecoveryDaemonEnabled": ("autorecovery", _same),
    "diskUsageThreshold": ("disk_usage_threshold", _same),
    "diskUsageLwmThreshold": ("disk_usage_lwm_threshold", _same),
    "bookieRack": ("rack", _same),  # Magnetar's own: BookKeeper maps racks by DNS or ZooKeeper
}
"""Pulsar's (or BookKeeper's) key → (the option's parameter name, conversion to its unit).
A key whose option a command lacks is unknown to that command."""


class ConfigFileError(ValueError):
    """The file cannot be read or a line is not ``key=value``; the message names both."""


def parse_properties(text: str, source: str) -> dict[str, str]:
    """``key=value`` (or ``key: value``) lines, ``#``/``!`` comments and blank lines
    skipped, both sides stripped; the last of a repeated key wins. Raises
    :class:`ConfigFileError` naming ``source`` and the line."""
    found: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        separators = [i for i in (line.find("="), line.find(":")) if i > 0]
        if not separators:
            raise ConfigFileError(f"{source}:{number}: not key=value: {line[:80]!r}")
        at = min(separators)
        found[line[:at].strip()] = line[at + 1 :].strip()
    return found


def default_map(
    properties: Mapping[str, str], accepted: set[str]
) -> tuple[dict[str, str], list[str]]:
    """(option parameter → value for click's ``default_map``, the keys not taken): a key is
    taken when it maps to one of the ``accepted`` parameter names; empty values are
    skipped."""
    defaults: dict[str, str] = {}
    unknown: list[str] = []
    for key, value in properties.items():
        target = PULSAR_KEYS.get(key)
        if target is None or target[0] not in accepted:
            unknown.append(key)
        elif value:
            name, convert = target
            try:
                defaults[name] = convert(value)
            except ValueError:
                raise ConfigFileError(f"{key}={value}: not a number") from None
    return defaults, unknown


def read_file(path: Path) -> dict[str, str]:
    """The properties of ``path``. Raises :class:`ConfigFileError` (also when it cannot be
    read)."""
    try:
        with path.open("rb") as f:
            data = f.read(FILE_BYTES_MAX + 1)
    except OSError as exc:
        raise ConfigFileError(f"cannot read {path}: {exc.strerror}") from None
    if len(data) > FILE_BYTES_MAX:
        raise ConfigFileError(f"{path}: larger than {FILE_BYTES_MAX} bytes")
    return parse_properties(data.decode("utf-8", errors="replace"), str(path))


def _unknown_line(command: str, path: Path, unknown: Sequence[str]) -> str:
    return f"magnetar {command}: {path}: ignoring keys this command does not take: " + ", ".join(
        unknown
    )


def _load(ctx: click.Context, param: click.Parameter, path: Path | None) -> None:
    if path is None:
        return
    accepted = {p.name for p in ctx.command.params if p.name and p is not param}
    try:
        defaults, unknown = default_map(read_file(path), accepted)
    except ConfigFileError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None
    if unknown:
        click.echo(_unknown_line(ctx.info_name or "", path, unknown), err=True)
    ctx.default_map = {**(ctx.default_map or {}), **defaults}


def config_file_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--config FILE``, read before the other options (their defaults come from it)."""
    return click.option(
        "--config",
        "config_file",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        is_eager=True,
        expose_value=False,
        allow_from_autoenv=False,
        callback=_load,
        help="Pulsar-style key=value file (broker.conf, standalone.conf, proxy.conf, "
        "bookkeeper.conf keys). Flags win over MAGNETAR_<OPTION> environment variables, which win over it.",
    )(f)


SERVER_CONTEXT: Final[dict[str, Any]] = {"auto_envvar_prefix": ENV_PREFIX}
"""``context_settings`` of a server command: ``MAGNETAR_<OPTION>`` environment variables."""


def argparse_argv(parser: argparse.ArgumentParser, argv: Sequence[str], command: str) -> list[str]:
    """``argv`` of an argparse command (``magnetar functions-worker``) with the same
    precedence as the click commands: ``--config FILE`` and ``MAGNETAR_<OPTION>`` become
    arguments put before ``argv`` (argparse keeps the last of a repeated option), the file's
    first, the environment's after. Unknown keys are named in one line on stderr. Raises
    :class:`ConfigFileError`."""
    rest, path = list(argv), None
    for i, arg in enumerate(rest):
        if arg == "--config" and i + 1 < len(rest):
            path = Path(rest[i + 1])
            del rest[i : i + 2]
            break
        if arg.startswith("--config="):
            path = Path(arg.partition("=")[2])
            del rest[i]
            break
    actions = {a.dest: a for a in parser._actions if a.option_strings and a.dest != "help"}
    values: dict[str, str] = {}
    if path is not None:
        values, unknown = default_map(read_file(path), set(actions))
        if unknown:
            print(_unknown_line(command, path, unknown), file=sys.stderr)
    for dest in actions:
        env = os.environ.get(f"{ENV_PREFIX}_{dest.upper()}")
        if env:
            values[dest] = env
    front: list[str] = []
    import argparse  # magnetar functions-worker's parser (the servers' are click's)

    for dest, value in values.items():
        action = actions[dest]
        if isinstance(action, argparse.BooleanOptionalAction):
            on = value.strip().lower() in ("1", "true", "yes", "on")
            front.append(action.option_strings[0 if on else 1])
        else:
            front += [action.option_strings[0], value]
    return front + rest
