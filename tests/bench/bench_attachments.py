"""Benchmark: attachments in Chromium (issue 20). Run on demand:

    .venv/bin/python -m tests.bench.bench_attachments [--runs 3]

Against the app with two trivial routes beside it (tests/bench/echo_server.py, on SQLite):

- *attach*: a 10 MB image (a PNG of noise, so its bytes are 10 MB) attached offline, from the
  file input's ``change`` event until its chip shows its thumbnail (decoded); then *sent*: from
  the Enter key (pressed as soon as the chip shows) until the message shows the image; then the
  same image attached again, until it is hashed and kept (its chip has Remove). Median of ``--runs``.
  Each "until" is the frame in which the page shows it, checked by the page itself every frame.
- *upload*: a 50 MB file sent online, from the Enter key until the server has it whole (the
  message no longer says where its upload stands), beside the baseline measured in the same page
  and run: one ``fetch`` PUT of the same 50 MB to a route that reads the body and drops it (the
  message as Python draws it, not the page's drawing at Enter, which has no upload state). The
  ratio is upload throughput over the PUT's; beside it, the same over the upload's own requests
  only (its HEAD sent until its PATCH answered, by Resource Timing), without the Send's work
  before the upload starts (the message saved and pushed first). And the same PUT of the file as
  the device keeps it (the IndexedDB Blob the upload sends, not one made in the page's memory):
  how much of the gap is the body's source rather than the server's work.
- *memory*: the renderers' resident memory (the sum of VmRSS of the ``--type=renderer``
  processes of the Chromium it started, not another's on the machine, sampled every 50 ms)
  while the 50 MB file is attached, hashed and uploaded, over what it was before; as a multiple
  of the file's size.
- *long tasks*: the page's long tasks (PerformanceObserver ``longtask``) from the attach of the
  50 MB file (the task of its ``change`` event) until its upload ends: how many, how many over
  50 ms, the longest; and, beside, from the new chat on (the second before the attach too).
  The benchmark waits with cheap functions of its own, polled every animation frame (a
  Playwright role query, polled, is a long task of its own on a loaded machine).

``--steps`` prints, for each run, the page's Python steps of 10 ms or more and the long tasks
they fall in (tests/bench/page_steps.py); ``--profile`` adds each one's profile (slower).
``--second`` measures the page's second Send rather than its first (``send_one_before``).
``--cpu`` records a Chrome trace of each upload run (attach to uploaded) and prints each task of
the page's main thread over 50 ms with the CPU time that thread had in it: a task that long with
little CPU waited for a core (the browser, the server and the hashing worker share this
machine's), rather than did that much work.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
import zlib
from pathlib import Path
from typing import Any

from playwright.sync_api import Browser, Page, sync_playwright

from server.config import ROOT
from tests.bench import page_steps
from tests.bench.browser_sync import until_warmed
from tests.e2e.conftest import playwright_config
from tests.e2e.pages import open_app, sign
from tests.processes import free_port

MB = 1024 * 1024
PASSWORD = "a long password"

OBSERVE = """() => {
  window.benchLongTasks = [];
  new PerformanceObserver((list) => { for (const e of list.getEntries()) window.benchLongTasks.push({ at: e.startTime, ms: e.duration }); })
    .observe({ type: "longtask" });
  document.addEventListener("change", (e) => { if (e.target.id === "attach-input") window.benchAttachAt = performance.now(); }, true);
  document.addEventListener("keydown", (e) => { if (e.key === "Enter") window.benchSentAt = performance.now(); }, true);
  // What the page shows, checked by the page itself every frame from before the action on: a
  // figure is the frame that shows it. (A poll of Playwright's begins a round trip after the
  // action returns, 100 ms and more on a loaded machine, and that was what got measured.)
  const checks = {
    chip: (name) => {
      const img = [...document.querySelectorAll("#composer-files img")].find((i) => i.alt === name);
      return img && img.complete && img.naturalWidth > 0;
    },
    attached: (name) => [...document.querySelectorAll("#composer-files button")].some((b) => b.getAttribute("aria-label") === `Remove ${name}`),
    message: (name) => {
      const img = [...document.querySelectorAll("#messages img")].find((i) => i.alt === name);
      return img && img.complete && img.naturalWidth > 0;
    },
    // Python's drawing of the message (a file's size is in it, not in the page's own drawing at
    // Enter, which loses its data-sending as soon as Python has the message) with no upload state.
    uploaded: (text) => {
      const li = [...document.querySelectorAll("#messages li.message")].find((m) => m.textContent.includes(text));
      return li && li.querySelector(".files .size") && !li.querySelector("[data-upload]");
    },
  };
  window.benchSeen = {};
  window.benchWatch = (kind, arg) => {
    const poll = () => {
      if (checks[kind](arg)) window.benchSeen[`${kind}:${arg}`] = performance.now();
      else requestAnimationFrame(poll);
    };
    requestAnimationFrame(poll);
  };
}"""

SEEN = """([key, since]) => {
  const at = window.benchSeen[key];
  return at === undefined ? null : at - window[since];
}"""


def watch(page: Page, kind: str, arg: str) -> None:
    """The page checks every frame from now on whether it shows ``kind`` (chip, attached,
    message, uploaded) of ``arg``: call before the action."""
    page.evaluate("([kind, arg]) => window.benchWatch(kind, arg)", [kind, arg])


def seen(page: Page, kind: str, arg: str, since: str, timeout: float = 60_000) -> float:
    """Once the page has shown it: ms from ``since`` (benchAttachAt, benchSentAt) to that frame."""
    return float(page.wait_for_function(SEEN, arg=[f"{kind}:{arg}", since], polling=100, timeout=timeout).json_value())


PLAIN_PUT = """async (size) => {
  const parts = [];
  for (let left = size; left > 0; left -= 65536) parts.push(crypto.getRandomValues(new Uint8Array(Math.min(65536, left))));
  return put(new Blob(parts), size);
}"""
# The same PUT of the file as this device keeps it (the IndexedDB Blob the upload sends, which the
# browser reads from its blob storage): the PUT above less what separates the two bodies' sources.
STORED_PUT = """async ([sha256, size]) => {
  if (await chatFiles.size(sha256) !== size) throw new Error("the file is not kept here");
  return put(await chatFiles.read(sha256, 0, size), size);
}"""
PUT_FUNCTION = """() => {
  window.put = async (blob, size) => {
    const started = performance.now();
    const response = await fetch('/bench/put', { method: 'PUT', body: blob });
    const { n } = await response.json();
    if (n !== size) throw new Error(`the route read ${n} bytes of ${size}`);
    return performance.now() - started;
  };
}"""


def noise_png(size: int) -> bytes:
    """A PNG of random pixels of about ``size`` bytes (stored, not compressed: noise does not)."""
    side = int((size / 3) ** 0.5)
    raw = b"".join(b"\x00" + os.urandom(side * 3) for _ in range(side))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 0)) + chunk(b"IEND", b"")


def _parent(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in status.splitlines() if line.startswith("PPid:")), 0)


def _ours(pid: int) -> bool:
    """Whether the process descends from this one (the Chromium this benchmark started, not
    another one on the machine)."""
    while pid > 1:
        pid = _parent(pid)
        if pid == os.getpid():
            return True
    return False


def renderers_rss() -> int:
    """The resident bytes of the Chromium renderers this benchmark started."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if b"--type=renderer" not in (entry / "cmdline").read_bytes() or not _ours(int(entry.name)):
                continue
            status = (entry / "status").read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return total


