"""The append's SQL, per dialect: the statements ``server/appender.py`` runs in a group's
transaction, and the text they are built from.

In order: ``lock_and_prefetch`` locks the accounts' log heads and reads what validation needs
(``prefetch`` is the same read without the lock, for PostgreSQL's optimistic way); ``write``
logs the events and carries out the reducer's mutations (``write_if_heads_are``, in one
statement, only if no head has moved since the read); ``insert_runs`` queues the requested
assistant runs. Many rows go to PostgreSQL as one JSON parameter and each statement's text is the
same whatever the count (asyncpg prepares each distinct text once); SQLite gets ``executemany``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Protocol

import pydantic_core

from server.db import Param, Row, Tx, Value, integer, optional_text, text
from server.store import Rejected
from server.validation import AccountState, named_ids
from shared.models import DomainEvent
from shared.reducer import DeleteChildren, Mutation, Patch, Upsert
from shared.schema import TABLES, Dialect, Sql, Table

EVENT_COLUMNS = (
    ("account_id", "text"), ("seq", "bigint"), ("event_id", "text"), ("type", "text"), ("payload", "text"),
    ("created_at", "text"), ("origin", "text"), ("entity", "text"), ("chat", "text"), ("kind", "text"),
)
EVENT_ID_COLUMNS = (("account_id", "text"), ("event_id", "text"), ("seq", "bigint"))

# PostgreSQL tells every server process of each commit (server/fanout.py listens): the payload is
# "<account> <seq>", delivered at commit, in commit order; nothing is sent for a rollback.
NOTIFY_CHANNEL = "chat_log"

_SQL: dict[Dialect, Sql] = {"sqlite": Sql("sqlite", scoped=True), "postgres": Sql("postgres", scoped=True)}


class Batch(Protocol):
    """One append request: an account's events (``server/appender.py``'s requests are)."""

    @property
    def account_id(self) -> str: ...

    @property
    def events(self) -> Sequence[DomainEvent | Rejected]: ...


async def lock_heads(tx: Tx, dialect: Dialect, account_ids: list[str]) -> list[tuple[str, int, int]]:
    """Lock the accounts' log head rows (see ``_lock_sql``). Returns (account, head seq, min
    available seq) in account order."""
    sql, params = _lock_sql(dialect, sorted(set(account_ids)))
    rows = await tx.fetchall(sql, *params)
    return sorted((text(r[0]), integer(r[1]), integer(r[2])) for r in rows)


async def lock_and_prefetch(
    tx: Tx, dialect: Dialect, group: Sequence[Batch]
) -> tuple[dict[str, int], dict[str, AccountState]]:
    """Lock the group's log heads, then read, for the whole transaction, the eventIds already
    logged and the rows the events name. Returns each account's head seq and state.

    On PostgreSQL both go in one statement, which also reads the heads as of its snapshot: that
    snapshot is taken before the lock is granted, so when a head moved meanwhile (another
    transaction of the account committed while this one waited for its lock) the rows are read
    again, now under the lock. Without contention that is one round trip instead of two."""
    accounts = sorted({r.account_id for r in group})
    query, params = _prefetch_query(dialect, group)
    if dialect == "postgres":
        lock, lock_params = _lock_sql(dialect, accounts)
        rows = await tx.fetchall(
            f"""WITH locked AS ({lock})
            SELECT 'h', account_id, NULL, CAST(head_seq AS TEXT), NULL, NULL, NULL FROM locked
            UNION ALL
            {_SEEN_HEADS}
            UNION ALL
            {query}""",
            *lock_params,
            accounts,
            *params,
        )
        heads, seen = _heads(rows, "h"), _heads(rows, "s")
        if any(seen.get(a, 0) != h for a, h in heads.items()):
            rows = await tx.fetchall(query, *params)
    else:
        heads = {a: h for a, h, _ in await lock_heads(tx, dialect, accounts)}
        rows = await tx.fetchall(query, *params)
    return heads, _states(group, rows)


async def prefetch(tx: Tx, group: Sequence[Batch]) -> tuple[dict[str, int], dict[str, AccountState]]:
    """PostgreSQL: the read of ``lock_and_prefetch`` without the lock, and the heads it saw (an
    account with no log yet has none)."""
    query, params = _prefetch_query("postgres", group)
    rows = await tx.fetchall(
        f"{_SEEN_HEADS} UNION ALL {query}",
        sorted({r.account_id for r in group}),
        *params,
    )
    return _heads(rows, "s"), _states(group, rows)


async def write(
    tx: Tx,
    dialect: Dialect,
    log_rows: list[Row],
    mutations: list[tuple[str, Mutation]],
    heads: dict[str, int],
) -> None:
    """The writes, in order, as few statements as possible: on PostgreSQL the log rows, their
    eventIds, the new heads and the leading upserts in one statement; then the state mutations
    in runs (see ``_runs``), each run one statement."""
    runs = list(_runs(mutations, dialect))
    if dialect == "postgres":
        # The leading upserts ride along, one per table: no row is written twice in one
        # statement, and they still come before the mutations after them.
        tables = _leading_upsert_tables(runs)
        folded, runs = runs[: len(tables)], runs[len(tables) :]
        upsert_rows = [_upsert_rows(table, run) for table, (_, run) in zip(tables, folded)]
        await tx.execute(_pg_log_write(tuple(tables)), _json_rows(log_rows), *upsert_rows)
    else:
        id_rows = [(row[0], row[2], row[1]) for row in log_rows]
        for name, columns, rows in (("events", EVENT_COLUMNS, log_rows), ("event_ids", EVENT_ID_COLUMNS, id_rows)):
            names, marks = ", ".join(n for n, _ in columns), ", ".join("?" for _ in columns)
            await tx.executemany(f"INSERT INTO {name} ({names}) VALUES ({marks})", rows)
        await tx.executemany(
            "UPDATE logs SET head_seq = ? WHERE account_id = ?", [(h, a) for a, h in sorted(heads.items())]
        )
    for upserts, run in runs:
        if upserts:  # PostgreSQL: one statement for the run, its rows in one JSON parameter
            table = TABLES[run[0][1].table]
            await tx.execute(_pg_upsert(table), _upsert_rows(table, run))
        else:
            rendered = [_SQL[dialect].mutation(m, account) for account, m in run]
            await tx.executemany(rendered[0][0], [params for _, params in rendered])


async def write_if_heads_are(
    tx: Tx, heads: dict[str, int], log_rows: list[Row], mutations: list[tuple[str, Mutation]]
) -> bool:
    """PostgreSQL: what ``write`` writes, in one statement that locks the heads and writes only if
    each is still the given one. False when nothing was written: a head had moved, or the
    mutations need more than one statement (then nothing was sent)."""
    runs = list(_runs(mutations, "postgres"))
    tables = _leading_upsert_tables(runs)
    if len(tables) != len(runs):
        return False
    accounts = sorted(heads)
    written = await tx.fetchall(
        _pg_log_write(tuple(tables), if_heads_are=True),
        accounts,
        accounts,
        [heads[a] for a in accounts],
        _json_rows(log_rows),
        *(_upsert_rows(table, run) for table, (_, run) in zip(tables, runs)),
    )
    return bool(written)


async def insert_runs(tx: Tx, rows: list[Row]) -> None:
    """Each run an accepted event asks of this server (an ``AssistantRunRequested``, an
    ``AssistantRunContinued``, a ``QueuedMessageSent`` with a run): a durable run, queued (the
    rows of the runs table)."""
    await tx.executemany(
        "INSERT INTO runs (account_id, id, chat_id, message_id, assistant_id, requested_seq, requested_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        rows,
    )


async def note_follow_ups(tx: Tx, rows: list[Row]) -> None:
    """The chats where a follow-up was queued (account, chat, its seq), for the run workers to
    send it when the answer before it ends (the follow_ups table: server/runs.py)."""
    await tx.executemany(
        "INSERT INTO follow_ups (account_id, chat_id, noted_seq) VALUES (?, ?, ?) "
        "ON CONFLICT (account_id, chat_id) DO UPDATE SET noted_seq = excluded.noted_seq",
        rows,
    )


def _pairs_in(dialect: Dialect, columns: str, pairs: list[tuple[str, str]]) -> tuple[str, list[Param]]:
    """``(a, b) IN <the pairs>`` and its parameters. PostgreSQL gets two arrays, so the statement
    text is the same whatever the count (asyncpg prepares each distinct text once); SQLite gets
    ``a = ? AND b IN (...)`` for each first value, joined by OR (it searches the key's index for
    each; a row value IN a VALUES list scanned the whole table), or a false condition when there
    are none."""
    if dialect == "postgres":
        return f"({columns}) IN (SELECT * FROM unnest(?::text[], ?::text[]))", [
            [a for a, _ in pairs],
            [b for _, b in pairs],
        ]
    if not pairs:
        return "1 = 0", []
    first, second = columns.split(", ")
    by_first: dict[str, list[str]] = {}
    for a, b in pairs:
        by_first.setdefault(a, []).append(b)
    terms = [f"({first} = ? AND {second} IN ({', '.join('?' for _ in bs)}))" for bs in by_first.values()]
    return "(" + " OR ".join(terms) + ")", [v for a, bs in by_first.items() for v in (a, *bs)]


def _lock_sql(dialect: Dialect, ordered: list[str]) -> tuple[str, list[Param]]:
    """Create the accounts' log head rows if need be and lock them until commit (PostgreSQL's
    ON CONFLICT DO UPDATE takes the row locks, in account order, so two processes cannot
    deadlock; SQLite's write transaction is exclusive)."""
    params: list[Param]
    if dialect == "postgres":
        rows_sql, params = "SELECT unnest(?::text[]) ORDER BY 1", [ordered]
    else:
        rows_sql, params = "VALUES " + ", ".join("(?)" for _ in ordered), list(ordered)
    sql = (
        f"INSERT INTO logs (account_id) {rows_sql}"
        " ON CONFLICT (account_id) DO UPDATE SET head_seq = logs.head_seq"
        " RETURNING account_id, head_seq, min_available_seq"
    )
    return sql, params


