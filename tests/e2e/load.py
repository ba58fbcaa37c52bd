"""The load beside a loaded variant of a browser test (conftest.py: ``load``): at least one core's
worth of work that is not the test's own, all the time, as a phone busy with other apps is.

Run as ``python -m tests.e2e.load PID``, where PID is the test's process: its own work (the test,
its Playwright driver, the Chromium processes, the servers it started: PID and everything below it)
is never counted as load. Every 0.2 s it reads how much CPU the rest of the machine used (from
/proc) and spins for what is missing of one core in the next 0.2 s: run alone, it spins a whole
core, as ``while True: pass`` does; beside the rest of the suite, whose other processes keep a
core or more busy already, it adds little, and the CPU the suite would spend spinning on top of
that load goes to the tests instead.
"""

from __future__ import annotations

import os
import sys
import time

WINDOW = 0.2  # seconds
HZ = os.sysconf("SC_CLK_TCK")


def machine_busy() -> int:
    """Clock ticks every core has spent busy since boot (all but idle and waiting for I/O)."""
    with open("/proc/stat") as f:
        ticks = [int(n) for n in f.readline().split()[1:]]
    return sum(ticks) - ticks[3] - ticks[4]


def tree_busy(*roots: int) -> int:
    """Clock ticks spent by ``roots`` and every process below them, those still running and those
    that have ended (counted in their parents' children's times once reaped)."""
    children: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:  # (ended meanwhile)
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # (after the command's name, which may hold spaces)
        children.setdefault(int(fields[1]), []).append(int(name))
        ticks[int(name)] = sum(int(n) for n in fields[11:15])  # utime, stime, cutime, cstime
    seen: set[int] = set()
    stack = list(roots)
    while stack:  # (each process once: this one is below the test's when the test started it)
        pid = stack.pop()
        if pid not in seen:
            seen.add(pid)
            stack.extend(children.get(pid, []))
    return sum(ticks.get(pid, 0) for pid in seen)


def sample(root: int) -> tuple[float, int, int]:
    """(the time, the machine's busy ticks, those of ``root``'s tree and this process's)."""
    return time.monotonic(), machine_busy(), tree_busy(root, os.getpid())


def main(root: int) -> None:
    before = sample(root)
    missing = 1.0
    while True:
        start = time.monotonic()
        while time.monotonic() < start + WINDOW * missing:
            pass
        time.sleep(max(0.0, start + WINDOW - time.monotonic()))
        now = sample(root)
        # The cores the processes outside the tree kept busy since the last sample (the time
        # between two samples, not the window: on a busy machine a sample takes a while).
        others = max(0, (now[1] - before[1]) - (now[2] - before[2])) / (HZ * (now[0] - before[0]))
        missing, before = min(1.0, max(0.0, 1.0 - others)), now


if __name__ == "__main__":
    main(int(sys.argv[1]))
