"""Transaction commands (the transaction coordinator's protocol).

Field rules: :mod:`magnetar.protocol.command`.
"""

from __future__ import annotations

from typing import ClassVar

from magnetar.common.errors import ServerError
from magnetar.common.frozen_struct import frozen_struct
from magnetar.protocol.command.enums import CommandType, TxnAction
from magnetar.protocol.command.structures import TxnSubscription


@frozen_struct
class TcClientConnectRequest:
    TYPE: ClassVar[CommandType] = CommandType.TC_CLIENT_CONNECT_REQUEST
    request_id: int
    tc_id: int


@frozen_struct
class TcClientConnectResponse:
    TYPE: ClassVar[CommandType] = CommandType.TC_CLIENT_CONNECT_RESPONSE
    request_id: int
    error: ServerError | None = None
    message: str | None = None


@frozen_struct
class NewTxn:
    TYPE: ClassVar[CommandType] = CommandType.NEW_TXN
    request_id: int
    txn_ttl_seconds: int = 0
    tc_id: int = 0


@frozen_struct
class _TxnResponse:
    """Fields shared by every transaction response."""

    request_id: int
    txnid_least_bits: int = 0
    txnid_most_bits: int = 0
    error: ServerError | None = None
    message: str | None = None


@frozen_struct
class NewTxnResponse(_TxnResponse):
    TYPE: ClassVar[CommandType] = CommandType.NEW_TXN_RESPONSE


@frozen_struct
class AddPartitionToTxn:
    TYPE: ClassVar[CommandType] = CommandType.ADD_PARTITION_TO_TXN
    request_id: int
    txnid_least_bits: int = 0
    txnid_most_bits: int = 0
    partitions: tuple[str, ...] = ()


@frozen_struct
class AddPartitionToTxnResponse(_TxnResponse):
    TYPE: ClassVar[CommandType] = CommandType.ADD_PARTITION_TO_TXN_RESPONSE


@frozen_struct
class AddSubscriptionToTxn:
    TYPE: ClassVar[CommandType] = CommandType.ADD_SUBSCRIPTION_TO_TXN
    request_id: int
    txnid_least_bits: int = 0
    txnid_most_bits: int = 0
    subscription: tuple[TxnSubscription, ...] = ()


@frozen_struct
class AddSubscriptionToTxnResponse(_TxnResponse):
    TYPE: ClassVar[CommandType] = CommandType.ADD_SUBSCRIPTION_TO_TXN_RESPONSE


@frozen_struct
class EndTxn:
    TYPE: ClassVar[CommandType] = CommandType.END_TXN
    request_id: int
    txnid_least_bits: int = 0
    txnid_most_bits: int = 0
    txn_action: TxnAction | None = None


@frozen_struct
class EndTxnResponse(_TxnResponse):
    TYPE: ClassVar[CommandType] = CommandType.END_TXN_RESPONSE


@frozen_struct
class EndTxnOnPartition:
    TYPE: ClassVar[CommandType] = CommandType.END_TXN_ON_PARTITION
    request_id: int
    txnid_least_bits: int = 0
    txnid_most_bits: int = 0
    topic: str | None = None
    txn_action: TxnAction | None = None
    txnid_least_bits_of_low_watermark: int | None = None


@frozen_struct
class EndTxnOnPartitionResponse(_TxnResponse):
    TYPE: ClassVar[CommandType] = CommandType.END_TXN_ON_PARTITION_RESPONSE


@frozen_struct
class EndTxnOnSubscription:
    TYPE: ClassVar[CommandType] = CommandType.END_TXN_ON_SUBSCRIPTION
    request_id: int
    txnid_least_bits: int = 0
    txnid_most_bits: int = 0
    subscription: TxnSubscription | None = None
    txn_action: TxnAction | None = None
    txnid_least_bits_of_low_watermark: int | None = None


@frozen_struct
class EndTxnOnSubscriptionResponse(_TxnResponse):
    TYPE: ClassVar[CommandType] = CommandType.END_TXN_ON_SUBSCRIPTION_RESPONSE
