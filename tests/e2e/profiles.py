"""A browser on a profile of its own (kept on disk, as a person's): launched, SIGKILLed as a
machine going down kills it, and opened again on the same profile."""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from pathlib import Path

from playwright.sync_api import BrowserContext, Page, Playwright

from tests.e2e.conftest import playwright_config
from tests.e2e.contexts import Contexts
from tests.e2e.pages import new_chat, open_app, sign
from tests.processes import Server


def alive(pid: int) -> bool:
    """Not ended (a zombie, ended and not yet reaped by its parent, holds nothing)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def browser_processes(profile: Path) -> list[int]:
    """The pids of the Chromium browser process (not its renderers) running on this profile."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"--user-data-dir={profile}".encode() in args and not any(a.startswith(b"--type=") for a in args):
            found.append(int(entry.name))
    return found


def launch(playwright: Playwright, profile: Path, server: Server) -> BrowserContext:
    return playwright.chromium.launch_persistent_context(str(profile), base_url=server.url, **playwright_config.LAUNCH_ARGS)  # type: ignore[arg-type]


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) if entry.name.isdigit() else None
        except (OSError, IndexError, ValueError):
            continue
        if parent is not None:
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo += children.get(found[-1], [])
    return found


def kill(profile: Path, context: BrowserContext) -> None:
    """SIGKILL the whole browser (not just a tab), every process of it at once, as a machine
    going down does: nothing of it gets to save anything more. Returns once all are gone, so that
    the next browser never opens the profile beside a process of this one. (The "Page crashed" once
    put down to such a process was Chromium's heap profiler: see playwright.config.py.)"""
    [pid] = browser_processes(profile)
    pids = descendants(pid)
    for each in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(each, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{each}").exists() and alive(each) for each in pids):
        assert time.monotonic() < deadline, "the browser's processes outlived SIGKILL"
        time.sleep(0.05)
    try:
        context.close()
    except Exception:  # the browser is gone: nothing left to close
        pass


def signed_up_in_a_profile(playwright: Playwright, contexts: Contexts, profile: Path, server: Server, username: str = "") -> None:
    context = launch(playwright, profile, server)
    contexts.seed(context, server.url)  # (kept on disk in the profile, as in a returning visitor's)
    page = context.pages[0] if context.pages else context.new_page()
    open_app(page)
    sign(page, username or f"kill{uuid.uuid4().hex[:8]}", "a long password", signup=True)
    new_chat(page)
    context.close()  # (the session cookie is on disk now: the kill below is what is tested)


def reopened(playwright: Playwright, profile: Path, server: Server) -> tuple[BrowserContext, Page]:
    context = launch(playwright, profile, server)
    page = context.pages[0] if context.pages else context.new_page()
    open_app(page)
    return context, page