# The accounts' heads as the reading statement's snapshot has them, as rows of the prefetch's shape.
_SEEN_HEADS = (
    "SELECT 's', account_id, NULL, CAST(head_seq AS TEXT), NULL, NULL, NULL FROM logs WHERE account_id = ANY(?::text[])"
)


def _heads(rows: list[Row], kind: str) -> dict[str, int]:
    return {text(r[1]): _number(r[3]) for r in rows if r[0] == kind}


def _number(value: Value) -> int:
    """An integer the prefetch's union carries in a TEXT column (PostgreSQL) or as it is (SQLite)."""
    return int(value) if isinstance(value, str) else integer(value)


def _states(group: Sequence[Batch], rows: list[Row]) -> dict[str, AccountState]:
    """The accounts' states from the prefetch read's rows (its other rows, heads, are skipped)."""
    states = {r.account_id: AccountState() for r in group}
    for kind, account, key, value, status, role, run_id in rows:
        if kind in ("h", "s"):
            continue
        state = states[text(account)]
        if kind == "e":
            state.logged[text(key)] = _number(value)
        elif kind == "m":
            state.messages[text(key)] = text(value)
            state.statuses[text(key)] = text(status)
            state.roles[text(key)] = text(role)
            state.message_runs[text(key)] = optional_text(run_id)
        elif kind == "r":
            state.runs.add(text(key))
        elif kind == "p":
            state.presets.add(text(key))
        else:
            state.chats.add(text(key))
    return states


