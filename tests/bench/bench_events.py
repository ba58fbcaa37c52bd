"""Benchmark: events/s through POST /sync/events at concurrency 16, on PostgreSQL or SQLite.

Run on demand:  .venv/bin/python -m tests.bench.bench_events [--database sqlite] [--seconds 5] [--rounds 3]
The load comes from wrk (Debian's package; installed if missing), a process of its own.

PostgreSQL (the default), printed beside two ceilings measured in the same run on the same
machine and database:
  * the same app's trivial JSON POST route (what Quart on Hypercorn does here at all), and
  * raw asyncpg single-row INSERT commits at the same concurrency.
Targets: single-event >= 0.5 x the trivial route; batched events/s >= 1.0 x raw commits.
Each of the 16 connections writes to its own account (one user per device), as in real use.

SQLite (``--database sqlite``): one account, 16 of its devices each appending single events
(one event per POST /sync/events) while 4 more poll GET /sync/updates from their cursor, all at
once and with no pause. The same wrk client drives, in turns, round after round:
  * the app (``tests/bench/echo_server.py`` on a SQLite file), and
  * the baseline, a naive implementation of the same protocol on SQLite: one connection used
    from the event loop under one lock, no grouping, no validation
    (``tests/bench/naive_sqlite_server.py``), the ceiling of one process here;
  * and the app's trivial JSON POST route, 16 writers, for comparison with PostgreSQL's figure.
Printed: events/s, polls/s and the server's CPU per event (from /proc), each beside the
baseline's. Target: single events >= 0.5 x the baseline, with the pollers running.
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


def wrk_run(wrk: str, url: str, script: str, connections: int, seconds: int, report: str) -> re.Match[str]:
    """Runs wrk with this Lua script; the match of ``report`` in its output (it must succeed)."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(script)
    try:
        done = subprocess.run(
            [wrk, f"-t{connections}", f"-c{connections}", f"-d{seconds}s", "-s", f.name, url],
            capture_output=True,
            text=True,
            timeout=seconds + 60,
        )
    finally:
        os.unlink(f.name)
    match = re.search(report, done.stdout)
    if done.returncode != 0 or match is None or "Non-2xx" in done.stdout or "error" in done.stderr.lower():
        raise RuntimeError(f"wrk failed:\n{done.stdout}\n{done.stderr}")
    return match


def run_wrk(wrk: str, url: str, tokens: list[str], path: str, batch: int, seconds: int) -> float:
    """Requests per second, as wrk measured them."""
    script = LUA % {"tokens": ", ".join(f'"{t}"' for t in tokens), "batch": batch, "path": path}
    return float(wrk_run(wrk, url, script, CONCURRENCY, seconds, r"Requests/sec:\s+([\d.]+)").group(1))


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

# SQLite: the first ``writers`` connections each append one event per request, the others poll
# /sync/updates from their cursor; every eventId and chat id is unique (thread, round, counter).
MIXED_LUA = r"""
local tokens = {%(tokens)s}
local writers = %(writers)d
local round = %(round)d
local head = %(head)d
local counter = 0
local threads = {}

function setup(thread)
  counter = counter + 1
  thread:set("id", counter)
  thread:set("token", tokens[counter])
  table.insert(threads, thread)
end

function init(args)
  writes, polls, received, after, n = 0, 0, 0, head, 0
  writer = id <= writers
end

function request()
  if writer then
    n = n + 1
    local event = string.format("%%08x-%%04x-4000-8000-%%012x", id, round, n)
    local chat = string.format("%%08x-%%04x-4000-9000-%%012x", id, round, n)
    local body = '{"events":[{"eventId":"' .. event .. '","type":"ChatCreated","createdAt":"2026-11-30T12:00:00.000Z",'
      .. '"payload":{"id":"' .. chat .. '","title":"bench","createdAt":"2026-11-30T12:00:00.000Z"}}]}'
    return wrk.format("POST", "/sync/events", {["Content-Type"] = "application/json",
                                               ["Authorization"] = "Bearer " .. token}, body)
  end
  return wrk.format("GET", "/sync/updates?limit=1000&afterSeq=" .. after, {["Authorization"] = "Bearer " .. token})
end

function response(status, headers, body)
  if status ~= 200 then
    error("HTTP " .. status .. ": " .. body)
  end
  if writer then
    writes = writes + 1
    return
  end
  polls = polls + 1
  local last = after
  for seq in body:gmatch('"seq":%%s*(%%d+)') do
    received = received + 1
    last = tonumber(seq)
  end
  if body:find('"hasMore":%%s*true') then
    after = last
  else
    after = tonumber(body:match('"currentSeq":%%s*(%%d+)'))
  end
end

function done(summary, latency, requests)
  local w, p, r = 0, 0, 0
  for _, thread in ipairs(threads) do
    w, p, r = w + thread:get("writes"), p + thread:get("polls"), r + thread:get("received")
  end
  io.write(string.format("BENCH %%d %%d %%d %%f\n", w, p, r, summary.duration / 1e6))
end
"""
WRITERS, POLLERS = 16, 4


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_mixed(wrk: str, url: str, tokens: list[str], writers: int, round_no: int, seconds: int, pid: int) -> dict[str, float]:
    """Writers' events/s, pollers' polls/s, and the server's CPU seconds per event."""
    script = MIXED_LUA % {
        "tokens": ", ".join(f'"{t}"' for t in tokens),
        "writers": writers,
        "round": round_no,
        "head": current_seq(url, tokens[0]),  # the pollers start from there
    }
    cpu = cpu_seconds(pid)
    match = wrk_run(wrk, url, script, len(tokens), seconds, r"BENCH (\d+) (\d+) (\d+) ([\d.]+)")
    cpu = cpu_seconds(pid) - cpu
    writes, polls, received, elapsed = (float(g) for g in match.groups())
    return {
        "events": writes / elapsed,
        "polls": polls / elapsed,
        "received": received / elapsed,
        "cpu_ms": 1000 * cpu / max(writes, 1),
    }