class Sampler:
    """The most ``renderers_rss`` reached while it runs."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, renderers_rss())
            time.sleep(0.05)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def attach(page: Page, name: str, mime: str, data: bytes) -> None:
    """Picked with the file chooser (from a file: Playwright passes no buffer over 50 MB)."""
    path = Path(tempfile.mkdtemp()) / name
    path.write_bytes(data)
    with page.expect_file_chooser() as chooser:
        page.get_by_role("button", name="Attach files").click()
    chooser.value.set_files(path)


def fresh_page(browser: Browser, url: str) -> Page:
    """A new device, signed up, in a new chat; once its first visit's background work is done
    (browser_sync.until_warmed), which would otherwise take a core from the run's first
    measures and not from its last (the plain PUT after the upload)."""
    context = browser.new_context(base_url=url)
    page = context.new_page()
    open_app(page)
    until_warmed(page)
    sign(page, f"bench{uuid.uuid4().hex[:8]}", PASSWORD, signup=True)
    page.get_by_role("button", name="New chat").first.click()
    page.evaluate(OBSERVE)
    return page


def image_run(browser: Browser, url: str, image: bytes, steps: bool = False, profile: bool = False) -> tuple[float, float, float]:
    """The chip shown, the message shown after Enter (pressed once the chip shows: the file may
    still be being hashed and kept), and, in a second attach of the same image, how long until
    it is attached (hashed and kept: its Remove button)."""
    page = fresh_page(browser, url)
    if steps:
        page_steps.install(page, profile=profile)
        page.on("console", lambda m: print("console:", m.type, m.text))
    page.context.set_offline(True)
    watch(page, "chip", "photo.png")
    attach(page, "photo.png", "image/png", image)
    shown = seen(page, "chip", "photo.png", "benchAttachAt")
    page.locator("textarea[name=text]").fill("the photo")
    watch(page, "message", "photo.png")
    page.locator("textarea[name=text]").press("Enter")
    sent = seen(page, "message", "photo.png", "benchSentAt")
    watch(page, "attached", "again.png")
    attach(page, "again.png", "image/png", image)
    attached = seen(page, "attached", "again.png", "benchAttachAt")
    if steps:
        marks = page.evaluate("() => [window.benchAttachAt, window.benchSentAt]")
        print(f"image run: last attach at {marks[0]:.0f} ms, Enter at {marks[1]:.0f} ms, chip {shown:.0f} ms, message {sent:.0f} ms")
        print(page_steps.report(page_steps.long_steps(page), page.evaluate("() => window.benchLongTasks")))
    page.context.close()
    return float(shown), float(sent), float(attached)


# The upload's own requests (Resource Timing): from its first request to /blobs/ going out (the
# HEAD that asks the server's offset) until the last one's answer has arrived (the PATCH's).
UPLOAD_SPAN = """() => {
  const own = performance.getEntriesByType('resource').filter((e) => new URL(e.name).pathname.startsWith('/blobs/'));
  if (!own.length) throw new Error('no request to /blobs/');
  return Math.max(...own.map((e) => e.responseEnd)) - Math.min(...own.map((e) => e.startTime));
}"""


def task_cpu(trace: bytes, url: str) -> list[tuple[float, float]]:
    """(wall ms, thread CPU ms) of each task over 50 ms on the main thread of the page at ``url``,
    from a Chrome trace (its renderer: the process of the frame at that address)."""
    events = json.loads(trace)
    events = events["traceEvents"] if isinstance(events, dict) else events
    pids = {
        frame.get("processId")
        for e in events if e.get("name") == "TracingStartedInBrowser"
        for frame in e.get("args", {}).get("data", {}).get("frames", []) if frame.get("url", "").startswith(url)
    }  # fmt: skip
    threads = {
        (e["pid"], e["tid"])
        for e in events
        if e.get("name") == "thread_name" and e["args"].get("name") == "CrRendererMain" and e["pid"] in pids
    }
    tasks = sorted(
        (e for e in events if e.get("ph") == "X" and e.get("name") == "RunTask" and (e.get("pid"), e.get("tid")) in threads),
        key=lambda e: e["ts"],
    )
    found, end = [], -1
    for task in tasks:  # (the outermost: a task within another is part of it)
        if task["ts"] >= end:
            end = task["ts"] + task["dur"]
            if task["dur"] > 50_000:
                found.append((task["dur"] / 1000, task.get("tdur", 0) / 1000))
    return found


def send_file(page: Page, name: str, data: bytes, text: str) -> float:
    """``data`` attached as ``name`` and sent with ``text`` once its chip is kept; returns the ms
    from the Enter to the server having it (benchSentAt on)."""
    watch(page, "attached", name)
    attach(page, name, "application/octet-stream", data)
    # (A role query, polled, costs the page a long task of its own on a loaded machine: this
    # benchmark's checks are cheap functions, run by the page every frame.)
    seen(page, "attached", name, "benchAttachAt", timeout=120_000)
    page.locator("textarea[name=text]").fill(text)
    watch(page, "uploaded", text)
    page.evaluate("() => performance.clearResourceTimings()")  # (room for the upload's: the buffer holds 250)
    page.locator("textarea[name=text]").press("Enter")
    return seen(page, "uploaded", text, "benchSentAt", timeout=300_000)


def send_one_before(page: Page) -> None:
    """A message with a 1 MB file sent and uploaded, and its answer given time to end: the page's
    first Send, whose one-time work (the renderer's threads compiling what a Send first runs,
    190-260 ms of CPU) is then not in the measured one's."""
    send_file(page, "first.bin", os.urandom(MB), "a first file")
    page.wait_for_timeout(3000)


