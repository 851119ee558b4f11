"""htpasswd files for the basic provider: one ``user:hash`` per line, as Apache's
``htpasswd`` writes them and Pulsar's ``AuthenticationProviderBasic`` reads them.

Hashes understood: ``$apr1$`` (Apache's MD5-crypt, ``htpasswd -m``, what Pulsar's own test
``.htpasswd`` uses) and bcrypt ``$2y$``/``$2a$``/``$2b$`` (``htpasswd -B``). A line with any
other hash is refused when the file is loaded (:class:`HtpasswdError`), so a user never
silently fails to log in. Comparison is constant-time.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from pathlib import Path

import bcrypt

HTPASSWD_FILE_BYTES_MAX = 4 * 1024 * 1024
PASSWORD_BYTES_MAX = 1024
"""Longer passwords are refused before hashing (bcrypt itself stops at 72 bytes)."""

_ITOA64 = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_APR1 = "$apr1$"
_BCRYPT_PREFIXES = ("$2y$", "$2a$", "$2b$")


class HtpasswdError(ValueError):
    """An htpasswd file that cannot be used; the message names the file and line."""


def _to64(value: int, count: int) -> str:
    out = []
    for _ in range(count):
        out.append(_ITOA64[value & 0x3F])
        value >>= 6
    return "".join(out)


def apr1_hash(password: bytes, salt: str) -> str:
    """Apache's ``$apr1$`` MD5-crypt of ``password`` with ``salt`` (at most 8 characters
    used): the same algorithm as FreeBSD's MD5-crypt, with the magic ``$apr1$``."""
    magic = _APR1.encode()
    salt_b = salt[:8].encode()
    ctx = hashlib.md5(password + magic + salt_b)
    alternate = hashlib.md5(password + salt_b + password).digest()
    remaining = len(password)
    while remaining > 0:
        ctx.update(alternate[: min(16, remaining)])
        remaining -= 16
    i = len(password)
    while i:
        ctx.update(b"\x00" if i & 1 else password[:1])
        i >>= 1
    final = ctx.digest()
    for round_ in range(1000):
        step = hashlib.md5()
        step.update(password if round_ & 1 else final)
        if round_ % 3:
            step.update(salt_b)
        if round_ % 7:
            step.update(password)
        step.update(final if round_ & 1 else password)
        final = step.digest()
    encoded = ""
    for a, b, c in ((0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)):
        encoded += _to64((final[a] << 16) | (final[b] << 8) | final[c], 4)
    encoded += _to64(final[11], 2)
    return f"{_APR1}{salt[:8]}${encoded}"


def verify_password(password: bytes, stored: str) -> bool:
    """Whether ``password`` matches the stored hash (apr1 or bcrypt)."""
    if len(password) > PASSWORD_BYTES_MAX:
        return False
    if stored.startswith(_APR1):
        salt = stored[len(_APR1) :].split("$", 1)[0]
        return hmac.compare_digest(apr1_hash(password, salt).encode(), stored.encode())
    if stored.startswith(_BCRYPT_PREFIXES):
        # the bcrypt package knows $2b$ and $2a$; $2y$ (PHP/Apache) is the same algorithm
        normalized = "$2b$" + stored[4:] if stored.startswith("$2y$") else stored
        try:
            return bcrypt.checkpw(password, normalized.encode())
        except ValueError:
            return False
    return False


def parse_htpasswd(text: str, source: str = "htpasswd") -> Mapping[str, str]:
    """``{user: hash}`` from htpasswd text. Blank lines and ``#`` comments are skipped.
    Raises :class:`HtpasswdError` for a line without ``:`` or with an unsupported hash."""
    users: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, stored = line.partition(":")
        if not sep or not user or not stored:
            raise HtpasswdError(f"{source} line {number}: expected user:hash")
        if not stored.startswith((_APR1, *_BCRYPT_PREFIXES)):
            raise HtpasswdError(
                f"{source} line {number}: user {user!r} has an unsupported hash "
                "(use htpasswd -m for apr1 or -B for bcrypt)"
            )
        users[user] = stored
    return users


def load_htpasswd(path: Path) -> Mapping[str, str]:
    """Read and parse an htpasswd file. Raises :class:`HtpasswdError`."""
    try:
        with path.open("rb") as f:
            data = f.read(HTPASSWD_FILE_BYTES_MAX + 1)
    except OSError as exc:
        raise HtpasswdError(f"cannot read htpasswd file {path}: {exc.strerror}") from None
    if len(data) > HTPASSWD_FILE_BYTES_MAX:
        raise HtpasswdError(f"htpasswd file {path} is larger than {HTPASSWD_FILE_BYTES_MAX} bytes")
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise HtpasswdError(f"htpasswd file {path} is not UTF-8 text") from None
    return parse_htpasswd(text, str(path))
