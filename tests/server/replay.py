"""Replaying events with the shared reducer into a scratch SQLite database, to compare states."""

from __future__ import annotations

import sqlite3
from typing import Any

from shared.models import LoggedEvent, Snapshot
from shared.reducer import apply, row_of
from shared.schema import TABLES, Sql

SQL = Sql("sqlite", scoped=False)
State = dict[str, dict[str, dict[str, Any]]]  # table -> id -> row


def replay(events: list[LoggedEvent], start: Snapshot | None = None) -> State:
    conn = sqlite3.connect(":memory:")
    for table in TABLES.values():
        for statement in SQL.create(table):
            conn.execute(statement)
    if start is not None:
        for table in TABLES.values():
            rows = getattr(start, table.name)
            cols = table.column_names
            conn.executemany(  # (a row twice in a snapshot: the later one, as a client keeps it)
                f"INSERT OR REPLACE INTO {table.name} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})",
                [[row_of(r)[c] for c in cols] for r in rows],
            )
    for event in events:
        for mutation in apply(event):
            conn.execute(*SQL.mutation(mutation))
    state: State = {}
    for table in TABLES.values():
        cols = table.column_names
        rows = conn.execute(f"SELECT {', '.join(cols)} FROM {table.name}").fetchall()
        state[table.name] = {r[0]: dict(zip(cols, r)) for r in rows}
    return state


def as_state(snapshot: Snapshot) -> State:
    return {name: {r.id: row_of(r) for r in getattr(snapshot, name)} for name in TABLES}


def at_most(state: State, n: int) -> State:
    return {t: {k: r for k, r in rows.items() if r["last_seq"] <= n} for t, rows in state.items()}
