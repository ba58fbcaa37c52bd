"""Benchmark: search in Chromium over the browser's own SQLite (FTS5, webapp/search.py).

Run on demand:  .venv/bin/python -m tests.bench.bench_search [--messages 50000] [--queries 120]

Signs up, then fills the page's local database (in Pyodide, one transaction of the store, so the search
index is kept as for synced rows) with ``--messages``
messages of varied words in chats of 100, and measures, per query typed:

- search -> painted: the page's search action (the query, the results' HTML, the list morphed)
  until the next frame has been painted; p50 and p95;
- the FTS5 query alone (``LocalStore.search``, in Python), p50 and p95;
- beside them, the baseline: what a search without an index does, ``LIKE '%word%'`` over the same
  messages (newest first, 30 rows), in the same run; the ratios say how much the index buys.

Queries mix common and rare words, two-letter prefixes (typed so far), two words, and Cyrillic.
Target (issue 12): search p95 <= 50 ms at 50,000 messages.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

from tests.e2e.conftest import playwright_config
from tests.e2e.pages import open_app, sign
from tests.processes import Server

FILL = """
import random, time
from datetime import datetime, timedelta, timezone
from shared.ids import Uuid7Generator
from shared.models import format_time
import os, itertools
store = chat_client.store
rng = random.Random(7)
words = [w for w in VOCABULARY.split()]
weights = [1 / (i + 1) for i in range(len(words))]  # Zipf-like: a few common words, many rare
new_id = Uuid7Generator(itertools.count(1_700_000_000_000).__next__, os.urandom)
start = datetime(2026, 1, 1, tzinfo=timezone.utc)
began = time.perf_counter()
chat = None
with store._transaction() as conn:  # (the index is brought up to date before it commits)
    for n in range(COUNT):
        at = format_time(start + timedelta(seconds=n * 30))
        if n % 100 == 0:
            chat = new_id()
            conn.execute("INSERT INTO chats (id, title, created_at, updated_at, last_seq) VALUES (?, ?, ?, ?, 1)", (chat, " ".join(rng.choices(words, weights, k=4)), at, at))
        text = " ".join(rng.choices(words, weights, k=rng.randint(8, 60)))
        conn.execute("INSERT INTO messages (id, chat_id, role, content, parent_id, status, assistant_id, run_id, created_at, updated_at, last_seq, attachments_json) VALUES (?, ?, ?, ?, NULL, 'completed', NULL, NULL, ?, ?, 1, NULL)",
                     (new_id(), chat, "user" if n % 2 == 0 else "assistant", text, at, at))
filled = time.perf_counter() - began
"""

TIME_QUERY = """
import time
began = time.perf_counter()
found = len(chat_client.store.search(QUERY))
fts_ms = (time.perf_counter() - began) * 1000
words = [w for w in QUERY.split()]
began = time.perf_counter()
like = " AND ".join("content LIKE ?" for _ in words)
chat_client.store.conn.execute(
    f"SELECT id FROM messages WHERE {like} ORDER BY created_at DESC LIMIT 30", [f"%{w}%" for w in words]
).fetchall()
like_ms = (time.perf_counter() - began) * 1000
"""

SEARCH_PAINTED = """async (text) => {
  const started = performance.now();
  const pending = globalThis.chatDispatch("search", JSON.stringify({ text }));
  await pending;
  pending.destroy();
  await new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve)));
  return performance.now() - started;
}"""


def vocabulary(size: int) -> list[str]:
    rng = random.Random(3)
    syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "de", "po", "ar", "en", "ix", "ul", "om"]
    common = "the a of to and in is it you that for on with as this be are not what how can"
    made = {"".join(rng.choices(syllables, k=rng.randint(2, 4))) for _ in range(size * 2)}
    cyrillic = "привет мир поиск сообщение ответ вопрос книга"
    return common.split() + sorted(made)[:size] + cyrillic.split()


def queries(words: list[str], count: int) -> list[str]:
    rng = random.Random(11)
    kinds = [
        lambda: rng.choice(words[:5]),  # a very common word
        lambda: rng.choice(words[20:200]),  # a frequent one
        lambda: rng.choice(words[1000:]),  # a rare one
        lambda: rng.choice(words[20:])[:2],  # two letters typed so far
        lambda: f"{rng.choice(words[20:300])} {rng.choice(words[20:300])[:3]}",  # two words, the second being typed
        lambda: rng.choice(["привет", "поис", "ответ вопрос"]),
    ]
    return [kinds[i % len(kinds)]() for i in range(count)]


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--queries", type=int, default=120)
    args = parser.parse_args()
    words = vocabulary(3000)
    data = Path(tempfile.mkdtemp())
    server = Server(f"sqlite:///{data / 'chat.db'}", data / "server.log")
    server.start()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(**playwright_config.LAUNCH_ARGS)  # type: ignore[arg-type]
            page = browser.new_context(base_url=server.url, viewport={"width": 1280, "height": 800}).new_page()
            open_app(page)
            sign(page, "bench", "a long password", signup=True)
            filled = page.evaluate(
                """([code, vocabulary, count]) => {
                  const py = globalThis.pyodide;
                  py.globals.set("VOCABULARY", vocabulary);
                  py.globals.set("COUNT", count);
                  py.runPython(code);
                  return py.globals.get("filled");
                }""",
                [FILL, " ".join(words), args.messages],
            )
            print(f"filled {args.messages:,} messages in {filled:.1f} s (the search index kept in the same transaction)")
            painted, fts, like = [], [], []
            for query in queries(words, args.queries):
                painted.append(page.evaluate(SEARCH_PAINTED, query))
                fts_ms, like_ms = page.evaluate(
                    """([code, query]) => {
                      const py = globalThis.pyodide;
                      py.globals.set("QUERY", query);
                      py.runPython(code);
                      return [py.globals.get("fts_ms"), py.globals.get("like_ms")];
                    }""",
                    [TIME_QUERY, query],
                )
                fts.append(fts_ms)
                like.append(like_ms)
            browser.close()
    finally:
        server.stop()
    print(f"{args.queries} queries over {args.messages:,} messages (ms)      p50      p95")
    for name, values in (("search -> painted", painted), ("FTS5 query (Python)", fts), ("baseline: LIKE scan", like)):
        print(f"  {name:<40} {statistics.median(values):8.1f} {percentile(values, 0.95):8.1f}")
    print(f"  ratio, p95: painted / LIKE scan = {percentile(painted, 0.95) / percentile(like, 0.95):.2f}, "
          f"FTS5 / LIKE scan = {percentile(fts, 0.95) / percentile(like, 0.95):.2f}")  # fmt: skip
    print(f"target: search -> painted p95 <= 50 ms: {'met' if percentile(painted, 0.95) <= 50 else 'NOT met'}")


if __name__ == "__main__":
    main()
