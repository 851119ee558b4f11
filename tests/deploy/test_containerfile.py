"""The image definition, checked statically (this machine has no container runtime to build
it): a slim Python base matching requires-python, the project installed without extras, a
non-root user, ``magnetar`` as the entrypoint, the data volume, health through /ready."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Containerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", (ROOT / "Containerfile").read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _final_stage() -> list[tuple[str, str]]:
    instructions = _instructions()
    last_from = max(i for i, (word, _) in enumerate(instructions) if word == "FROM")
    return instructions[last_from:]


def test_the_base_is_a_slim_python_matching_requires_python() -> None:
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    minimum = re.fullmatch(r">=(\d+)\.(\d+)", requires)
    assert minimum is not None
    for word, args in _instructions():
        if word == "FROM":
            image = args.split()[0]
            match = re.fullmatch(r"python:(\d+)\.(\d+)-slim(-\w+)?", image)
            assert match, image
            assert (int(match[1]), int(match[2])) >= (int(minimum[1]), int(minimum[2]))


def test_the_runtime_runs_as_a_non_root_user_with_magnetar_as_entrypoint() -> None:
    final = _final_stage()
    users = [args for word, args in final if word == "USER"]
    assert users and users[-1] not in ("root", "0", "0:0")
    (entrypoint,) = [json.loads(args) for word, args in final if word == "ENTRYPOINT"]
    assert entrypoint == ["magnetar"]
    (volume,) = [json.loads(args) for word, args in final if word == "VOLUME"]
    assert volume == ["/pulsar/data"]
    (healthcheck,) = [args for word, args in final if word == "HEALTHCHECK"]
    assert "/ready" in healthcheck


def test_only_runtime_dependencies_are_installed() -> None:
    installs = [args for word, args in _instructions() if word == "RUN" and "pip " in args]
    assert installs
    for args in installs:
        assert "[" not in args, f"an extra is installed: {args}"
        assert not re.search(r"\b(pytest|ruff|mypy|moto|pyspark|dev)\b", args), args
        assert " -e " not in args, "the image installs the project, not an editable checkout"


def test_the_build_context_leaves_out_tests_and_local_state() -> None:
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert "*" in ignore  # everything is left out ...
    assert {"!pyproject.toml", "!README.md", "!src/"} <= set(ignore)  # ... but what is built
