"""A headless chromium for driving the web console: Debian's ``chromium`` and
``chromium-driver`` (installed by ``scripts/ensure-system-deps.sh``) through selenium (a
``dev`` extra). Used by the console tests and ``benchmarks/console.py``."""

from __future__ import annotations

import shutil

from selenium import webdriver
from selenium.webdriver.chrome.service import Service


def headless_chromium() -> webdriver.Chrome:
    """A started headless chromium (the caller quits it) with a 1280x900 window, making no
    request of its own (no update, safe-browsing or component calls), keeping the page's
    console log (``driver.get_log("browser")``). Raises ``RuntimeError`` when chromedriver
    is not installed."""
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for arg in (
        "--headless=new",
        "--no-sandbox",  # root in CI containers
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",  # no update or safe-browsing calls
        "--disable-component-update",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver_path = shutil.which("chromedriver")
    if driver_path is None:
        raise RuntimeError("chromedriver missing: run scripts/ensure-system-deps.sh")
    return webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
