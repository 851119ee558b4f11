"""Node paths: validation and the few manipulations both backends need.

A valid path is ``/`` or ``/seg[/seg...]`` where no segment is empty, ``.`` or ``..`` and no
character is NUL or another control character ZooKeeper refuses (U+0001..U+001F, U+007F..U+009F).
"""

from __future__ import annotations

import re

from magnetar.metadata.store import InvalidPath

PATH_LENGTH_MAX_CHARS = 4096
"""Longest path accepted; far above any path Magnetar builds, it bounds hostile input."""

SEQUENCE_DIGITS = 10
"""Digits of the counter appended by sequential creates (ZooKeeper's format: ``%010d``)."""


_FORBIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\uf8ff]")
"""The characters ZooKeeper refuses in a path (its ``PathUtils.validatePath``)."""


_VALID = re.compile(r"(?:/(?!\.\.?(?:/|$))[^/\x00-\x1f\x7f-\x9f\ud800-\uf8ff]+)+")
"""Every valid path but ``/``, in one match (the checks below say what is wrong with one
that does not match)."""


def validate(path: str) -> str:
    """Return ``path`` unchanged if valid; raise :class:`InvalidPath` otherwise."""
    if type(path) is str and len(path) <= PATH_LENGTH_MAX_CHARS and _VALID.fullmatch(path):
        return path
    if not isinstance(path, str) or not path.startswith("/"):
        raise InvalidPath(f"path must be an absolute string: {path!r}")
    if len(path) > PATH_LENGTH_MAX_CHARS:
        raise InvalidPath(f"path longer than {PATH_LENGTH_MAX_CHARS} characters")
    if path == "/":
        return path
    if path.endswith("/"):
        raise InvalidPath(f"path must not end with '/': {path!r}")
    for segment in path[1:].split("/"):
        if segment in ("", ".", ".."):
            raise InvalidPath(f"empty, '.' or '..' segment in {path!r}")
    forbidden = _FORBIDDEN.search(path)
    if forbidden is not None:
        raise InvalidPath(f"forbidden character U+{ord(forbidden.group()):04X} in {path!r}")
    return path


def parent(path: str) -> str:
    """Parent of a valid non-root path (``/a/b`` -> ``/a``, ``/a`` -> ``/``)."""
    index = path.rfind("/")
    return "/" if index == 0 else path[:index]


def name(path: str) -> str:
    """Last segment of a valid non-root path."""
    return path[path.rfind("/") + 1 :]


def join(base: str, child: str) -> str:
    return base + child if base == "/" else f"{base}/{child}"


def ancestors(path: str) -> list[str]:
    """Proper ancestors of ``path`` excluding ``/``, outermost first (``/a/b/c`` -> ``/a``, ``/a/b``)."""
    out: list[str] = []
    index = path.find("/", 1)
    while index != -1:
        out.append(path[:index])
        index = path.find("/", index + 1)
    return out


def is_under(path: str, prefix: str) -> bool:
    """True if ``path`` is ``prefix`` or a descendant of it."""
    if prefix == "/" or path == prefix:
        return True
    return path.startswith(prefix + "/")
