"""Test certificates made with the ``openssl`` command line (no Python dependency).

:func:`make_pki` writes, into one directory: two unrelated CAs (``ca`` trusted by the tests,
``other-ca`` trusted by nobody), a server certificate for ``localhost`` / ``127.0.0.1``, a
server certificate naming only ``wrong.invalid`` (hostname validation must refuse it on
127.0.0.1) and a client certificate for mutual TLS, all signed by ``ca``. P-256 keys, so
generation takes milliseconds.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

OPENSSL = shutil.which("openssl") or "/usr/bin/openssl"


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    ca: Path
    """PEM of the CA every certificate below is signed by."""
    other_ca: Path
    """PEM of a CA that signed nothing here."""
    server: KeyPair
    """SAN DNS:localhost, IP:127.0.0.1."""
    wrong_host_server: KeyPair
    """SAN DNS:wrong.invalid only."""
    client: KeyPair
    """extendedKeyUsage clientAuth, CN magnetar-test-client."""


def _openssl(*args: str | Path, cwd: Path) -> None:
    subprocess.run([OPENSSL, *map(str, args)], cwd=cwd, check=True, capture_output=True, timeout=60)


def _new_key(path: Path, cwd: Path) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-out", path, cwd=cwd)  # fmt: skip


def _make_ca(name: str, d: Path) -> tuple[Path, Path]:
    key, cert = d / f"{name}.key", d / f"{name}.pem"
    _new_key(key, d)
    _openssl(
        "req", "-x509", "-new", "-key", key, "-out", cert, "-days", "30",
        "-subj", f"/CN=magnetar-test-{name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=d,
    )  # fmt: skip
    return cert, key


def _make_leaf(
    name: str, d: Path, ca: tuple[Path, Path], cn: str, extensions: list[str]
) -> KeyPair:
    key, csr, cert, ext = (d / f"{name}{s}" for s in (".key", ".csr", ".pem", ".ext"))
    _new_key(key, d)
    _openssl("req", "-new", "-key", key, "-out", csr, "-subj", f"/CN={cn}", cwd=d)
    ext.write_text("\n".join(["basicConstraints=CA:FALSE", *extensions]) + "\n")
    _openssl(
        "x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial",
        "-out", cert, "-days", "30", "-extfile", ext,
        cwd=d,
    )  # fmt: skip
    return KeyPair(cert, key)


def make_pki(d: Path) -> Pki:
    d.mkdir(parents=True, exist_ok=True)
    ca = _make_ca("ca", d)
    other_ca, _ = _make_ca("other-ca", d)
    server_ext = ["keyUsage=critical,digitalSignature", "extendedKeyUsage=serverAuth"]
    return Pki(
        ca=ca[0],
        other_ca=other_ca,
        server=_make_leaf(
            "server",
            d,
            ca,
            "localhost",
            [*server_ext, "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        ),
        wrong_host_server=_make_leaf(
            "wrong-host",
            d,
            ca,
            "wrong.invalid",
            [*server_ext, "subjectAltName=DNS:wrong.invalid"],
        ),
        client=_make_leaf(
            "client",
            d,
            ca,
            "magnetar-test-client",
            ["keyUsage=critical,digitalSignature", "extendedKeyUsage=clientAuth"],
        ),
    )
