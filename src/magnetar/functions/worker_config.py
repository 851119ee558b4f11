"""What a Functions Worker needs to know to join its worker cluster.

Defaults follow Pulsar's: coordination topic ``persistent://public/functions/coordinate``,
subscription ``participants``, assignments topic ``persistent://public/functions/assignments``.
The broker creates the ``public/functions`` namespace at start (as it does ``public/default``).

Several worker clusters may share one broker cluster: each gives its workers its own
coordination topic (or subscription) *and* its own assignments topic. Two clusters sharing an
assignments topic would fence each other's leader; :class:`WorkerConfig` cannot see that (it
knows one cluster), so it is a documented rule, not a check.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.auth.client_credentials import NO_CREDENTIALS, ClientCredentials
from magnetar.common.errors import InvalidSubscriptionName, InvalidTopicName
from magnetar.common.names import TopicName, check_subscription_name
from magnetar.functions.worker_info import WorkerInfo

DEFAULT_FUNCTIONS_NAMESPACE = "public/functions"
DEFAULT_COORDINATION_TOPIC = f"persistent://{DEFAULT_FUNCTIONS_NAMESPACE}/coordinate"
DEFAULT_COORDINATION_SUBSCRIPTION = "participants"
DEFAULT_ASSIGNMENTS_TOPIC = f"persistent://{DEFAULT_FUNCTIONS_NAMESPACE}/assignments"
DEFAULT_METADATA_TOPIC = f"persistent://{DEFAULT_FUNCTIONS_NAMESPACE}/metadata"
DEFAULT_PACKAGES_TOPIC = f"persistent://{DEFAULT_FUNCTIONS_NAMESPACE}/packages"
DEFAULT_RESCHEDULE_GRACE_MS = 10_000
DEFAULT_SCHEDULE_INTERVAL_MS = 1_000
DEFAULT_COMPACTION_INTERVAL_MS = 300_000
DEFAULT_PACKAGE_BYTES_MAX = 64 * 1024 * 1024
DEFAULT_WRITE_TIMEOUT_MS = 30_000
DEFAULT_ACQUIRE_BACKOFF_MAX_MS = 5_000
DEFAULT_ADMIN_REQUEST_TIMEOUT_MS = 10_000


WORKER_TOPICS = ("coordination_topic", "assignments_topic", "metadata_topic", "packages_topic")


class InvalidWorkerConfig(ValueError):
    """A worker setting that cannot work; the message names the setting."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerConfig:
    """One worker's settings. Topic names are normalized to their full form
    (``coordinate`` -> ``persistent://public/default/coordinate``, as clients spell them).
    Raises :class:`InvalidWorkerConfig` for an unusable combination."""

    worker: WorkerInfo
    service_url: str
    """The broker's binary-protocol URL (``pulsar://host:6650``)."""
    admin_url: str
    """The broker's HTTP URL (``http://host:8080``), for the coordination topic's stats."""
    coordination_topic: str = DEFAULT_COORDINATION_TOPIC
    coordination_subscription: str = DEFAULT_COORDINATION_SUBSCRIPTION
    assignments_topic: str = DEFAULT_ASSIGNMENTS_TOPIC
    metadata_topic: str = DEFAULT_METADATA_TOPIC
    """Definitions (functions, sources, sinks), keyed by fqfn; written by the leader only."""
    packages_topic: str = DEFAULT_PACKAGES_TOPIC
    """Uploaded packages, in parts; written by the leader only."""
    work_dir: str = "functions-work"
    """This worker's own directory: fetched packages, instance directories."""
    reschedule_grace_ms: int = DEFAULT_RESCHEDULE_GRACE_MS
    """How long a worker may be missing from the cluster before the leader gives its
    instances to others."""
    schedule_interval_ms: int = DEFAULT_SCHEDULE_INTERVAL_MS
    """How often the leader reads the member list and schedules (also after every change)."""
    compaction_interval_ms: int = DEFAULT_COMPACTION_INTERVAL_MS
    """How often the leader asks the broker to compact ``metadata`` and ``assignments``."""
    package_bytes_max: int = DEFAULT_PACKAGE_BYTES_MAX
    write_timeout_ms: int = DEFAULT_WRITE_TIMEOUT_MS
    """How long a definition change may take: leader write, then reading it back."""
    acquire_backoff_max_ms: int = DEFAULT_ACQUIRE_BACKOFF_MAX_MS
    """Longest wait between two attempts of a new leader to take the assignments producer."""
    admin_request_timeout_ms: int = DEFAULT_ADMIN_REQUEST_TIMEOUT_MS
    client_credentials: ClientCredentials = NO_CREDENTIALS
    """What the worker and its instances present to the broker, on the binary protocol and
    on REST (Pulsar's ``brokerClientAuthenticationPlugin``/``Parameters``). With
    authorization on, the role must be a super user: the worker writes ``public/functions``
    and every function's topics."""

    def __post_init__(self) -> None:
        for attr in WORKER_TOPICS:
            value = getattr(self, attr)
            try:
                full = str(TopicName.parse(value))
            except InvalidTopicName as exc:
                raise InvalidWorkerConfig(f"{attr}: {exc}") from None
            object.__setattr__(self, attr, full)
        seen: dict[str, str] = {}
        for attr in WORKER_TOPICS:
            value = getattr(self, attr)
            if value in seen:
                raise InvalidWorkerConfig(f"{seen[value]} and {attr} are both {value}")
            seen[value] = attr
        for attr in (
            "reschedule_grace_ms",
            "schedule_interval_ms",
            "compaction_interval_ms",
            "package_bytes_max",
            "write_timeout_ms",
        ):
            if getattr(self, attr) <= 0:
                raise InvalidWorkerConfig(f"{attr} must be positive")
        try:
            check_subscription_name(self.coordination_subscription)
        except InvalidSubscriptionName as exc:
            raise InvalidWorkerConfig(f"coordination_subscription: {exc}") from None
        if not self.service_url.startswith(("pulsar://", "pulsar+ssl://", "http://", "https://")):
            raise InvalidWorkerConfig(f"service_url {self.service_url!r} is not a pulsar:// URL")
        if not self.admin_url.startswith(("http://", "https://")):
            raise InvalidWorkerConfig(f"admin_url {self.admin_url!r} is not an http(s):// URL")
        if self.acquire_backoff_max_ms < 100:
            raise InvalidWorkerConfig("acquire_backoff_max_ms must be at least 100")
        if self.admin_request_timeout_ms <= 0:
            raise InvalidWorkerConfig("admin_request_timeout_ms must be positive")
