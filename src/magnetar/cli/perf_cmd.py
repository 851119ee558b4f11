"""``magnetar perf produce|consume|read``: throughput and latency of a Magnetar (or Pulsar)
service, with Magnetar's asyncio client (mirrors ``pulsar-perf``; same short options).

::

    magnetar perf produce my-topic -r 10000 -s 1024 -time 30
    magnetar perf consume my-topic -s sub -st Shared -n 2 --output json
    magnetar perf read my-topic -m earliest -time 10

Every ``-i`` seconds a window's throughput (msg/s, MB/s) and latency percentiles (p50, p95,
p99, p99.9, max) are shown: a live table on a terminal, one plain line per window
otherwise. At the end (quota, ``-time`` or Ctrl+C/SIGTERM) a summary is printed;
``--output json`` prints it as JSON and ``--json-file`` also writes it to a file.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from magnetar.cli.auth_options import auth_options, parse_auth
from magnetar.cli.client_cmd import (
    COMPRESSIONS,
    DEFAULT_SERVICE_URL,
    RECEIVER_QUEUE_SIZE_OPTION,
    SUBSCRIPTION_TYPES,
    subscription_type_name,
)
from magnetar.cli.command_group import SuggestingGroup
from magnetar.cli.output import log_client_warnings, output_option, printer

MESSAGE_SIZE_MAX_BYTES = 5 * 1024 * 1024

_SERVICE_URL = click.option(
    "--service-url", "-u", envvar="MAGNETAR_SERVICE_URL", default=DEFAULT_SERVICE_URL,
    show_default=True, show_envvar=True,
    help="pulsar://host:port, or several hosts (pulsar://h1:6650,h2:6650): each is tried in turn.",
)  # fmt: skip
_DURATION = click.option(
    "--test-duration", "-time", "duration_s", default=0.0, show_default=True,
    type=click.FloatRange(min=0), help="Seconds to run (0: until the message count or Ctrl+C).",
)  # fmt: skip
_INTERVAL = click.option(
    "--stats-interval-seconds", "-i", "interval_s", default=5.0, show_default=True,
    type=click.FloatRange(min=0.1), help="Seconds between reports.",
)  # fmt: skip
_JSON_FILE = click.option(
    "--json-file", type=click.Path(dir_okay=False, writable=True, path_type=Path), default=None,
    help="Also write the summary as JSON to this file.",
)  # fmt: skip


@click.group(cls=SuggestingGroup, context_settings={"help_option_names": ["-h", "--help"]})
@output_option
def perf() -> None:
    """Measure publish and consume throughput and latency (mirrors pulsar-perf)."""
    log_client_warnings()


@perf.command()
@click.argument("topics", nargs=-1, required=True)
@_SERVICE_URL
@click.option(
    "--rate",
    "-r",
    default=100.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Messages per second over all producers (0: unlimited).",
)
@click.option(
    "--size",
    "-s",
    "size_bytes",
    default=1024,
    show_default=True,
    type=click.IntRange(0, MESSAGE_SIZE_MAX_BYTES),
    help="Message size in bytes.",
)
@click.option(
    "--num-producers",
    "-n",
    default=1,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="Producers per topic.",
)
@click.option(
    "--num-messages",
    "-m",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="Messages to send in all (0: unlimited).",
)
@_DURATION
@click.option(
    "--batch-time-window",
    "-b",
    "batch_delay_ms",
    default=1,
    show_default=True,
    type=click.IntRange(min=0),
    help="Batching delay in ms.",
)
@click.option(
    "--batch-max-messages", "-bm", default=1000, show_default=True, type=click.IntRange(min=1)
)
@click.option(
    "--batch-max-bytes",
    "-bb",
    default=4 * 1024 * 1024,
    show_default=True,
    type=click.IntRange(min=1),
)
@click.option("--disable-batching", "-db", is_flag=True)
@click.option(
    "--max-outstanding",
    "-o",
    default=1000,
    show_default=True,
    type=click.IntRange(1, 1_000_000),
    help="Messages in flight per producer at most.",
)
@click.option(
    "--compression",
    "-z",
    type=click.Choice(COMPRESSIONS, case_sensitive=False),
    default="NONE",
    show_default=True,
)
@_INTERVAL
@auth_options
@_JSON_FILE
@output_option
def produce(
    topics: tuple[str, ...],
    service_url: str,
    auth_plugin: str | None,
    auth_params: str | None,
    rate: float,
    size_bytes: int,
    num_producers: int,
    num_messages: int,
    duration_s: float,
    batch_delay_ms: int,
    batch_max_messages: int,
    batch_max_bytes: int,
    disable_batching: bool,
    max_outstanding: int,
    compression: str,
    interval_s: float,
    json_file: Path | None,
) -> None:
    """Publish to TOPICS and report publish latency (send to receipt)."""
    from magnetar.cli.perf.produce import ProduceOptions, run_produce
    from magnetar.cli.perf.report import ReportPrinter

    opts = ProduceOptions(
        service_url=service_url, auth=parse_auth(auth_plugin, auth_params), topics=topics, rate=rate, size_bytes=size_bytes,
        producers_per_topic=num_producers, num_messages=num_messages, duration_s=duration_s,
        batching=not disable_batching, batch_delay_ms=batch_delay_ms,
        batch_max_messages=batch_max_messages, batch_max_bytes=batch_max_bytes,
        max_outstanding=max_outstanding, compression=compression.upper(),
        stats_interval_s=interval_s,
    )  # fmt: skip
    out = printer()
    reporter = ReportPrinter(out, "produced", f"perf produce {' '.join(topics)}")
    summary = asyncio.run(run_produce(opts, reporter))
    extra = {
        "mode": "produce", "topics": list(topics), "rate": rate, "messageSize": size_bytes,
        "producers": num_producers * len(topics), "batching": not disable_batching,
    }  # fmt: skip
    reporter.summary(summary, extra, json_file)


@perf.command()
@click.argument("topics", nargs=-1, required=True)
@_SERVICE_URL
@click.option(
    "--num-consumers",
    "-n",
    default=1,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="Consumers per subscription.",
)
@click.option(
    "--num-subscriptions", "-ns", default=1, show_default=True, type=click.IntRange(1, 1000)
)
@click.option(
    "--subscriber-name",
    "-s",
    default="sub",
    show_default=True,
    help="Subscription name (suffixed -0, -1... with -ns > 1).",
)
@click.option(
    "--subscription-type",
    "-st",
    type=click.Choice(SUBSCRIPTION_TYPES, case_sensitive=False),
    default="Exclusive",
    show_default=True,
)
@click.option(
    "--subscription-position",
    "-sp",
    type=click.Choice(["Latest", "Earliest"], case_sensitive=False),
    default="Latest",
    show_default=True,
)
@RECEIVER_QUEUE_SIZE_OPTION
@click.option(
    "--num-messages",
    "-m",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="Messages to receive in all (0: unlimited).",
)
@_DURATION
@_INTERVAL
@auth_options
@_JSON_FILE
@output_option
def consume(
    topics: tuple[str, ...],
    service_url: str,
    auth_plugin: str | None,
    auth_params: str | None,
    num_consumers: int,
    num_subscriptions: int,
    subscriber_name: str,
    subscription_type: str,
    subscription_position: str,
    receiver_queue_size: int,
    num_messages: int,
    duration_s: float,
    interval_s: float,
    json_file: Path | None,
) -> None:
    """Consume from TOPICS and report end-to-end latency (publish to receive)."""
    from magnetar.cli.perf.consume import ConsumeOptions, run_consume
    from magnetar.cli.perf.report import ReportPrinter

    sub_type = subscription_type_name(subscription_type)
    if num_consumers > 1 and sub_type == "Exclusive":
        raise click.UsageError(
            "several consumers on one subscription need -st Shared, Failover or Key_Shared"
        )
    subs = (
        (subscriber_name,)
        if num_subscriptions == 1
        else tuple(f"{subscriber_name}-{i}" for i in range(num_subscriptions))
    )
    opts = ConsumeOptions(
        service_url=service_url, auth=parse_auth(auth_plugin, auth_params), topics=topics, subscriptions=subs, subscription_type=sub_type,
        consumers_per_subscription=num_consumers, position=subscription_position.capitalize(),
        receiver_queue_size=receiver_queue_size, num_messages=num_messages,
        duration_s=duration_s, stats_interval_s=interval_s,
    )  # fmt: skip
    out = printer()
    reporter = ReportPrinter(out, "received", f"perf consume {' '.join(topics)}")
    summary = asyncio.run(run_consume(opts, reporter))
    extra = {
        "mode": "consume", "topics": list(topics), "subscriptions": list(subs),
        "subscriptionType": sub_type, "consumers": len(subs) * num_consumers * len(topics),
    }  # fmt: skip
    reporter.summary(summary, extra, json_file)


@perf.command()
@click.argument("topics", nargs=-1, required=True)
@_SERVICE_URL
@click.option(
    "--start-message-id",
    "-m",
    default="earliest",
    show_default=True,
    help="Where each reader starts: earliest, latest or ledgerId:entryId.",
)
@RECEIVER_QUEUE_SIZE_OPTION
@click.option(
    "--num-messages",
    "-n",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="Messages to read in all (0: unlimited).",
)
@_DURATION
@_INTERVAL
@auth_options
@_JSON_FILE
@output_option
def read(
    topics: tuple[str, ...],
    service_url: str,
    auth_plugin: str | None,
    auth_params: str | None,
    start_message_id: str,
    receiver_queue_size: int,
    num_messages: int,
    duration_s: float,
    interval_s: float,
    json_file: Path | None,
) -> None:
    """Read TOPICS with one reader each and report end-to-end latency (publish to read)."""
    from magnetar.cli.client_cmd import parse_start_message_id
    from magnetar.cli.perf.read import ReadOptions, run_read
    from magnetar.cli.perf.report import ReportPrinter

    opts = ReadOptions(
        service_url=service_url, auth=parse_auth(auth_plugin, auth_params), topics=topics,
        start_message_id=parse_start_message_id(start_message_id),
        receiver_queue_size=receiver_queue_size, num_messages=num_messages,
        duration_s=duration_s, stats_interval_s=interval_s,
    )  # fmt: skip
    out = printer()
    reporter = ReportPrinter(out, "read", f"perf read {' '.join(topics)}")
    summary = asyncio.run(run_read(opts, reporter))
    extra = {"mode": "read", "topics": list(topics), "readers": len(topics)}
    reporter.summary(summary, extra, json_file)
