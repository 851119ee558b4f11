"""``magnetar client``: produce and consume messages from the command line (mirrors
``pulsar-client``), with Magnetar's asyncio client :mod:`magnetar.client`.

::

    magnetar client --url pulsar://localhost:6650 produce my-topic -m "hello,world" -n 10
    magnetar client consume my-topic -s sub -t Failover -n 0      # 0 = until interrupted

``consume`` prints each message (``--output json``: one JSON object per line on stdout) and
acknowledges it; diagnostics (subscribed, became active/inactive, the final count) go to
stderr. SIGINT and SIGTERM close the consumer and the client cleanly and exit with status 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from magnetar.cli.auth_options import NO_AUTH, auth_options, parse_auth
from magnetar.cli.command_group import SuggestingGroup
from magnetar.cli.output import Printer, fail, log_client_warnings, output_option, printer

if TYPE_CHECKING:
    from magnetar.common.clock import Clock

_T = TypeVar("_T")

DEFAULT_SERVICE_URL = "pulsar://localhost:6650"
SUBSCRIPTION_TYPES = ("Exclusive", "Shared", "Failover", "Key_Shared")
"""Subscription types as pulsar-client and pulsar-perf spell them (accepted in any case)."""
_CONSUMER_TYPE_NAMES = {
    "Exclusive": "Exclusive",
    "Shared": "Shared",
    "Failover": "Failover",
    "Key_Shared": "KeyShared",
}
COMPRESSIONS = ("NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY")
MESSAGES_PER_PRODUCE_MAX = 10_000_000
PENDING_MESSAGES_MAX = 1000


def subscription_type_name(given: str) -> str:
    """The canonical spelling (one of :data:`SUBSCRIPTION_TYPES`) of a type given in any case."""
    return {t.lower(): t for t in SUBSCRIPTION_TYPES}[given.lower()]


def consumer_type(name: str) -> Any:
    """The client's ``ConsumerType`` for a canonical CLI name (``Key_Shared`` is ``KeyShared``
    in the client, as in the official one)."""
    from magnetar.client import ConsumerType

    return ConsumerType[_CONSUMER_TYPE_NAMES[name]]


class ClientSettings:
    """``ctx.obj`` of the client group."""

    def __init__(self) -> None:
        self.url = DEFAULT_SERVICE_URL
        self.auth = NO_AUTH
        self.operation_timeout_s = 30.0

    def make_client(self) -> Any:
        from magnetar.client import Client

        return Client(
            self.url,
            authentication=self.auth.client_authentication(),
            tls_certificate_file_path=self.auth.tls_cert_file,
            tls_private_key_file_path=self.auth.tls_key_file,
            operation_timeout_seconds=self.operation_timeout_s,
            connection_timeout_ms=int(min(self.operation_timeout_s, 10.0) * 1000),
        )


@click.group(cls=SuggestingGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--url",
    "--service-url",
    envvar="MAGNETAR_SERVICE_URL",
    default=DEFAULT_SERVICE_URL,
    show_default=True,
    show_envvar=True,
    help="The service URL: pulsar://host:port, several hosts (pulsar://h1:6650,h2:6650; each "
    "is tried in turn), or http://host:port for HTTP lookups.",
)
@click.option("--auth-token", envvar="MAGNETAR_AUTH_TOKEN", default=None, help="Token auth.")
@auth_options
@click.option(
    "--operation-timeout",
    "operation_timeout_s",
    default=30.0,
    show_default=True,
    help="Seconds for lookups, connects and sends.",
)
@output_option
@click.pass_context
def client(
    ctx: click.Context,
    url: str,
    auth_token: str | None,
    auth_plugin: str | None,
    auth_params: str | None,
    operation_timeout_s: float,
) -> None:
    """Produce and consume messages from the command line (mirrors pulsar-client)."""
    log_client_warnings()
    settings = ctx.ensure_object(ClientSettings)
    settings.url = url
    settings.auth = parse_auth(auth_plugin, auth_params, auth_token)
    settings.operation_timeout_s = operation_timeout_s


def _run(coro: Any) -> Any:
    # The default event loop, not uvloop: magnetar.client asserts asyncio.Transport
    # instances, which uvloop's transports are not.
    return asyncio.run(coro)


def message_id_text(mid: Any) -> str:
    """Pulsar's ``ledgerId:entryId:partition[:batchIndex]`` spelling of a message id."""
    text = f"{mid.ledger_id()}:{mid.entry_id()}:{mid.partition()}"
    return text if mid.batch_index() < 0 else f"{text}:{mid.batch_index()}"


