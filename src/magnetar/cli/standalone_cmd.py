"""``magnetar standalone``: the whole system in one process (see :mod:`magnetar.standalone`)."""

from __future__ import annotations

import time
from pathlib import Path

import click


@click.command()
@click.option(
    "--data-dir", default=Path("data"), show_default=True, type=click.Path(path_type=Path)
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=6650, show_default=True, type=int, help="Binary protocol port.")
@click.option("--http-port", default=8080, show_default=True, type=int)
@click.option("--advertised-address", default=None, help="Host put in lookup answers.")
@click.option(
    "--deduplication/--no-deduplication",
    default=False,
    show_default=True,
    help="Broker-wide message deduplication (brokerDeduplicationEnabled).",
)
@click.option("--max-message-size", default=5 * 1024 * 1024, show_default=True, type=int)
@click.option("--failover-delay-ms", default=1000, show_default=True, type=int)
@click.option("--log-level", default="WARNING", show_default=True)
def standalone(
    data_dir: Path,
    host: str,
    port: int,
    http_port: int,
    advertised_address: str | None,
    deduplication: bool,
    max_message_size: int,
    failover_delay_ms: int,
    log_level: str,
) -> None:
    """One process: embedded metadata store, a bookie and a broker."""
    started = time.perf_counter()
    import asyncio
    import logging
    import sys

    from magnetar.broker.config import BrokerConfig
    from magnetar.standalone import StandaloneConfig, run

    logging.basicConfig(
        level=log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    config = StandaloneConfig(
        data_dir=data_dir,
        http_host=host,
        http_port=http_port,
        broker=BrokerConfig(
            host=host,
            port=port,
            advertised_address=advertised_address,
            deduplication_enabled=deduplication,
            max_message_size_bytes=max_message_size,
            failover_delay_ms=failover_delay_ms,
        ),
    )
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        pass
    asyncio.run(run(config, started))
