"""Test support that users can use too: real Magnetar processes for integration tests.

:class:`~magnetar.testing.standalone.StandaloneProcess` runs ``magnetar standalone`` in a
subprocess on free ports; :class:`~magnetar.testing.broker.BrokerProcess` and
:class:`~magnetar.testing.bookie.BookieProcess` run ``magnetar broker`` and ``magnetar
bookie`` of a cluster on ZooKeeper; :func:`~magnetar.testing.wait.wait_until` polls a
condition with a deadline instead of sleeping.
"""

from magnetar.testing.bookie import BookieProcess
from magnetar.testing.broker import BrokerProcess
from magnetar.testing.standalone import StandaloneProcess
from magnetar.testing.wait import wait_until, wait_until_async

__all__ = ["BookieProcess", "BrokerProcess", "StandaloneProcess", "wait_until", "wait_until_async"]