def upload_run(
    browser: Browser, url: str, size: int, steps: bool = False, profile: bool = False, cpu: bool = False, second: bool = False
) -> dict[str, Any]:
    page = fresh_page(browser, url)
    if second:
        send_one_before(page)
    if steps:
        page_steps.install(page, profile=profile)
    data = os.urandom(size)
    page.wait_for_timeout(1000)  # (settled: the renderers' memory from here)
    before = renderers_rss()
    if cpu:
        browser.start_tracing(page=page, categories=["toplevel", "disabled-by-default-devtools.timeline"])  # (its frames, named there)
    with Sampler() as sampler:
        upload = send_file(page, "film.bin", data, "the film")
    traced = task_cpu(browser.stop_tracing(), url) if cpu else []
    # From the attach (its change event's task) on; and, beside, all of them since the new chat
    # (the sign-up's start-up work, the 1 s before the attach, the attach).
    every = page.evaluate("() => window.benchLongTasks")
    tasks = page.evaluate("() => window.benchLongTasks.filter((t) => t.at + t.ms >= window.benchAttachAt)")
    if steps:
        print(page_steps.report(page_steps.long_steps(page), tasks))
    own = float(page.evaluate(UPLOAD_SPAN))
    page.evaluate(PUT_FUNCTION)
    put = float(page.evaluate(PLAIN_PUT, size))
    put_stored = float(page.evaluate(STORED_PUT, [hashlib.sha256(data).hexdigest(), size]))
    page.context.close()
    return {
        "upload": upload, "own": own, "put": put, "put_stored": put_stored, "growth": (sampler.peak - before) / size,
        "tasks": len(tasks), "over50": sum(1 for t in tasks if t["ms"] > 50), "longest": max((t["ms"] for t in tasks), default=0.0),
        "since_chat": len(every), "longest_since_chat": max((t["ms"] for t in every), default=0.0),
        "traced": traced,
    }  # fmt: skip


