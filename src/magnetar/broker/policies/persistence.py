"""Persistence: the ensemble, write and ack quorums of a topic's next ledgers (Pulsar's
``PersistencePolicies``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from magnetar.broker.policies.json_fields import PolicyError, json_int, json_object


@dataclass(frozen=True, slots=True)
class PersistencePolicies:
    """``{"bookkeeperEnsemble", "bookkeeperWriteQuorum", "bookkeeperAckQuorum",
    "managedLedgerMaxMarkDeleteRate"}``; applies to ledgers created after it is set."""

    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    max_mark_delete_rate: float = 0.0

    def __post_init__(self) -> None:
        if not (1 <= self.ack_quorum <= self.write_quorum <= self.ensemble_size):
            raise PolicyError(
                "persistence needs 1 <= ackQuorum <= writeQuorum <= ensemble, got "
                f"E={self.ensemble_size} Qw={self.write_quorum} Qa={self.ack_quorum}"
            )

    def to_json(self) -> dict[str, Any]:
        return {
            "bookkeeperEnsemble": self.ensemble_size,
            "bookkeeperWriteQuorum": self.write_quorum,
            "bookkeeperAckQuorum": self.ack_quorum,
            "managedLedgerMaxMarkDeleteRate": self.max_mark_delete_rate,
        }

    @classmethod
    def from_json(cls, value: Any) -> PersistencePolicies:
        body = json_object(value, "persistence policies")
        rate = body.get("managedLedgerMaxMarkDeleteRate", 0.0)
        if not isinstance(rate, int | float) or isinstance(rate, bool):
            raise PolicyError("managedLedgerMaxMarkDeleteRate must be a number")
        return cls(
            json_int(body.get("bookkeeperEnsemble"), "bookkeeperEnsemble"),
            json_int(body.get("bookkeeperWriteQuorum"), "bookkeeperWriteQuorum"),
            json_int(body.get("bookkeeperAckQuorum"), "bookkeeperAckQuorum"),
            float(rate),
        )
