"""Test support that users can use too: real Magnetar processes for integration tests.

:class:`~magnetar.testing.standalone.StandaloneProcess` runs ``magnetar standalone`` in a
subprocess on free ports; :func:`~magnetar.testing.wait.wait_until` polls a condition with a
deadline instead of sleeping.
"""

from magnetar.testing.standalone import StandaloneProcess
from magnetar.testing.wait import wait_until, wait_until_async

__all__ = ["StandaloneProcess", "wait_until", "wait_until_async"]
