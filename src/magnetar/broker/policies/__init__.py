"""Namespace and topic policies: the model, its storage, and the effective view per topic.

One module per concern:

- the policy families, each Pulsar's nested JSON object: :mod:`.retention`,
  :mod:`.backlog_quota` (also the namespace storage quota), :mod:`.persistence`,
  :mod:`.auto_topic_creation`, :mod:`.inactive_topic`, :mod:`.rates` (publish, dispatch and
  subscribe rates), :mod:`.offload` (tiered storage, and how its levels merge);
- the two levels that hold them: :class:`Policies` (:mod:`.namespace_policies`, Pulsar's
  namespace ``Policies`` JSON) and :class:`TopicPolicies` (:mod:`.topic_policies`, Pulsar's
  ``TopicPolicies`` JSON), both keeping every field they do not model in ``extra`` so a value
  written by the admin API round-trips unchanged (``None`` means "not set here");
- :mod:`.resolution` (:func:`resolve`): topic level, else namespace level, else the broker's
  defaults, giving an :class:`EffectivePolicies` in the broker's units (pure);
- :mod:`.store` (:class:`PolicyStore`): the metadata layout and compare-and-set updates;
- :mod:`.cache` (:class:`PolicyCache`): the broker's live view, cached and notified;
- :mod:`.json_fields`: the field checks, raising :class:`PolicyError`.

Every public name is importable from ``magnetar.broker.policies``. Admin usage::

    policies = PolicyStore(store)
    await policies.update_namespace(ns, lambda p: p.with_(message_ttl_in_seconds=60))
    await policies.update_topic(topic, lambda p: p.with_(maxProducerPerTopic=1))
"""

from magnetar.broker.policies.auto_topic_creation import AutoTopicCreationOverride
from magnetar.broker.policies.backlog_quota import (
    NAMESPACE_STORAGE_QUOTA_KEY,
    BacklogQuota,
    BacklogQuotaPolicy,
    BacklogQuotaType,
    NamespaceStorageQuota,
    namespace_storage_quota_of,
)
from magnetar.broker.policies.cache import PolicyCache, PolicyListener
from magnetar.broker.policies.inactive_topic import (
    InactiveTopicDeleteMode,
    InactiveTopicPolicies,
    delete_mode,
)
from magnetar.broker.policies.json_fields import PolicyError
from magnetar.broker.policies.namespace_policies import Policies
from magnetar.broker.policies.offload import OffloadPolicies
from magnetar.broker.policies.persistence import PersistencePolicies
from magnetar.broker.policies.rates import dispatch_rate_of, publish_rate_of, subscribe_rate_of
from magnetar.broker.policies.resolution import (
    BrokerDefaults,
    EffectivePolicies,
    broker_defaults,
    ml_config_for,
    resolve,
)
from magnetar.broker.policies.retention import RetentionPolicies
from magnetar.broker.policies.store import (
    NAMESPACE_POLICIES_ROOT,
    TOPIC_POLICIES_ROOT,
    UPDATE_RETRIES_MAX,
    PolicyStore,
    namespace_path,
    parse_policy_path,
    topic_path,
)
from magnetar.broker.policies.topic_policies import TopicPolicies

__all__ = [
    "NAMESPACE_POLICIES_ROOT",
    "NAMESPACE_STORAGE_QUOTA_KEY",
    "TOPIC_POLICIES_ROOT",
    "UPDATE_RETRIES_MAX",
    "AutoTopicCreationOverride",
    "BacklogQuota",
    "BacklogQuotaPolicy",
    "BacklogQuotaType",
    "BrokerDefaults",
    "EffectivePolicies",
    "InactiveTopicDeleteMode",
    "InactiveTopicPolicies",
    "NamespaceStorageQuota",
    "OffloadPolicies",
    "PersistencePolicies",
    "Policies",
    "PolicyCache",
    "PolicyError",
    "PolicyListener",
    "PolicyStore",
    "RetentionPolicies",
    "TopicPolicies",
    "broker_defaults",
    "delete_mode",
    "dispatch_rate_of",
    "ml_config_for",
    "namespace_path",
    "namespace_storage_quota_of",
    "parse_policy_path",
    "publish_rate_of",
    "resolve",
    "subscribe_rate_of",
    "topic_path",
]
