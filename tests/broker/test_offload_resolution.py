"""Offload policies resolved as Pulsar's ``OffloadPoliciesImpl`` does: the JSON round trip,
``oldPoliciesCompatible`` (the namespace's single values fill what its ``offload_policies``
leaves unset), ``mergeConfiguration`` (topic > namespace > broker, field by field), and the
:class:`OffloadSettings` the managed ledger gets through ``resolve`` and ``ml_config_for``."""

from __future__ import annotations

import pytest

from magnetar.broker.config import BrokerConfig
from magnetar.broker.policies import (
    BrokerDefaults,
    OffloadPolicies,
    Policies,
    PolicyError,
    TopicPolicies,
    broker_defaults,
    ml_config_for,
    resolve,
)
from magnetar.broker.policies.offload import (
    broker_level,
    merge,
    namespace_level,
    problem,
    settings_of,
)
from magnetar.managed_ledger.config import ManagedLedgerConfig
from magnetar.offload.settings import (
    DEFAULT_DELETION_LAG_MS,
    NO_OFFLOAD,
    OffloadDriverConfig,
    ReadPriority,
)

S3 = OffloadPolicies(driver="aws-s3", bucket="ns-bucket", region="eu-west-1")
BROKER = broker_level("filesystem", directory="/srv/offload", threshold_bytes=1 << 30)


def test_pulsar_json_round_trips_and_keeps_unmodelled_fields() -> None:
    body = {
        "managedLedgerOffloadDriver": "aws-s3",
        "s3ManagedLedgerOffloadBucket": "b",
        "s3ManagedLedgerOffloadRegion": "r",
        "managedLedgerOffloadThresholdInBytes": 10,
        "managedLedgerOffloadThresholdInSeconds": 60,
        "managedLedgerOffloadDeletionLagInMillis": 0,
        "managedLedgerOffloadedReadPriority": "BOOKKEEPER_FIRST",
        "offloadersDirectory": "./offloaders",
    }
    policies = OffloadPolicies.from_json(body)
    assert policies == OffloadPolicies(
        driver="aws-s3",
        bucket="b",
        region="r",
        threshold_bytes=10,
        threshold_s=60,
        deletion_lag_ms=0,
        read_priority=ReadPriority.BOOKKEEPER_FIRST,
        extra={"offloadersDirectory": "./offloaders"},
    )
    written = policies.to_json()
    # an S3 driver's bucket and region under both names, as OffloadPoliciesImpl.create
    assert written["managedLedgerOffloadBucket"] == written["s3ManagedLedgerOffloadBucket"] == "b"
    assert OffloadPolicies.from_json(written) == policies


@pytest.mark.parametrize(
    "body",
    [
        {"managedLedgerOffloadDriver": 3},
        {"managedLedgerOffloadThresholdInBytes": "ten"},
        {"managedLedgerOffloadedReadPriority": "SOMEWHERE_FIRST"},
        [],
    ],
)
def test_malformed_json_is_a_policy_error(body: object) -> None:
    with pytest.raises(PolicyError):
        OffloadPolicies.from_json(body)


@pytest.mark.parametrize(
    ("policies", "reason"),
    [
        (OffloadPolicies(), "must be specified"),
        (OffloadPolicies(driver="azureblob", bucket="b"), "azureblob is not supported"),
        (OffloadPolicies(driver="S3", region="r"), "bucket must be specified"),
        (OffloadPolicies(driver="filesystem", deletion_lag_ms=-5), "0 or more"),
        (OffloadPolicies(driver="filesystem", directory="hdfs://nn/x"), "fileSystemURI"),
    ],
)
def test_problem_names_why_policies_cannot_work(policies: OffloadPolicies, reason: str) -> None:
    found = problem(policies)
    assert found is not None and reason in found


def test_a_supported_driver_passes_whatever_its_case() -> None:
    assert problem(OffloadPolicies(driver="S3", bucket="b")) is None
    assert problem(OffloadPolicies(driver="filesystem", directory="file:///tmp/x")) is None


def test_old_single_values_fill_only_what_offload_policies_leave_unset() -> None:
    """Pulsar's ``oldPoliciesCompatibleTest``."""
    assert namespace_level(None, -1, -1, None) is None
    level = namespace_level(None, 0, -1, 1000)
    assert level == OffloadPolicies(threshold_bytes=0, deletion_lag_ms=1000)
    assert namespace_level(level, 100, 30, 2000) == OffloadPolicies(
        threshold_bytes=0, threshold_s=30, deletion_lag_ms=1000
    )


def test_merge_takes_each_field_from_the_first_level_setting_it() -> None:
    topic = OffloadPolicies(driver="S3", bucket="topic-bucket", endpoint="http://minio")
    merged = merge(topic, S3.with_(threshold_s=60), BROKER)
    assert merged.driver == "S3" and merged.bucket == "topic-bucket"
    assert merged.region == "eu-west-1"  # the namespace's
    assert merged.threshold_s == 60  # the namespace's
    assert merged.threshold_bytes == 1 << 30  # the broker's
    assert merged.directory == "/srv/offload"  # the broker's (unused by S3)
    assert merged.deletion_lag_ms == DEFAULT_DELETION_LAG_MS


