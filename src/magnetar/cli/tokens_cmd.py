"""``magnetar tokens``: Pulsar's ``bin/pulsar tokens`` for JWT authentication.

    magnetar tokens create-secret-key --output secret.key          # HS256, 32 raw bytes
    magnetar tokens create-key-pair --output-private-key my.key --output-public-key my.pub
    magnetar tokens create --secret-key file:///path/secret.key --subject my-role [--expiry-time 1h]
    magnetar tokens show -i <token>
    magnetar tokens validate --secret-key file:///path/secret.key -i <token>

Keys are named as the broker's settings name them (``file:///path``, ``data:;base64,...`` or
base64 text). Every error is one ``Error: ...`` line with exit status 1.
"""

from __future__ import annotations

import base64
import json
import os
import re
import sys
import time
from pathlib import Path

import click

from magnetar.cli.command_group import SuggestingGroup

_DURATION = re.compile(r"^(\d+)\s*([smhdwy]?)$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


def _duration_s(value: str) -> int:
    match = _DURATION.match(value.strip().lower())
    if match is None:
        raise click.BadParameter(f"{value!r}: expected a number with s, m, h, d, w or y")
    return int(match.group(1)) * _UNIT_S[match.group(2)]


def _token_text(token: str | None, token_file: Path | None, stdin: bool) -> str:
    if (token is not None) + (token_file is not None) + stdin != 1:
        raise click.UsageError("give the token with exactly one of -i, -f or --stdin")
    if token is not None:
        return token.strip()
    if token_file is not None:
        try:
            return token_file.read_text().strip()
        except OSError as exc:
            raise click.ClickException(f"cannot read {token_file}: {exc.strerror}") from None
    return sys.stdin.read().strip()


def _key(value: str) -> bytes:
    from magnetar.auth.tokens import KeyLoadError, read_key_bytes

    try:
        return read_key_bytes(value)
    except KeyLoadError as exc:
        raise click.ClickException(str(exc)) from None


SECRET_FILE_MODE = 0o600
"""Secret and private keys are readable by their owner only, as ``ssh-keygen`` writes them."""


def _write(path: Path | None, data: bytes, *, secret: bool = False) -> None:
    """Write ``data`` to ``path`` (stdout when None); a ``secret`` file gets
    :data:`SECRET_FILE_MODE` from its creation on (and an existing one is narrowed to it)."""
    if path is None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    try:
        if not secret:
            path.write_bytes(data)
            return
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, SECRET_FILE_MODE)
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), SECRET_FILE_MODE)
            out.write(data)
    except OSError as exc:
        raise click.ClickException(f"cannot write {path}: {exc.strerror}") from None


@click.group(cls=SuggestingGroup)
def tokens() -> None:
    """Create and check JWT tokens (Pulsar's ``pulsar tokens``)."""


@tokens.command("create-secret-key")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None)
@click.option("-b", "--base64", "as_base64", is_flag=True, help="Write the key in base64.")
@click.option("-a", "--algorithm", default="HS256", show_default=True)
def create_secret_key(output: Path | None, as_base64: bool, algorithm: str) -> None:
    """A new random secret key for HS256 tokens (raw bytes, or base64 with -b)."""
    from magnetar.auth.tokens import new_secret_key

    if algorithm not in ("HS256", "HS384", "HS512"):
        raise click.BadParameter("secret keys are for HS256, HS384 or HS512", param_hint="-a")
    key = new_secret_key()
    _write(output, base64.b64encode(key) if as_base64 else key, secret=True)


@tokens.command("create-key-pair")
@click.option(
    "--output-private-key", type=click.Path(dir_okay=False, path_type=Path), required=True
)
@click.option("--output-public-key", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option(
    "-a", "--algorithm", default="RS256", show_default=True, type=click.Choice(["RS256", "ES256"])
)
def create_key_pair(output_private_key: Path, output_public_key: Path, algorithm: str) -> None:
    """A new key pair (DER, as Pulsar's): the private key signs, brokers get the public one."""
    from magnetar.auth.tokens import new_key_pair

    private, public = new_key_pair(algorithm)
    _write(output_private_key, private, secret=True)
    _write(output_public_key, public)


@tokens.command("create")
@click.option("-s", "--subject", required=True, help="The role the token authenticates.")
@click.option("-sk", "--secret-key", default=None, metavar="KEY")
@click.option("-pk", "--private-key", default=None, metavar="KEY")
@click.option("-a", "--algorithm", default=None, help="Default HS256, or RS256/ES256 by key.")
@click.option("-exp", "--expiry-time", default=None, help="e.g. 30m, 12h, 7d, 1y.")
@click.option("-h", "--headers", "headers", multiple=True, metavar="KEY=VALUE")
def create(
    subject: str,
    secret_key: str | None,
    private_key: str | None,
    algorithm: str | None,
    expiry_time: str | None,
    headers: tuple[str, ...],
) -> None:
    """A signed token for SUBJECT, printed on stdout."""
    from magnetar.auth.tokens import KeyLoadError, create_token

    if (secret_key is None) == (private_key is None):
        raise click.UsageError("give exactly one of --secret-key and --private-key")
    extra = {}
    for item in headers:
        name, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r}: expected KEY=VALUE", param_hint="--headers")
        extra[name] = value
    expires = None if expiry_time is None else int(time.time()) + _duration_s(expiry_time)
    try:
        token = create_token(
            subject,
            secret_key=None if secret_key is None else _key(secret_key),
            private_key=None if private_key is None else _key(private_key),
            algorithm=algorithm,
            expires_at_s=expires,
            headers=extra or None,
        )
    except (KeyLoadError, NotImplementedError, ValueError, TypeError) as exc:
        raise click.ClickException(f"cannot sign the token: {exc}") from None
    click.echo(token)


@tokens.command("show")
@click.option("-i", "--token", default=None)
@click.option("-f", "--token-file", type=click.Path(dir_okay=False, path_type=Path), default=None)
@click.option("--stdin", is_flag=True)
def show(token: str | None, token_file: Path | None, stdin: bool) -> None:
    """The token's header and claims, without checking its signature."""
    import jwt

    from magnetar.auth.tokens import InvalidToken, unverified_claims

    text = _token_text(token, token_file, stdin)
    try:
        header = jwt.get_unverified_header(text)
        claims = unverified_claims(text)
    except (jwt.PyJWTError, InvalidToken) as exc:
        raise click.ClickException(f"malformed token: {exc}") from None
    click.echo(json.dumps(header))
    click.echo("---")
    click.echo(json.dumps(claims))


@tokens.command("validate")
@click.option("-i", "--token", default=None)
@click.option("-f", "--token-file", type=click.Path(dir_okay=False, path_type=Path), default=None)
@click.option("--stdin", is_flag=True)
@click.option("-sk", "--secret-key", default=None, metavar="KEY")
@click.option("-pk", "--public-key", default=None, metavar="KEY")
def validate(
    token: str | None,
    token_file: Path | None,
    stdin: bool,
    secret_key: str | None,
    public_key: str | None,
) -> None:
    """Check the token's signature and expiry; print its claims (exit 1 when invalid)."""
    from magnetar.auth.tokens import InvalidToken, KeyLoadError, TokenVerifier, unverified_claims

    if (secret_key is None) == (public_key is None):
        raise click.UsageError("give exactly one of --secret-key and --public-key")
    text = _token_text(token, token_file, stdin)
    try:
        verifier = TokenVerifier.from_setting(secret_key=secret_key, public_key=public_key)
        verifier.verify(text, time.time())
    except (InvalidToken, KeyLoadError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(unverified_claims(text)))
