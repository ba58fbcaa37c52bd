"""Benchmark: what one assistant answer costs in the log, against its text.

Run on demand:  .venv/bin/python -m tests.bench.bench_answer_log [--tokens 2000] [--database sqlite|postgres]
Runs the server in-process (Quart's test app on a fresh database) with a fake OpenAI-compatible
upstream that streams an answer of ``--tokens`` words at 30 tokens a second, time scaled by
``--speedup`` (the checkpoints' floor of a second scaled with it, so the figures are those of the
real pace; the pace as run is printed). Each answer is measured twice in the same run: with the rule before issue 13 (a
checkpoint of the full text every second, ``CheckpointPlan(ratio=None)``) and with the plan
(server/runs.py). Prints, for each: the answer's events and log bytes (its request and every edit
of its reply, as /sync/updates returns them) over its text's UTF-8 bytes, and what a crash
(SIGKILL) would lose: all before the first checkpoint, and then at worst, just before a
checkpoint, the text streamed since the one before.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from server.app import create_app
from server.config import Settings
from tests.conftest import drop_schema, postgres_schema
from tests.fake_upstream import FakeUpstream

SENTENCE = (
    "The answer to your question depends on how the data is stored, so let us look at the "
    'schema first: each row has an "id", a timestamp and the text.'
).split()


def answer(tokens: int) -> str:
    words = [SENTENCE[i % len(SENTENCE)] for i in range(tokens)]
    return "".join(("" if i == 0 else "\n\n" if i % 60 == 0 else " ") + w for i, w in enumerate(words))


async def one_answer(url: str, upstream: FakeUpstream, speedup: float, ratio: float | None) -> dict[str, Any]:
    app = create_app(Settings(database_url=url, assistants=upstream.config(), run_poll_seconds=0.05))
    async with app.test_app():
        worker = app.extensions["runs"]
        worker.checkpoint_seconds = 1.0 / speedup
        worker.checkpoint_ratio = ratio
        client = app.test_client(use_cookies=False)
        user = f"bench{uuid.uuid4().hex[:8]}"
        session = await (await client.post("/auth/signup", json={"username": user, "password": "long enough"})).get_json()
        headers = {"Authorization": f"Bearer {session['token']}"}
        chat, question, reply, run = (str(uuid.uuid4()) for _ in range(4))
        at = "2026-12-01T12:00:00.000Z"
        events = [
            {"eventId": str(uuid.uuid4()), "type": "ChatCreated", "payload": {"id": chat, "title": "Bench", "createdAt": at}, "createdAt": at},
            {"eventId": str(uuid.uuid4()), "type": "MessageAppended", "createdAt": at, "payload": {
                "id": question, "chatId": chat, "role": "user", "content": "Tell me", "createdAt": at}},
            {"eventId": str(uuid.uuid4()), "type": "AssistantRunRequested", "createdAt": at, "payload": {
                "runId": run, "chatId": chat, "parentId": question, "messageId": reply, "assistantId": "fake"}},
        ]  # fmt: skip
        assert (await client.post("/sync/events", json={"events": events}, headers=headers)).status_code == 200
        started = time.perf_counter()
        while True:
            body = await (await client.get("/sync/updates?afterSeq=0&limit=1000", headers=headers)).get_json()
            edits = [e for e in body["events"] if e["type"] == "MessageEdited" and e["payload"]["id"] == reply]
            if edits and edits[-1]["payload"]["status"] not in ("queued", "streaming"):
                break
            await asyncio.sleep(0.05)
    seconds = (time.perf_counter() - started) * speedup  # at the real pace
    request = [e for e in body["events"] if e["type"] == "AssistantRunRequested"]
    final = edits[-1]["payload"]["content"]
    text_bytes = len(final.encode())
    log_bytes = sum(len(json.dumps(e).encode()) for e in request + edits)
    sizes = [len(e["payload"]["content"].encode()) for e in edits]
    checkpoints = [size for size in sizes[1:-1] if size]
    first = checkpoints[0] if checkpoints else text_bytes
    lost = max(((b - a, b) for a, b in zip(checkpoints, checkpoints[1:] + sizes[-1:])), default=(text_bytes, text_bytes))
    return {
        "status": edits[-1]["payload"]["status"], "events": len(request + edits), "log": log_bytes,
        "text": text_bytes, "ratio": log_bytes / text_bytes, "first": first, "lost": lost, "seconds": seconds,
    }  # fmt: skip


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--speedup", type=float, default=1.0, help="time runs this many times faster (default 1: about 70 s an answer)")
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    args = parser.parse_args(argv)
    upstream = FakeUpstream(delay=1 / (30 * args.speedup), text=answer(args.tokens))
    server = await upstream.start()
    print(f"one answer of {args.tokens} tokens at 30 tokens/s (time x{args.speedup:g}), {args.database}")
    results = {}
    try:
        for name, ratio in (("baseline: a checkpoint every second", None), ("plan: within 3x its text", 3.0)):
            with tempfile.TemporaryDirectory() as tmp:
                schema = None
                if args.database == "postgres":
                    schema, url = await postgres_schema()
                else:
                    url = f"sqlite:///{Path(tmp) / 'bench.db'}"
                try:
                    results[name] = r = await one_answer(url, upstream, args.speedup, ratio)
                finally:
                    if schema is not None:
                        await drop_schema(schema)
            print(
                f"{name:38} {r['events']:4} events {r['log'] / 1024:8.1f} KB of log for {r['text'] / 1024:5.1f} KB"
                f" of text: {r['ratio']:5.2f}x  ({r['status']}, {args.tokens / r['seconds']:.0f} tokens/s as run)"
            )
            print(
                f"{'':38} a crash loses the text before the first checkpoint ({r['first'] / 1024:.1f} KB),"
                f" then at most {r['lost'][0] / 1024:.1f} KB ({r['lost'][0] / r['lost'][1]:.0%} of the text streamed by then)"
            )
    finally:
        server.close()
    baseline, plan = results.values()
    print(f"log bytes per answer: plan / baseline = {plan['log'] / baseline['log']:.3f}")


if __name__ == "__main__":
    asyncio.run(main())
