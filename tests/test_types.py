"""`mypy --strict` passes on the packages that run on the server (STYLE.md, 9)."""

from __future__ import annotations

import subprocess
import sys

from server.config import ROOT


def test_shared_and_server_type_check_strictly() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "shared", "server"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
