"""Benchmark: what gzip costs and saves on /sync/state and /sync/updates pages, by level.

Run on demand:  .venv/bin/python -m tests.bench.bench_compression [--rows 500] [--repeat 20]

Builds the JSON of a full page as the server sends it (a /sync/state page of ``--rows`` messages
over a few chats, and a /sync/updates page of as many MessageAppended events, with varied English
words and ids as the app writes them), then times ``gzip.compress`` at levels 1, 6 (the default)
and 9 against ``json.dumps`` of the same page (the work the server does anyway), and prints
the compressed size as a share of the plain one. server/compression.py uses GZIP_LEVEL.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import statistics
import time
import uuid
from typing import Any

from server.compression import GZIP_LEVEL

WORDS = (
    "the of and to a in is you that it he was for on are as with his they I at be this have from or one had by "
    "word but not what all were we when your can said there use an each which she do how their if will up other "
    "about out many then them these so some her would make like him into time has look two more write go see "
    "number no way could people my than first water been call who oil its now find long down day did get come "
    "made may part python sqlite offline browser server event message chat answer model token cursor snapshot"
).split()


def text(rng: random.Random) -> str:
    return " ".join(rng.choices(WORDS, k=rng.randint(5, 80)))


def state_page(rows: int, rng: random.Random) -> dict[str, Any]:
    chats = [str(uuid.uuid4()) for _ in range(max(1, rows // 50))]
    messages = [
        {
            "id": str(uuid.uuid4()), "chatId": rng.choice(chats), "role": rng.choice(["user", "assistant"]),
            "content": text(rng), "parentId": None, "status": "completed", "deleted": False,
            "createdAt": "2026-11-30T12:00:00.000Z", "updatedAt": "2026-11-30T12:00:00.000Z", "lastSeq": n,
        }
        for n in range(rows)
    ]  # fmt: skip
    return {"snapshot": {"chats": [], "messages": messages}, "upToSeq": rows, "currentSeq": rows, "nextPage": "x" * 40}


def updates_page(rows: int, rng: random.Random) -> dict[str, Any]:
    events = [
        {
            "seq": n, "eventId": str(uuid.uuid4()), "type": "MessageAppended", "createdAt": "2026-11-30T12:00:00.000Z",
            "payload": {"id": str(uuid.uuid4()), "chatId": str(uuid.uuid4()), "role": "user", "content": text(rng),
                        "createdAt": "2026-11-30T12:00:00.000Z"},
        }
        for n in range(rows)
    ]  # fmt: skip
    return {"events": events, "hasMore": True, "currentSeq": rows}


def timed(work: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        work()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    rng = random.Random(13)
    for name, page in (("/sync/state", state_page(args.rows, rng)), ("/sync/updates", updates_page(args.rows, rng))):
        data = json.dumps(page).encode()
        dumps = timed(lambda: json.dumps(page), args.repeat)  # noqa: B023 (called at once)
        print(f"{name}: {args.rows} rows, {len(data) / 1e3:.0f} kB of JSON, json.dumps {dumps * 1e3:.2f} ms")
        for level in (1, 6, 9):
            seconds = timed(lambda: gzip.compress(data, compresslevel=level, mtime=0), args.repeat)  # noqa: B023 (called at once)
            size = len(gzip.compress(data, compresslevel=level, mtime=0))
            mark = "  <- GZIP_LEVEL" if level == GZIP_LEVEL else ""
            print(
                f"  gzip level {level}: {seconds * 1e3:6.2f} ms ({seconds / dumps:4.2f}x json.dumps,"
                f" {len(data) / seconds / 1e6:5.0f} MB/s), {size / 1e3:6.1f} kB = {size / len(data):.0%} of the JSON{mark}"
            )


if __name__ == "__main__":
    main()
