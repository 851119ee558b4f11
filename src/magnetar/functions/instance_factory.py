"""What an instance runs, from its spec: a function (or a packaged sink) through
:class:`FunctionInstance`, a built-in sink through :class:`FunctionInstance` too (a sink is a
``process`` that writes elsewhere), a built-in source through :class:`SourceInstance`.

Both runtimes call :func:`prepare_instance` (in the worker), then :func:`load_instance` once (it imports user code or builds the connector,
checking its settings) and then its result once per attempt, for a fresh instance.
"""

from __future__ import annotations

from collections.abc import Callable

from magnetar.common.clock import Clock
from magnetar.functions.connectors.registry import make_sink, make_source
from magnetar.functions.function_config import ComponentKind
from magnetar.functions.function_loader import (
    PackageError,
    PreparedPackage,
    load_function,
    prepare_package,
)
from magnetar.functions.instance import FunctionInstance
from magnetar.functions.instance_spec import InstanceSpec
from magnetar.functions.instance_stats import InstanceStats
from magnetar.functions.source_instance import SourceInstance

InstanceMaker = Callable[[], FunctionInstance | SourceInstance]


async def prepare_instance(spec: InstanceSpec) -> PreparedPackage:
    """Make the instance's package importable (:func:`prepare_package`); a built-in source
    or sink has none. Creates ``spec.work_dir``. Raises :class:`PackageError`, OSError."""
    if spec.package_path is None and spec.config.kind is not ComponentKind.FUNCTION:
        spec.work_dir.mkdir(parents=True, exist_ok=True)
        return PreparedPackage(None)
    return await prepare_package(spec.package_path, spec.work_dir)


def load_instance(
    spec: InstanceSpec,
    prepared: PreparedPackage,
    *,
    clock: Clock,
    stats: InstanceStats,
    on_running: Callable[[], None] | None = None,
) -> InstanceMaker:
    """Raises :class:`PackageError` (or its subclass
    :class:`~magnetar.functions.connectors.connector.InvalidConnectorConfig`) for what
    cannot run; blocking (imports user code): call it off the event loop."""
    config = spec.config
    if config.kind is ComponentKind.SOURCE:
        if spec.package_path is not None:
            raise PackageError(
                "a source runs a built-in connector (className builtin://NAME); "
                "sources from packages are not supported"
            )
        make_source(config, instance_id=spec.instance_id, clock=clock)  # checks the settings

        def source_instance() -> SourceInstance:
            return SourceInstance(
                spec,
                lambda: make_source(config, instance_id=spec.instance_id, clock=clock),
                clock=clock,
                stats=stats,
                on_running=on_running,
            )

        return source_instance
    if config.kind is ComponentKind.SINK and spec.package_path is None:
        process = make_sink(config)
    else:
        process = load_function(prepared, config.class_name)
    return lambda: FunctionInstance(spec, process, clock=clock, stats=stats, on_running=on_running)
