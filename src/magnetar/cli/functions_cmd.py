"""``magnetar functions localrun``: run a Python function's instances on this machine
against a broker, until Ctrl+C (as ``pulsar-admin functions localrun`` does)::

    magnetar functions localrun --py wordcount.py --classname wordcount.WordCount \\
        --inputs sentences --output counts --parallelism 2 \\
        --processing-guarantees EFFECTIVELY_ONCE --user-config '{"min": 2}'

It prints one line when each instance runs or reports an error, and exits 0 after
SIGINT/SIGTERM once every instance stopped; 1 with ``Error: ...`` when the definition is
unusable or no instance can load the package.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import tempfile
from pathlib import Path
from typing import Any

import click

from magnetar.cli.command_group import SuggestingGroup
from magnetar.cli.output import fail
from magnetar.functions.function_config import FunctionConfig, ProcessingGuarantee
from magnetar.functions.instance_spec import InstanceSpec
from magnetar.functions.instance_status import InstanceStatus
from magnetar.functions.process_runtime import ProcessRuntime
from magnetar.functions.thread_runtime import ThreadRuntime

STATUS_POLL_INTERVAL_MS = 250


@click.group("functions", cls=SuggestingGroup)
def functions() -> None:
    """Develop Python functions: run them locally with localrun."""


def _json_object(option: str, text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint=option) from None
    if not isinstance(value, dict):
        raise click.BadParameter("must be a JSON object", param_hint=option)
    return value


@functions.command("localrun")
@click.option(
    "--py",
    "package",
    required=True,
    type=click.Path(path_type=Path),
    help="The function's code: a .py file, a module directory, a .zip or a .whl.",
)
@click.option("--classname", required=True, help="module.Class or module.function.")
@click.option("--inputs", default="", help="Input topics, comma-separated.")
@click.option("--topics-pattern", default=None, help="A regex of input topics.")
@click.option("--output", default=None, help="Where results go (none: results are dropped).")
@click.option("--tenant", default="public", show_default=True)
@click.option("--namespace", default="default", show_default=True)
@click.option("--name", default=None, help="Default: the class or function name.")
@click.option("--parallelism", default=1, show_default=True, type=int)
@click.option(
    "--processing-guarantees",
    "guarantee",
    default="ATLEAST_ONCE",
    show_default=True,
    type=click.Choice([g.value for g in ProcessingGuarantee], case_sensitive=False),
)
@click.option("--user-config", default=None, help="A JSON object for get_user_config_*.")
@click.option("--secrets", default=None, help="A JSON object of secrets (clear text).")
@click.option("--subs-name", default=None, help="Default: tenant/namespace/name.")
@click.option(
    "--subs-position",
    default="Latest",
    show_default=True,
    type=click.Choice(["Latest", "Earliest"]),
)
@click.option("--max-message-retries", default=None, type=int)
@click.option("--dead-letter-topic", default=None)
@click.option("--auto-ack/--no-auto-ack", default=True, show_default=True)
@click.option("--broker-service-url", default="pulsar://localhost:6650", show_default=True)
@click.option(
    "--web-service-url",
    default="http://localhost:8080",
    show_default=True,
    help="The admin API (deduplication for effectively-once, state compaction).",
)
@click.option(
    "--runtime",
    "runtime_kind",
    default="process",
    show_default=True,
    type=click.Choice(["process", "thread"]),
)
@click.option(
    "--work-dir",
    default=None,
    type=click.Path(path_type=Path),
    help="Where instances keep their files (default: a temporary directory).",
)
def localrun(
    package: Path,
    classname: str,
    inputs: str,
    topics_pattern: str | None,
    output: str | None,
    tenant: str,
    namespace: str,
    name: str | None,
    parallelism: int,
    guarantee: str,
    user_config: str | None,
    secrets: str | None,
    subs_name: str | None,
    subs_position: str,
    max_message_retries: int | None,
    dead_letter_topic: str | None,
    auto_ack: bool,
    broker_service_url: str,
    web_service_url: str,
    runtime_kind: str,
    work_dir: Path | None,
) -> None:
    """Run a function's instances locally until Ctrl+C."""  # fmt: skip
    if not package.exists():
        fail(f"package {package} does not exist")
    config = FunctionConfig(
        tenant=tenant,
        namespace=namespace,
        name=name or classname.rpartition(".")[2],
        class_name=classname,
        inputs=tuple(t for t in inputs.split(",") if t),
        topics_pattern=topics_pattern,
        output=output,
        parallelism=parallelism,
        processing_guarantee=ProcessingGuarantee(guarantee.upper()),
        user_config=_json_object("--user-config", user_config),
        secrets=_json_object("--secrets", secrets),
        auto_ack=auto_ack,
        max_message_retries=max_message_retries,
        dead_letter_topic=dead_letter_topic,
        subscription_name=subs_name,
        subscription_position=subs_position,
        package=package.name,
    )
    with contextlib.ExitStack() as stack:
        if work_dir is None:
            work_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="localrun-")))
        code = asyncio.run(
            _run(config, package.resolve(), broker_service_url, web_service_url,
                 runtime_kind, work_dir)
        )  # fmt: skip
    if code:
        fail(code)


async def _run(
    config: FunctionConfig,
    package: Path,
    service_url: str,
    admin_url: str,
    runtime_kind: str,
    work_dir: Path,
) -> str:
    """Returns "" after a signal, else the error that ended every instance."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    runtimes: list[ThreadRuntime | ProcessRuntime] = []
    for i in range(config.parallelism):
        spec = InstanceSpec(
            config=config,
            instance_id=i,
            package_path=package,
            service_url=service_url,
            admin_url=admin_url,
            worker_id="localrun",
            work_dir=work_dir / f"instance-{i}",
        )
        runtime = ProcessRuntime() if runtime_kind == "process" else ThreadRuntime()
        await runtime.start(spec)
        runtimes.append(runtime)
    shown: dict[int, tuple[bool, str]] = {}
    try:
        while not stop.is_set():
            for i, runtime in enumerate(runtimes):
                status = runtime.status()
                seen = (status.running, status.error)
                if shown.get(i) != seen:
                    shown[i] = seen
                    click.echo(_describe(config, i, status))
            if all(r.failed_permanently for r in runtimes):
                return runtimes[0].status().error or "every instance failed"
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), STATUS_POLL_INTERVAL_MS / 1000)
        return ""
    finally:
        await asyncio.gather(*(r.stop() for r in runtimes))
        click.echo(f"{config.fqfn}: stopped {len(runtimes)} instance(s)")


def _describe(config: FunctionConfig, instance_id: int, status: InstanceStatus) -> str:
    who = f"{config.fqfn}:{instance_id}"
    if status.running:
        return f"{who}: running"
    if status.error:
        return f"{who}: error: {status.error}"
    return f"{who}: starting"