# ------------------------------------------------------------------ produce


def _properties(values: tuple[str, ...]) -> dict[str, str]:
    props: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected key=value, got {item!r}", param_hint="'-p'")
        props[key] = value
    return props


@client.command()
@click.argument("topic")
@click.option("--messages", "-m", multiple=True, help="Messages to send, split on --separator.")
@click.option(
    "--files", "-f", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Files whose contents are each sent as one message.",
)  # fmt: skip
@click.option(
    "--num-produce",
    "-n",
    default=1,
    show_default=True,
    type=click.IntRange(1, MESSAGES_PER_PRODUCE_MAX),
    help="Send each message this many times.",
)
@click.option(
    "--rate",
    "-r",
    default=0.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Messages per second (0: as fast as possible).",
)
@click.option("--key", "-k", default=None, help="Partitioning key of every message.")
@click.option("--properties", "-p", multiple=True, help="key=value property (repeatable).")
@click.option(
    "--separator",
    "-s",
    default=",",
    show_default=True,
    help="Splits -m values ('' to send them whole).",
)
@click.option("--disable-batching", "-db", is_flag=True)
@click.option(
    "--chunking",
    "-c",
    is_flag=True,
    help="Split messages larger than the broker's limit (disables batching).",
)
@click.option(
    "--compression",
    "-z",
    type=click.Choice(COMPRESSIONS, case_sensitive=False),
    default="NONE",
    show_default=True,
)
@click.option("--producer-name", default=None)
@output_option
@click.pass_obj
def produce(
    settings: ClientSettings,
    topic: str,
    messages: tuple[str, ...],
    files: tuple[Path, ...],
    num_produce: int,
    rate: float,
    key: str | None,
    properties: tuple[str, ...],
    separator: str,
    disable_batching: bool,
    chunking: bool,
    compression: str,
    producer_name: str | None,
) -> None:
    """Send messages to TOPIC."""
    bodies: list[bytes] = []
    for m in messages:
        parts = m.split(separator) if separator else [m]
        bodies.extend(p.encode() for p in parts)
    bodies.extend(f.read_bytes() for f in files)
    if not bodies:
        raise click.UsageError("give messages with -m or files with -f")
    props = _properties(properties)
    out = printer()
    from magnetar.client import MessageTooBig

    try:
        ids = _run(
            _produce(
                settings, topic, bodies, num_produce, rate, key, props,
                batching=not (disable_batching or chunking), chunking=chunking,
                compression=compression.upper(), producer_name=producer_name,
            )
        )  # fmt: skip
    except MessageTooBig as exc:
        # Only reachable without -c: a chunking producer splits what exceeds the limit.
        fail(f"{exc}; send it in chunks with -c/--chunking")
    if out.json:
        out.result({"topic": topic, "produced": len(ids), "messageIds": ids})
    else:
        click.echo(f"{len(ids)} messages successfully produced")


async def _produce(
    settings: ClientSettings,
    topic: str,
    bodies: list[bytes],
    rounds: int,
    rate: float,
    key: str | None,
    props: dict[str, str],
    *,
    batching: bool,
    chunking: bool,
    compression: str,
    producer_name: str | None,
) -> list[str]:
    from magnetar.client import CompressionType
    from magnetar.common.clock import SystemClock

    clock = SystemClock()
    async with settings.make_client() as c:
        producer = await c.create_producer(
            topic,
            producer_name=producer_name,
            batching_enabled=batching,
            chunking_enabled=chunking,
            compression_type=CompressionType[compression],
            send_timeout_millis=int(settings.operation_timeout_s * 1000),
            max_pending_messages=PENDING_MESSAGES_MAX,
        )
        futures: list[asyncio.Future[Any]] = []
        started_s = clock.monotonic_s()
        sent = 0
        oldest = 0
        for _ in range(rounds):
            for body in bodies:
                if rate > 0:
                    # Pace against the start time, not the previous send, so the
                    # average rate holds even when one sleep overshoots.
                    ahead_s = started_s + sent / rate - clock.monotonic_s()
                    if ahead_s > 0:
                        await clock.sleep(ahead_s)
                while len(futures) - oldest >= PENDING_MESSAGES_MAX:
                    await futures[oldest]  # bounds what is in flight, partitioned or not
                    oldest += 1
                futures.append(
                    producer.send_async(body, properties=props or None, partition_key=key)
                )
                sent += 1
        await producer.flush()
        ids = await asyncio.gather(*futures)
        await producer.close()
    return [message_id_text(i) for i in ids]