def _prefetch_query(dialect: Dialect, group: Sequence[Batch]) -> tuple[str, list[Param]]:
    """One read for the whole transaction: the eventIds already logged, and the named rows."""
    event_pairs: set[tuple[str, str]] = set()
    chat_pairs: set[tuple[str, str]] = set()
    message_pairs: set[tuple[str, str]] = set()
    run_pairs: set[tuple[str, str]] = set()
    preset_pairs: set[tuple[str, str]] = set()
    for request in group:
        named = named_ids(request.events)
        account = request.account_id
        event_pairs |= {(account, e.event_id) for e in request.events}
        run_pairs |= {(account, r) for r in named.runs}
        chat_pairs |= {(account, c) for c in named.chats}
        message_pairs |= {(account, m) for m in named.messages}
        preset_pairs |= {(account, p) for p in named.presets}
    in_events, event_params = _pairs_in(dialect, "account_id, event_id", sorted(event_pairs))
    in_messages, message_params = _pairs_in(dialect, "account_id, id", sorted(message_pairs))
    in_chats, chat_params = _pairs_in(dialect, "account_id, id", sorted(chat_pairs))
    # (Two branches for the chats, not one OR: an OR with a subquery scans the whole table.)
    in_messages_of_chats, _ = _pairs_in(dialect, "messages.account_id, messages.id", sorted(message_pairs))
    in_runs, run_params = _pairs_in(dialect, "account_id, id", sorted(run_pairs))
    in_presets, preset_params = _pairs_in(dialect, "account_id, id", sorted(preset_pairs))
    query = f"""SELECT 'e', account_id, event_id, CAST(seq AS TEXT), NULL, NULL, NULL FROM event_ids WHERE {in_events}
        UNION ALL
        SELECT 'm', account_id, id, chat_id, status, role, run_id FROM messages WHERE {in_messages}
        UNION ALL
        SELECT 'c', account_id, id, NULL, NULL, NULL, NULL FROM chats WHERE {in_chats}
        UNION ALL
        SELECT 'c', chats.account_id, chats.id, NULL, NULL, NULL, NULL FROM messages
            JOIN chats ON chats.account_id = messages.account_id AND chats.id = messages.chat_id
            WHERE {in_messages_of_chats}
        UNION ALL
        SELECT 'r', account_id, id, NULL, NULL, NULL, NULL FROM runs WHERE {in_runs}
        UNION ALL
        SELECT 'p', account_id, id, NULL, NULL, NULL, NULL FROM presets WHERE {in_presets}"""
    return query, [*event_params, *message_params, *chat_params, *message_params, *run_params, *preset_params]


