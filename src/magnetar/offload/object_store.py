"""The object-store port of tiered storage and its two backends, both through ``obstore``:

* ``filesystem`` — a local directory (``--offload-directory``), for one machine and for tests;
* ``aws-s3`` / ``s3`` — S3-compatible storage (AWS, MinIO, Ceph, GCS's S3 API), ``bucket``,
  ``region`` and ``endpoint`` as Pulsar's ``s3ManagedLedgerOffload*`` settings name them.

Credentials never come from the command line: S3 takes the standard variables
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``, …)
and, when those hold no key, the ``[default]`` (or ``$AWS_PROFILE``) section of
``~/.aws/credentials`` (``$AWS_SHARED_CREDENTIALS_FILE``).

Every failure of the store surfaces as :class:`ObjectStoreError` (missing objects as its
subclass :class:`ObjectNotFound`), with the key in the message.
"""

from __future__ import annotations

import configparser
import glob
import os
from collections.abc import AsyncIterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import obstore
from obstore.exceptions import NotFoundError
from obstore.store import LocalStore, S3Store

from magnetar.common.errors import PersistenceError
from magnetar.offload.settings import OffloadDriverConfig

if TYPE_CHECKING:
    from obstore.store import ClientConfig, S3Config

PART_SIZE_BYTES = 5 * 1024 * 1024
"""S3's smallest part but the last; blocks are joined up to this size before upload."""


class ObjectStoreError(PersistenceError):
    """The object store refused or could not be reached; the message names the key."""


class ObjectNotFound(ObjectStoreError):
    """The object does not exist."""


class ObjectStore(Protocol):
    """What tiered storage needs of an object store. Keys are ``/``-free names."""

    @property
    def description(self) -> str:
        """Where the objects go, for status and logs (``s3://bucket``, ``file:///dir``)."""
        ...

    async def put(self, key: str, data: bytes) -> None: ...

    async def put_stream(self, key: str, chunks: AsyncIterable[bytes]) -> None:
        """Writes an object from chunks (a multipart upload on S3); the object appears whole
        or not at all."""
        ...

    async def get(self, key: str) -> bytes: ...

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        """``length`` bytes from ``start`` (a ranged GET)."""
        ...

    async def size(self, key: str) -> int: ...

    async def delete(self, key: str) -> None:
        """Idempotent: a missing object is not an error."""
        ...

    async def keys(self, prefix: str) -> list[str]: ...


def open_object_store(
    config: OffloadDriverConfig, env: dict[str, str] | None = None
) -> ObjectStore:
    """The store ``config`` names; raises :class:`ValueError` for settings that cannot work."""
    if config.driver == "filesystem":
        assert config.directory is not None
        root = Path(config.directory).resolve()
        return _ObstoreStore(LocalStore(prefix=root, mkdir=True), f"file://{root}", root)
    assert config.bucket is not None
    s3_config, client_options = _s3_settings(config, os.environ if env is None else env)
    store = S3Store(config.bucket, config=s3_config, client_options=client_options)
    return _ObstoreStore(store, f"s3://{config.bucket}")


def _s3_settings(
    config: OffloadDriverConfig, env: Mapping[str, str]
) -> tuple[S3Config, ClientConfig]:
    s3_config: S3Config = {}
    client_options: ClientConfig = {}
    if config.region:
        s3_config["region"] = config.region
    if config.endpoint:
        s3_config["endpoint"] = config.endpoint
        s3_config["virtual_hosted_style_request"] = False
        if config.endpoint.startswith("http://"):
            client_options["allow_http"] = True
    if not env.get("AWS_ACCESS_KEY_ID"):
        found = _credentials_file(env)
        if "access_key_id" in found:
            s3_config["access_key_id"] = found["access_key_id"]
        if "secret_access_key" in found:
            s3_config["secret_access_key"] = found["secret_access_key"]
        if "token" in found:
            s3_config["session_token"] = found["token"]
    return s3_config, client_options


def _credentials_file(env: Mapping[str, str]) -> dict[str, str]:
    """Keys from the shared credentials file's profile, as the AWS tools read it."""
    path = Path(env.get("AWS_SHARED_CREDENTIALS_FILE") or Path.home() / ".aws" / "credentials")
    if not path.is_file():
        return {}
    parser = configparser.ConfigParser()
    parser.read(path)
    profile = env.get("AWS_PROFILE", "default")
    if not parser.has_section(profile):
        return {}
    section = parser[profile]
    found = {
        "access_key_id": section.get("aws_access_key_id"),
        "secret_access_key": section.get("aws_secret_access_key"),
        "token": section.get("aws_session_token"),
    }
    return {k: v for k, v in found.items() if v}


class _ObstoreStore:
    """:class:`ObjectStore` over an ``obstore`` store (async calls run on obstore's runtime)."""

    def __init__(
        self, store: LocalStore | S3Store, description: str, root: Path | None = None
    ) -> None:
        self._store = store
        self._description = description
        self._root = root
        """A local store's directory: its unfinished streamed writes are ``<key>#<n>`` files
        there (renamed to ``<key>`` when complete), which :meth:`delete` removes too."""

    @property
    def description(self) -> str:
        return self._description

    async def put(self, key: str, data: bytes) -> None:
        try:
            await obstore.put_async(self._store, key, data, use_multipart=False)
        except Exception as exc:
            raise self._error("put", key, exc) from exc

    async def put_stream(self, key: str, chunks: AsyncIterable[bytes]) -> None:
        try:
            await obstore.put_async(
                self._store, key, chunks, chunk_size=PART_SIZE_BYTES, max_concurrency=4
            )
        except Exception as exc:
            raise self._error("upload", key, exc) from exc

    async def get(self, key: str) -> bytes:
        try:
            result = await obstore.get_async(self._store, key)
            return bytes(await result.bytes_async())
        except Exception as exc:
            raise self._error("get", key, exc) from exc

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        try:
            return bytes(
                await obstore.get_range_async(self._store, key, start=start, length=length)
            )
        except Exception as exc:
            raise self._error("read", key, exc) from exc

    async def size(self, key: str) -> int:
        try:
            return int((await obstore.head_async(self._store, key))["size"])
        except Exception as exc:
            raise self._error("stat", key, exc) from exc

    async def delete(self, key: str) -> None:
        try:
            if self._root is not None:  # a write cut short (a crash) left its staging file
                for staged in self._root.glob(f"{glob.escape(key)}#*"):
                    staged.unlink(missing_ok=True)
            await obstore.delete_async(self._store, key)
        except (NotFoundError, FileNotFoundError):
            return
        except Exception as exc:
            raise self._error("delete", key, exc) from exc

    async def keys(self, prefix: str) -> list[str]:
        try:
            out: list[str] = []
            # obstore's prefixes are whole path segments; keys here are flat names
            async for batch in obstore.list(self._store):
                out.extend(str(m["path"]) for m in batch if str(m["path"]).startswith(prefix))
            return sorted(out)
        except Exception as exc:
            raise self._error("list", prefix, exc) from exc

    def _error(self, action: str, key: str, exc: Exception) -> ObjectStoreError:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if isinstance(exc, NotFoundError | FileNotFoundError):
            return ObjectNotFound(f"{self._description}/{key}: not found")
        return ObjectStoreError(f"{self._description}/{key}: {action} failed: {reason}")
