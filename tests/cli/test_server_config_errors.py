"""A security setting that cannot work names the flags that fix it, in one line, whether it came
from the command line or from a configuration file with Pulsar's keys."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    ("lines", "flags"),
    [
        (["authenticationEnabled=true", "authenticationProviders=basic"], "--basic-auth-conf"),
        (["authenticationEnabled=true", "authenticationProviders=token"], "--token-secret-key"),
        (["authorizationEnabled=true"], "--authentication-enabled"),
    ],
    ids=["basic", "token", "authorization"],
)
def test_a_security_setting_that_cannot_work_names_its_flags(
    tmp_path: Path, lines: list[str], flags: str
) -> None:
    conf = tmp_path / "standalone.conf"
    conf.write_text("\n".join(lines) + "\n")
    result = subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "standalone", "--config", str(conf),
         "--data-dir", str(tmp_path / "data"), "--port", "0", "--http-port", "0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert flags in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "data").exists()
