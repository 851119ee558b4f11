"""Load reports: the CPU meter, and the report's round trip through a registration node."""

from __future__ import annotations

import json

from magnetar.broker.controller.load import LoadReport
from magnetar.broker.load_report import CpuMeter, report_of, with_load


def test_cpu_is_process_time_over_wall_time_in_percent_of_one_core() -> None:
    cpu, now = [10.0], [100.0]
    meter = CpuMeter(lambda: cpu[0], lambda: now[0])
    cpu[0], now[0] = 10.5, 102.0
    assert meter.sample() == 25.0
    cpu[0], now[0] = 12.5, 104.0
    assert meter.sample() == 100.0
    assert meter.sample() == 0.0  # no time passed


def test_a_report_survives_the_registration_node() -> None:
    report = LoadReport(
        "b1", 1_700, 42.5, 10.0, 20.0, 3, 4, {"public/default/0x00000000_0x40000000": 30.0}
    )
    registration = json.dumps({"brokerId": "b1", "pulsarServiceUrl": "pulsar://h:1"}).encode()
    value = with_load(registration, report)
    assert json.loads(value)["pulsarServiceUrl"] == "pulsar://h:1"
    assert report_of("b1", value) == report


def test_no_or_a_malformed_report_counts_as_none() -> None:
    assert report_of("b1", b'{"brokerId": "b1"}') is None
    assert report_of("b1", b'{"load": {"lastUpdate": "x"}}') is None
    assert report_of("b1", b"not json") is None
