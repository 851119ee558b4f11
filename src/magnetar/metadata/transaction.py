"""A write transaction of the embedded metadata store (:mod:`magnetar.metadata.embedded`)
on its worker thread: the ZooKeeper-like checks and changes of the node tree in SQLite, and
the notifications to publish once it commits. Runs on the database's worker thread only."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from magnetar.metadata import path as paths
from magnetar.metadata.store import (
    ANY_VERSION,
    BadVersion,
    CheckOp,
    CreateOp,
    DeleteOp,
    EventType,
    InvalidPath,
    NoChildrenForEphemerals,
    NodeExists,
    NotEmpty,
    NotFound,
    Notification,
    Op,
    OpResult,
    SetOp,
    Stat,
)

COLUMNS = "value, version, created_ms, modified_ms, owner"


@dataclass
class Row:
    value: bytes
    version: int
    created_ms: int
    modified_ms: int
    owner: int | None


@dataclass
class Transaction:
    """One write transaction on the worker thread: typed checks, changes, and the events
    to publish if it commits."""

    conn: sqlite3.Connection
    session_id: int
    now_ms: int
    events: list[Notification] = field(default_factory=list)

    def row(self, path: str) -> Row | None:
        found = self.conn.execute(f"SELECT {COLUMNS} FROM nodes WHERE path = ?", (path,)).fetchone()
        return None if found is None else Row(*found)

    def _row_at(self, path: str, version: int) -> Row:
        """The node at ``path``, at ``version`` unless that is ``ANY_VERSION``. Raises
        :class:`NotFound` or :class:`BadVersion`."""
        row = self.row(path)
        if row is None:
            raise NotFound(path)
        if version != ANY_VERSION and version != row.version:
            raise BadVersion(f"{path}: expected version {version}, found {row.version}")
        return row

    def stat(self, path: str, row: Row) -> Stat:
        (count,) = self.conn.execute(
            "SELECT count(*) FROM nodes WHERE parent = ?", (path,)
        ).fetchone()
        return Stat(row.version, row.created_ms, row.modified_ms, row.owner, count)

    def create(
        self,
        path: str,
        value: bytes,
        *,
        ephemeral: bool,
        sequential: bool,
        parents: bool = False,
    ) -> str:
        """Create ``path`` (with its missing ancestors first when ``parents``; else a
        missing parent raises :class:`NotFound`) and return its path (sequential: with its
        number)."""
        if path == "/" and not sequential:
            raise NodeExists("/ always exists")
        parent = paths.parent(path) if path != "/" else "/"
        # One statement counts the child in the parent and reads what the checks need: a
        # check that fails raises, and a write that raises is rolled back whole (see
        # EmbeddedDatabase._run_batch), the count with it.
        parent_row = self._count_child(parent)
        if parent_row is None and parents:
            self.ensure_parents(path)
            parent_row = self._count_child(parent)
        if parent_row is None:
            raise NotFound(f"parent of {path} does not exist")
        owner, cversion = parent_row
        if owner is not None:
            raise NoChildrenForEphemerals(f"{parent} is ephemeral")
        if sequential:  # numbered by the parent's cversion before this child
            path = f"{path}{cversion - 1:0{paths.SEQUENCE_DIGITS}d}"
        try:  # the primary key refuses a node that exists (one statement, not a look first)
            self.conn.execute(
                "INSERT INTO nodes (path, parent, value, version, cversion, created_ms,"
                " modified_ms, owner) VALUES (?, ?, ?, 0, 0, ?, ?, ?)",
                (
                    path,
                    parent,
                    value,
                    self.now_ms,
                    self.now_ms,
                    self.session_id if ephemeral else None,
                ),
            )
        except sqlite3.IntegrityError:
            raise NodeExists(path) from None
        self.events.append(Notification(EventType.CREATED, path))
        self.events.append(Notification(EventType.CHILDREN_CHANGED, parent))
        return path

    def _count_child(self, path: str) -> tuple[int | None, int] | None:
        """Adds one to the cversion of ``path`` and returns its owner and new cversion;
        None (and no change) if there is no node at ``path``."""
        rows: list[tuple[int | None, int]] = self.conn.execute(
            "UPDATE nodes SET cversion = cversion + 1 WHERE path = ? RETURNING owner, cversion",
            (path,),
        ).fetchall()  # to its end: the statement is done with, not left in progress
        return rows[0] if rows else None

    def created_stat(self) -> Stat:
        """The stat of a persistent node this transaction has just created."""
        return Stat(0, self.now_ms, self.now_ms, None, 0)

    def ensure_parents(self, path: str) -> None:
        """Create the missing ancestors of ``path``, outermost first."""
        for ancestor in paths.ancestors(path):
            if self.conn.execute("SELECT 1 FROM nodes WHERE path = ?", (ancestor,)).fetchone():
                continue
            self.create(ancestor, b"", ephemeral=False, sequential=False)

    def set(self, path: str, value: bytes, version: int) -> Stat:
        row = self._row_at(path, version)
        self.conn.execute(
            "UPDATE nodes SET value = ?, version = version + 1, modified_ms = ? WHERE path = ?",
            (value, self.now_ms, path),
        )
        self.events.append(Notification(EventType.MODIFIED, path))
        row.version += 1
        row.modified_ms = self.now_ms
        return self.stat(path, row)

    def check(self, path: str, version: int) -> None:
        self._row_at(path, version)

    def delete(self, path: str, version: int) -> None:
        if path == "/":
            raise InvalidPath("/ cannot be deleted")
        # Deleted first, checked after (one statement fewer than a look first): a check
        # that fails raises, and the write that raises is rolled back whole.
        found = self.conn.execute(
            "DELETE FROM nodes WHERE path = ? RETURNING version", (path,)
        ).fetchall()
        if not found:
            raise NotFound(path)
        if version != ANY_VERSION and version != found[0][0]:
            raise BadVersion(f"{path}: expected version {version}, found {found[0][0]}")
        if self.conn.execute("SELECT 1 FROM nodes WHERE parent = ? LIMIT 1", (path,)).fetchone():
            raise NotEmpty(path)
        self._removed(path)

    def _remove(self, path: str) -> None:
        self.conn.execute("DELETE FROM nodes WHERE path = ?", (path,))
        self._removed(path)

    def _removed(self, path: str) -> None:
        """``path`` was deleted: its parent counts the change, and both are notified."""
        parent = paths.parent(path)
        self.conn.execute("UPDATE nodes SET cversion = cversion + 1 WHERE path = ?", (parent,))
        self.events.append(Notification(EventType.DELETED, path))
        self.events.append(Notification(EventType.CHILDREN_CHANGED, parent))

    def delete_tree(self, path: str) -> None:
        if path == "/":
            raise InvalidPath("/ cannot be deleted")
        # '0' is the character after '/', so this range is exactly the descendants.
        rows = self.conn.execute(
            "SELECT path FROM nodes WHERE path = ? OR (path > ? AND path < ?)",
            (path, path + "/", path + "0"),
        ).fetchall()
        for (victim,) in sorted(rows, key=lambda r: (-r[0].count("/"), r[0])):
            self._remove(victim)

    def delete_owned(self, owner: int) -> None:
        rows = self.conn.execute("SELECT path FROM nodes WHERE owner = ?", (owner,)).fetchall()
        for (victim,) in sorted(rows):
            self._remove(victim)


def apply_op(txn: Transaction, op: Op) -> OpResult:
    if isinstance(op, CheckOp):
        txn.check(op.path, op.version)
        return OpResult(op.path)
    if isinstance(op, CreateOp):
        return OpResult(
            txn.create(op.path, op.value, ephemeral=op.ephemeral, sequential=op.sequential)
        )
    if isinstance(op, SetOp):
        return OpResult(op.path, txn.set(op.path, op.value, op.version))
    if isinstance(op, DeleteOp):
        txn.delete(op.path, op.version)
        return OpResult(op.path)
    raise TypeError(f"not an op: {op!r}")
