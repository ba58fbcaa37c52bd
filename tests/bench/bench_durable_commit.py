"""Benchmark: what one durable local commit costs in the browser as the database grows.

Run on demand:  .venv/bin/python -m tests.bench.bench_durable_commit
Starts the server, opens the app in Debian's Chromium, fills the local database (persisted in
IndexedDB) with 1k, 10k and 50k messages, and times LocalStore.add_local: one SQLite transaction
(outbox row + optimistic apply) plus the awaited IndexedDB sync. Prints mean and p95 per commit at
each size, beside the same commit's cost with a no-op persistence (the SQLite part alone), measured
in the same page.
"""

from __future__ import annotations

import json
import tempfile
import uuid
from pathlib import Path

from playwright.sync_api import sync_playwright

from tests.e2e.conftest import playwright_config
from tests.e2e.pages import open_app, sign
from tests.processes import Server

SIZES = (1_000, 10_000, 50_000)
COMMITS = 40

MEASURE = """
import json, time, statistics
from shared.models import DomainEvent, EventType, Message
from webapp.database import FilePersistence
from webapp.store import LocalStore

store = chat_client.store
chat = store.chats()[0].id

def fill(total):
    have = store.conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    rows = [(f"00000000-0000-7000-8000-{n:012d}", chat, "user", "x" * 200, None, "completed", None, None,
             "2026-11-30T12:00:00.000Z", "2026-11-30T12:00:00.000Z", 1, None) for n in range(have, total)]
    with store._transaction() as conn:  # (the server's rows, stored once: shown)
        conn.executemany("INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)

async def timed(target, n):
    times = []
    for i in range(n):
        message = Message(id=chat_client.s.new_id(), chat_id=chat, role="user", content=f"bench {i}",
                          created_at="2026-11-30T12:00:00.000Z")
        event = DomainEvent(event_id=chat_client.s.new_id(), type=EventType.MESSAGE_APPENDED,
                            payload=message, created_at="2026-11-30T12:00:00.000Z")
        start = time.perf_counter()
        await target.add_local(event)
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return statistics.mean(times), times[int(len(times) * 0.95) - 1]

chat_client.stop()
results = []
for size in SIZES:
    fill(size)
    await store._durable()
    durable = await timed(store, COMMITS)
    sqlite_only = LocalStore.__new__(LocalStore)
    sqlite_only.__dict__.update(store.__dict__)
    sqlite_only._persistence = FilePersistence()
    memory = await timed(sqlite_only, COMMITS)
    import os
    size_mb = sum(os.path.getsize(p) for p in ("/data/chat.db", "/data/chat.db-wal") if os.path.exists(p)) / 1e6
    results.append({"messages": size, "mb": size_mb, "durable": durable, "sqlite": memory})
json.dumps(results)
"""


def main() -> None:
    data = Path(tempfile.mkdtemp())
    server = Server(f"sqlite:///{data / 'chat.db'}", data / "server.log")
    server.start()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(**playwright_config.LAUNCH_ARGS)
            page = browser.new_context(base_url=server.url).new_page()
            open_app(page)
            sign(page, f"bench{uuid.uuid4().hex[:8]}", "a long password", signup=True)
            page.click("[data-action=new-chat]")
            page.wait_for_timeout(500)
            code = MEASURE.replace("SIZES", repr(SIZES)).replace("COMMITS", str(COMMITS))
            results = json.loads(page.evaluate("code => pyodide.runPythonAsync(code)", code))
            browser.close()
    finally:
        server.stop()
    print(f"durable local commit (SQLite, WAL, its files in IndexedDB as 64 KiB chunks), {COMMITS} commits per size")
    for r in results:
        (d_mean, d_p95), (s_mean, _) = r["durable"], r["sqlite"]
        print(
            f"  {r['messages']:>6} messages ({r['mb']:5.1f} MB): durable {d_mean:6.1f} ms mean, {d_p95:6.1f} ms p95"
            f"  | SQLite alone {s_mean:5.2f} ms mean  | ratio {d_mean / s_mean:5.1f}"
        )


if __name__ == "__main__":
    main()
