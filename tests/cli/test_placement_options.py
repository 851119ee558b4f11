"""The placement policy's flags (:mod:`magnetar.cli.placement_options`): on the broker with
Pulsar's defaults and config keys, passed on by ``magnetar local-cluster`` only when given;
``--rack`` and ``--bookie-racks`` checked as one-line usage errors."""

from __future__ import annotations

from pathlib import Path

import click
from click.testing import CliRunner

from magnetar.cli.bookie_cmd import bookie
from magnetar.cli.broker_cmd import broker
from magnetar.cli.local_cluster_cmd import local_cluster
from magnetar.cli.placement_options import FLAGS, PARAMS, forwarded_args, placement_policy
from magnetar.cli.server_config_file import PULSAR_KEYS
from magnetar.ledger.placement import PlacementPolicy


def test_the_broker_defaults_are_the_policy_defaults() -> None:
    ctx = click.Context(broker)
    defaults = {p.name: p.default for p in broker.get_params(ctx) if p.name in PARAMS}
    assert set(defaults) == set(PARAMS)
    assert placement_policy(defaults) == PlacementPolicy()


def test_every_flag_has_its_pulsar_key() -> None:
    mapped = {param for param, _ in PULSAR_KEYS.values()}
    assert set(PARAMS) <= mapped
    assert PULSAR_KEYS["bookkeeperClientRegionawarePolicyEnabled"][0] == (
        "bookkeeper_client_regionaware_policy_enabled"
    )
    assert PULSAR_KEYS["bookieRack"][0] == "rack"


def test_local_cluster_passes_on_only_the_flags_given() -> None:
    unset = dict.fromkeys(PARAMS)
    assert forwarded_args(unset) == ()
    given = {
        **unset,
        "bookkeeper_client_regionaware_policy_enabled": True,
        "bookkeeper_client_rackaware_policy_enabled": False,
        "repp_minimum_regions_for_durability": 3,
    }
    assert forwarded_args(given) == (
        "--no-bookkeeper-client-rackaware-policy-enabled",
        "--bookkeeper-client-regionaware-policy-enabled",
        "--repp-minimum-regions-for-durability",
        "3",
    )
    ctx = click.Context(local_cluster)
    offered = {p.name for p in local_cluster.get_params(ctx)}
    assert set(PARAMS) <= offered and len(FLAGS) == len(PARAMS)


def test_bad_racks_are_one_line_usage_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    done = runner.invoke(
        bookie, ["--metadata-url", "memory:x", "--data-dir", str(tmp_path), "--rack", "/"]
    )
    assert done.exit_code == 2 and "--rack" in done.output and "empty" in done.output
    for racks, what in (
        ("/east/r1,/west/r1", "2 bookie racks given for 3 bookies"),
        ("/a,", "empty"),
    ):
        done = runner.invoke(
            local_cluster, ["--data-dir", str(tmp_path / "c"), "--bookie-racks", racks]
        )
        assert done.exit_code == 2, done.output
        assert what in done.output
        assert "Traceback" not in done.output
