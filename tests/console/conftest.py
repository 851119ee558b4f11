"""Fixtures for the web console tests: headless chromium driven by selenium (Debian's
``chromium`` and ``chromium-driver``, installed by ``scripts/ensure-system-deps.sh``)
against real ``magnetar standalone`` processes.

Screenshots go to ``$MAGNETAR_CONSOLE_SCREENSHOTS`` when set (docs/console.md's figures
are taken that way), else to the pytest temporary directory ``console-screenshots``.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from selenium import webdriver

from magnetar.testing import StandaloneProcess
from magnetar.testing.browser import headless_chromium
from magnetar.testing.wait import wait_until

_client_log = logging.getLogger("pulsar-client")
_client_log.setLevel(logging.WARNING)

PAGE_TIMEOUT_S = 20.0
FUNCTION = b"def process(input, context):\n    return input\n"
"""A Python function echoing its input."""


def create_function(admin_url: str, name: str, package: Path) -> None:
    """Deploy :data:`FUNCTION` as ``public/default/<name>`` (input ``<name>-in``, output
    ``<name>-out``) with ``magnetar admin functions create`` against ``admin_url``."""
    package.write_bytes(FUNCTION)
    done = subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "admin", "--admin-url", admin_url,
         "functions", "create", "--name", name, "--py", str(package),
         "--classname", f"{package.stem}.process", "--inputs", f"{name}-in",
         "--output", f"{name}-out"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


class Console:
    """One browser tab on one broker's console."""

    def __init__(self, driver: webdriver.Chrome, base_url: str, shots: Path) -> None:
        self.driver = driver
        self.base_url = base_url
        self.shots = shots

    def open(self, fragment: str = "#/", refresh_ms: int = 1000) -> None:
        """Load the page anew (a fresh document: its resource timings start empty; a URL
        that differs only by its fragment would otherwise keep the document)."""
        self.driver.get("about:blank")
        self.driver.get(f"{self.base_url}/?refresh={refresh_ms}{fragment}")

    def go(self, fragment: str) -> None:
        """Navigate inside the loaded page."""
        self.driver.execute_script("location.hash = arguments[0]", fragment)

    def find(self, css: str, timeout_s: float = PAGE_TIMEOUT_S) -> bool:
        """Wait until an element matching ``css`` is shown."""
        script = (
            "const e = document.querySelector(arguments[0]);"
            " return !!e && e.getClientRects().length > 0"
        )
        return bool(
            wait_until(
                lambda: self.driver.execute_script(script, css), timeout_s, 0.05, f"{css} shown"
            )
        )

    def text(self, css: str, timeout_s: float = PAGE_TIMEOUT_S) -> str:
        """The text of the first element matching ``css`` once one is shown (read in one
        script: the views re-render while they refresh)."""
        script = (
            "const e = document.querySelector(arguments[0]);"
            " return e && e.getClientRects().length ? e.textContent : null"
        )
        got: str = wait_until(
            lambda: (
                self.driver.execute_script(script, css) is not None
                and [self.driver.execute_script(script, css)]
            ),
            timeout_s,
            0.05,
            f"{css} shown",
        )[0]
        return got.strip()

    def number(self, css: str) -> int:
        return int(self.text(css).replace(",", "") or "0")

    def click(self, css: str) -> None:
        self.find(css)
        self.driver.execute_script("document.querySelector(arguments[0]).click()", css)

    def attribute(self, css: str, name: str) -> str:
        self.find(css)
        value = self.driver.execute_script(
            "const e = document.querySelector(arguments[0]); return e && e.getAttribute(arguments[1])",
            css,
            name,
        )
        return str(value or "")

    def screenshot(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        self.driver.save_screenshot(str(path))
        return path

    def errors(self) -> list[dict[str, Any]]:
        """The browser console's errors since the last call."""
        return [e for e in self.driver.get_log("browser") if e.get("level") == "SEVERE"]

    def foreign_requests(self) -> list[str]:
        """URLs this document fetched from anywhere but the broker."""
        urls: list[str] = self.driver.execute_script(
            "return performance.getEntries().map(e => e.name).filter(n => /^[a-z]+:/.test(n))"
        )
        return [u for u in urls if not u.startswith(self.base_url + "/")]


@pytest.fixture(scope="session")
def chromium() -> Iterator[webdriver.Chrome]:
    driver = headless_chromium()
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    named = os.environ.get("MAGNETAR_CONSOLE_SCREENSHOTS")
    if named:
        Path(named).mkdir(parents=True, exist_ok=True)
        return Path(named)
    return tmp_path_factory.mktemp("console-screenshots")


@pytest.fixture(scope="session")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    with StandaloneProcess(tmp_path_factory.mktemp("console") / "data") as node:
        yield node


@pytest.fixture
def console(
    chromium: webdriver.Chrome, standalone: StandaloneProcess, screenshots: Path
) -> Iterator[Console]:
    tab = Console(chromium, standalone.http_url, screenshots)
    chromium.get("about:blank")  # no earlier page still refreshing
    chromium.get_log("browser")  # drop what an earlier test left
    yield tab
    chromium.execute_script("sessionStorage.clear()")


@pytest.fixture
def client(standalone: StandaloneProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(standalone.url, operation_timeout_seconds=15, logger=_client_log)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def name() -> str:
    return f"t{uuid.uuid4().hex[:8]}"


@pytest.fixture
def console_on(
    chromium: webdriver.Chrome,
    standalone_factory: Callable[..., StandaloneProcess],
    screenshots: Path,
) -> Iterator[Callable[..., tuple[Console, StandaloneProcess]]]:
    """A console on a standalone of the test's own, started with the given CLI arguments."""

    def make(*args: str) -> tuple[Console, StandaloneProcess]:
        node = standalone_factory(*args)
        chromium.get_log("browser")
        return Console(chromium, node.http_url, screenshots), node

    yield make
    chromium.execute_script("sessionStorage.clear()")
