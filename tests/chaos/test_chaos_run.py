"""``python -m server chaos`` itself, as CI runs it: 60 seconds of two server processes on one
PostgreSQL, four engine devices and one browser, every fault of the nemesis, and no anomaly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from server.chaos.browsers import apps_own
from server.chaos.checker import check
from server.chaos.history import load
from server.chaos.options import KINDS
from server.config import ROOT
from tests.conftest import POSTGRES_URL


def test_a_minute_of_chaos_on_two_servers_finds_no_anomaly(tmp_path: Path) -> None:
    history = tmp_path / "history.jsonl"
    command = [
        sys.executable, "-m", "server", "chaos", "--seconds", "60", "--servers", "2", "--devices", "4", "--browsers", "1",
        "--database-url", POSTGRES_URL, "--seed", "22", "--history", str(history), "--heal-seconds", "180",
    ]  # fmt: skip
    # (The run bounds its every wait, so it ends well within this; if it does not, the run and all
    # it started are killed, and what its history holds last says where it was.)
    run = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = run.communicate(timeout=480)
    except subprocess.TimeoutExpired:
        run.send_signal(signal.SIGUSR1)  # (it prints where each of its tasks waits)
        time.sleep(2)
        os.killpg(run.pid, signal.SIGKILL)
        stdout, stderr = run.communicate()
        last = history.read_text().splitlines()[-40:] if history.exists() else []
        said = "\n".join(last) + "\n" + stderr[-8000:]
        raise AssertionError(f"the chaos run did not end in 480 s; its history ends, then where it waited:\n{said}") from None
    assert run.returncode == 0, stdout + stderr[-3000:]
    assert "anomalies: 0 " in stdout
    records = load(history)
    faults = {r["kind"] for r in records if r["op"] == "fault"}
    assert faults == set(KINDS), faults  # (in rounds: every kind once a round, server/chaos/nemesis.py)
    did = {r["what"] for r in records if r["op"] == "did"}
    assert {"write", "ask", "edit", "stop", "retry", "queue", "attach", "browser-send"} <= did, did
    assert check(records).anomalies == 0
    # What the page logged as errors: only the network's (a server down, a session ended, a file
    # not uploaded yet), never the app's own (an action that failed, a CSP refusal).
    logged = [r["text"] for r in records if r["op"] == "console"]
    assert apps_own(logged) == [], logged
    finals = [r for r in records if r["op"] == "final"]
    assert len(finals) == 6 and all(len(r["messages"]) > 20 for r in finals)


def test_what_chromium_logs_when_the_network_fails_is_not_counted_as_the_apps() -> None:
    """Seen in a loaded run of the chaos minute: a killed server reset a live socket's handshake,
    which Chromium logs as an error in its own words; the app's own errors still count."""
    logged = [
        "Failed to load resource: the server responded with a status of 401 ()",
        "WebSocket connection to 'ws://127.0.0.1:34263/sync/live?afterSeq=366' failed: Error during WebSocket handshake: net::ERR_CONNECTION_RESET",
        "The app could not start: reload to try again. TypeError: x is undefined",
    ]
    assert apps_own(logged) == [logged[2]]
