"""What the server commands (``standalone``, ``broker``, ``bookie``) share before they
start serving: the checks of their common options (one usage line each), logging, uvloop.

Imports of the server side stay inside the functions: these run after the command line is
parsed, so ``--help`` and usage errors stay fast.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from magnetar.broker.listeners import AdvertisedListeners


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

log_level_option = click.option(
    "--log-level",
    default="WARNING",
    show_default=True,
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
)


def restore_stop_signals() -> None:
    """SIGINT raises KeyboardInterrupt (until a server's loop takes it over: a stop then);
    ``magnetar`` calls this first.

    A shell starts a background job (``magnetar standalone &``) with SIGINT ignored, and an
    ignored signal stays ignored across exec: without this, a Ctrl+C or ``kill -INT`` before
    the loop installs its handler (the imports, about half a second) was lost, and the
    server went on to serve.
    """
    signal.signal(signal.SIGINT, signal.default_int_handler)


def check_quorums(ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
    if not ensemble_size >= write_quorum >= ack_quorum:
        raise click.UsageError("needs --ensemble-size >= --write-quorum >= --ack-quorum")


def check_tls(
    tls_port: int | None,
    tls_cert_file: str | None,
    tls_key_file: str | None,
    tls_require_trusted_client_cert: bool,
    tls_trust_certs_file: str | None,
) -> None:
    if tls_port is not None and (tls_cert_file is None or tls_key_file is None):
        raise click.UsageError("--tls-port needs --tls-cert-file and --tls-key-file")
    if tls_require_trusted_client_cert and tls_trust_certs_file is None:
        raise click.UsageError("--tls-require-trusted-client-cert needs --tls-trust-certs-file")


def parse_listeners(
    advertised_listeners: str | None, internal_listener_name: str | None
) -> AdvertisedListeners:
    """``--advertised-listeners`` / ``--internal-listener-name``, or a usage error."""
    from magnetar.broker.listeners import ListenerConfigError, parse_advertised_listeners

    try:
        return parse_advertised_listeners(advertised_listeners, internal_listener_name)
    except ListenerConfigError as exc:
        raise click.UsageError(str(exc)) from None


def configure_logging(level: str) -> None:
    """Log lines to stderr at ``level``; above INFO, kazoo's warning on every failed
    connection attempt is kept out (the outcome is one line anyway)."""
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if logging.getLogger().level > logging.INFO:
        logging.getLogger("kazoo.client").setLevel(logging.ERROR)


def install_uvloop() -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        pass


def tls_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The TLS listener's options (``--tls-port``, its certificate, key and trust)."""
    f = click.option(
        "--tls-require-trusted-client-cert/--no-tls-require-trusted-client-cert",
        default=False,
        show_default=True,
        help="Refuse TLS clients without a certificate signed by --tls-trust-certs-file.",
    )(f)
    f = click.option(
        "--tls-trust-certs-file",
        default=None,
        type=click.Path(exists=True, dir_okay=False),
        help="PEM CA bundle that client certificates must chain to (mutual TLS).",
    )(f)
    f = click.option(
        "--tls-key-file",
        default=None,
        type=click.Path(exists=True, dir_okay=False),
        help="PEM private key (unencrypted) of --tls-cert-file.",
    )(f)
    f = click.option(
        "--tls-cert-file",
        default=None,
        type=click.Path(exists=True, dir_okay=False),
        help="PEM certificate chain of the TLS listener.",
    )(f)
    f = click.option(
        "--tls-port",
        default=None,
        type=int,
        help="TLS listener port (pulsar+ssl://; 0 = any free port). Off when not given.",
    )(f)
    return f


def listener_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--advertised-address``, ``--advertised-listeners``, ``--internal-listener-name``."""
    f = click.option(
        "--internal-listener-name",
        default=None,
        help="The advertised listener lookups without a listener name get (default: the "
        "first of --advertised-listeners).",
    )(f)
    f = click.option(
        "--advertised-listeners",
        default=None,
        metavar="NAME:URL,...",
        help="Named addresses lookups answer with, as Pulsar's advertisedListeners: e.g. "
        "internal:pulsar://10.0.0.5:6650,external:pulsar://broker.example.com:16650 "
        "(per name one pulsar:// and at most one pulsar+ssl:// URL). Clients pick one by "
        "listener name; lookups without a name get the internal listener.",
    )(f)
    f = click.option("--advertised-address", default=None, help="Host put in lookup answers.")(f)
    return f


def ledger_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """When a topic's ledger rolls over: ``--managed-ledger-max-entries-per-ledger`` (Pulsar's
    ``managedLedgerMaxEntriesPerLedger``) once it is ``--managed-ledger-min-ledger-rollover-time-ms``
    old (``managedLedgerMinLedgerRolloverTimeMinutes``)."""
    f = click.option(
        "--managed-ledger-min-ledger-rollover-time-ms",
        default=10_000,
        show_default=True,
        type=click.IntRange(min=0),
        help="A ledger rolls over for its entry count no sooner than this after it was "
        "created (managedLedgerMinLedgerRolloverTimeMinutes; 0: at the count).",
    )(f)
    f = click.option(
        "--managed-ledger-max-entries-per-ledger",
        default=50_000,
        show_default=True,
        type=click.IntRange(min=1),
        help="A topic's ledger rolls over after this many entries "
        "(managedLedgerMaxEntriesPerLedger).",
    )(f)
    return f


def memory_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--managed-ledger-cache-size-mb``: the bound of what a broker keeps in memory for
    tailing reads (Pulsar's ``managedLedgerCacheSizeMB``); ``--max-message-publish-buffer-size-mb``:
    the bound of publishes in flight (Pulsar's ``maxMessagePublishBufferSizeInMB``)."""
    from magnetar.broker.publish_buffer import DEFAULT_PUBLISH_BUFFER_SIZE_MB
    from magnetar.managed_ledger.entry_cache import DEFAULT_CACHE_SIZE_MAX_BYTES

    f = click.option(
        "--max-message-publish-buffer-size-mb",
        default=DEFAULT_PUBLISH_BUFFER_SIZE_MB,
        show_default=True,
        type=click.IntRange(min=0),
        help="MiB of published messages all connections together may have in flight to "
        "storage (maxMessagePublishBufferSizeInMB); past it the broker stops reading from "
        "every connection that publishes until half of it is stored (0: no bound).",
    )(f)

    f = click.option(
        "--managed-ledger-cache-size-mb",
        default=DEFAULT_CACHE_SIZE_MAX_BYTES // (1024 * 1024),
        show_default=True,
        type=click.IntRange(min=0),
        help="MiB of recently written entries all topics keep in memory together for "
        "consumers that keep up (managedLedgerCacheSizeMB; 0: none, every read goes to "
        "the bookies).",
    )(f)
    return f