# ------------------------------------------------------------------ consume


class _EventPrinter:
    """The failover consumer event listener: reports activity changes on stderr.

    The name comes from the consumer the event is about: a broker may report a consumer
    inactive before its subscribe has returned (and before "subscribed" is printed), when
    only the consumer itself knows the name it generated."""

    def __init__(self, out: Printer) -> None:
        self.out = out

    def _say(self, consumer: Any, active: bool, partition: int) -> None:
        name = consumer.consumer_name()
        where = f" on partition {partition}" if partition >= 0 else ""
        if self.out.json:
            click.echo(
                json.dumps(
                    {
                        "event": "active" if active else "inactive",
                        "consumer": name,
                        "partition": partition,
                    }
                ),
                err=True,
            )
        else:
            state = "active" if active else "inactive"
            click.echo(f"consumer {name} became {state}{where}", err=True)

    def became_active(self, consumer: Any, partition: int) -> None:
        self._say(consumer, True, partition)

    def became_inactive(self, consumer: Any, partition: int) -> None:
        self._say(consumer, False, partition)


def message_record(msg: Any, hex_payload: bool) -> dict[str, Any]:
    data: bytes = msg.data()
    record: dict[str, Any] = {
        "topic": msg.topic_name(),
        "messageId": message_id_text(msg.message_id()),
        "key": msg.partition_key() if msg.has_partition_key() else None,
        "properties": msg.properties(),
        "publishTime": msg.publish_timestamp(),
        "redeliveryCount": msg.redelivery_count(),
    }
    if hex_payload:
        record["payloadHex"] = data.hex()
    else:
        try:
            record["payload"] = data.decode("utf-8")
        except UnicodeDecodeError:
            record["payloadHex"] = data.hex()
    return record


def _print_message(out: Printer, record: dict[str, Any]) -> None:
    if out.json:
        click.echo(json.dumps(record, separators=(",", ":")))
        return
    props = ", ".join(f"{k}={v}" for k, v in record["properties"].items())
    content = record.get("payload", record.get("payloadHex"))
    click.echo("----- got message -----")
    click.echo(f"key:[{record['key'] or 'null'}], properties:[{props}], content:{content}")


def _print_count(out: Printer, verb: str, count: int) -> None:
    """The final line of ``consume`` or ``read`` on stderr: ``{"<verb>": count}`` in JSON,
    else ``<count> messages successfully <verb>``."""
    if out.json:
        click.echo(json.dumps({verb: count}), err=True)
    else:
        click.echo(f"{count} messages successfully {verb}", err=True)


# Options that ``consume`` and ``read`` share.
_RATE = click.option(
    "--rate",
    "-r",
    default=0.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Messages per second at most (0: no limit).",
)
RECEIVER_QUEUE_SIZE_OPTION = click.option(
    "--receiver-queue-size", "-q", default=1000, show_default=True, type=click.IntRange(min=1)
)
"""``--receiver-queue-size/-q``, as ``client consume/read`` and ``perf consume/read`` take it."""
_HEX = click.option("--hex", "hex_payload", is_flag=True, help="Print payloads in hexadecimal.")


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Interrupted(Exception):
    """SIGINT or SIGTERM arrived before the awaited step finished."""


