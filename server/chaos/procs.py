"""A Chromium browser's processes, found in /proc by its profile, and killed all at once as a
machine going down kills them (the chaos run's browser fault; tests/e2e/profiles.py too)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


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


def kill_browser(profile: Path) -> None:
    """SIGKILL every process of the browser on ``profile`` at once; returns once all are gone, so
    the next browser never opens the profile beside a process of this one."""
    pids = [each for pid in browser_processes(profile) for each in descendants(pid)]
    for each in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(each, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while any(alive(each) for each in pids):
        if time.monotonic() > deadline:
            raise RuntimeError("the browser's processes outlived SIGKILL")
        time.sleep(0.05)
