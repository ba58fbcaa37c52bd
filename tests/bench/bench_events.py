"""Benchmark: events/s through POST /sync/events on PostgreSQL at concurrency 16.

Run on demand:  .venv/bin/python -m tests.bench.bench_events [--seconds 5] [--rounds 3]
The load comes from wrk (Debian's package; installed if missing), a process of its own. Printed
beside two ceilings measured in the same run on the same machine and database:
  * the same app's trivial JSON POST route (what Quart on Hypercorn does here at all), and
  * raw asyncpg single-row INSERT commits at the same concurrency.
Targets: single-event >= 0.5 x the trivial route; batched events/s >= 1.0 x raw commits.
Each of the 16 connections writes to its own account (one user per device), as in real use.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import asyncpg

from server.config import ROOT
from tests.conftest import drop_schema, postgres_schema
from tests.processes import free_port

CONCURRENCY = 16

LUA = r"""
local tokens = {%(tokens)s}
local counter = 0
local batch = %(batch)d
local path = "%(path)s"

function setup(thread)
  counter = counter + 1
  thread:set("token", tokens[counter])
end

local function uuid()
  return (string.gsub("xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx", "[xy]", function(c)
    local v = (c == "x") and math.random(0, 15) or math.random(8, 11)
    return string.format("%%x", v)
  end))
end

function request()
  local events = {}
  for i = 1, batch do
    local chat = uuid()
    events[i] = '{"eventId":"' .. uuid() .. '","type":"ChatCreated","createdAt":"2026-11-30T12:00:00.000Z",'
      .. '"payload":{"id":"' .. chat .. '","title":"bench","createdAt":"2026-11-30T12:00:00.000Z"}}'
  end
  local body = '{"events":[' .. table.concat(events, ",") .. ']}'
  return wrk.format("POST", path, {["Content-Type"] = "application/json",
                                   ["Authorization"] = "Bearer " .. token}, body)
end

function response(status, headers, body)
  if status ~= 200 then
    error("HTTP " .. status .. ": " .. body)
  end
end
"""


def ensure_wrk() -> str:
    found = shutil.which("wrk")
    if found:
        return found
    subprocess.run(["apt-get", "install", "-y", "-qq", "wrk"], check=True, stdout=subprocess.DEVNULL)
    return shutil.which("wrk") or "wrk"


def run_wrk(wrk: str, url: str, tokens: list[str], path: str, batch: int, seconds: int) -> float:
    """Requests per second, as wrk measured them."""
    script = LUA % {"tokens": ", ".join(f'"{t}"' for t in tokens), "batch": batch, "path": path}
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(script)
    try:
        done = subprocess.run(
            [wrk, f"-t{CONCURRENCY}", f"-c{CONCURRENCY}", f"-d{seconds}s", "-s", f.name, url],
            capture_output=True,
            text=True,
            timeout=seconds + 60,
        )
    finally:
        os.unlink(f.name)
    match = re.search(r"Requests/sec:\s+([\d.]+)", done.stdout)
    if done.returncode != 0 or match is None or "Non-2xx" in done.stdout or "error" in done.stderr.lower():
        raise RuntimeError(f"wrk failed:\n{done.stdout}\n{done.stderr}")
    return float(match.group(1))


async def raw_commit_rate(url: str, seconds: float) -> float:
    """Single-row INSERT commits per second from CONCURRENCY asyncpg connections."""
    conns = [await asyncpg.connect(url) for _ in range(CONCURRENCY)]
    await conns[0].execute("CREATE TABLE IF NOT EXISTS raw_inserts (id BIGSERIAL PRIMARY KEY, body TEXT NOT NULL)")
    count = 0
    deadline = time.monotonic() + seconds

    async def loop(conn: asyncpg.Connection) -> None:
        nonlocal count
        while time.monotonic() < deadline:
            await conn.execute("INSERT INTO raw_inserts (body) VALUES ($1)", "x" * 200)
            count += 1

    start = time.monotonic()
    await asyncio.gather(*(loop(c) for c in conns))
    elapsed = time.monotonic() - start
    for conn in conns:
        await conn.close()
    return count / elapsed


def signup(base: str, name: str) -> str:
    body = json.dumps({"username": name, "password": "benchmark password"}).encode()
    request = urllib.request.Request(base + "/auth/signup", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request) as response:
        token: str = json.loads(response.read())["token"]
        return token


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=5, help="per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="each rate is the median of this many")
    args = parser.parse_args()
    wrk = ensure_wrk()
    schema, url = asyncio.run(postgres_schema())
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.bench.echo_server", str(port), url],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # The four measurements take turns, round after round, so that a slow spell of a shared
    # machine does not fall on one of them only.
    rates: dict[str, list[float]] = {"trivial": [], "single": [], "batched": [], "raw": []}
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(base + "/healthz", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        tokens = [signup(base, f"bench{i}") for i in range(CONCURRENCY)]
        for _ in range(args.rounds):
            rates["trivial"].append(run_wrk(wrk, base, tokens, "/bench/echo", 1, args.seconds))
            rates["single"].append(run_wrk(wrk, base, tokens, "/sync/events", 1, args.seconds))
            rates["batched"].append(run_wrk(wrk, base, tokens, "/sync/events", 100, args.seconds) * 100)
            rates["raw"].append(asyncio.run(raw_commit_rate(url, args.seconds)))
    finally:
        server.terminate()
        server.wait()
    asyncio.run(drop_schema(schema))
    trivial, single, batched, raw = (statistics.median(rates[k]) for k in ("trivial", "single", "batched", "raw"))

    print(f"PostgreSQL, concurrency {CONCURRENCY}, {os.cpu_count()} CPUs, median of {args.rounds} rounds of {args.seconds} s")
    print(f"  trivial JSON POST route     {trivial:10.0f} req/s   (ceiling 1)")
    print(f"  raw asyncpg INSERT commits  {raw:10.0f} rows/s  (ceiling 2)")
    print(f"  POST /sync/events, 1 event  {single:10.0f} events/s  = {single / trivial:.2f} x trivial route (target >= 0.5)")
    print(f"  POST /sync/events, 100      {batched:10.0f} events/s  = {batched / raw:.2f} x raw commits (target >= 1.0)")
    print("rounds: " + "; ".join(f"{k} {', '.join(f'{v:.0f}' for v in vs)}" for k, vs in rates.items()))


if __name__ == "__main__":
    main()
