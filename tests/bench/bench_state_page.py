"""Benchmark: one 5,000-row page of ``GET /sync/state`` read and stored by the client, the models'
path beside the rows' (webapp/state_page.py), in one process, under CPython and under Pyodide
(in Node.js, the vendored Pyodide and wheels the browser gets: tests/shared/pyodide_run.mjs).

Run on demand:  .venv/bin/python -m tests.bench.bench_state_page [--rows 5000] [--reps 7] [--only cpython pyodide]

- *models*: ``StateResponse.model_validate_json`` of the page's bytes (as webapp/browser.py did),
  then each row's tuple taken from its model (``attrgetter``, as webapp/snapshots.py did);
- *rows*: ``read_state_page`` of the same bytes (tuples straight from pydantic-core's dicts);
- *store*: those rows into a new device's database in one transaction (webapp/snapshots.py
  ``_store``, the search index's bookkeeping and the commit), a fresh database each time, while
  what the parse made is alive (as in webapp/sync.py).

The heap is frozen once the page is made (``gc.freeze()``, as the browser's page does once
started), and the cyclic garbage collector runs as it does there: a path that makes more
objects pays for the collector's passes over them.

Each figure is the median over ``--reps`` rounds, the two paths taking turns, and the least (on a
busy machine, the nearer to what the work itself costs). The page is what the
server sends at 50,000 messages (tests/bench/browser_sync.py: ``export_file``'s messages,
~200 characters each), serialized by the server's own model.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

from server.assets import python_bundle
from server.config import ROOT

VENDOR = ROOT / "static" / "vendor"

SCRIPT = """
import gc, os, statistics, tempfile, time
from operator import attrgetter
from shared.models import StateResponse, Snapshot, Message
from shared.schema import TABLES
from webapp.database import FilePersistence
from webapp.snapshots import _store
from webapp.state_page import read_state_page, snapshot_rows
from webapp.store import LocalStore

def make_page(rows):
    import uuid
    words = "the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches".split()
    t0 = 1_764_590_400_000
    def at(ms):
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"
    def uid(ms, n):
        return str(uuid.UUID(int=(ms << 80) | (0x7 << 76) | (0x8 << 60) | n))
    chats = [uid(t0 + c, c) for c in range(100)]
    messages, last = [], {}
    for m in range(rows):
        chat = chats[m % len(chats)]
        ms = t0 + 10_000 + m * 10
        text = " ".join(words[(m + k) % len(words)] for k in range(36))[:200]
        messages.append(Message(id=uid(ms, 1_000_000 + m), chat_id=chat, role="user" if m % 2 == 0 else "assistant",
                                content=f"{m}: {text}", parent_id=last.get(chat), created_at=at(ms), updated_at=at(ms),
                                last_seq=rows - m))
        last[chat] = messages[-1].id
    page = StateResponse(snapshot=Snapshot(chats=[], messages=messages[::-1]), up_to_seq=rows, current_seq=rows, next_page="next")
    return page.model_dump_json(by_alias=True).encode()

def store_rows(rows):
    directory = tempfile.mkdtemp()
    store = LocalStore(os.path.join(directory, "bench.db"), FilePersistence())
    start = time.perf_counter()
    with store._transaction(defer_index=True) as conn:
        _store(conn, rows, fresh=True)
    took = time.perf_counter() - start
    count = store.conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    store.close()
    return took, count

def bench(rows, reps):
    body = make_page(rows)
    gc.collect()
    gc.freeze()  # (as the page does once started: webapp/app.py, freeze_heap)
    times = {k: [] for k in ("models parse", "models to rows", "models store", "rows parse", "rows store")}
    for rep in range(reps):
        for path in (("models", "rows") if rep % 2 == 0 else ("rows", "models")):
            start = time.perf_counter()
            if path == "models":
                page = StateResponse.model_validate_json(body)
                parsed = time.perf_counter()
                values = snapshot_rows(page.snapshot)
                times["models to rows"].append(time.perf_counter() - parsed)
            else:
                values = read_state_page(body).rows
                parsed = time.perf_counter()
            times[f"{path} parse"].append(parsed - start)
            took, count = store_rows(values)
            assert count == rows, count
            times[f"{path} store"].append(took)
    assert snapshot_rows(StateResponse.model_validate_json(body).snapshot) == read_state_page(body).rows
    return {
        "bytes": len(body),
        **{k: statistics.median(v) * 1000 for k, v in times.items()},
        **{f"{k} min": min(v) * 1000 for k, v in times.items()},
    }
"""


def run_cpython(rows: int, reps: int) -> dict[str, float]:
    namespace: dict[str, object] = {}
    exec(SCRIPT, namespace)
    return namespace["bench"](rows, reps)  # type: ignore[operator,no-any-return]


def run_pyodide(rows: int, reps: int) -> tuple[dict[str, float], str]:
    with tempfile.TemporaryDirectory() as directory:
        bundle, script = Path(directory) / "bundle.zip", Path(directory) / "script.py"
        bundle.write_bytes(python_bundle())
        script.write_text(SCRIPT + f"\nresult = bench({rows}, {reps})\n")
        done = subprocess.run(
            ["node", str(ROOT / "tests" / "shared" / "pyodide_run.mjs"), str(VENDOR), str(bundle), str(script)],
            capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        out = json.loads(done.stdout.strip().splitlines()[-1])
        return out["result"], out["version"]


def show(label: str, figures: dict[str, float]) -> None:
    for which in ("median", "min"):
        f = {k.removesuffix(" min"): v for k, v in figures.items() if k.endswith(" min") == (which == "min")}
        models = f["models parse"] + f["models to rows"] + f["models store"]
        rows = f["rows parse"] + f["rows store"]
        print(
            f"  {label}, {which:>6}: models: parse {f['models parse']:6.1f} + to rows {f['models to rows']:5.1f}"
            f" + store {f['models store']:6.1f} = {models:6.1f} ms | rows: parse {f['rows parse']:6.1f}"
            f" + store {f['rows store']:6.1f} = {rows:6.1f} ms",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--only", nargs="+", choices=("cpython", "pyodide"), default=["cpython", "pyodide"])
    args = parser.parse_args()
    loadavg = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    print(f"{time.strftime('%Y-%m-%d %H:%M')}: a {args.rows:,}-row /sync/state page, median of {args.reps} (load {' '.join(loadavg)})")
    if "cpython" in args.only:
        show("CPython", run_cpython(args.rows, args.reps))
    if "pyodide" in args.only:
        figures, version = run_pyodide(args.rows, args.reps)
        show(f"Pyodide (Node.js, Python {version.split()[0]})", figures)


if __name__ == "__main__":
    main()
