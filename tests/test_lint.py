"""`ruff check` passes with the rules pyproject.toml picks (pycodestyle, pyflakes, import order,
bugbear, pyupgrade) on all of our Python."""

from __future__ import annotations

import subprocess
import sys

from server.config import ROOT


def test_ruff_finds_nothing() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
