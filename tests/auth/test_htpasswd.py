"""htpasswd for the basic provider: Apache's apr1 (Pulsar's test file) and bcrypt."""

from __future__ import annotations

from pathlib import Path

import bcrypt
import pytest

from magnetar.auth.htpasswd import HtpasswdError, apr1_hash, load_htpasswd, verify_password

PULSAR_TEST_LINE = "admin:$apr1$FG4AO6aX$KGYPuMoLUou3i6vUkPUUf."
"""The line of pulsar-client-python's tests/test-conf/.htpasswd (password 123456)."""


def test_apr1_matches_pulsars_test_file(tmp_path: Path) -> None:
    (tmp_path / ".htpasswd").write_text(PULSAR_TEST_LINE + "\n")
    users = load_htpasswd(tmp_path / ".htpasswd")
    assert verify_password(b"123456", users["admin"])
    assert not verify_password(b"1234567", users["admin"])
    assert not verify_password(b"", users["admin"])


def test_apr1_matches_openssl() -> None:
    # `openssl passwd -apr1 -salt abcdefgh hello`
    assert apr1_hash(b"hello", "abcdefgh") == "$apr1$abcdefgh$cy3DSYyOwfhsyu7QOMQzd."


@pytest.mark.parametrize("prefix", ["$2y$", "$2b$", "$2a$"])
def test_bcrypt_hashes_of_every_prefix(prefix: str) -> None:
    stored = prefix + bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()[4:]
    assert verify_password(b"s3cret", stored)
    assert not verify_password(b"s3creT", stored)


def test_unsupported_hashes_are_refused_when_loading(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("# users\n\nalice:plaintext\n")
    with pytest.raises(HtpasswdError, match="line 3: user 'alice' has an unsupported hash"):
        load_htpasswd(tmp_path / "f")
    (tmp_path / "g").write_text("no-colon\n")
    with pytest.raises(HtpasswdError, match="line 1: expected user:hash"):
        load_htpasswd(tmp_path / "g")


def test_overlong_passwords_are_refused_without_hashing() -> None:
    stored = apr1_hash(b"x" * 2000, "salt")
    assert not verify_password(b"x" * 2000, stored)
