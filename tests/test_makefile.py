"""``make run`` installs only the runtime; ``make test`` adds the dev and Spark extras; one
virtualenv, whose stamps spare a reinstall. Checked with make's dry run (``make -n``) on a
virtualenv directory of the test's own."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _plan(target: str, venv: Path, *variables: str) -> str:
    """The commands ``make <target>`` would run with this virtualenv (nothing is run)."""
    result = subprocess.run(
        ["make", "--no-print-directory", "-C", str(REPO), "-n", target, f"VENV={venv}",
         *variables],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return result.stdout


def _installs(plan: str) -> list[str]:
    return [ln.strip() for ln in plan.splitlines() if "pip install" in ln and "-e " in ln]


def test_run_installs_the_runtime_only_and_test_the_extras(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    run_plan = _plan("run", venv)
    assert f"-m venv {venv}" in run_plan
    assert [i.split()[-1] for i in _installs(run_plan)] == ["."]
    assert run_plan.strip().endswith(f"{venv}/bin/magnetar standalone")
    assert [i.split()[-1] for i in _installs(_plan("test", venv))] == ["'.[dev,spark]'"]


def test_run_passes_args_to_the_standalone(tmp_path: Path) -> None:
    plan = _plan("run", tmp_path / "venv", "ARGS=--http-port 8081 --port 6651")
    assert plan.strip().endswith("bin/magnetar standalone --http-port 8081 --port 6651")


def test_stamps_spare_needless_reinstalls(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()  # the virtualenv exists (make only checks for it)

    (venv / ".installed-runtime").touch()  # after `make run`
    assert _installs(_plan("run", venv)) == []
    assert [i.split()[-1] for i in _installs(_plan("test", venv))] == ["'.[dev,spark]'"]

    (venv / ".installed-runtime").unlink()
    (venv / ".installed-dev").touch()  # after `make test` on a fresh clone...
    (venv / ".installed-runtime").touch()  # ...which marks the runtime level done too
    assert _installs(_plan("run", venv)) == []
    assert _installs(_plan("test", venv)) == []
