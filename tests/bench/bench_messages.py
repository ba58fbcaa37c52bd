"""Benchmark: the message pane in Chromium on a chat of 1,000 Markdown messages with code.

Run on demand:  .venv/bin/python -m tests.bench.bench_messages [--messages 1000] [--tokens 2000]
Starts the server with a fake OpenAI-compatible assistant, fills one chat (through the API, then
sync) with Markdown messages holding code, and measures in the page:

- open the chat -> painted: a click on it in the list until the frame with its messages has been
  painted (the first open, when none of its Markdown has been rendered yet, and the median of
  later ones); beside it, the browser alone putting the same HTML into the list (innerHTML);
- send -> shown: Enter until the frame with the new message has been painted; beside it, the one
  durable local commit (SQLite + IndexedDB) a message must have before it may be shown;
- while a ``--tokens`` answer streams: the main thread's time per delta (reading the frame, taking
  it in, and the render of the frame that shows it, counted whole for every delta it shows), p50
  and p95; beside it, rendering the whole answer's Markdown once (what redrawing it at each delta
  would cost at its end); and the long tasks (over 50 ms) meanwhile.

Targets (issue 11): open <= 150 ms, send -> shown <= 50 ms, p95 per delta <= 8 ms, no long task.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import tempfile
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

from shared.ids import Uuid7Generator
from shared.models import format_time
from tests.e2e.conftest import playwright_config
from tests.e2e.pages import api, new_chat, open_app, sign
from tests.fake_upstream import FakeUpstream
from tests.processes import Server

PASSWORD = "a long password"
new_id = Uuid7Generator(itertools.count(1_700_000_000_000).__next__, os.urandom)

QUESTION = "How would I {n} in Python? Keep it **short**, and show the `code`."
ANSWER = """Here is one way to do step {n}, with a *small* function:

```python
def step_{n}(items: list[int]) -> list[int]:
    \"\"\"Keep the even items, doubled.\"\"\"
    return [2 * x for x in items if x % 2 == 0]
```

- It keeps the order of `items`.
- It makes a new list; the old one is left as it was.

See https://docs.python.org/3/tutorial/datastructures.html for more."""


def long_answer(tokens: int) -> str:
    """A Markdown answer of about ``tokens`` words: paragraphs, lists, tables and code."""
    parts, count, n = [], 0, 0
    while count < tokens:
        n += 1
        section = (
            f"## Part {n}\n\nThis part explains one more idea in plain words, so that the answer reads like "
            f"a real one: it has **bold** words, `inline code` and a [link](https://example.com/{n}).\n\n"
            f"1. the first point of part {n}\n2. the second point\n3. the third, a little longer than the others\n\n"
            f"| name | value |\n|---|---|\n| a{n} | {n} |\n| b{n} | {2 * n} |\n\n"
            f"```python\ndef part_{n}(x):\n    total = 0\n    for i in range(x):\n        total += i * {n}\n"
            f"    return total\n```\n\n"
        )
        parts.append(section)
        count += len(section.split())
    return "".join(parts)


def fill(server: Server, token: str, chat: str, count: int) -> str:
    """``count`` messages in ``chat``, one after the other; returns the id of the last."""
    parent: str | None = None
    events = []
    for i in range(count):
        message_id = new_id()
        role, text = ("user", QUESTION) if i % 2 == 0 else ("assistant", ANSWER)
        at = format_time(datetime(2026, 11, 30, 12, tzinfo=UTC) + timedelta(seconds=i))
        message = {"id": message_id, "chatId": chat, "role": role, "content": text.replace("{n}", str(i)),
                   "parentId": parent, "createdAt": at}
        events.append({"eventId": new_id(), "type": "MessageAppended", "payload": message,
                       "createdAt": "2026-11-30T12:00:00.000Z"})  # fmt: skip
        parent = message_id
    for start in range(0, len(events), 500):
        api(server.url, "POST", "/sync/events", {"events": events[start : start + 500]}, token=token)
    assert parent is not None
    return parent


# (inside each function below) resolves once the frame with the change that made `ready()` true
# has been painted: checked at each change of the page, then the next frame, then past its paint.
AFTER_PAINT = """
  const painted = (ready) => new Promise((resolve) => {
    const done = () => requestAnimationFrame(() => setTimeout(resolve, 0));
    if (ready()) return done();
    const watch = new MutationObserver(() => { if (ready()) { watch.disconnect(); done(); } });
    watch.observe(document.body, { childList: true, subtree: true, characterData: true });
  });"""