class _Interruptible:
    """SIGINT and SIGTERM for the life of an ``async with``: either one sets a stop event
    instead of raising ``KeyboardInterrupt``, so ``consume`` and ``read`` close their client and
    exit 0. The handlers are removed on exit."""

    def __init__(self) -> None:
        self._stop = asyncio.Event()
        self._stopping: asyncio.Future[Any] | None = None

    async def __aenter__(self) -> _Interruptible:
        loop = asyncio.get_running_loop()
        for sig in _STOP_SIGNALS:
            loop.add_signal_handler(sig, self._stop.set)
        self._stopping = asyncio.ensure_future(self._stop.wait())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._stopping is not None, "used outside async with"
        self._stopping.cancel()
        loop = asyncio.get_running_loop()
        for sig in _STOP_SIGNALS:
            loop.remove_signal_handler(sig)

    async def step(self, awaitable: Awaitable[_T]) -> _T:
        """The result of ``awaitable``; if a signal came (or comes) first, it is cancelled and
        :class:`_Interrupted` is raised. Errors of ``awaitable`` propagate."""
        assert self._stopping is not None, "used outside async with"
        task = asyncio.ensure_future(awaitable)
        await asyncio.wait({task, self._stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            raise _Interrupted
        return task.result()

    async def pause_s(self, delay_s: float) -> None:
        """Wait ``delay_s`` seconds or until a signal, whichever is first."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), delay_s)


async def _receive_paced(
    interrupt: _Interruptible,
    clock: Clock,
    num_messages: int,
    rate: float,
    next_message: Callable[[], Awaitable[Any]],
    handle: Callable[[Any], Awaitable[None]],
) -> int:
    """Await ``next_message()`` and ``handle`` its result ``num_messages`` times (0: until a
    signal), starting no more than ``rate`` per second (0: no limit); returns how many were
    handled. A signal ends the loop during a wait; ``handle`` always completes."""
    handled = 0
    started_s = clock.monotonic_s()
    while num_messages == 0 or handled < num_messages:
        if rate > 0:
            ahead_s = started_s + handled / rate - clock.monotonic_s()
            if ahead_s > 0:
                await interrupt.pause_s(ahead_s)
        try:
            msg = await interrupt.step(next_message())
        except _Interrupted:
            break
        await handle(msg)
        handled += 1
    return handled


@client.command()
@click.argument("topic")
@click.option("--subscription-name", "-s", required=True, help="Subscription name.")
@click.option(
    "--subscription-type",
    "-t",
    type=click.Choice(SUBSCRIPTION_TYPES, case_sensitive=False),
    default="Exclusive",
    show_default=True,
)
@click.option(
    "--num-messages",
    "-n",
    default=1,
    show_default=True,
    type=click.IntRange(min=0),
    help="Messages to consume; 0 = until interrupted.",
)
@click.option(
    "--subscription-position",
    "-p",
    type=click.Choice(["Latest", "Earliest"], case_sensitive=False),
    default="Latest",
    show_default=True,
)
@click.option("--consumer-name", default=None, help="Consumer name (default: generated).")
@_RATE
@RECEIVER_QUEUE_SIZE_OPTION
@click.option(
    "--priority-level",
    default=None,
    type=click.IntRange(min=0),
    help="Failover/Shared priority (0 is highest).",
)
@click.option(
    "--regex", is_flag=True, help="TOPIC is a regular expression over a namespace's topics."
)
@_HEX
@output_option
@click.pass_obj
def consume(
    settings: ClientSettings,
    topic: str,
    subscription_name: str,
    subscription_type: str,
    num_messages: int,
    subscription_position: str,
    consumer_name: str | None,
    rate: float,
    receiver_queue_size: int,
    priority_level: int | None,
    regex: bool,
    hex_payload: bool,
) -> None:
    """Consume messages from TOPIC, printing and acknowledging each one."""
    canonical = subscription_type_name(subscription_type)
    out = printer()
    count = _run(
        _consume(
            settings, out, topic, subscription_name, canonical, num_messages,
            subscription_position.capitalize(), consumer_name, rate, receiver_queue_size,
            priority_level, regex, hex_payload,
        )
    )  # fmt: skip
    _print_count(out, "consumed", count)


async def _consume(
    settings: ClientSettings,
    out: Printer,
    topic: str,
    subscription: str,
    sub_type: str,
    num_messages: int,
    position: str,
    consumer_name: str | None,
    rate: float,
    queue_size: int,
    priority_level: int | None,
    regex: bool,
    hex_payload: bool,
) -> int:
    import re

    from magnetar.client import InitialPosition
    from magnetar.common.clock import SystemClock

    async with _Interruptible() as interrupt:
        c = settings.make_client()
        try:
            listener = _EventPrinter(out)
            target: Any = re.compile(topic) if regex else topic
            try:
                consumer = await interrupt.step(
                    c.subscribe(
                        target,
                        subscription,
                        consumer_type=consumer_type(sub_type),
                        consumer_name=consumer_name,
                        receiver_queue_size=queue_size,
                        initial_position=InitialPosition[position],
                        consumer_event_listener=listener if sub_type == "Failover" else None,
                        priority_level=priority_level,
                    )
                )
            except _Interrupted:
                return 0
            name = consumer.consumer_name()
            if out.json:
                click.echo(
                    json.dumps(
                        {
                            "event": "subscribed",
                            "topic": topic,
                            "subscription": subscription,
                            "consumer": name,
                        }
                    ),
                    err=True,
                )
            else:
                click.echo(
                    f"subscribed to {topic} as {subscription} ({sub_type}), consumer {name}",
                    err=True,
                )

            async def print_and_acknowledge(msg: Any) -> None:
                _print_message(out, message_record(msg, hex_payload))
                await consumer.acknowledge(msg)

            return await _receive_paced(
                interrupt, SystemClock(), num_messages, rate, consumer.receive,
                print_and_acknowledge,
            )  # fmt: skip
        finally:
            await c.close()


# ------------------------------------------------------------------ read


def parse_start_message_id(text: str) -> Any:
    """``latest``, ``earliest`` or ``ledgerId:entryId[:partition[:batchIndex]]`` (as
    pulsar-client's ``read -m`` takes it) as a client ``MessageId``. Raises
    :class:`click.BadParameter` otherwise."""
    from magnetar.client import MessageId

    lowered = text.lower()
    if lowered == "latest":
        return MessageId.latest
    if lowered == "earliest":
        return MessageId.earliest
    parts = text.split(":")
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        numbers = []
    if not 2 <= len(numbers) <= 4 or min(numbers[:2]) < 0:
        raise click.BadParameter(
            f"{text!r} is not latest, earliest or ledgerId:entryId", param_hint="'-m'"
        )
    ledger_id, entry_id, *rest = numbers
    partition = rest[0] if rest else -1
    batch_index = rest[1] if len(rest) > 1 else -1
    return MessageId(partition, ledger_id, entry_id, batch_index)


@client.command()
@click.argument("topic")
@click.option(
    "--start-message-id",
    "-m",
    default="latest",
    show_default=True,
    help="Where to start: latest, earliest or ledgerId:entryId.",
)
@click.option("--start-message-id-inclusive", "-i", is_flag=True, help="Include the start message.")
@click.option(
    "--num-messages",
    "-n",
    default=1,
    show_default=True,
    type=click.IntRange(min=0),
    help="Messages to read; 0 = until interrupted.",
)
@_RATE
@RECEIVER_QUEUE_SIZE_OPTION
@_HEX
@output_option
@click.pass_obj
def read(
    settings: ClientSettings,
    topic: str,
    start_message_id: str,
    start_message_id_inclusive: bool,
    num_messages: int,
    rate: float,
    receiver_queue_size: int,
    hex_payload: bool,
) -> None:
    """Read messages from TOPIC with a reader (no subscription is left behind, nothing is
    acknowledged), printing each one."""
    start = parse_start_message_id(start_message_id)
    out = printer()
    count = _run(
        _read(
            settings, out, topic, start, start_message_id_inclusive, num_messages, rate,
            receiver_queue_size, hex_payload,
        )
    )  # fmt: skip
    _print_count(out, "read", count)


async def _read(
    settings: ClientSettings,
    out: Printer,
    topic: str,
    start: Any,
    inclusive: bool,
    num_messages: int,
    rate: float,
    queue_size: int,
    hex_payload: bool,
) -> int:
    from magnetar.common.clock import SystemClock

    async with _Interruptible() as interrupt:
        c = settings.make_client()
        try:
            try:
                reader = await interrupt.step(
                    c.create_reader(
                        topic, start, receiver_queue_size=queue_size,
                        start_message_id_inclusive=inclusive,
                    )
                )  # fmt: skip
            except _Interrupted:
                return 0
            if out.json:
                click.echo(json.dumps({"event": "reading", "topic": topic}), err=True)
            else:
                click.echo(f"reading {topic}", err=True)

            async def print_only(msg: Any) -> None:
                _print_message(out, message_record(msg, hex_payload))

            return await _receive_paced(
                interrupt, SystemClock(), num_messages, rate, reader.read_next, print_only
            )
        finally:
            await c.close()
