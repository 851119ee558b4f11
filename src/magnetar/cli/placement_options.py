"""The ledger client's placement policy as server flags, declared once: part of the broker
options (``magnetar broker`` and ``magnetar standalone``, :mod:`magnetar.cli.broker_options`)
and passed on by ``magnetar local-cluster`` to every broker. Pulsar's broker settings are
the config-file keys (:data:`magnetar.cli.server_config_file.PULSAR_KEYS`); the policy is
:class:`magnetar.ledger.placement.PlacementPolicy`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import click

from magnetar.common.frozen_struct import frozen_struct

if TYPE_CHECKING:
    from magnetar.ledger.placement import PlacementPolicy


@frozen_struct(kw_only=False)
class _Flag:
    name: str
    """The option without ``--`` (a boolean one also has ``--no-<name>``)."""
    field: str
    """The :class:`PlacementPolicy` field it sets."""
    default: bool | int
    help: str

    @property
    def param(self) -> str:
        return self.name.replace("-", "_")


FLAGS: tuple[_Flag, ...] = (
    _Flag(
        "bookkeeper-client-rackaware-policy-enabled",
        "rack_aware",
        True,
        "Spread each ledger's write sets over bookie racks "
        "(bookkeeperClientRackawarePolicyEnabled).",
    ),
    _Flag(
        "bookkeeper-client-regionaware-policy-enabled",
        "region_aware",
        False,
        "Spread each ledger's write sets over regions (the first part of a /region/rack) and "
        "acknowledge an entry only once bookies of --repp-minimum-regions-for-durability "
        "regions stored it (bookkeeperClientRegionawarePolicyEnabled).",
    ),
    _Flag(
        "bookkeeper-client-min-num-racks-per-write-quorum",
        "min_racks_per_write_quorum",
        2,
        "Racks each write set should span (bookkeeperClientMinNumRacksPerWriteQuorum).",
    ),
    _Flag(
        "bookkeeper-client-enforce-min-num-racks-per-write-quorum",
        "enforce_min",
        False,
        "Refuse to place a ledger (and fail its appends) while its write sets cannot span "
        "the minimum racks, or with the region-aware policy the minimum regions; off: write "
        "on with a logged warning (bookkeeperClientEnforceMinNumRacksPerWriteQuorum).",
    ),
    _Flag(
        "repp-minimum-regions-for-durability",
        "min_regions_for_durability",
        2,
        "Regions whose bookies must acknowledge an entry, with the region-aware policy "
        "(BookKeeper's reppMinimumRegionsForDurability).",
    ),
)

PARAMS: tuple[str, ...] = tuple(flag.param for flag in FLAGS)


def _option(flag: _Flag, *, forwarded: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The click option; ``forwarded`` (local-cluster): no default, so an unset flag is not
    passed on and the broker's default applies."""
    help_text = flag.help + (" Passed on to every broker." if forwarded else "")
    default = None if forwarded else flag.default
    if isinstance(flag.default, bool):
        return click.option(
            f"--{flag.name}/--no-{flag.name}",
            default=default,
            show_default=not forwarded,
            help=help_text,
        )
    return click.option(
        f"--{flag.name}",
        default=default,
        show_default=not forwarded,
        type=click.IntRange(min=1),
        help=help_text,
    )


def placement_options(
    *, forwarded: bool = False
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Adds every placement flag to a command (its parameters: :data:`PARAMS`)."""

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        for flag in reversed(FLAGS):
            f = _option(flag, forwarded=forwarded)(f)
        return f

    return decorate


def placement_policy(values: Mapping[str, Any]) -> PlacementPolicy:
    """The policy from the flags' values (by parameter name)."""
    from magnetar.ledger.placement import PlacementPolicy

    return PlacementPolicy(**{flag.field: values[flag.param] for flag in FLAGS})


def forwarded_args(values: Mapping[str, Any]) -> tuple[str, ...]:
    """The broker arguments for the flags set (not ``None``) in ``values``."""
    args: list[str] = []
    for flag in FLAGS:
        value = values[flag.param]
        if value is None:
            continue
        if isinstance(value, bool):
            args.append(f"--{flag.name}" if value else f"--no-{flag.name}")
        else:
            args += [f"--{flag.name}", str(value)]
    return tuple(args)
