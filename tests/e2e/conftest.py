"""End-to-end fixtures: the real server (Hypercorn) on a free port, Debian's Chromium."""

from __future__ import annotations

import fcntl
import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from _pytest.nodeid import coerce_node_id
from playwright.sync_api import Browser, BrowserContext, expect

from server.config import ROOT
from tests.e2e.contexts import Contexts
from tests.processes import Server

_spec = importlib.util.spec_from_file_location("playwright_config", ROOT / "playwright.config.py")
assert _spec is not None and _spec.loader is not None
playwright_config = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(playwright_config)

# What a page should come to show, it shows within this (Playwright's default is 5 s): these
# tests share the machine's cores with the rest of the suite (scripts/test runs both at once).
expect.set_options(timeout=15_000)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data = tmp_path_factory.mktemp("server")
    running = Server(f"sqlite:///{data / 'chat.db'}", data / "server.log")
    running.start()
    yield running
    running.stop()


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    return {**browser_type_launch_args, **playwright_config.SUITE_LAUNCH_ARGS}


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args: dict[str, Any], server: Server) -> dict[str, Any]:
    return {**browser_context_args, "base_url": server.url}


@pytest.fixture(scope="session")
def contexts(browser: Browser, server: Server, tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Iterator[Contexts]:
    """New browser contexts that start Python as a returning visitor's does (tests/e2e/contexts.py),
    from what one first visit kept for all of the run's workers (under pytest-xdist, the run's
    temporary directory is the parent of each worker's)."""
    if worker_id == "master":
        kept = tmp_path_factory.mktemp("python-start")
    else:
        kept = tmp_path_factory.getbasetemp().parent / "python-start"
        kept.mkdir(exist_ok=True)
    made = Contexts(browser, kept)
    made.keep_once(server.url)
    yield made
    made.close()


@pytest.fixture
def context(contexts: Contexts, browser_context_args: dict[str, Any]) -> Iterator[BrowserContext]:
    """pytest-playwright's ``context`` (and so its ``page``), seeded as ``contexts`` makes them."""
    made = contexts.new(**browser_context_args)
    yield made
    made.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.stash[_failed] = report.failed
    return report


_failed = pytest.StashKey[bool]()


@pytest.fixture(autouse=True)
def _server_log_on_failure(request: pytest.FixtureRequest, server: Server) -> Iterator[None]:
    """A failed test's report ends with what the server did meanwhile (its requests but for the
    app's files, their statuses, any traceback): whether a page's request reached it, and how it
    was answered; and what the pages logged (Python's failures among it). A test that passed
    fails if a page broke the Content Security Policy."""
    start = server.log.stat().st_size if server.log.exists() else 0
    console = request.getfixturevalue("contexts").console if "contexts" in request.fixturenames else []
    console.clear()
    yield
    if request.node.stash.get(_failed, False):
        files = ('"path": "/static/', '"path": "/py/', '"path": "/sw.js"', '"path": "/favicon')
        lines = server.log.read_bytes()[start:].decode(errors="replace").splitlines()
        logged = [line for line in lines if not any(f in line for f in files)]
        print("The server logged during this test (its last 150 lines):", *logged[-150:], sep="\n")
        print("The pages logged in their consoles (the last 100 lines):", *console[-100:], sep="\n")
        return
    # The app's own markup never needs what its Content Security Policy refuses (server/headers.py):
    # a refusal is a bug even when nothing visible came of it (found: the render cache kept the
    # composer's height as an inline style).
    refused = [line for line in console if "Content Security Policy" in line]
    assert not refused, f"a page broke its Content Security Policy: {refused[:3]}"


# The browser promises (drafts, sends, answers, sign-in) are tested on an idle machine and on a
# loaded one, as a slow phone is: a test parametrized with `load` runs twice, the second time
# beside at least a core's worth of other work (tests/e2e/load.py: a process spinning for what
# the rest of the machine leaves of a core). A test that passes only idle is a bug in the product.


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (scripts/test runs these tests on two workers, --dist loadgroup) the
    loaded variants all go to one worker, one after the other: never two spinners at once.

    pytest-xdist 3.8 groups a test by appending "@group" to its node id (``item._nodeid``), which
    pytest 9 no longer reads (a node's id is ``item._id`` now): its groups came to nothing, and the
    loaded variants ran on both workers, two spinners at once. The id is appended here (the same
    id pytest-xdist means to make), and the ``load`` fixture fails should two ever overlap."""
    grouped = config.getoption("loadgroup", False)  # (a worker's: pytest-xdist sets it from --dist)
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("load") == "loaded":
            item.add_marker(pytest.mark.xdist_group("loaded"))
            if grouped and not item.nodeid.endswith("@loaded"):
                item._id = coerce_node_id(f"{item.nodeid}@loaded")


@pytest.fixture(params=["idle", "loaded"])
def load(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.param == "idle":
        yield "idle"
        return
    # One spinner at a time in the whole run (both workers: the run's temporary directory is the
    # parent of each worker's).
    with open(tmp_path_factory.getbasetemp().parent / "spinner.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pytest.fail("another loaded variant is running on the other worker: their xdist group was not applied")
        spinner = subprocess.Popen([sys.executable, "-m", "tests.e2e.load", str(os.getpid())], cwd=ROOT)
        try:
            yield "loaded"
        finally:
            spinner.kill()
            spinner.wait()
