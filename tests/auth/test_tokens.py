"""JWT tokens: signing and checking with HS256 secrets and RS256/ES256 key pairs, and the
one-line reason for every token that does not authenticate anybody."""

from __future__ import annotations

import base64
from pathlib import Path

import jwt
import pytest

from magnetar.auth.tokens import (
    InvalidToken,
    KeyLoadError,
    TokenVerifier,
    create_token,
    new_key_pair,
    new_secret_key,
    read_key_bytes,
)

NOW_S = 1_700_000_000.0


def _secret_verifier(key: bytes) -> TokenVerifier:
    setting = "data:;base64," + base64.b64encode(key).decode()
    return TokenVerifier.from_setting(secret_key=setting, public_key=None)


def test_hs256_token_names_its_subject_as_role() -> None:
    key = new_secret_key()
    token = create_token("alice", secret_key=key)
    assert _secret_verifier(key).verify(token, NOW_S) == ("alice", None)


@pytest.mark.parametrize("algorithm", ["RS256", "ES256"])
def test_key_pair_tokens_verify_with_the_public_key(tmp_path: Path, algorithm: str) -> None:
    private, public = new_key_pair(algorithm)
    (tmp_path / "pub.der").write_bytes(public)
    token = create_token("bob", private_key=private)
    assert jwt.get_unverified_header(token)["alg"] == algorithm
    verifier = TokenVerifier.from_setting(
        secret_key=None, public_key=f"file://{tmp_path / 'pub.der'}"
    )
    assert verifier.verify(token, NOW_S) == ("bob", None)


def test_expiry_is_honoured_at_the_injected_time() -> None:
    key = new_secret_key()
    token = create_token("carol", secret_key=key, expires_at_s=int(NOW_S) + 60)
    verifier = _secret_verifier(key)
    assert verifier.verify(token, NOW_S) == ("carol", NOW_S + 60)
    with pytest.raises(InvalidToken, match="token expired"):
        verifier.verify(token, NOW_S + 60)


@pytest.mark.parametrize(
    ("token_of", "reason"),
    [
        (lambda key: "not-a-real-token", "malformed token"),
        (lambda key: "", "empty token"),
        (lambda key: "a.b.c", "malformed token"),
        (lambda key: create_token("x", secret_key=new_secret_key()), "signature does not verify"),
        (lambda key: create_token("x", secret_key=key)[:-4] + "AAAA", "signature does not verify"),
        (lambda key: jwt.encode({"sub": "x"}, None, algorithm="none"), "signed with 'none'"),
        (lambda key: jwt.encode({"role": "x"}, key, algorithm="HS256"), "no 'sub' claim"),
        (lambda key: jwt.encode({"sub": 7}, key, algorithm="HS256"), "Subject must be a string"),
    ],
)
def test_bad_tokens_are_refused_with_the_reason(token_of: object, reason: str) -> None:
    key = new_secret_key()
    token = token_of(key)  # type: ignore[operator]
    with pytest.raises(InvalidToken, match=reason):
        _secret_verifier(key).verify(token, NOW_S)


def test_a_secret_key_token_is_refused_by_a_public_key_verifier(tmp_path: Path) -> None:
    _, public = new_key_pair("RS256")
    (tmp_path / "pub").write_bytes(public)
    verifier = TokenVerifier.from_setting(secret_key=None, public_key=f"file://{tmp_path}/pub")
    with pytest.raises(InvalidToken, match="signed with 'HS256'"):
        verifier.verify(create_token("x", secret_key=new_secret_key()), NOW_S)


def test_key_settings_take_pulsars_three_forms(tmp_path: Path) -> None:
    key = new_secret_key()
    (tmp_path / "k").write_bytes(key)
    b64 = base64.b64encode(key).decode()
    assert read_key_bytes(f"file://{tmp_path}/k") == key
    assert read_key_bytes(f"data:;base64,{b64}") == key
    assert read_key_bytes(b64) == key
    with pytest.raises(KeyLoadError, match="cannot read key file"):
        read_key_bytes(f"file://{tmp_path}/missing")
    with pytest.raises(KeyLoadError, match="base64"):
        read_key_bytes("not base64 at all!")
