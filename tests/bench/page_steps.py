"""Which Python step of the page is long: a diagnostic for the benchmarks (``--steps``).

Python runs on the page's main thread, one asyncio callback per browser task (Pyodide's WebLoop
schedules each ``Handle`` as a task of its own), so a long task that Python causes is one long
callback: a task's step from one ``await`` to the next, or a plain callback. ``install(page)``
wraps ``asyncio.Handle._run`` (and the pane's animation-frame drawing, and the garbage
collector's passes) in the page's Python to time each one; ``long_steps(page, ms)`` gives those
that took ``ms`` or more: when (``performance.now()``), how long, and what ran (for a task's
step, where its coroutines were suspended before and after the step: the code between the two
is what took the time; the profile's top functions when ``profile`` is on).

It costs a ``performance.now()`` call per callback, so the timings it prints are of the code
with it; the benchmarks' own figures are taken without it.
"""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Page

INSTALL = r"""
import asyncio, gc, sys, js
from asyncio import events

_steps = []
_profile = PROFILE

def _where(coro):
    chain = []
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None) or getattr(coro, "ag_frame", None)
        if frame is None:
            break
        named = [f"{k}={v!r:.40}" for k in ("name", "text", "state") if isinstance(v := frame.f_locals.get(k), str)]
        chain.append(f"{frame.f_code.co_qualname}:{frame.f_lineno}" + (f"[{', '.join(named)}]" if named else ""))
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None) or getattr(coro, "ag_await", None)
    return " > ".join(chain)

def _label(callback, args=()):
    try:
        task = getattr(callback, "__self__", None)
        if isinstance(task, asyncio.Task):
            return task, _where(task.get_coro())
        name = getattr(callback, "__qualname__", None) or repr(callback)
        generators = [a for a in args if getattr(a, "gi_frame", None) is not None]
        return None, name + "".join(f" ({_where(g)})" for g in generators)
    except Exception as e:  # (never in the way of the step itself)
        return None, f"(unknown: {e!r})"

def _after(task):
    try:
        return "" if task is None else "(done)" if task.done() else _where(task.get_coro())
    except Exception as e:
        return f"(unknown: {e!r})"

def _name(code):
    if hasattr(code, "co_qualname"):
        return f"{code.co_qualname} ({code.co_filename.rsplit('/', 2)[-1]}:{code.co_firstlineno})"
    return str(code)

def _top(profiler):
    # (the page's standard library has no cProfile nor pstats: _lsprof's entries, read here)
    entries = profiler.getstats()
    own = sorted(entries, key=lambda e: e.inlinetime, reverse=True)[:10]
    whole = sorted(entries, key=lambda e: e.totaltime, reverse=True)[:10]
    rows = ["own time:"] + [f"  {e.inlinetime * 1000:7.1f} ms {e.callcount:6d}x {_name(e.code)}" for e in own]
    rows += ["with callees:"] + [f"  {e.totaltime * 1000:7.1f} ms {e.callcount:6d}x {_name(e.code)}" for e in whole]
    return "\n".join(rows)

def _safe_top(profiler):
    try:
        return "" if profiler is None else _top(profiler)
    except Exception as e:
        return f"(no profile: {e!r})"

def _timed(run, what):
    def wrapped(self, *args):
        task, before = what(self)
        profiler = None
        if _profile:
            import _lsprof
            profiler = _lsprof.Profiler()
            try:
                profiler.enable(subcalls=False, builtins=True)
            except ValueError:  # (a step inside another one's: profiled as part of it)
                profiler = None
        start = js.performance.now()
        try:
            return run(self, *args)
        finally:
            end = js.performance.now()
            if profiler is not None:
                profiler.disable()
            if end - start >= THRESHOLD:
                _steps.append({"at": start, "ms": end - start, "before": before, "after": _after(task),
                               "profile": _safe_top(profiler)})
    return wrapped

def _handle_label(handle):
    return _label(handle._callback, handle._args or ())

events.Handle._run = _timed(events.Handle._run, _handle_label)
import webapp.pane
webapp.pane.MessagePane._frame = _timed(webapp.pane.MessagePane._frame, lambda pane: (None, "MessagePane._frame (animation frame)"))

_gc_start = [0.0]
def _gc(phase, info):
    if phase == "start":
        _gc_start[0] = js.performance.now()
    else:
        ms = js.performance.now() - _gc_start[0]
        if ms >= THRESHOLD:
            _steps.append({"at": _gc_start[0], "ms": ms, "before": f"gc generation {info.get('generation')}",
                           "after": f"collected {info.get('collected')}", "profile": ""})
gc.callbacks.append(_gc)

import builtins
builtins._bench_steps = _steps
"""


def install(page: Page, threshold_ms: float = 10.0, profile: bool = False) -> None:
    """Time the page's Python callbacks from now on (the app must have started)."""
    code = INSTALL.replace("THRESHOLD", repr(threshold_ms)).replace("PROFILE", repr(profile))
    page.evaluate("(code) => { pyodide.runPython(code); }", code)


def long_steps(page: Page) -> list[dict[str, Any]]:
    """The steps timed so far (at, ms, before, after, profile), and forgets them."""
    found: list[dict[str, Any]] = page.evaluate(
        "() => { const steps = pyodide.runPython('import builtins, json\\n"
        "s = json.dumps(builtins._bench_steps)\\nbuiltins._bench_steps.clear()\\ns'); return JSON.parse(steps); }"
    )
    return found


def report(steps: list[dict[str, Any]], tasks: list[dict[str, float]]) -> str:
    """The long tasks, each with the Python steps timed inside it, then the other steps."""
    lines = []
    used = set()
    for task in tasks:
        lines.append(f"long task at {task['at']:.0f} ms: {task['ms']:.0f} ms")
        for i, step in enumerate(steps):
            if task["at"] - 1 <= step["at"] <= task["at"] + task["ms"] + 1:
                used.add(i)
                lines.append(_step_line(step))
    rest = [s for i, s in enumerate(steps) if i not in used]
    if rest:
        lines.append("steps in no long task:")
        lines += [_step_line(s) for s in rest]
    return "\n".join(lines)


def _step_line(step: dict[str, Any]) -> str:
    line = f"  {step['ms']:6.1f} ms at {step['at']:.0f}: {step['before']}"
    if step["after"]:
        line += f"  ->  {step['after']}"
    if step.get("profile"):
        line += "\n" + "\n".join("      " + row for row in step["profile"].splitlines() if row.strip())
    return line