def _leading_upsert_tables(runs: list[tuple[bool, list[tuple[str, Mutation]]]]) -> list[Table]:
    """The tables of the leading upsert runs, one run per table, that can ride in the log write
    (no row is written twice in one statement, and they still come before the runs after them)."""
    tables: list[Table] = []
    for upserts, run in runs:
        table = TABLES[run[0][1].table]
        if not upserts or table in tables:
            break
        tables.append(table)
    return tables


def _runs(mutations: list[tuple[str, Mutation]], dialect: Dialect) -> Iterator[tuple[bool, list[tuple[str, Mutation]]]]:
    """Consecutive mutations that can go out as one statement, in order: on PostgreSQL, upserts
    into one table with no key twice (one statement cannot update a row twice); otherwise those
    that render to the same SQL."""
    run: list[tuple[str, Mutation]] = []
    keys: set[tuple[str, str]] = set()
    upserts = False
    for account, mutation in mutations:
        is_upsert = dialect == "postgres" and isinstance(mutation, Upsert)
        if run:
            same = is_upsert == upserts and type(mutation) is type(run[0][1]) and mutation.table == run[0][1].table
            if is_upsert:
                same = same and (account, mutation.row["id"]) not in keys  # type: ignore[union-attr]
            else:
                same = same and _shape(mutation) == _shape(run[0][1])
            if not same:
                yield upserts, run
                run, keys = [], set()
        run.append((account, mutation))
        upserts = is_upsert
        if is_upsert:
            keys.add((account, mutation.row["id"]))  # type: ignore[union-attr]
    if run:
        yield upserts, run


