"""Packages and the Function API without a broker: the forms a package takes, how a class
is told from a plain function, and each way a package can be unusable."""

from __future__ import annotations

import asyncio
import re
import zipfile
from pathlib import Path

import pytest

from magnetar.client import MessageId
from magnetar.functions.context import sequence_id_of
from magnetar.functions.function_config import FunctionConfig
from magnetar.functions.function_loader import PackageError, load_function, prepare_package
from magnetar.functions.instance_spec import InstanceSpec
from magnetar.functions.instance_status import ExceptionReport, InstanceStatus
from magnetar.functions.restart_backoff import RestartBackoff
from magnetar.functions.serde import deserialize_input, serialize_output

CODE = """
import pulsar

class Upper(pulsar.Function):
    def process(self, input, context):
        return input.upper() + context

def plain(input):
    return input * 2

class NeedsArgs:
    def __init__(self, x):
        pass

value = 3
"""


def load(package: Path, class_name: str, work_dir: Path):  # type: ignore[no-untyped-def]
    prepared = asyncio.run(prepare_package(package, work_dir))
    return load_function(prepared, class_name)


def test_file_directory_and_zip_packages(tmp_path: Path) -> None:
    (tmp_path / "single.py").write_text(CODE)
    assert load(tmp_path / "single.py", "single.Upper", tmp_path / "w1")("a", "!") == "A!"
    assert load(tmp_path / "single.py", "single.plain", tmp_path / "w1")("ab", None) == "abab"

    folder = tmp_path / "pkgdir"
    (folder / "inner").mkdir(parents=True)
    (folder / "inner" / "__init__.py").write_text(CODE)
    assert load(folder, "inner.Upper", tmp_path / "w2")("b", "?") == "B?"

    archive = tmp_path / "fn.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("fn/zipped.py", CODE)
    assert load(archive, "zipped.plain", tmp_path / "w3")("z", None) == "zz"


@pytest.mark.parametrize(
    ("class_name", "expected"),
    [
        ("single.Missing", "module has no 'Missing'"),
        ("single.NeedsArgs", "single.NeedsArgs(): TypeError"),
        ("single.value", "neither a class nor a function"),
        ("single", "expected module.Class or module.function"),
        ("", "className: missing"),
        ("absent_module_xyz.F", "importing 'absent_module_xyz' failed: ModuleNotFoundError"),
    ],
)
def test_unusable_class_names(tmp_path: Path, class_name: str, expected: str) -> None:
    (tmp_path / "single.py").write_text(CODE)
    with pytest.raises(PackageError, match=re.escape(expected)):
        load(tmp_path / "single.py", class_name, tmp_path / "w")


def test_a_module_that_exits_at_import_is_a_package_error(tmp_path: Path) -> None:
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(4)\n")
    with pytest.raises(PackageError, match=re.escape("importing 'exits' failed: SystemExit: 4")):
        load(tmp_path / "exits.py", "exits.F", tmp_path / "w")


def test_unusable_packages(tmp_path: Path) -> None:
    with pytest.raises(PackageError, match="no package"):
        asyncio.run(prepare_package(None, tmp_path / "w"))
    with pytest.raises(PackageError, match="does not exist"):
        asyncio.run(prepare_package(tmp_path / "gone.py", tmp_path / "w"))
    (tmp_path / "data.tar").write_bytes(b"\0" * 10)
    with pytest.raises(
        PackageError, match=re.escape("not a .py file, a directory, a .zip or a .whl")
    ):
        asyncio.run(prepare_package(tmp_path / "data.tar", tmp_path / "w"))
    (tmp_path / "bad.zip").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(PackageError, match=re.escape("bad.zip is not a readable zip")):
        asyncio.run(prepare_package(tmp_path / "bad.zip", tmp_path / "w"))
    with zipfile.ZipFile(tmp_path / "evil.zip", "w") as zf:
        zf.writestr("../../escaped.py", "x = 1\n")
    with pytest.raises(PackageError, match="outside the package"):
        asyncio.run(prepare_package(tmp_path / "evil.zip", tmp_path / "w"))
    assert not (tmp_path / "escaped.py").exists()


def test_default_serde() -> None:
    assert deserialize_input("é".encode()) == "é"
    assert deserialize_input(b"\xff\xfe") == b"\xff\xfe"
    assert [serialize_output(v) for v in ("é", b"\x00", 3, 1.5, True)] == [
        "é".encode(), b"\x00", b"3", b"1.5", b"True",
    ]  # fmt: skip
    with pytest.raises(TypeError, match="not dict"):
        serialize_output({"a": 1})


def test_sequence_ids_grow_along_a_partition_including_batch_indexes() -> None:
    ids = [
        MessageId(-1, 3, 9),
        MessageId(-1, 3, 10, 0),
        MessageId(-1, 3, 10, 1),
        MessageId(-1, 4, 0),
    ]
    seqs = [sequence_id_of(m) for m in ids]
    assert seqs == sorted(seqs) and len(set(seqs)) == 4
    with pytest.raises(ValueError, match="outside"):
        sequence_id_of(MessageId(-1, 1 << 28, 0))


def test_restart_backoff_doubles_to_its_bound() -> None:
    backoff = RestartBackoff(initial_ms=100, max_ms=1_000)
    assert [backoff.delay_ms(a) for a in range(6)] == [100, 200, 400, 800, 1_000, 1_000]
    assert backoff.delay_ms(10_000) == 1_000
    with pytest.raises(ValueError):
        RestartBackoff(initial_ms=0)


def test_spec_and_status_survive_json(tmp_path: Path) -> None:
    config = FunctionConfig(tenant="public", namespace="default", name="f", class_name="m.F",
                            inputs=("in",), output="out", user_config={"a": [1]},
                            subscription_position="Earliest")  # fmt: skip
    spec = InstanceSpec(config=config, instance_id=2, package_path=tmp_path / "m.py",
                        service_url="pulsar://h:1", admin_url="http://h:2", worker_id="w",
                        work_dir=tmp_path)  # fmt: skip
    assert InstanceSpec.from_json(spec.to_json()) == spec
    status = InstanceStatus(instance_id=1, running=True, error="e", num_restarts=2,
                            num_received=5, num_user_exceptions=1,
                            latest_user_exceptions=(ExceptionReport("ValueError: x", 7),),
                            average_latency_ms=1.5, last_invocation_time_ms=9)  # fmt: skip
    assert InstanceStatus.from_json(status.to_json()) == status
