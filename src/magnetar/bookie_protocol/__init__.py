"""The bookie protocol: what a ledger client and a bookie say to each other.

Imported by both sides and by neither's internals: the ledger client
(:mod:`magnetar.ledger`) and the bookie server (:mod:`magnetar.bookie`) depend on this
package, never on each other.

* :mod:`~magnetar.bookie_protocol.codec` — frames, the ``Request``/``Response`` headers
  (``bookie.proto``, generated ``bookie_pb2``), :class:`~magnetar.bookie_protocol.codec.OpType`
  and :class:`~magnetar.bookie_protocol.codec.Status`;
* :mod:`~magnetar.bookie_protocol.errors` — one error class per refusal status;
* :mod:`~magnetar.bookie_protocol.responder` — where a bookie's answers go
  (a connection, or an in-process caller).
"""
