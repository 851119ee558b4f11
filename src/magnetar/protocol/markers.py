"""Marker entries: broker-only entries of a topic's log (replicated subscriptions, PIP-33).

A marker is a stored entry like any message, told apart by ``marker_type`` in its metadata::

    stored entry:  magic 0x0e01 | crc32c | metadata size | MessageMetadata | payload
    metadata:      producer_name "pulsar.marker", sequence_id 0, publish_time,
                   marker_type (10..13), replicate_to (which remote clusters get it)
    payload:       one PulsarMarkers.proto message, chosen by marker_type:
                   10 ReplicatedSubscriptionsSnapshotRequest  {snapshot_id, source_cluster}
                   11 ReplicatedSubscriptionsSnapshotResponse {snapshot_id, cluster{cluster, message_id}}
                   12 ReplicatedSubscriptionsSnapshot         {snapshot_id, local_message_id,
                                                               clusters[{cluster, message_id}]}
                   13 ReplicatedSubscriptionsUpdate           {subscription_name,
                                                               clusters[{cluster, message_id}]}

Positions are ``(ledger_id, entry_id)`` pairs of the log the message id belongs to. This
module only turns markers into bytes and back; who writes which marker, and when, is
:mod:`magnetar.replication.subscription_snapshots`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from google.protobuf.message import DecodeError

from magnetar.common.errors import ProtocolError
from magnetar.protocol.entry import Entry, build_entry
from magnetar.protocol.generated import PulsarMarkers_pb2 as pb
from magnetar.protocol.metadata import MessageMetadata

MARKER_PRODUCER_NAME = "pulsar.marker"
"""The producer name in every marker's metadata (Pulsar's)."""

Pair = tuple[int, int]
"""A position ``(ledger_id, entry_id)`` in one cluster's log."""


class MarkerType(IntEnum):
    """``MessageMetadata.marker_type`` values of replicated subscriptions."""

    SNAPSHOT_REQUEST = 10
    SNAPSHOT_RESPONSE = 11
    SNAPSHOT = 12
    UPDATE = 13


REPLICATED_SUBSCRIPTION_MARKERS = frozenset(int(t) for t in MarkerType)


@dataclass(frozen=True, slots=True)
class SnapshotRequest:
    snapshot_id: str
    source_cluster: str


@dataclass(frozen=True, slots=True)
class SnapshotResponse:
    snapshot_id: str
    cluster: str
    position: Pair
    """The last position of ``cluster``'s log when it answered."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    snapshot_id: str
    local_position: Pair
    clusters: Mapping[str, Pair] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Update:
    subscription: str
    clusters: Mapping[str, Pair] = field(default_factory=dict)


Marker = SnapshotRequest | SnapshotResponse | Snapshot | Update


def _pair(m: pb.MarkersMessageIdData) -> Pair:
    return (m.ledger_id, m.entry_id)


def _clusters(items: Sequence[pb.ClusterMessageId]) -> dict[str, Pair]:
    return {c.cluster: _pair(c.message_id) for c in items}


def _fill(target: pb.MarkersMessageIdData, pair: Pair) -> None:
    target.ledger_id, target.entry_id = pair


def _add_clusters(target: object, clusters: Mapping[str, Pair]) -> None:
    for name in sorted(clusters):
        item = target.add()  # type: ignore[attr-defined]
        item.cluster = name
        _fill(item.message_id, clusters[name])


def encode_marker(marker: Marker) -> tuple[MarkerType, bytes]:
    """The marker type and payload bytes of ``marker``."""
    if isinstance(marker, SnapshotRequest):
        req = pb.ReplicatedSubscriptionsSnapshotRequest(
            snapshot_id=marker.snapshot_id, source_cluster=marker.source_cluster
        )
        return MarkerType.SNAPSHOT_REQUEST, req.SerializeToString()
    if isinstance(marker, SnapshotResponse):
        resp = pb.ReplicatedSubscriptionsSnapshotResponse(snapshot_id=marker.snapshot_id)
        resp.cluster.cluster = marker.cluster
        _fill(resp.cluster.message_id, marker.position)
        return MarkerType.SNAPSHOT_RESPONSE, resp.SerializeToString()
    if isinstance(marker, Snapshot):
        snap = pb.ReplicatedSubscriptionsSnapshot(snapshot_id=marker.snapshot_id)
        _fill(snap.local_message_id, marker.local_position)
        _add_clusters(snap.clusters, marker.clusters)
        return MarkerType.SNAPSHOT, snap.SerializeToString()
    update = pb.ReplicatedSubscriptionsUpdate(subscription_name=marker.subscription)
    _add_clusters(update.clusters, marker.clusters)
    return MarkerType.UPDATE, update.SerializeToString()


def decode_marker(marker_type: int, payload: bytes) -> Marker | None:
    """The marker of ``marker_type`` in ``payload``; None for a type this module does not
    know (other brokers' markers, e.g. transactions'). Raises ProtocolError if malformed."""
    try:
        if marker_type == MarkerType.SNAPSHOT_REQUEST:
            req = pb.ReplicatedSubscriptionsSnapshotRequest.FromString(payload)
            return SnapshotRequest(req.snapshot_id, req.source_cluster)
        if marker_type == MarkerType.SNAPSHOT_RESPONSE:
            resp = pb.ReplicatedSubscriptionsSnapshotResponse.FromString(payload)
            if not resp.HasField("cluster"):
                raise ProtocolError("snapshot response without a cluster")
            return SnapshotResponse(
                resp.snapshot_id, resp.cluster.cluster, _pair(resp.cluster.message_id)
            )
        if marker_type == MarkerType.SNAPSHOT:
            snap = pb.ReplicatedSubscriptionsSnapshot.FromString(payload)
            return Snapshot(
                snap.snapshot_id, _pair(snap.local_message_id), _clusters(snap.clusters)
            )
        if marker_type == MarkerType.UPDATE:
            update = pb.ReplicatedSubscriptionsUpdate.FromString(payload)
            return Update(update.subscription_name, _clusters(update.clusters))
    except DecodeError as exc:
        raise ProtocolError(f"malformed marker {marker_type}: {exc}") from exc
    return None


def marker_entry(marker: Marker, publish_ms: int, replicate_to: Sequence[str] = ()) -> bytes:
    """The stored-entry bytes of ``marker`` (``replicate_to`` empty: every remote cluster
    the replicators serve; otherwise only those named)."""
    marker_type, payload = encode_marker(marker)
    metadata = MessageMetadata(
        producer_name=MARKER_PRODUCER_NAME,
        sequence_id=0,
        publish_time=publish_ms,
        marker_type=int(marker_type),
        replicate_to=tuple(replicate_to),
    )
    return b"".join(build_entry(metadata, payload))


def marker_type_of(data: bytes) -> int | None:
    """The ``marker_type`` of a stored entry (None: a message). Raises ProtocolError if the
    entry is malformed."""
    return Entry(data).metadata.marker_type