def test_settings_are_in_the_managed_ledgers_units() -> None:
    settings = settings_of(
        OffloadPolicies(
            driver="filesystem",
            directory="file:///srv/x",
            threshold_bytes=0,
            threshold_s=90,
            deletion_lag_ms=0,
        )
    )
    assert settings.driver == OffloadDriverConfig("filesystem", directory="/srv/x")
    assert (settings.threshold_bytes, settings.threshold_ms, settings.deletion_lag_ms) == (
        0,
        90_000,
        0,
    )
    assert settings.read_priority is ReadPriority.TIERED_STORAGE_FIRST
    assert settings_of(OffloadPolicies()) == NO_OFFLOAD


def test_a_driver_that_cannot_work_is_no_driver() -> None:
    assert settings_of(OffloadPolicies(driver="filesystem", threshold_bytes=0)).driver is None
    assert settings_of(OffloadPolicies(driver="azureblob", bucket="b")).driver is None


def test_resolve_topic_over_namespace_over_broker() -> None:
    defaults = BrokerDefaults(offload=BROKER)
    assert resolve(BrokerDefaults(), None).offload == NO_OFFLOAD

    broker_only = resolve(defaults, Policies()).offload
    assert broker_only.driver == OffloadDriverConfig("filesystem", directory="/srv/offload")
    assert broker_only.threshold_bytes == 1 << 30

    ns = Policies(offload_policies=S3, offload_threshold=0, offload_deletion_lag_ms=5)
    from_ns = resolve(defaults, ns).offload
    assert from_ns.driver == OffloadDriverConfig("aws-s3", bucket="ns-bucket", region="eu-west-1")
    assert (from_ns.threshold_bytes, from_ns.deletion_lag_ms) == (0, 5)

    topic = TopicPolicies(
        offloadPolicies=OffloadPolicies(
            driver="filesystem", directory="/t", read_priority=ReadPriority.BOOKKEEPER_FIRST
        )
    )
    from_topic = resolve(defaults, ns, topic).offload
    assert from_topic.driver == OffloadDriverConfig("filesystem", directory="/t")
    assert from_topic.threshold_bytes == 0  # still the namespace's
    assert from_topic.read_priority is ReadPriority.BOOKKEEPER_FIRST

    config = ml_config_for(ManagedLedgerConfig(), resolve(defaults, ns, topic))
    assert (config.offload_threshold_bytes, config.offload_deletion_lag_ms) == (0, 5)
    assert config.offload_read_bookkeeper_first


def test_namespace_single_values_alone_need_a_driver_from_elsewhere() -> None:
    ns = Policies(offload_threshold=0)
    assert resolve(BrokerDefaults(), ns).offload.driver is None
    config = ml_config_for(ManagedLedgerConfig(), resolve(BrokerDefaults(), ns))
    assert config.offload_threshold_bytes == -1  # no driver: no automatic offload
    with_driver = resolve(BrokerDefaults(offload=BROKER), ns).offload
    assert with_driver.threshold_bytes == 0


def test_policies_json_keeps_the_offload_fields() -> None:
    ns = Policies(
        offload_threshold=7,
        offload_threshold_in_seconds=8,
        offload_deletion_lag_ms=9,
        offload_policies=S3,
    )
    body = ns.to_json()
    assert (body["offload_threshold"], body["offload_threshold_in_seconds"]) == (7, 8)
    assert Policies.from_json(body) == ns
    assert Policies.from_json({}).offload_threshold == -1
    topic = TopicPolicies(offloadPolicies=S3)
    assert TopicPolicies.from_json(topic.to_json()) == topic


def test_the_broker_flags_are_the_last_level() -> None:
    assert resolve(broker_defaults(BrokerConfig()), None).offload.driver is None
    config = BrokerConfig(
        offload_driver="aws-s3",
        offload_bucket="b",
        offload_region="r",
        offload_endpoint="http://minio:9000",
        offload_threshold_bytes=0,
        offload_deletion_lag_ms=0,
        offload_read_priority="bookkeeper-first",
    )
    settings = resolve(broker_defaults(config), Policies()).offload
    assert settings.driver == OffloadDriverConfig(
        "aws-s3", bucket="b", region="r", endpoint="http://minio:9000"
    )
    assert (settings.threshold_bytes, settings.deletion_lag_ms) == (0, 0)
    assert settings.read_priority is ReadPriority.BOOKKEEPER_FIRST
    # a namespace's threshold overrides the flag, the store stays the broker's
    ns = resolve(broker_defaults(config), Policies(offload_threshold=1 << 20)).offload
    assert (ns.driver, ns.threshold_bytes) == (settings.driver, 1 << 20)