def current_seq(base: str, token: str) -> int:
    request = urllib.request.Request(
        base + f"/sync/updates?limit=1&afterSeq={2**53 - 1}", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request) as response:
        return int(json.loads(response.read())["currentSeq"])


def start(module: str, port: int, target: str) -> subprocess.Popen[bytes]:
    server = subprocess.Popen(
        [sys.executable, "-m", module, str(port), target],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return server
        except OSError:
            time.sleep(0.1)
    server.terminate()
    raise RuntimeError(f"{module} did not start")


def sessions(base: str, name: str, count: int) -> list[str]:
    """``count`` sessions (devices) of one new account."""
    tokens = [signup(base, name)]
    body = json.dumps({"username": name, "password": "benchmark password"}).encode()
    for _ in range(count - 1):
        request = urllib.request.Request(base + "/auth/login", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request) as response:
            tokens.append(json.loads(response.read())["token"])
    return tokens


def sqlite_main(args: argparse.Namespace) -> None:
    wrk = ensure_wrk()
    writers, pollers = WRITERS, args.pollers
    with tempfile.TemporaryDirectory() as folder:
        app_port, naive_port = free_port(), free_port()
        app = start("tests.bench.echo_server", app_port, f"sqlite:///{folder}/app.db")
        naive = start("tests.bench.naive_sqlite_server", naive_port, f"{folder}/naive.db")
        servers = {"app": (f"http://127.0.0.1:{app_port}", app), "naive": (f"http://127.0.0.1:{naive_port}", naive)}
        results: dict[str, list[dict[str, float]]] = {"naive": [], "app": []}
        trivial: list[float] = []
        try:
            tokens = {name: sessions(base, "bench", writers + pollers) for name, (base, _) in servers.items()}
            # Each takes its turn in every round, so that a slow spell of a shared machine does
            # not fall on one of them only.
            for round_no in range(args.rounds):
                for name in ("naive", "app"):
                    base, process = servers[name]
                    results[name].append(
                        run_mixed(wrk, base, tokens[name], writers, round_no, args.seconds, process.pid)
                    )
                trivial.append(run_wrk(wrk, servers["app"][0], tokens["app"][:writers], "/bench/echo", 1, args.seconds))
        finally:
            for _, process in servers.values():
                process.terminate()
                process.wait()

    def median(name: str, key: str) -> float:
        return statistics.median(r[key] for r in results[name])

    naive_events, app_events = median("naive", "events"), median("app", "events")
    print(
        f"SQLite, one account: {writers} devices appending single events, {pollers} polling /sync/updates;"
        f" {os.cpu_count()} CPUs, median of {args.rounds} rounds of {args.seconds} s"
    )
    print(f"  trivial JSON POST route ({writers} writers)  {statistics.median(trivial):8.0f} req/s")
    print(f"  {'':22}{'events/s':>10} {'polls/s':>9} {'events polled/s':>16} {'CPU/event':>10}")
    for name, label in (("naive", "naive one-lock SQLite"), ("app", "POST /sync/events")):
        print(
            f"  {label:22}{median(name, 'events'):10.0f} {median(name, 'polls'):9.0f}"
            f" {median(name, 'received'):16.0f} {median(name, 'cpu_ms'):8.3f}ms"
        )
    print(
        f"  app / naive: events {app_events / naive_events:.2f} x (target >= 0.5),"
        f" CPU per event {median('naive', 'cpu_ms') / median('app', 'cpu_ms'):.2f} x (naive's / app's);"
        f" app / trivial route {app_events / statistics.median(trivial):.2f} x"
    )
    print(
        "rounds: "
        + "; ".join(
            f"{name} " + ", ".join(f"{r['events']:.0f} ev/s {r['polls']:.0f} polls/s" for r in rs)
            for name, rs in results.items()
        )
        + "; trivial "
        + ", ".join(f"{t:.0f}" for t in trivial)
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=5, help="per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="each rate is the median of this many")
    parser.add_argument("--database", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--pollers", type=int, default=POLLERS, help="SQLite: devices polling /sync/updates")
    args = parser.parse_args()
    if args.database == "sqlite":
        sqlite_main(args)
        return
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