OPEN = """
async ([chat, last]) => {""" + AFTER_PAINT + """
  const start = performance.now();
  document.getElementById('c-' + chat).click();
  await painted(() => document.getElementById('m-' + last) !== null);
  return performance.now() - start;
}"""

INNER_HTML = """
async () => {""" + AFTER_PAINT + """
  const list = document.getElementById('messages');
  const html = list.innerHTML;
  list.replaceChildren();
  await painted(() => true);
  const start = performance.now();
  list.innerHTML = html;
  await painted(() => true);
  return performance.now() - start;
}"""

SEND = """
async (text) => {""" + AFTER_PAINT + """
  const box = document.getElementById('composer-text');
  box.value = text;
  box.dispatchEvent(new Event('input', { bubbles: true }));
  await new Promise((r) => setTimeout(r, 150)); // (its draft saved, as when someone types it)
  const start = performance.now();
  box.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', bubbles: true, cancelable: true }));
  const shown = () => [...document.querySelectorAll('#messages .message.user .content')].some((e) => e.textContent.trim() === text);
  await painted(shown);
  return performance.now() - start;
}"""

# Times what the page does with each delta frame: reading it, taking it in, and the frame drawn.
INSTRUMENT = """
import time, webapp.browser as browser
client = chat_client
bench = {"deltas": [], "frames": [], "parse": 0.0, "pending": []}

class TimedFrames:
    def __init__(self, inner):
        self.inner = inner
    def validate_json(self, data):
        start = time.perf_counter()
        frame = self.inner.validate_json(data)
        bench["parse"] = (time.perf_counter() - start) * 1000
        return frame

browser.FRAME = TimedFrames(browser.FRAME)
on_delta = client.engine._on_delta
def timed_delta(frame):
    start = time.perf_counter()
    on_delta(frame)
    bench["pending"].append(bench["parse"] + (time.perf_counter() - start) * 1000)
client.engine._on_delta = timed_delta
draw = type(client.pane)._frame
def timed_frame():
    start = time.perf_counter()
    draw(client.pane)
    took = (time.perf_counter() - start) * 1000
    bench["frames"].append(took)
    bench["deltas"] += [d + took for d in bench["pending"]]
    bench["pending"] = []
client.pane._frame = timed_frame
"""

FULL_RENDER = """
import time, webapp.markdown as markdown
text = chat_client.store.message(REPLY).content
times = []
for i in range(5):
    markdown._CACHE.clear()
    start = time.perf_counter()
    markdown.render(text)
    times.append((time.perf_counter() - start) * 1000)
sorted(times)[2]
"""

