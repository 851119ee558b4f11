"""Test support for the instance runtime tests: specs, packages, and reading outputs and
state with the official ``pulsar`` client."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import pulsar

from magnetar.functions.function_config import FunctionConfig, ProcessingGuarantee
from magnetar.functions.instance_spec import InstanceSpec
from magnetar.functions.state_store import StateStore, state_topic_name
from magnetar.testing import StandaloneProcess

RECEIVE_TIMEOUT_MS = 10_000
QUIET_MS = 1_500
"""How long a topic must stay silent before a test concludes nothing more is coming."""


def make_spec(
    node: StandaloneProcess,
    work_dir: Path,
    package: Path | None,
    class_name: str,
    *,
    name: str,
    inputs: tuple[str, ...],
    output: str | None = None,
    instance_id: int = 0,
    parallelism: int = 1,
    guarantee: ProcessingGuarantee = ProcessingGuarantee.AT_LEAST_ONCE,
    **config: Any,
) -> InstanceSpec:
    fn = FunctionConfig(
        tenant="public",
        namespace="default",
        name=name,
        class_name=class_name,
        inputs=inputs,
        output=output,
        parallelism=parallelism,
        processing_guarantee=guarantee,
        **config,
    )
    return InstanceSpec(
        config=fn,
        instance_id=instance_id,
        package_path=package,
        service_url=node.url,
        admin_url=node.http_url,
        worker_id="test-worker",
        work_dir=work_dir / f"{name}-{instance_id}",
    )


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def build_wheel(directory: Path, name: str, version: str, module_source: str) -> Path:
    """A minimal pure-Python wheel (no build backend needed): ``name/__init__.py`` holding
    ``module_source``, with the metadata pip requires."""
    directory.mkdir(parents=True, exist_ok=True)
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": module_source,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: magnetar-tests\nRoot-Is-Purelib: true\n"
            "Tag: py3-none-any\n"
        ),
    }
    record = "".join(f"{path},,\n" for path in files) + f"{dist}/RECORD,,\n"
    files[f"{dist}/RECORD"] = record
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return wheel


def zip_dir(source: Path, target: Path) -> Path:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for path in sorted(source.rglob("*")):
            if path.is_file():
                zf.write(path, path.relative_to(source.parent))
    target.write_bytes(buf.getvalue())
    return target


def drain(consumer: pulsar.Consumer, expected: int) -> list[pulsar.Message]:
    """Receive ``expected`` messages, then keep receiving until the topic stays quiet for
    :data:`QUIET_MS`, so duplicates that arrive late are counted too."""
    out: list[pulsar.Message] = []
    while len(out) < expected:
        msg = consumer.receive(RECEIVE_TIMEOUT_MS)
        consumer.acknowledge(msg)
        out.append(msg)
    while True:
        try:
            msg = consumer.receive(QUIET_MS)
        except pulsar.Timeout:
            return out
        consumer.acknowledge(msg)
        out.append(msg)


def read_state(client: pulsar.Client, function_name: str) -> StateStore:
    """The function's state as a new instance would see it (its whole state topic)."""
    store = StateStore(instance_id=10_000)
    reader = client.create_reader(
        state_topic_name("public", "default", function_name), pulsar.MessageId.earliest
    )
    try:
        while reader.has_message_available():
            msg = reader.read_next(RECEIVE_TIMEOUT_MS)
            store.apply(msg.partition_key(), msg.data())
    finally:
        reader.close()
    return store


def state_record(client: pulsar.Client, function_name: str, records: dict[str, Any]) -> None:
    """Write records to the function's state topic as one batch (as an instance does)."""
    producer = client.create_producer(
        state_topic_name("public", "default", function_name),
        batching_enabled=True,
        batching_max_publish_delay_ms=60_000,
    )
    for key, doc in records.items():
        producer.send_async(json.dumps(doc).encode(), None, partition_key=key)
    producer.flush()
    producer.close()
