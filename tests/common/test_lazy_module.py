"""A lazy module: imported at the first attribute read, from any thread, and then read
as the module itself."""

from __future__ import annotations

import subprocess
import sys
import threading

from magnetar.common.lazy_module import lazy_module

CODE = """
import sys
from magnetar.common.lazy_module import lazy_module
m = lazy_module("json.tool")
assert "json.tool" not in sys.modules
main = m.main
assert "json.tool" in sys.modules and main is sys.modules["json.tool"].main
assert "main" in vars(m)  # copied: later reads do not go through __getattr__
assert type(m) is type(sys)  # a plain module now: its reads are a module's
print("ok")
"""


def test_imported_at_the_first_attribute_read_only() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "ok"


def test_reads_from_many_threads_see_the_loaded_module() -> None:
    m = lazy_module("email.mime.text")
    seen: list[object] = []
    threads = [threading.Thread(target=lambda: seen.append(m.MIMEText)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 8 and all(s is sys.modules["email.mime.text"].MIMEText for s in seen)


def test_a_missing_attribute_raises_attribute_error() -> None:
    m = lazy_module("json")
    try:
        m.no_such_name  # noqa: B018
    except AttributeError:
        pass
    else:
        raise AssertionError("expected AttributeError")
