"""``python -m server chaos``: run the world, the workload and the nemesis, heal, read everything,
check, report (README.md, "Checking consistency"). ``--check FILE`` checks a saved history alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import logging
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from playwright.async_api import Playwright, async_playwright

from server.chaos.browsers import BrowserDevice, apps_own, drive_browser
from server.chaos.checker import COUNTS, Report, check
from server.chaos.devices import PASSWORD, EngineDevice, row_of
from server.chaos.history import History, load
from server.chaos.nemesis import Nemesis
from server.chaos.transport import HttpTransport
from server.chaos.workload import Workload, drive
from server.chaos.world import World
from shared.followups import queue_state
from shared.models import UNFINISHED, Message
from webapp.transport import NetworkError, ServerError

USERNAME = "chaos"
STILL_SECONDS = 60.0  # the log not moving this long after the heal, with something left: stuck


def main(args: argparse.Namespace) -> int:
    if args.check is not None:
        records = load(args.check)
        report = check(records)
        print(summary(records, report))
        return 1 if report.anomalies else 0
    return asyncio.run(run(args))


def summary(records: list[dict[str, Any]], report: Report) -> str:
    """The report: operations, faults by kind, anomalies per count (and the first findings)."""
    begin = next((r for r in records if r["op"] == "begin"), {})
    did = Counter(r["what"] for r in records if r["op"] == "did")
    faults = Counter(r["kind"] for r in records if r["op"] == "fault")
    lines = []
    if begin:
        lines.append(
            f"chaos: {begin.get('seconds')} s, seed {begin.get('seed')}, {begin.get('servers')} servers on {begin.get('database')},"
            f" {begin.get('devices')} devices, {begin.get('browsers')} browsers"
        )
    lines.append(f"operations: {sum(did.values())} ({', '.join(f'{k} {n}' for k, n in did.most_common())})")
    lines.append(f"faults: {sum(faults.values())} ({', '.join(f'{k} {n}' for k, n in faults.most_common())})")
    logged = [r["text"] for r in records if r["op"] == "console"]
    if logged:  # (in the history: the pages' errors, beside what was done when they came)
        own = apps_own(logged)
        lines.append(f"the pages logged {len(logged)} errors, {len(own)} of them the app's own; the first: {(own or logged)[0][:300]}")
    lines.append(f"anomalies: {report.anomalies} ({', '.join(f'{k} {report.counts[k]}' for k in COUNTS)})")
    lines.extend("  " + detail for detail in report.details[:50])
    return "\n".join(lines)


def dump_tasks() -> None:
    """Where every task of the run is waiting, on stderr (on SIGUSR1: the chaos minute's test
    sends it to a run that did not end in time, before it kills it)."""
    for task in asyncio.all_tasks():
        task.print_stack(limit=12, file=sys.stderr)


async def run(args: argparse.Namespace) -> int:
    seed = args.seed if args.seed is not None else random.randrange(10**6)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s", stream=sys.stderr)
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, dump_tasks)
    with tempfile.TemporaryDirectory(prefix="chaos-") as folder:
        directory = Path(folder)
        history = History(args.history)
        world = World(directory, history, args.servers, args.database_url)
        history.record(
            {"op": "begin", "seed": seed, "seconds": args.seconds, "servers": len(world.servers), "devices": args.devices,
             "browsers": args.browsers, "database": "PostgreSQL" if world.schema else "SQLite"}
        )  # fmt: skip
        devices: list[EngineDevice] = []
        browsers: list[BrowserDevice] = []
        playwright: Playwright | None = None
        try:
            await world.start()
            print(f"chaos: seed {seed}, {len(world.servers)} servers on {world.database_url.split('?')[0]}", file=sys.stderr)
            for i in range(args.devices):
                device = EngineDevice(f"d{i + 1}", directory, world.urls, history, random.Random(f"{seed}-d{i + 1}"), i)
                await device.sign_in(USERNAME, signup=i == 0)
                device.start()
                devices.append(device)
            if args.browsers:
                playwright = await async_playwright().start()
                for i in range(args.browsers):
                    url = world.urls[(args.devices + i) % len(world.urls)]
                    browser = BrowserDevice(f"b{i + 1}", directory, url, history, random.Random(f"{seed}-b{i + 1}"), playwright)
                    await browser.sign_in(USERNAME)
                    browsers.append(browser)

            async def browser_fault(rng: random.Random) -> str | None:
                browser, reload = rng.choice(browsers), rng.random() < 0.3
                await browser.kill_and_reopen(reload)
                return browser.name + (" (reloaded)" if reload else " (killed)")

            kinds = tuple(k for k in args.faults.split(",") if k)
            nemesis = Nemesis(world, devices, history, random.Random(f"{seed}-nemesis"), kinds, browser_fault if browsers else None)
            until = time.monotonic() + args.seconds
            workloads = [Workload(d, d.rng) for d in devices]
            jobs = [asyncio.ensure_future(drive(w, until, args.interval)) for w in workloads]
            jobs += [asyncio.ensure_future(drive_browser(b, until, args.interval * 4)) for b in browsers]
            jobs.append(asyncio.ensure_future(nemesis.run(until, args.faults_every)))
            await asyncio.gather(*jobs)
            history.record({"op": "heal"})
            await nemesis.heal()
            history.record({"op": "healed"})
            server = await settle(world, devices, browsers, history, args.heal_seconds)
            for device in devices:
                history.record(device.final())
            for browser in browsers:
                final = await browser.final()
                if final is not None:  # (else its "unresponsive" is recorded: stuck)
                    history.record(final)
            history.record(server)
            await read_blobs(world, server, history)
        finally:
            for browser in browsers:
                await browser.close()
            if playwright is not None:
                await playwright.stop()
            for device in devices:
                with contextlib.suppress(Exception):
                    await device.close()
            await world.stop()
        report = check(history.records)
        history.record({"op": "end", "counts": report.counts})
        history.close()
        print(summary(history.records, report))
        if args.history is not None:
            print(f"history: {args.history}")
        return 1 if report.anomalies else 0


async def read_server(reader: HttpTransport) -> tuple[dict[str, Any], int]:
    """The server's whole state now, page by page at one seq: (the final record, its seq)."""
    first = await reader.state_models(None, None, 5000)
    pages, page = [first], first
    while page.next_page is not None:
        page = await reader.state_models(first.up_to_seq, page.next_page, 5000)
        pages.append(page)
    chats = {c.id: {"title": c.title} for p in pages for c in p.snapshot.chats}
    messages = {m.id: row_of(m) for p in pages for m in p.snapshot.messages}
    return {"op": "final", "who": "server", "chats": chats, "messages": messages, "lastSeq": first.up_to_seq}, first.up_to_seq


