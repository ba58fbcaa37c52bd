"""The baseline of ``bench_events --database sqlite``: a naive implementation of the same sync
protocol on SQLite, the ceiling of what one process does with it here.

One ``sqlite3`` connection (WAL, synchronous=NORMAL, as the real server), used from the event loop
under one lock: each request runs its statements and its commit right there, no thread, no
grouping, no validation beyond the event's type. It keeps the log as the real server does (a head
row per account, the events, their eventIds for duplicates, the state row each ChatCreated makes)
and answers in the protocol's shapes, so the same client drives both:

* ``POST /auth/signup`` and ``POST /auth/login`` -> ``{"token": ...}`` (no password is checked);
* ``POST /sync/events`` (``Authorization: Bearer``) -> ``{"results": [...], "currentSeq": N}``;
* ``GET /sync/updates?afterSeq=N&limit=L`` -> ``{"events": [...], "hasMore": b, "currentSeq": N}``.

Only the benchmark starts it:  python -m tests.bench.naive_sqlite_server PORT PATH
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import uuid
from datetime import UTC, datetime
from typing import Any

from hypercorn.asyncio import serve
from hypercorn.config import Config
from quart import Quart, Response, request

from server.tuning import tune_garbage_collection

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (token TEXT PRIMARY KEY, account_id TEXT NOT NULL, device_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS accounts (id TEXT PRIMARY KEY, username TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS logs (account_id TEXT PRIMARY KEY, head_seq INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    account_id TEXT NOT NULL, seq INTEGER NOT NULL, event_id TEXT NOT NULL, type TEXT NOT NULL,
    payload TEXT NOT NULL, created_at TEXT NOT NULL, origin TEXT NOT NULL, PRIMARY KEY (account_id, seq));
CREATE TABLE IF NOT EXISTS event_ids (
    account_id TEXT NOT NULL, event_id TEXT NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (account_id, event_id));
CREATE TABLE IF NOT EXISTS chats (
    account_id TEXT NOT NULL, id TEXT NOT NULL, title TEXT NOT NULL, created_at TEXT NOT NULL,
    last_seq INTEGER NOT NULL, PRIMARY KEY (account_id, id));
"""


def create_app(path: str) -> Quart:
    app = Quart(__name__, static_folder=None)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(SCHEMA)
    lock = asyncio.Lock()
    sessions: dict[str, tuple[str, str]] = {}

    def session() -> tuple[str, str] | None:
        token = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        found = sessions.get(token)
        if found is None:
            row = conn.execute("SELECT account_id, device_id FROM sessions WHERE token = ?", (token,)).fetchone()
            if row is not None:
                found = sessions[token] = (row[0], row[1])
        return found

    def reply(body: Any, status: int = 200) -> Response:
        return Response(json.dumps(body), status=status, content_type="application/json")

    async def start_session(create: bool) -> Response:
        body = json.loads(await request.get_data())
        async with lock:
            conn.execute("BEGIN IMMEDIATE")
            if create:
                conn.execute("INSERT INTO accounts VALUES (?, ?)", (str(uuid.uuid4()), body["username"]))
            row = conn.execute("SELECT id FROM accounts WHERE username = ?", (body["username"],)).fetchone()
            token = uuid.uuid4().hex
            conn.execute("INSERT INTO sessions VALUES (?, ?, ?)", (token, row[0], str(uuid.uuid4())))
            conn.execute("COMMIT")
        return reply({"token": token, "userId": row[0]}, 201 if create else 200)

    @app.post("/auth/signup")
    async def signup() -> Response:
        return await start_session(create=True)

    @app.post("/auth/login")
    async def login() -> Response:
        return await start_session(create=False)

    @app.post("/sync/events")
    async def post_events() -> Response:
        found = session()
        if found is None:
            return reply({"error": "unauthorized"}, 401)
        account, device = found
        events = json.loads(await request.get_data())["events"]
        now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        results = []
        async with lock:
            conn.execute("BEGIN IMMEDIATE")
            row = conn.execute("SELECT head_seq FROM logs WHERE account_id = ?", (account,)).fetchone()
            head = 0 if row is None else row[0]
            for event in events:
                event_id, payload = event["eventId"], event["payload"]
                seen = conn.execute(
                    "SELECT seq FROM event_ids WHERE account_id = ? AND event_id = ?", (account, event_id)
                ).fetchone()
                if seen is not None:
                    results.append({"eventId": event_id, "status": "duplicate", "seq": seen[0]})
                    continue
                if event["type"] != "ChatCreated" or conn.execute(
                    "SELECT 1 FROM chats WHERE account_id = ? AND id = ?", (account, payload["id"])
                ).fetchone():
                    results.append({"eventId": event_id, "status": "rejected", "error": "not a new chat"})
                    continue
                head += 1
                conn.execute(
                    "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (account, head, event_id, event["type"], json.dumps(payload), now, device),
                )
                conn.execute("INSERT INTO event_ids VALUES (?, ?, ?)", (account, event_id, head))
                conn.execute(
                    "INSERT INTO chats VALUES (?, ?, ?, ?, ?)",
                    (account, payload["id"], payload["title"], payload["createdAt"], head),
                )
                results.append({"eventId": event_id, "status": "accepted", "seq": head})
            conn.execute(
                "INSERT INTO logs VALUES (?, ?) ON CONFLICT (account_id) DO UPDATE SET head_seq = excluded.head_seq",
                (account, head),
            )
            conn.execute("COMMIT")
        return reply({"results": results, "currentSeq": head})

    @app.get("/sync/updates")
    async def get_updates() -> Response:
        found = session()
        if found is None:
            return reply({"error": "unauthorized"}, 401)
        account = found[0]
        after = int(request.args.get("afterSeq", "0"))
        limit = int(request.args.get("limit", "500"))
        async with lock:
            conn.execute("BEGIN")
            row = conn.execute("SELECT head_seq FROM logs WHERE account_id = ?", (account,)).fetchone()
            rows = conn.execute(
                "SELECT seq, event_id, type, payload, created_at, origin FROM events"
                " WHERE account_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (account, after, limit + 1),
            ).fetchall()
            conn.execute("COMMIT")
        events = [
            {"seq": r[0], "eventId": r[1], "type": r[2], "payload": json.loads(r[3]), "createdAt": r[4], "origin": r[5]}
            for r in rows[:limit]
        ]
        return reply({"events": events, "hasMore": len(rows) > limit, "currentSeq": 0 if row is None else row[0]})

    @app.get("/healthz")
    async def healthz() -> Response:
        return reply({"status": "ok"})

    return app


def main() -> None:
    port, path = int(sys.argv[1]), sys.argv[2]
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    app = create_app(path)
    tune_garbage_collection()
    asyncio.run(serve(app, config))


if __name__ == "__main__":
    main()
