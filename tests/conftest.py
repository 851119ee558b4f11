"""Fixtures shared by every test package. Package-specific fixtures live beside their tests."""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling

from magnetar.metadata.zookeeper_server import ZooKeeperServer
from magnetar.testing import StandaloneProcess

_chroots = itertools.count()
_seconds_by_package: collections.Counter[str] = collections.Counter()


def _package_of(nodeid: str) -> str:
    """The test package of a test (``tests/<package>/...``), or its file when the file lies
    directly under ``tests/``."""
    parts = nodeid.split("::", 1)[0].split("/")
    return parts[1] if len(parts) > 2 else parts[-1]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _seconds_by_package[_package_of(report.nodeid)] += report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Seconds per test package (setup, call and teardown): where the suite's time budget
    goes, printed by every run so CI's log shows it."""
    if not _seconds_by_package:
        return
    terminalreporter.section("seconds per test package")
    for package, seconds in _seconds_by_package.most_common():
        terminalreporter.write_line(f"{seconds:8.1f}  {package}")


class PackageScheduling(LoadScopeScheduling):
    """pytest-xdist's unit of work under ``make test``: a whole test package
    (``tests/<package>/``; a file directly under ``tests/`` is its own unit). A package's
    session-wide processes (its standalone, Spark, PostgreSQL, the browser) then start on one
    worker, not on each."""

    def _split_scope(self, nodeid: str) -> str:
        return _package_of(nodeid)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> PackageScheduling | None:
    """Packages as units for ``-n N`` (whose default is ``--dist load``); other modes as asked."""
    return PackageScheduling(config, log) if config.getvalue("dist") == "load" else None


@pytest.fixture(scope="session")
def zookeeper() -> Iterator[ZooKeeperServer]:
    """One real ZooKeeper server for the whole test session, on a free 127.0.0.1 port with
    a temporary data directory, stopped (and its directory deleted) at the end.

    Tests share it, so each test must work under its own chroot: use
    ``zookeeper_url`` (a fresh ``zk://127.0.0.1:<port>/test-<n>`` per test) or
    ``zookeeper.url(f"/{unique}")``. Sessions may be as short as 1 s (minSessionTimeout).
    Fails (never skips) when java or the zookeeper package is missing.
    """
    server = ZooKeeperServer(fsync=False)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def zookeeper_url(zookeeper: ZooKeeperServer) -> str:
    """A metadata-store URL on the shared server, under a chroot no other test uses."""
    return zookeeper.url(f"/test-{next(_chroots)}")


@pytest.fixture
def standalone_factory(tmp_path: Path) -> Iterator[Callable[..., StandaloneProcess]]:
    """Start ``magnetar standalone`` processes of the test's own (extra CLI arguments as
    positional strings), each over a fresh data directory; all are killed at teardown.
    Packages share one session-wide process for tests that need no restarts."""
    started: list[StandaloneProcess] = []

    def make(*extra_args: str) -> StandaloneProcess:
        node = StandaloneProcess(tmp_path / f"data{len(started)}", *extra_args)
        started.append(node)
        node.start()
        return node

    try:
        yield make
    finally:
        for node in started:
            node.kill()