def _shape(mutation: Mutation) -> tuple[object, ...]:
    """What decides a mutation's SQL text (besides its type and table)."""
    if isinstance(mutation, DeleteChildren):
        return (mutation.column,)
    if isinstance(mutation, Patch):
        return (tuple(mutation.values), len(mutation.only_if_status))
    return ()


_PG_TYPES = {"integer": "bigint", "text": "text", "real": "double precision"}


@functools.cache
def _pg_upsert(table: Table, where: str = "") -> str:
    columns = (("account_id", "text"),) + tuple((c.name, _PG_TYPES[c.type]) for c in table.columns)
    updates = ", ".join(f"{c} = excluded.{c}" for c in table.column_names if c != "id")
    return (
        f"INSERT INTO {table.name} ({', '.join(n for n, _ in columns)}) {_from_json_rows(columns)} {where} "
        f"ON CONFLICT (account_id, id) DO UPDATE SET {updates}"
    )


# Many rows go to PostgreSQL as ONE parameter, a JSON array of arrays: the statement text is the
# same whatever the count, and encoding it costs a fraction of one array parameter per column.
def _json_rows(rows: list[Row]) -> str:
    return pydantic_core.to_json(rows).decode()  # (pydantic's Rust encoder: twice json's speed)


def _from_json_rows(columns: tuple[tuple[str, str], ...]) -> str:
    values = ", ".join(f"(r->>{i})::{kind}" for i, (_, kind) in enumerate(columns))
    return f"SELECT {values} FROM jsonb_array_elements(?::jsonb) AS r"


def _upsert_rows(table: Table, run: list[tuple[str, Mutation]]) -> str:
    return _json_rows([(account, *(m.row[c] for c in table.column_names)) for account, m in run])  # type: ignore[union-attr]


# One round trip for the log rows, their eventIds, each account's new head (its last seq), the
# notifications and the given tables' upserts: they touch different tables, so one statement may
# hold them all (its parts see one snapshot, none another's writes). With ``if_heads_are`` the
# statement first locks the heads (its first two parameters: the accounts, in order, and their
# expected heads) and writes nothing unless every one is as expected: then it returns no rows.
@functools.cache
def _pg_log_write(upserts: tuple[Table, ...], if_heads_are: bool = False) -> str:
    check, where = "", ""
    if if_heads_are:
        check = """locked AS (
            SELECT account_id, head_seq FROM logs WHERE account_id = ANY(?::text[]) ORDER BY account_id FOR UPDATE
        ), expected AS (
            SELECT * FROM unnest(?::text[], ?::bigint[]) AS e(account_id, head_seq)
        ), unmoved AS (
            SELECT (SELECT count(*) FROM expected) = count(*) AS ok
            FROM locked JOIN expected USING (account_id) WHERE locked.head_seq = expected.head_seq
        ), """
        where = "WHERE (SELECT ok FROM unmoved)"
    also = "".join(f", upsert_{table.name} AS ({_pg_upsert(table, where)})" for table in upserts)
    return f"""WITH {check}logged AS (
        INSERT INTO events ({", ".join(n for n, _ in EVENT_COLUMNS)})
        {_from_json_rows(EVENT_COLUMNS)} {where}
        RETURNING account_id, event_id, seq
    ), remembered AS (
        INSERT INTO event_ids ({", ".join(n for n, _ in EVENT_ID_COLUMNS)})
        SELECT account_id, event_id, seq FROM logged
    ){also}
    UPDATE logs SET head_seq = heads.head_seq
    FROM (SELECT account_id, max(seq) AS head_seq FROM logged GROUP BY account_id) AS heads
    WHERE logs.account_id = heads.account_id
    RETURNING pg_notify('{NOTIFY_CHANNEL}', logs.account_id || ' ' || logs.head_seq)"""
