"""The broker: topics, producers, subscriptions and dispatchers.

This package currently holds the sans-IO decision cores (see ``docs/broker.md``):
``topic_name``, ``failover``, ``key_shared``, ``shared_dispatch``, ``deduplication``,
``producer_access``, ``subscription_rules``, ``redelivery_tracker``, ``delayed_delivery``.
"""