def settled_server(final: dict[str, Any]) -> bool:
    """No reply being written, no follow-up the server has yet to send."""
    rows = list(final["messages"].values())
    if any(m["role"] == "assistant" and m["status"] in UNFINISHED for m in rows):
        return False
    chats: dict[str, list[Message]] = {}
    for m in rows:
        chats.setdefault(m["chat"], []).append(
            Message(id=m["id"], chat_id=m["chat"], role=m["role"], content="", status=m["status"], assistant_id=m["assistant"],
                    created_at=m["created"])  # fmt: skip
        )
    return all(queue_state(messages) != "ready" for messages in chats.values())


async def settle(
    world: World, devices: list[EngineDevice], browsers: list[BrowserDevice], history: History, seconds: float
) -> dict[str, Any]:
    """Wait until every outbox is empty, every run has ended and every device is at the server's
    seq: while the log moves (a backlog of answers, one at a time per chat, takes a while), up to
    ``seconds``; once it has not moved for ``STILL_SECONDS`` with something left, what is left is
    stuck. The server's final read."""
    reader = HttpTransport(world.urls, "reader", lambda record: None)
    await reader.sign_in(USERNAME, PASSWORD, signup=False)
    start = time.monotonic()
    moved, last = start, -1
    final: dict[str, Any] = {}
    try:
        while True:
            try:
                final, seq = await read_server(reader)
            except (NetworkError, ServerError):
                await asyncio.sleep(1)
                continue
            if seq != last:
                moved, last = time.monotonic(), seq
            ready = settled_server(final) and all(d.settled() and d.store.last_seq() >= seq for d in devices)
            for browser in browsers:
                if browser.page is None:  # (its reopen failed)
                    with contextlib.suppress(Exception):
                        await browser.open()
                if await browser.signed_out():  # (as a person does when the page says so)
                    await browser.signed_in()
                ready = ready and await browser.settled() and await browser.last_seq() >= seq
            now = time.monotonic()
            if ready or now - moved > STILL_SECONDS or now - start > seconds:
                if not ready:
                    history.record({"op": "unsettled", "after": round(now - start, 1), "still": round(now - moved, 1)})
                history.record({"op": "settled", "after": round(now - start, 1), "seq": seq})
                return final
            await asyncio.sleep(2)
    finally:
        await reader.close()


async def read_blobs(world: World, final: dict[str, Any], history: History) -> None:
    reader = HttpTransport(world.urls, "reader", lambda record: None)
    await reader.sign_in(USERNAME, PASSWORD, signup=False)
    try:
        shas = sorted({sha for m in final["messages"].values() for sha in m["files"]})
        for sha in shas:
            response = await reader.client.get(f"{reader.url}/blobs/{sha}", headers={"Authorization": f"Bearer {reader.token}"})
            if response.status_code != 200:
                history.record({"op": "blob", "sha256": sha, "ok": False, "error": f"HTTP {response.status_code}"})
                continue
            digest = hashlib.sha256(response.content).hexdigest()
            history.record({"op": "blob", "sha256": sha, "ok": digest == sha, "digest": digest})
    finally:
        await reader.close()
