"""A broker without tiered storage does not load the object-store library (start-up time):
the server commands' modules import without obstore, and the broker's offloaders create an
offloader (loading it) only when a driver is named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CHECK = """
import sys
from pathlib import Path
import magnetar.admin.app, magnetar.broker_node, magnetar.cli.main, magnetar.standalone
from magnetar.broker.offloaders import Offloaders
offloaders = Offloaders()
assert offloaders.get(None) is None
assert "obstore" not in sys.modules, "obstore loaded without an offload driver"
from magnetar.offload.settings import OffloadDriverConfig
assert offloaders.get(OffloadDriverConfig("filesystem", directory=sys.argv[1])) is not None
assert "obstore" in sys.modules
"""


def test_obstore_is_loaded_only_for_an_offload_driver(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHECK, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
