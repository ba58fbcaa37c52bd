"""The pending overlay: the outbox's events on top of the server's rows, each row stored once.

The state tables (one ``shared`` schema) hold:
  ``chats``/``messages``/``presets``/``settings``: what the UI shows, the confirmed state with
  the pending events on top;
  ``overlaid``: the rows the pending events made or changed there (by table and id);
  ``confirmed_*`` (one per table): the server's version of those rows (none when the server has
  none), kept aside while they are overlaid.
So the server's state at ``last_seq`` is the shown rows that are not overlaid, plus the confirmed
ones (``confirmed``). A remote event changes the server's version of a row wherever it is
(``confirm``); then the overlay is put back on top (``reapply``: the overlaid rows restored, the
outbox run again), so nothing pending is lost and nothing rejected survives. A row no pending
event touches is stored once, which is what a device syncing a large account writes.

Each function is a step of a transaction of the store (webapp/store.py), on its connection.
"""

from __future__ import annotations

import sqlite3

from shared.models import Chat, DomainEvent, LoggedEvent, Message, Preset, Settings, Snapshot
from shared.reducer import PENDING_SEQ, DeleteChildren, Upsert, apply
from shared.schema import TABLES, Sql

SHOWN = Sql("sqlite", scoped=False)
CONFIRMED = Sql("sqlite", scoped=False, prefix="confirmed_")


def add(conn: sqlite3.Connection, event: DomainEvent) -> None:
    """A pending event onto the shown rows; the server's version of each row it touches is
    kept aside first (unless the row is overlaid already: then it is kept already)."""
    for mutation in apply(event):
        table = TABLES[mutation.table]
        cols = ", ".join(table.column_names)
        if isinstance(mutation, DeleteChildren):
            where, value = f"{mutation.column} = ?", mutation.value
        else:
            where, value = "id = ?", mutation.id if not isinstance(mutation, Upsert) else mutation.row["id"]
        untouched = f"{where} AND id NOT IN (SELECT id FROM overlaid WHERE tbl = '{table.name}')"
        conn.execute(f"INSERT INTO {CONFIRMED.name(table)} ({cols}) SELECT {cols} FROM {table.name} WHERE {untouched}", (value,))
        if isinstance(mutation, DeleteChildren):
            conn.execute(f"INSERT OR IGNORE INTO overlaid SELECT '{table.name}', id FROM {table.name} WHERE {where}", (value,))
        else:
            conn.execute("INSERT OR IGNORE INTO overlaid VALUES (?, ?)", (table.name, value))
        statement, params = SHOWN.mutation(mutation)
        conn.execute(statement, params)


def confirm(conn: sqlite3.Connection, event: LoggedEvent, overlaid: set[tuple[str, str]]) -> None:
    """A logged event onto the server's version of each row: the shown row, or the one kept
    aside when the row is ``overlaid`` (the overlay goes back on top afterwards)."""
    for mutation in apply(event):
        if isinstance(mutation, DeleteChildren):
            statement, params = CONFIRMED.mutation(mutation)
            conn.execute(statement, params)
            statement, params = SHOWN.mutation(mutation)
            if overlaid:
                statement += f" AND id NOT IN (SELECT id FROM overlaid WHERE tbl = '{mutation.table}')"
            conn.execute(statement, params)
            continue
        row_id = mutation.row["id"] if isinstance(mutation, Upsert) else mutation.id
        statement, params = (CONFIRMED if (mutation.table, row_id) in overlaid else SHOWN).mutation(mutation)
        conn.execute(statement, params)


def overlaid(conn: sqlite3.Connection) -> set[tuple[str, str]]:
    """The rows the overlay changed, as (table, id)."""
    return {(r[0], r[1]) for r in conn.execute("SELECT tbl, id FROM overlaid")}


def reapply(conn: sqlite3.Connection) -> None:
    """Shown state := confirmed state + every pending event, in order. Only the overlaid rows
    change: each is put back as the server has it (a row restored keeps its rowid, and its
    search entry unless its text differs), then the outbox runs again."""
    for table in TABLES.values():
        cols = table.column_names
        shown, confirmed = table.name, CONFIRMED.name(table)
        conn.execute(
            f"""DELETE FROM {shown} WHERE id IN (SELECT id FROM overlaid WHERE tbl = '{shown}')
                AND id NOT IN (SELECT id FROM {confirmed})"""
        )
        updates = ", ".join(f"{c} = excluded.{c}" for c in cols if c != "id")
        conn.execute(
            f"""INSERT INTO {shown} ({', '.join(cols)}) SELECT {', '.join(cols)} FROM {confirmed} WHERE true
                ON CONFLICT (id) DO UPDATE SET {updates}"""
        )
        conn.execute(f"DELETE FROM {confirmed}")
    conn.execute("DELETE FROM overlaid")
    for row in conn.execute("SELECT body FROM pending_events ORDER BY id").fetchall():
        add(conn, DomainEvent.model_validate_json(row[0]))


def confirmed(conn: sqlite3.Connection) -> Snapshot:
    """The confirmed state: the shown rows the overlay did not change, and the server's version
    of those it did."""

    def rows(table: str) -> list[sqlite3.Row]:
        return conn.execute(
            f"""SELECT * FROM {table} WHERE id NOT IN (SELECT id FROM overlaid WHERE tbl = '{table}')
                UNION ALL SELECT * FROM confirmed_{table} ORDER BY id"""
        ).fetchall()

    return Snapshot(
        chats=[Chat.model_validate(dict(r)) for r in rows("chats")],
        messages=[Message.model_validate(dict(r)) for r in rows("messages")],
        settings=[Settings.model_validate(dict(r)) for r in rows("settings")],
        presets=[Preset.model_validate(dict(r)) for r in rows("presets")],
    )


def is_pending(row: Chat | Message | Preset | Settings) -> bool:
    """A shown row that a still-unconfirmed local event made."""
    return row.last_seq == PENDING_SEQ
