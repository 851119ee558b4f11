"""The data source's options, parsed and checked once on the driver (sans-IO).

Options (case-insensitive, as Spark passes them):

================================  ==========================================================
``service_url``                   ``pulsar://host:6650`` (required)
``admin_url``                     HTTP admin URL: needed by ``max_entries_per_trigger`` (ledger
                                  lists); lets the sink check deduplication is on
``topic`` / ``topics`` /          one topic, a comma-separated list, or a regex over the
``topics_pattern``                namespace's topics (``persistent://t/ns/orders-.*``)
``starting_offsets``              ``earliest`` / ``latest`` / JSON (see :mod:`.offsets`);
                                  streaming default ``latest``, batch default ``earliest``
``ending_offsets``                batch reads: ``latest`` (default) or JSON
``starting_time`` /               batch reads: publish-time bounds in ms since the epoch
``ending_time``                   (inclusive start, exclusive end)
``max_entries_per_trigger``       admission control: entries per partition per micro-batch
``fail_on_data_loss``             ``true`` (default): fail when requested data is gone
``subscription_name``             a durable subscription that follows committed offsets
``read_timeout_ms``               give up reading a range after this long without progress
``value_format``                  ``binary`` (default), ``json``, or ``schema`` (decoded
                                  through the topic's schema, see :mod:`.schema_values`)
``value_schema``                  Spark DDL schema of JSON values (with ``value_format=json``)
``auth_token`` /                  token authentication, or basic with
``auth_basic_user`` / ...password user and password
``write_id``                      batch writes: names the producers (default: random per job)
``offload.driver``, ``.bucket``,  batch reads: the object store topics offload to
``.region``, ``.endpoint``,       (``filesystem``, ``aws-s3``, ``s3``), as the broker's
``.directory``                    ``--offload-*`` flags name it; credentials from the
                                  environment. With ``admin_url`` set, executors read
                                  offloaded ledgers from it directly
``offload.directRead``            ``true`` (default): read offloaded ledgers from the object
                                  store; ``false``: everything through the broker
``offload.splitBytes``            bytes of an offloaded ledger per Spark partition (128 MiB)
================================  ==========================================================
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from magnetar.common.errors import MagnetarError
from magnetar.offload.settings import OffloadDriverConfig
from magnetar.spark.offload_plan import SPLIT_BYTES_DEFAULT


class OptionsError(MagnetarError):
    """A missing, unknown-valued or contradictory option."""


@dataclass(frozen=True, slots=True)
class SourceOptions:
    service_url: str
    admin_url: str | None
    topics: tuple[str, ...]
    topics_pattern: str | None
    starting_offsets: str | None
    ending_offsets: str | None
    starting_time_ms: int | None
    ending_time_ms: int | None
    max_entries_per_trigger: int | None
    fail_on_data_loss: bool
    subscription_name: str | None
    read_timeout_ms: int
    value_format: str
    value_schema: str | None
    auth_token: str | None
    auth_basic: tuple[str, str] | None
    write_topic: str | None
    write_id: str | None
    offload: OffloadDriverConfig | None = None
    """The object store offloaded ledgers are read from directly (None: through the broker)."""
    offload_split_bytes: int = SPLIT_BYTES_DEFAULT


def _bool(name: str, text: str) -> bool:
    low = text.strip().lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise OptionsError(f"option {name} must be true or false, got {text!r}")


def _int(name: str, text: str | None, minimum: int) -> int | None:
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError as exc:
        raise OptionsError(f"option {name} must be an integer, got {text!r}") from exc
    if value < minimum:
        raise OptionsError(f"option {name} must be >= {minimum}, got {value}")
    return value


def _offload(opts: Mapping[str, str]) -> OffloadDriverConfig | None:
    """The object store of the ``offload.*`` options, None when direct reads are off or no
    driver is given."""
    if not _bool("offload.directRead", opts.get("offload.directread", "true")):
        return None
    driver = opts.get("offload.driver")
    if not driver:
        return None
    try:
        return OffloadDriverConfig(
            driver.strip().lower(),
            bucket=opts.get("offload.bucket") or None,
            region=opts.get("offload.region") or None,
            endpoint=opts.get("offload.endpoint") or None,
            directory=opts.get("offload.directory") or None,
        )
    except ValueError as exc:
        raise OptionsError(f"offload.* options: {exc}") from None


def parse_options(raw: Mapping[str, str], *, for_write: bool = False) -> SourceOptions:
    """Check and parse Spark's option map. Raises :class:`OptionsError`."""
    opts = {k.lower(): v for k, v in raw.items()}
    service_url = opts.get("service_url") or opts.get("service.url")
    if not service_url:
        raise OptionsError("option service_url is required (e.g. pulsar://127.0.0.1:6650)")
    if not service_url.startswith(("pulsar://", "pulsar+ssl://")):
        raise OptionsError(f"service_url must be pulsar:// or pulsar+ssl://, got {service_url!r}")
    topic = opts.get("topic")
    topics_list = opts.get("topics")
    pattern = opts.get("topics_pattern") or opts.get("topicspattern")
    given = [x for x in (topic, topics_list, pattern) if x]
    if len(given) > 1:
        raise OptionsError("give only one of topic, topics, topics_pattern")
    topics: tuple[str, ...] = ()
    if topic:
        topics = (topic.strip(),)
    elif topics_list:
        topics = tuple(t.strip() for t in topics_list.split(",") if t.strip())
    if pattern:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionsError(f"topics_pattern is not a valid regex: {exc}") from exc
    if not for_write and not topics and not pattern:
        raise OptionsError("one of topic, topics, topics_pattern is required")
    if for_write and (topics_list or pattern):
        raise OptionsError("writes take topic (or a per-row topic column), not topics")
    value_format = opts.get("value_format", "binary").lower()
    if value_format not in ("binary", "json", "schema"):
        raise OptionsError(f"value_format must be binary, json or schema, got {value_format!r}")
    value_schema = opts.get("value_schema")
    if value_format == "json" and not value_schema:
        raise OptionsError("value_format=json needs value_schema (a Spark DDL schema)")
    user = opts.get("auth_basic_user")
    password = opts.get("auth_basic_password")
    if (user is None) != (password is None):
        raise OptionsError("auth_basic_user and auth_basic_password go together")
    admin_url = opts.get("admin_url")
    if admin_url is not None and not admin_url.startswith(("http://", "https://")):
        raise OptionsError(f"admin_url must be http:// or https://, got {admin_url!r}")
    max_entries = _int("max_entries_per_trigger", opts.get("max_entries_per_trigger"), 1)
    if max_entries is not None and admin_url is None and not for_write:
        raise OptionsError(
            "max_entries_per_trigger needs admin_url (e.g. http://127.0.0.1:8080): the "
            "entries between two positions in different ledgers are counted from the "
            "topic's ledger list, which only the admin API serves"
        )
    return SourceOptions(
        service_url=service_url,
        admin_url=admin_url,
        topics=topics,
        topics_pattern=pattern,
        starting_offsets=opts.get("starting_offsets"),
        ending_offsets=opts.get("ending_offsets"),
        starting_time_ms=_int("starting_time", opts.get("starting_time"), 0),
        ending_time_ms=_int("ending_time", opts.get("ending_time"), 0),
        max_entries_per_trigger=max_entries,
        fail_on_data_loss=_bool("fail_on_data_loss", opts.get("fail_on_data_loss", "true")),
        subscription_name=opts.get("subscription_name"),
        read_timeout_ms=_int("read_timeout_ms", opts.get("read_timeout_ms", "30000"), 1) or 30_000,
        value_format=value_format,
        value_schema=value_schema,
        auth_token=opts.get("auth_token"),
        auth_basic=(user, password) if user is not None and password is not None else None,
        write_topic=topic,
        write_id=opts.get("write_id"),
        offload=_offload(opts),
        offload_split_bytes=_int("offload.splitBytes", opts.get("offload.splitbytes"), 1)
        or SPLIT_BYTES_DEFAULT,
    )
