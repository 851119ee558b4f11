"""Fixtures for the TLS tests: certificates made with ``openssl`` once per session, and
``magnetar standalone`` processes with a TLS listener (real subprocesses on free ports).

``tls_standalone`` is shared by the session (tests use unique topics) and presents the
``localhost``/``127.0.0.1`` certificate; ``standalone_factory`` gives a test its own process
(other certificates, mutual TLS, restarts). Every process is killed at teardown.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Iterator

import pytest

from magnetar.testing import StandaloneProcess

from .certs import KeyPair, Pki, make_pki

_names = itertools.count()

wheel_log = logging.getLogger("pulsar-client")
wheel_log.setLevel(logging.WARNING)


def tls_args(server: KeyPair, *extra: str) -> tuple[str, ...]:
    return ("--tls-port", "0", "--tls-cert-file", str(server.cert),
            "--tls-key-file", str(server.key), *extra)  # fmt: skip


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def tls_standalone(
    tmp_path_factory: pytest.TempPathFactory, pki: Pki
) -> Iterator[StandaloneProcess]:
    data_dir = tmp_path_factory.mktemp("tls-standalone") / "data"
    with StandaloneProcess(data_dir, *tls_args(pki.server)) as node:
        assert node.tls_port is not None and node.tls_port != node.port
        yield node


@pytest.fixture
def topic() -> str:
    return f"persistent://public/default/tls-{next(_names)}-{uuid.uuid4().hex[:8]}"
