"""``builtin://postgres`` (also ``jdbc-postgres``): a sink that writes each message, a JSON
object, as one row of a PostgreSQL table (psycopg 3).

Settings (``--sink-config``):

* ``connection`` (required): a libpq connection string or ``postgresql://`` URL (``jdbcUrl``,
  ``jdbc:postgresql://host:port/db``, is read too); ``userName`` and ``password`` are added
  when given;
* ``tableName`` (required): ``table`` or ``schema.table``;
* ``columns``: an object mapping column → JSON field; default: every field of the message
  goes to the column of the same name (a field missing from a message is NULL when mapped);
* ``key``: the key column(s), a list or comma-separated text. With a key, a row is
  *upserted* (``INSERT … ON CONFLICT (key) DO UPDATE``), so a message delivered again
  (at-least-once) writes the same row again instead of a second one; without, every
  delivery inserts a row. The key must be the table's primary key or a unique index.
* ``connectTimeoutMs`` (default 10000).

Each message is one statement in its own transaction, committed before the input is
acknowledged. A message that is not a JSON object, a database error (no such table or
column, a constraint) or a lost connection raises: the input is negatively acknowledged
and comes back (after a lost connection the next message connects again).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import psycopg
import psycopg.conninfo
from psycopg import sql
from psycopg.types.json import Jsonb

from magnetar.functions.connectors.connector import InvalidConnectorConfig, setting


class PostgresSink:
    def __init__(self, config: Mapping[str, Any]) -> None:
        connection = config.get("connection") or config.get("jdbcUrl")
        if not isinstance(connection, str) or not connection:
            raise InvalidConnectorConfig(
                "connection: missing (a libpq string or postgresql:// URL)"
            )
        if connection.startswith("jdbc:"):
            connection = connection[len("jdbc:") :]
        try:
            psycopg.conninfo.conninfo_to_dict(connection)
        except psycopg.ProgrammingError as exc:
            raise InvalidConnectorConfig(f"connection: {exc}") from None
        self._connection = connection
        self._user = setting(config, "userName", str, "") or None
        self._password = setting(config, "password", str, "") or None
        self._connect_timeout_ms = setting(config, "connectTimeoutMs", int, 10_000)
        if self._connect_timeout_ms < 1_000:
            raise InvalidConnectorConfig("connectTimeoutMs: must be at least 1000")
        table = setting(config, "tableName", str)
        parts = table.split(".")
        if not 1 <= len(parts) <= 2 or not all(parts):
            raise InvalidConnectorConfig(f"tableName: must be table or schema.table: {table!r}")
        self._table = sql.Identifier(*parts)
        columns = setting(config, "columns", dict, {})
        if not all(isinstance(k, str) and k and isinstance(v, str) for k, v in columns.items()):
            raise InvalidConnectorConfig("columns: must map column names to JSON field names")
        self._columns: dict[str, str] = dict(columns)
        key = config.get("key") or []
        if isinstance(key, str):
            key = [k.strip() for k in key.split(",") if k.strip()]
        if not isinstance(key, list) or not all(isinstance(k, str) and k for k in key):
            raise InvalidConnectorConfig("key: must be a column name or a list of them")
        if self._columns and not set(key) <= set(self._columns):
            raise InvalidConnectorConfig("key: every key column must be one of columns")
        self._key: list[str] = key
        self._conn: psycopg.Connection[Any] | None = None

    def process(self, value: Any, context: Any) -> None:
        try:
            doc = json.loads(value)
        except ValueError as exc:
            raise ValueError(f"the message is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise ValueError("the message must be a JSON object")
        if self._columns:
            row = {column: doc.get(field) for column, field in self._columns.items()}
        else:
            row = doc
        if not row:
            raise ValueError("the message has no fields to write")
        missing = [k for k in self._key if row.get(k) is None]
        if missing:
            raise ValueError(f"the message has no value for key column(s) {', '.join(missing)}")
        statement = self._statement(list(row))
        values = [Jsonb(v) if isinstance(v, dict | list) else v for v in row.values()]
        conn = self._connect()
        try:
            conn.execute(statement, values)
        except psycopg.OperationalError:
            self._close()
            raise

    def close(self) -> None:
        self._close()

    def _statement(self, columns: list[str]) -> sql.Composed:
        names = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
        placeholders = sql.SQL(", ").join(sql.Placeholder() for _ in columns)
        insert = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(self._table, names, placeholders)
        if not self._key:
            return insert
        others = [c for c in columns if c not in self._key]
        key = sql.SQL(", ").join(sql.Identifier(c) for c in self._key)
        if not others:
            return sql.SQL("{} ON CONFLICT ({}) DO NOTHING").format(insert, key)
        updates = sql.SQL(", ").join(
            sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c)) for c in others
        )
        return sql.SQL("{} ON CONFLICT ({}) DO UPDATE SET {}").format(insert, key, updates)

    def _connect(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            extra: dict[str, Any] = {"connect_timeout": max(1, self._connect_timeout_ms // 1000)}
            if self._user:
                extra["user"] = self._user
            if self._password:
                extra["password"] = self._password
            self._conn = psycopg.connect(self._connection, autocommit=True, **extra)
        return self._conn

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
