"""A database's schema as its catalog tells it, on SQLite and PostgreSQL, and what differs between two.

The migration tests (tests/server/test_migrations.py, tests/webapp/test_migrations.py) read the
schema of a database made by running every migration and the one today's definitions render, and
name each difference: a table, a column (its type, NOT NULL, default, place), the primary key, a
UNIQUE constraint, an index (its columns, unique, a partial index's condition), a trigger, a
virtual table's definition.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass, field, replace

import asyncpg


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # as the catalog names it, in lower case
    not_null: bool
    default: str | None  # its SQL, without PostgreSQL's casts

    def __str__(self) -> str:
        default = "" if self.default is None else f" DEFAULT {self.default}"
        return f"{self.type or '(no type)'}{' NOT NULL' if self.not_null else ' NULL'}{default}"


@dataclass(frozen=True)
class Index:
    columns: tuple[str, ...]
    unique: bool
    where: str | None  # a partial index's condition

    def __str__(self) -> str:
        where = "" if self.where is None else f" WHERE {self.where}"
        return f"{'UNIQUE ' if self.unique else ''}({', '.join(self.columns)}){where}"


@dataclass(frozen=True)
class Table:
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    unique: frozenset[tuple[str, ...]] = frozenset()  # UNIQUE constraints (each backend names them its own way)
    indexes: dict[str, Index] = field(default_factory=dict)  # by name: those made by CREATE INDEX
    triggers: dict[str, str] = field(default_factory=dict)  # by name: their SQL, whitespace folded
    virtual: str | None = None  # a virtual table's CREATE statement, whitespace folded


Schema = dict[str, Table]


def _folded(sql: str) -> str:
    return " ".join(sql.split())


def read_sqlite(conn: sqlite3.Connection) -> Schema:
    """Every table of a SQLite database but SQLite's own."""
    schema: Schema = {}
    objects = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'").fetchall()
    for kind, name, _, sql in objects:
        if kind != "table":
            continue
        info = conn.execute(f"PRAGMA table_info('{name}')").fetchall()  # cid, name, type, notnull, default, pk
        columns = tuple(Column(r[1], r[2].lower(), bool(r[3]), r[4]) for r in info)
        primary_key = tuple(r[1] for r in sorted(info, key=lambda r: r[5]) if r[5])
        unique, indexes = set(), {}
        for _, index, is_unique, origin, partial in conn.execute(f"PRAGMA index_list('{name}')").fetchall():
            cols = tuple(r[2] for r in conn.execute(f"PRAGMA index_info('{index}')"))
            if origin == "u":
                unique.add(cols)
            elif origin == "c":
                where = None
                if partial:
                    [(text,)] = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?", (index,))
                    where = _folded(re.split(r"\bWHERE\b", text, maxsplit=1, flags=re.IGNORECASE)[1])
                indexes[index] = Index(cols, bool(is_unique), where)
        triggers = {n: _folded(s) for k, n, t, s in objects if k == "trigger" and t == name}
        virtual = _folded(sql) if sql.upper().startswith("CREATE VIRTUAL TABLE") else None
        schema[name] = Table(columns, primary_key, frozenset(unique), indexes, triggers, virtual)
    return schema