DURABLE_COMMIT = """
import time, statistics
from shared.models import DomainEvent, EventType, Chat
times = []
for i in range(20):
    chat = Chat(id=chat_client.s.new_id(), title="scratch", created_at=chat_client.s.now())
    event = DomainEvent(event_id=chat_client.s.new_id(), type=EventType.CHAT_UPDATED, payload=chat, created_at=chat.created_at)
    start = time.perf_counter()
    await chat_client.store.add_local(event)
    times.append((time.perf_counter() - start) * 1000)
    chat_client.store.conn.execute("DELETE FROM pending_events WHERE event_id = ?", (event.event_id,))
statistics.median(times)
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def measure(page: Page, server: Server, upstream: FakeUpstream, messages: int) -> dict[str, object]:
    open_app(page)
    username = f"bench{uuid.uuid4().hex[:8]}"
    sign(page, username, PASSWORD, signup=True)
    new_chat(page)
    small = page.evaluate("document.querySelector('.chat-item.selected').dataset.id")
    token = api(server.url, "POST", "/auth/login", {"username": username, "password": PASSWORD})["token"]
    big = new_id()
    chat = {"id": big, "title": "A long chat", "createdAt": "2026-11-30T11:00:00.000Z"}
    api(server.url, "POST", "/sync/events", {"events": [{"eventId": new_id(), "type": "ChatCreated", "payload": chat,
                                                          "createdAt": chat["createdAt"]}]}, token=token)  # fmt: skip
    last = fill(server, token, big, messages)
    print(f"filled a chat with {messages} messages; waiting for the page to sync them", flush=True)
    page.wait_for_function(f"() => pyodide.runPython(\"len(chat_client.store.links('{big}'))\") === {messages}", timeout=120_000)

    print("opening", flush=True)
    opens = []
    for _ in range(6):
        page.evaluate(f"document.getElementById('c-{small}').click()")
        page.wait_for_function(f"() => document.getElementById('composer-text').dataset.chat === '{small}'")
        page.wait_for_timeout(300)
        opens.append(page.evaluate(OPEN, [big, last]))
    page.wait_for_timeout(300)
    inner = [page.evaluate(INNER_HTML) for _ in range(5)]

    print("sending", flush=True)
    page.locator("select[name=assistant]").select_option("")  # (no answer to these)
    sends = [page.evaluate(SEND, f"send {i}: a short question") for i in range(30)]
    durable = page.evaluate("code => pyodide.runPythonAsync(code)", DURABLE_COMMIT)

    page.evaluate("""() => { window.longTasks = [];
      new PerformanceObserver((list) => { for (const e of list.getEntries()) window.longTasks.push(e.duration); })
        .observe({ type: 'longtask' }); }""")
    page.evaluate("code => pyodide.runPython(code)", INSTRUMENT)
    page.locator("select[name=assistant]").select_option("fake")
    print("streaming", flush=True)
    page.evaluate(SEND, "Now a long answer, please.")
    page.wait_for_function(  # the last message is the answer to it, and it is complete
        "() => (last => last.matches('.assistant') && last.dataset.state === 'completed' && last.previousElementSibling"
        ".textContent.includes('Now a long answer'))(document.querySelector('#messages').lastElementChild)",
        timeout=600_000, polling=500)  # fmt: skip
    page.wait_for_function("() => pyodide.runPython('len(bench[\"pending\"])') === 0")
    bench = json.loads(page.evaluate("pyodide.runPython('import json; json.dumps(bench)')"))
    reply = page.evaluate("[...document.querySelectorAll('.message.assistant')].at(-1).id.slice(2)")
    full = page.evaluate("code => pyodide.runPython(code)", FULL_RENDER.replace("REPLY", repr(reply)))
    return {"opens": opens, "inner": inner, "sends": sends, "durable": durable, "deltas": bench["deltas"],
            "frames": bench["frames"], "full_render": full, "long_tasks": page.evaluate("window.longTasks")}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--seconds-per-token", type=float, default=0.01)
    args = parser.parse_args()
    upstream = FakeUpstream(delay=args.seconds_per_token, text=long_answer(args.tokens))
    upstream.start_in_thread()
    data = Path(tempfile.mkdtemp())
    server = Server(f"sqlite:///{data / 'chat.db'}", data / "server.log", assistants=upstream.config(),
                    rate_limit_per_minute="0")  # fmt: skip
    server.start()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(**playwright_config.LAUNCH_ARGS)
            page = browser.new_context(base_url=server.url, viewport={"width": 1280, "height": 800}).new_page()
            r = measure(page, server, upstream, args.messages)
            browser.close()
    finally:
        server.stop()
    opens, inner, sends = r["opens"], r["inner"], r["sends"]
    deltas, frames = r["deltas"], r["frames"]
    long_tasks = r["long_tasks"]
    assert isinstance(opens, list) and isinstance(inner, list) and isinstance(sends, list)
    assert isinstance(deltas, list) and isinstance(frames, list) and isinstance(long_tasks, list)
    warm, base = statistics.median(opens[1:]), statistics.median(inner)
    send, durable = statistics.median(sends), float(r["durable"])  # type: ignore[arg-type]
    p95, full = percentile(deltas, 0.95), float(r["full_render"])  # type: ignore[arg-type]
    print(f"message pane, Chromium, a chat of {args.messages} Markdown messages with code; {args.tokens}-token answer")
    print(f"  open -> painted: first {opens[0]:6.1f} ms, then median {warm:6.1f} ms"
          f"  | the browser alone (innerHTML of the same list) {base:5.1f} ms  | ratio {warm / base:4.1f}   target <= 150 ms")
    print(f"  send -> shown:   median {send:6.1f} ms, p95 {percentile(sends, 0.95):6.1f} ms, max {max(sends):6.1f} ms"
          f"  | one durable commit {durable:5.1f} ms  | ratio {send / durable:4.1f}   target <= 50 ms")
    print(f"  per delta:       p50 {percentile(deltas, 0.5):5.2f} ms, p95 {p95:5.2f} ms over {len(deltas)} deltas in "
          f"{len(frames)} frames (render p95 {percentile(frames, 0.95):5.2f} ms)"
          f"  | whole answer rendered once {full:5.1f} ms  | ratio {p95 / full:4.2f}   target p95 <= 8 ms")
    print(f"  long tasks while it streamed: {len(long_tasks)}" + (f" (longest {max(long_tasks):.0f} ms)" if long_tasks else "")
          + "   target none")  # fmt: skip


if __name__ == "__main__":
    main()
