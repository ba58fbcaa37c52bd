"""Benchmark: live fan-out latency and the memory of idle sockets, on one server process.

Run on demand:  .venv/bin/python -m tests.bench.bench_fanout [--sockets 1000] [--idle 10000]
The server runs in a process of its own (on PostgreSQL, in a fresh schema). The latency sockets
are held by a Node.js client (tests/bench/fanout_client.mjs, with the npm ``ws`` package installed
into build/), so the figures are the server's, not a slow client's; the idle sockets by this
process. Prints:
  * latency from the start of a POST /sync/events to each of --sockets sockets of that account
    (spread over 20 devices) receiving the event's frame: p50 / p99 over --events events
    (target: p99 <= 50 ms);
  * the server's resident memory with --idle idle sockets open (target: 10,000 within 1 GiB).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
from pathlib import Path

import httpx
import websockets

from server.config import ROOT
from tests.conftest import drop_schema, postgres_schema
from tests.processes import Server

DEVICES = 20
WS_VERSION = "8.23.0"


def ws_module() -> str:
    """The npm ``ws`` package for the Node.js client, installed once into build/ (git-ignored)."""
    prefix = ROOT / "build" / "bench"
    module = prefix / "node_modules" / "ws"
    if not module.exists():
        subprocess.run(["npm", "install", "--silent", "--prefix", str(prefix), f"ws@{WS_VERSION}"], check=True)
    return str(module)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def open_sockets(url: str, tokens: list[str], count: int) -> list[websockets.ClientConnection]:
    sockets: list[websockets.ClientConnection] = []
    for start in range(0, count, 200):
        batch = [
            websockets.connect(url, additional_headers={"Authorization": f"Bearer {tokens[i % len(tokens)]}"},
                               open_timeout=60, ping_interval=None, max_queue=None)
            for i in range(start, min(count, start + 200))
        ]
        sockets += await asyncio.gather(*batch)
    for socket in sockets:  # past the backlog
        while json.loads(await socket.recv())["type"] != "caughtUp":
            pass
    return sockets


async def measure(args: argparse.Namespace) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))  # the server inherits it
    schema, url = await postgres_schema()
    server = Server(url, Path(f"/tmp/bench-fanout-{schema}.log"), rate_limit_per_minute="0",
                    auth_rate_limit_per_minute="0")
    await asyncio.to_thread(server.start)
    assert server.process is not None
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
            await http.post("/auth/signup", json={"username": "fan", "password": "long enough password"})
            tokens = []
            for i in range(DEVICES):
                login = await http.post(
                    "/auth/login", json={"username": "fan", "password": "long enough password", "deviceName": f"d{i}"}
                )
                tokens.append(login.json()["token"])
            ws_url = server.url.replace("http://", "ws://") + "/sync/live?afterSeq=0"

            # 1. Fan-out latency, with the sockets held by a Node.js process.
            done = await asyncio.to_thread(
                subprocess.run,
                ["node", str(Path(__file__).with_name("fanout_client.mjs")), server.url, json.dumps(tokens),
                 str(args.sockets), str(args.events)],
                capture_output=True, text=True, timeout=600, env={**os.environ, "WS_MODULE_DIR": ws_module()},
            )
            if done.returncode != 0:
                raise RuntimeError(done.stderr)
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            p50, p99 = figures["p50"], figures["p99"]

            # 2. Memory of idle sockets.
            await asyncio.sleep(1)
            before = rss_mib(server.process.pid)
            idle = await open_sockets(ws_url, tokens, args.idle)
            await asyncio.sleep(2)
            after = rss_mib(server.process.pid)
            for socket in idle:
                await socket.close()
    finally:
        server.stop()
        await drop_schema(schema)

    print(f"one server process on PostgreSQL; sockets spread over {DEVICES} devices of one account")
    print(f"  fan-out to {args.sockets} sockets, {args.events} events: p50 {p50:.1f} ms, p99 {p99:.1f} ms"
          f" (target p99 <= 50 ms)")
    print(f"  {args.idle} idle sockets: server RSS {before:.0f} MiB -> {after:.0f} MiB"
          f" ({(after - before) * 1024 / args.idle:.1f} KiB per socket; target: within 1024 MiB)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sockets", type=int, default=1000)
    parser.add_argument("--events", type=int, default=30)
    parser.add_argument("--idle", type=int, default=10_000)
    asyncio.run(measure(parser.parse_args()))


if __name__ == "__main__":
    main()
