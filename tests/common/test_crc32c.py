"""magnetar.common.crc32c: the crc32c package's function, without the package's import cost."""

from __future__ import annotations

import subprocess
import sys

from magnetar.common import crc32c

PROBE = """
import sys
from magnetar.common import crc32c
print(crc32c.crc32c(b"123456789"), "importlib.metadata" in sys.modules, "crc32c" in sys.modules)
"""


def test_the_check_value_and_continuation() -> None:
    assert crc32c.crc32c(b"123456789") == 0xE3069283  # CRC-32C's published check value
    assert crc32c.crc32c(b"6789", value=crc32c.crc32c(b"12345")) == 0xE3069283
    assert crc32c.crc32c(memoryview(b"xx123456789")[2:]) == 0xE3069283


def test_it_is_the_packages_function() -> None:
    import crc32c as package

    assert crc32c.crc32c is package.crc32c


def test_loading_it_imports_neither_the_package_nor_importlib_metadata() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == [str(0xE3069283), "False", "False"]
