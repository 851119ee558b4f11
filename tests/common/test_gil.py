"""The switch interval of serving processes (``magnetar.common.gil``)."""

from __future__ import annotations

import sys

from magnetar.common.gil import GIL_SWITCH_INTERVAL_S, tune_gil_for_serving


def test_serving_processes_hand_the_gil_to_helper_threads_within_half_a_millisecond() -> None:
    before = sys.getswitchinterval()
    try:
        tune_gil_for_serving()
        assert sys.getswitchinterval() <= 0.0005
        assert abs(sys.getswitchinterval() - GIL_SWITCH_INTERVAL_S) < 1e-9
    finally:
        sys.setswitchinterval(before)
