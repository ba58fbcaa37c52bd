"""The state tables, defined once and rendered to SQLite and PostgreSQL, and the SQL of mutations.

The server's tables lead with ``account_id`` (every key and index starts with it, so the data can
shard by account); the browser's local copy holds one account and has no such column.
The databases get their tables from migrations (server/migrations.py, webapp/migrations.py), each
holding its own DDL; ``Sql.create`` renders the tables as defined here today, and the migration
tests (tests/server/test_migrations.py, tests/webapp/test_migrations.py) check that a database
migrated from nothing has exactly those: a change of the columns here needs a migration on both
sides (of the indexes, on the server's: the browser picks its own).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, cached_property
from typing import Any, Literal, assert_never

from shared.reducer import Delete, DeleteChildren, Mutation, Patch, Upsert

Dialect = Literal["sqlite", "postgres"]


@dataclass(frozen=True)
class Column:
    name: str
    type: Literal["text", "integer", "real"]
    nullable: bool = False


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]
    indexes: tuple[tuple[str, ...], ...] = ()  # besides the primary key (id); the server's (see above)

    @cached_property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


CHATS = Table(
    "chats",
    (
        Column("id", "text"),
        Column("title", "text"),
        Column("created_at", "text"),
        Column("updated_at", "text"),
        Column("last_seq", "integer"),
        # The chat's layer of instructions, and its preset (added by a migration: last).
        Column("instructions", "text", nullable=True),
        Column("preset_id", "text", nullable=True),
    ),
    indexes=(("last_seq",),),
)

MESSAGES = Table(
    "messages",
    (
        Column("id", "text"),
        Column("chat_id", "text"),
        Column("role", "text"),
        Column("content", "text"),
        Column("parent_id", "text", nullable=True),
        Column("status", "text"),
        Column("assistant_id", "text", nullable=True),
        Column("run_id", "text", nullable=True),
        Column("created_at", "text"),
        Column("updated_at", "text"),
        Column("last_seq", "integer"),
        # The message's attachments (references, never bytes) as JSON text; NULL: none.
        Column("attachments_json", "text", nullable=True),
        # What an answer was given and how it ended (shared/models.py, Message); its usage as JSON text.
        Column("preset_id", "text", nullable=True),
        Column("instructions", "text", nullable=True),
        Column("finish_reason", "text", nullable=True),
        Column("usage_json", "text", nullable=True),
    ),
    indexes=(("last_seq",), ("chat_id", "last_seq"), ("chat_id", "created_at")),
)

PRESETS = Table(
    "presets",
    (
        Column("id", "text"),
        Column("name", "text"),
        Column("assistant_id", "text", nullable=True),
        Column("instructions", "text"),
        Column("temperature", "real", nullable=True),
        Column("max_tokens", "integer", nullable=True),
        Column("created_at", "text"),
        Column("updated_at", "text"),
        Column("last_seq", "integer"),
    ),
    indexes=(("last_seq",),),
)

# One row per account (its id is always shared.models.SETTINGS_ID).
SETTINGS = Table(
    "settings",
    (
        Column("id", "text"),
        Column("instructions", "text"),
        Column("default_preset_id", "text", nullable=True),
        Column("created_at", "text"),
        Column("updated_at", "text"),
        Column("last_seq", "integer"),
    ),
    indexes=(("last_seq",),),
)

TABLES: dict[str, Table] = {t.name: t for t in (CHATS, MESSAGES, PRESETS, SETTINGS)}

_TYPES: dict[Dialect, dict[str, str]] = {
    "sqlite": {"text": "TEXT", "integer": "INTEGER", "real": "REAL"},
    "postgres": {"text": "TEXT", "integer": "BIGINT", "real": "DOUBLE PRECISION"},
}


@dataclass(frozen=True)
class Sql:
    """Renders SQL for one dialect, for the server (``scoped``: rows carry ``account_id``) or a client.

    ``prefix`` names a second copy of the tables (the browser keeps ``confirmed_*`` beside the
    tables it shows). Parameters are positional: ``?`` for SQLite, ``$n`` for PostgreSQL.
    """

    dialect: Dialect
    scoped: bool
    prefix: str = ""

    def _param(self, n: int) -> str:
        return "?" if self.dialect == "sqlite" else f"${n}"

    def _key(self) -> tuple[str, ...]:
        return ("account_id",) if self.scoped else ()

    def name(self, table: Table) -> str:
        return self.prefix + table.name

    def create(self, table: Table) -> list[str]:
        """The table and its indexes as defined today (what the migrations are checked against)."""
        types = _TYPES[self.dialect]
        cols = [f"account_id {types['text']} NOT NULL"] if self.scoped else []
        cols += [
            f"{c.name} {types[c.type]}{'' if c.nullable else ' NOT NULL'}" for c in table.columns
        ]
        pk = ", ".join(self._key() + ("id",))
        name = self.name(table)
        statements = [f"CREATE TABLE IF NOT EXISTS {name} ({', '.join(cols)}, PRIMARY KEY ({pk}))"]
        for index in table.indexes:
            columns = self._key() + index
            statements.append(
                f"CREATE INDEX IF NOT EXISTS {name}_{'_'.join(columns)} ON {name} ({', '.join(columns)})"
            )
        return statements

    def _where(self, columns: tuple[str, ...], start: int) -> str:
        cols = self._key() + columns
        return " AND ".join(f"{c} = {self._param(start + i)}" for i, c in enumerate(cols))

    def mutation(self, mutation: Mutation, account_id: str | None = None) -> tuple[str, list[Any]]:
        """The statement and parameters that carry out one reducer mutation."""
        scope: list[Any] = [account_id] if self.scoped else []
        table = TABLES[mutation.table]
        match mutation:
            case Upsert(row=row):
                return self._upsert(table), scope + [row[c] for c in table.column_names]
            case Delete(id=row_id):
                return self._delete(table, "id"), scope + [row_id]
            case DeleteChildren(column=column, value=value):
                return self._delete(table, column), scope + [value]
            case Patch(id=row_id, values=values, only_if_status=statuses):
                sql = self._patch(table, tuple(values), len(statuses))
                return sql, list(values.values()) + scope + [row_id] + list(statuses)
            case _:  # (a new mutation fails type-checking here until it is handled above)
                assert_never(mutation)

    # The statement texts depend only on their arguments: rendered once each (a hot path).

    @cache  # noqa: B019 (on the few module-level Sql instances: nothing to leak)
    def _upsert(self, table: Table) -> str:
        cols = self._key() + table.column_names
        placeholders = ", ".join(self._param(i + 1) for i in range(len(cols)))
        conflict = ", ".join(self._key() + ("id",))
        updates = ", ".join(f"{c} = excluded.{c}" for c in table.column_names if c != "id")
        return (
            f"INSERT INTO {self.name(table)} ({', '.join(cols)}) VALUES ({placeholders}) "
            f"ON CONFLICT ({conflict}) DO UPDATE SET {updates}"
        )

    @cache  # noqa: B019
    def _delete(self, table: Table, column: str) -> str:
        return f"DELETE FROM {self.name(table)} WHERE {self._where((column,), 1)}"

    @cache  # noqa: B019
    def _patch(self, table: Table, columns: tuple[str, ...], statuses: int) -> str:
        sets = ", ".join(f"{c} = {self._param(i + 1)}" for i, c in enumerate(columns))
        where = self._where(("id",), len(columns) + 1)
        if statuses:
            start = len(columns) + len(self._key()) + 2
            marks = ", ".join(self._param(start + i) for i in range(statuses))
            where += f" AND status IN ({marks})"
        return f"UPDATE {self.name(table)} SET {sets} WHERE {where}"