async def read_postgres(conn: asyncpg.Connection, namespace: str) -> Schema:
    """Every table of one PostgreSQL schema (``namespace``), from information_schema and pg_catalog."""
    columns: dict[str, list[Column]] = {}
    for r in await conn.fetch(
        """SELECT table_name, column_name, data_type, is_nullable, column_default FROM information_schema.columns
           WHERE table_schema = $1 ORDER BY table_name, ordinal_position""",
        namespace,
    ):
        default = None if r["column_default"] is None else re.sub(r"::[a-z ]+$", "", r["column_default"])
        columns.setdefault(r["table_name"], []).append(Column(r["column_name"], r["data_type"], r["is_nullable"] == "NO", default))
    tables = {name: Table(tuple(cols), ()) for name, cols in columns.items()}
    for r in await conn.fetch(
        """SELECT t.relname AS table, i.relname AS index, x.indisprimary AS primary, x.indisunique AS unique,
                  pg_get_expr(x.indpred, x.indrelid) AS where,
                  EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid AND c.contype = 'u') AS constraint,
                  ARRAY(SELECT a.attname FROM unnest(x.indkey) WITH ORDINALITY AS k(attnum, n)
                        JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum ORDER BY k.n) AS columns
           FROM pg_index x JOIN pg_class t ON t.oid = x.indrelid JOIN pg_class i ON i.oid = x.indexrelid
           JOIN pg_namespace n ON n.oid = t.relnamespace WHERE n.nspname = $1""",
        namespace,
    ):
        table, cols = tables[r["table"]], tuple(r["columns"])
        if r["primary"]:
            tables[r["table"]] = replace(table, primary_key=cols)
        elif r["constraint"]:
            tables[r["table"]] = replace(table, unique=table.unique | {cols})
        else:
            table.indexes[r["index"]] = Index(cols, r["unique"], r["where"])
    for r in await conn.fetch(
        """SELECT c.relname AS table, t.tgname AS name, pg_get_triggerdef(t.oid) AS sql FROM pg_trigger t
           JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = $1 AND NOT t.tgisinternal""",
        namespace,
    ):
        tables[r["table"]].triggers[r["name"]] = _folded(r["sql"])
    return tables


def _named(kind: str, table: str, expected: dict[str, str], actual: dict[str, str]) -> list[str]:
    found = []
    for name in sorted(expected.keys() | actual.keys()):
        if name not in actual:
            found.append(f"{table}: {kind} {name} ({expected[name]}) expected, missing")
        elif name not in expected:
            found.append(f"{table}: {kind} {name} ({actual[name]}) is there, not expected")
        elif expected[name] != actual[name]:
            found.append(f"{table}: {kind} {name} is ({actual[name]}), expected ({expected[name]})")
    return found


def differences(expected: Schema, actual: Schema) -> list[str]:
    """What ``actual`` has otherwise than ``expected``, one sentence each (none: the same schema)."""
    found: list[str] = []
    for name in sorted(expected.keys() | actual.keys()):
        if name not in actual:
            found.append(f"table {name}: expected, missing")
            continue
        if name not in expected:
            found.append(f"table {name}: is there, not expected")
            continue
        want, have = expected[name], actual[name]
        found += _named("column", name, {c.name: str(c) for c in want.columns}, {c.name: str(c) for c in have.columns})
        order = [c.name for c in want.columns], [c.name for c in have.columns]
        if sorted(order[0]) == sorted(order[1]) and order[0] != order[1]:
            found.append(f"{name}: columns in the order ({', '.join(order[1])}), expected ({', '.join(order[0])})")
        if want.primary_key != have.primary_key:
            found.append(f"{name}: primary key is ({', '.join(have.primary_key)}), expected ({', '.join(want.primary_key)})")
        for cols in sorted(want.unique - have.unique):
            found.append(f"{name}: UNIQUE ({', '.join(cols)}) expected, missing")
        for cols in sorted(have.unique - want.unique):
            found.append(f"{name}: UNIQUE ({', '.join(cols)}) is there, not expected")
        found += _named("index", name, {k: str(v) for k, v in want.indexes.items()}, {k: str(v) for k, v in have.indexes.items()})
        found += _named("trigger", name, want.triggers, have.triggers)
        if want.virtual != have.virtual:
            found.append(f"{name}: is {have.virtual or 'an ordinary table'}, expected {want.virtual or 'an ordinary table'}")
    return found


def report(found: list[str], today: str) -> str:
    """The assertion message of a migration test: what to do, then each difference."""
    return (
        f"a database made by running every migration differs from today's {today}"
        " (a released migration is never edited: add one)\n  " + "\n  ".join(found)
    )
