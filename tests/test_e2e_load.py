"""The loaded variants' load (tests/e2e/load.py): at least one core's worth of work outside the
test's own processes, whatever else the machine runs, spun by it only for what is missing."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from server.config import ROOT
from tests.e2e.load import HZ, machine_busy, tree_busy


@contextmanager
def running(*command: str) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(command, cwd=ROOT)
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def cores(measure: object, seconds: float = 2.0) -> float:
    """The cores ``measure()`` (ticks) went up by per second over ``seconds``."""
    assert callable(measure)
    before = measure()
    time.sleep(seconds)
    return float(measure() - before) / (HZ * seconds)


def test_beside_the_test_there_is_always_a_core_of_other_work_and_the_load_spins_only_what_is_missing() -> None:
    # The test's own processes: a tree that does nothing here (a sleep), so all the rest is load.
    with running("sleep", "60") as test, running(sys.executable, "-m", "tests.e2e.load", str(test.pid)) as load:
        time.sleep(0.5)  # (its first windows)
        assert cores(lambda: machine_busy() - tree_busy(test.pid)) >= 0.85
        # Beside a process spinning on a core (load the test did not start), it leaves that core be.
        with running(sys.executable, "-c", "while True: pass"):
            time.sleep(0.5)
            assert cores(lambda: tree_busy(load.pid)) <= 0.35


def test_the_load_inside_the_tests_tree_counts_itself_once() -> None:
    """As conftest.py starts it, the load is inside the test's tree (here: the tree is the load
    itself). Beside a process spinning on a core outside it, it leaves that core be; counted twice,
    its own spinning would hide as much of the others' and it would go on spinning."""
    with running(sys.executable, "-c", "while True: pass"):
        with running("sh", "-c", f"exec {sys.executable} -m tests.e2e.load $$") as load:
            time.sleep(0.5)
            assert cores(lambda: tree_busy(load.pid)) <= 0.35
