"""Topic names that land in chosen bundles."""

from __future__ import annotations

from magnetar.broker.controller import NamespaceBundles


def topic_per_bundle(prefix: str, namespace: str = "public/default") -> list[str]:
    """One topic name in each of the 4 default bundles of ``namespace``, in bundle order."""
    bundles = NamespaceBundles.default(namespace)
    found: dict[str, str] = {}
    i = 0
    while len(found) < len(bundles.bundles):
        topic = f"persistent://{namespace}/{prefix}-{i}"
        found.setdefault(bundles.bundle_for_topic(topic).name, topic)
        i += 1
    return [found[name] for name in sorted(found)]