def wait_for(url: str) -> None:
    for _ in range(200):
        try:
            urllib.request.urlopen(url + "/healthz", timeout=1)
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the server did not start")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", choices=["image", "upload"], default=None)
    parser.add_argument("--steps", action="store_true", help="print the page's Python steps of 10 ms or more (tests/bench/page_steps.py)")
    parser.add_argument("--profile", action="store_true", help="with --steps: each long step's profile (slows Python down)")
    parser.add_argument(
        "--cpu", action="store_true", help="the main thread's CPU in each task over 50 ms of an upload run (a Chrome trace)"
    )
    parser.add_argument("--second", action="store_true", help="the upload is the page's second Send, not its first (send_one_before)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.bench.echo_server", str(port), f"sqlite:///{folder / 'app.db'}"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(folder / "server.log", "wb"),  # noqa: SIM115
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(url)
        print(f"{time.strftime('%Y-%m-%d')}: Chromium at {playwright_config.CHROMIUM}, SQLite server, this machine")
        with sync_playwright() as p:
            browser = p.chromium.launch(**playwright_config.LAUNCH_ARGS)
            if args.only != "upload":
                image = noise_png(10 * MB)
                images = [image_run(browser, url, image, args.steps, args.profile) for _ in range(args.runs)]
                shown = statistics.median(s for s, _, _ in images)
                sent = statistics.median(t for _, t, _ in images)
                attached = statistics.median(a for _, _, a in images)
                print(f"attach a {len(image) / MB:.1f} MB image offline -> chip with thumbnail: {shown:.0f} ms (median of {args.runs})")
                print(f"sent -> message shown with the image: {sent:.0f} ms")
                print(f"attach -> hashed and kept (its Remove button): {attached:.0f} ms")
            if args.only == "image":
                return
            size = 50 * MB
            runs = [upload_run(browser, url, size, args.steps, args.profile, args.cpu, args.second) for _ in range(args.runs)]
            upload = statistics.median(r["upload"] for r in runs)
            put = statistics.median(r["put"] for r in runs)
            own = statistics.median(r["own"] for r in runs)
            print(f"upload 50 MB (Enter -> on the server): {upload:.0f} ms, {size / MB / upload * 1000:.0f} MB/s;"
                  f" one plain PUT of 50 MB: {put:.0f} ms, {size / MB / put * 1000:.0f} MB/s; ratio {put / upload:.2f}")  # fmt: skip
            print(f"the upload's own requests (its HEAD sent -> its PATCH answered): {own:.0f} ms, {size / MB / own * 1000:.0f} MB/s;"
                  f" ratio {put / own:.2f}; each run's (PUT over own, PUT over Enter->done): "
                  + ", ".join(f"{r['put'] / r['own']:.2f}/{r['put'] / r['upload']:.2f}" for r in runs))  # fmt: skip
            stored = statistics.median(r["put_stored"] for r in runs)
            print(f"the same PUT of the file as kept on this device (its IndexedDB Blob): {stored:.0f} ms;"
                  f" its ratio over the upload's own requests {stored / own:.2f}")  # fmt: skip
            print("renderers' memory while attaching and uploading 50 MB, over before: "
                  + ", ".join(f"{r['growth']:.2f}x" for r in runs) + " the file")  # fmt: skip
            print("long tasks from attach to uploaded: "
                  + "; ".join(f"{r['tasks']:.0f} ({r['over50']:.0f} over 50 ms, longest {r['longest']:.0f} ms)" for r in runs))  # fmt: skip
            if args.cpu:
                print("tasks over 50 ms in the trace, attach to uploaded (wall / the main thread's CPU): "
                      + "; ".join(", ".join(f"{w:.0f}/{c:.0f} ms" for w, c in r["traced"]) or "none" for r in runs))  # fmt: skip
            print("long tasks from the new chat (1 s before the attach) to uploaded: "
                  + "; ".join(f"{r['since_chat']:.0f} (longest {r['longest_since_chat']:.0f} ms)" for r in runs))  # fmt: skip
            browser.close()
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
