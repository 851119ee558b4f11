"""JSON Web Tokens as Pulsar uses them: the role in the ``sub`` claim, an optional ``exp``.

Keys are given as Pulsar gives them (``tokenSecretKey`` / ``tokenPublicKey``):
``file:///path/to/key``, ``data:;base64,<base64>``, or the key itself in base64. A secret
key is raw bytes (HS256/HS384/HS512); public and private keys may be PEM or DER
(RSA for RS256, EC P-256 for ES256), as Pulsar's ``tokens create-key-pair`` writes DER.

Errors: every problem with a token raises :class:`InvalidToken` with one line saying what
is wrong (malformed, bad signature, expired, no role); problems with a key raise
:class:`KeyLoadError`.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

SECRET_KEY_BYTES = 32
"""Length of the HS256 key ``create-secret-key`` writes (as Pulsar's)."""
KEY_FILE_BYTES_MAX = 1024 * 1024

SYMMETRIC_ALGORITHMS = ("HS256", "HS384", "HS512")
ASYMMETRIC_ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512")


class InvalidToken(Exception):
    """A token that does not authenticate anybody; the message says why."""


class KeyLoadError(Exception):
    """A key setting that does not name a readable key."""


def read_key_bytes(value: str) -> bytes:
    """The bytes a Pulsar key setting names. Raises :class:`KeyLoadError`."""
    if value.startswith("file:"):
        path = Path(unquote(urlparse(value).path))
        try:
            with path.open("rb") as f:
                data = f.read(KEY_FILE_BYTES_MAX + 1)
        except OSError as exc:
            raise KeyLoadError(f"cannot read key file {path}: {exc.strerror}") from None
        if len(data) > KEY_FILE_BYTES_MAX:
            raise KeyLoadError(f"key file {path} is larger than {KEY_FILE_BYTES_MAX} bytes")
        return data
    if value.startswith("data:"):
        _, _, payload = value.partition(",")
        value = payload
    try:
        return base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise KeyLoadError("a key must be file:///path, data:;base64,... or base64 text") from None


def load_public_key(data: bytes) -> Any:
    """An RSA or EC public key from PEM or DER bytes. Raises :class:`KeyLoadError`."""
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            key = serialization.load_pem_public_key(data)
        else:
            key = serialization.load_der_public_key(data)
    except ValueError as exc:
        raise KeyLoadError(f"not a PEM or DER public key: {exc}") from None
    if not isinstance(key, rsa.RSAPublicKey | ec.EllipticCurvePublicKey):
        raise KeyLoadError("public keys must be RSA or EC")
    return key


def load_private_key(data: bytes) -> Any:
    """An RSA or EC private key from PEM or DER (PKCS#8) bytes, unencrypted."""
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            key = serialization.load_pem_private_key(data, password=None)
        else:
            key = serialization.load_der_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise KeyLoadError(f"not an unencrypted PEM or DER private key: {exc}") from None
    if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        raise KeyLoadError("private keys must be RSA or EC")
    return key


def new_secret_key() -> bytes:
    return secrets.token_bytes(SECRET_KEY_BYTES)


def new_key_pair(algorithm: str) -> tuple[bytes, bytes]:
    """(private key PKCS#8 DER, public key X.509 SubjectPublicKeyInfo DER), as Pulsar's
    ``tokens create-key-pair`` writes them. ``algorithm``: RS256 or ES256 (and the 384/512
    variants)."""
    private: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
    if algorithm.startswith("RS"):
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    elif algorithm in ("ES256", "ES384", "ES512"):
        curve = {"ES256": ec.SECP256R1(), "ES384": ec.SECP384R1(), "ES512": ec.SECP521R1()}
        private = ec.generate_private_key(curve[algorithm])
    else:
        raise KeyLoadError(f"unsupported key pair algorithm {algorithm!r} (RS256, ES256)")
    private_der = private.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public_der = private.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private_der, public_der


def create_token(
    subject: str,
    *,
    secret_key: bytes | None = None,
    private_key: bytes | None = None,
    algorithm: str | None = None,
    expires_at_s: int | None = None,
    headers: dict[str, Any] | None = None,
) -> str:
    """A signed token whose ``sub`` is ``subject``; ``exp`` when ``expires_at_s`` is given
    (seconds since the epoch). Exactly one of ``secret_key``/``private_key``."""
    if (secret_key is None) == (private_key is None):
        raise ValueError("give exactly one of secret_key and private_key")
    claims: dict[str, Any] = {"sub": subject}
    if expires_at_s is not None:
        claims["exp"] = int(expires_at_s)
    if secret_key is not None:
        return jwt.encode(claims, secret_key, algorithm=algorithm or "HS256", headers=headers)
    assert private_key is not None
    key = load_private_key(private_key)
    if algorithm is None:
        algorithm = "RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256"
    return jwt.encode(claims, key, algorithm=algorithm, headers=headers)


def unverified_claims(token: str) -> dict[str, Any]:
    """The claims of ``token`` without checking its signature (``tokens show``)."""
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError as exc:
        raise InvalidToken(f"malformed token: {exc}") from None
    return dict(claims)


@dataclass(frozen=True, slots=True)
class TokenVerifier:
    """Checks tokens against one key. ``now_s`` is passed in (the injected clock)."""

    key: Any
    algorithms: tuple[str, ...]
    role_claim: str = "sub"
    audience_claim: str | None = None
    audience: str | None = None

    @classmethod
    def from_setting(
        cls,
        *,
        secret_key: str | None,
        public_key: str | None,
        role_claim: str = "sub",
        audience_claim: str | None = None,
        audience: str | None = None,
    ) -> TokenVerifier:
        """From Pulsar-style key settings; the public key wins when both are set (as
        Pulsar's provider). Raises :class:`KeyLoadError`."""
        if public_key:
            return cls(
                load_public_key(read_key_bytes(public_key)),
                ASYMMETRIC_ALGORITHMS,
                role_claim,
                audience_claim,
                audience,
            )
        if secret_key:
            return cls(
                read_key_bytes(secret_key),
                SYMMETRIC_ALGORITHMS,
                role_claim,
                audience_claim,
                audience,
            )
        raise KeyLoadError("no token key configured")

    def verify(self, token: str, now_s: float) -> tuple[str, float | None]:
        """``(role, expires_at_s)`` of a valid token. Raises :class:`InvalidToken`."""
        if not token:
            raise InvalidToken("empty token")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"malformed token: {exc}") from None
        alg = header.get("alg")
        if alg not in self.algorithms:
            raise InvalidToken(
                f"token signed with {alg!r}; the key verifies {', '.join(self.algorithms)}"
            )
        try:
            claims = jwt.decode(
                token,
                self.key,
                algorithms=list(self.algorithms),
                options={"verify_exp": False, "verify_aud": False},
            )
        except jwt.InvalidSignatureError:
            raise InvalidToken("token signature does not verify") from None
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"malformed token: {exc}") from None
        exp = claims.get("exp")
        if exp is not None:
            if not isinstance(exp, int | float):
                raise InvalidToken("token exp claim is not a number")
            if now_s >= exp:
                raise InvalidToken("token expired")
        if self.audience_claim and self.audience:
            aud = claims.get(self.audience_claim)
            auds = aud if isinstance(aud, list) else [aud]
            if self.audience not in auds:
                raise InvalidToken("token is not for this audience")
        role = claims.get(self.role_claim)
        if not isinstance(role, str) or not role:
            raise InvalidToken(f"token has no {self.role_claim!r} claim naming a role")
        return role, None if exp is None else float(exp)
