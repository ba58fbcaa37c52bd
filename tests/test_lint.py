"""`ruff check` passes with the rules pyproject.toml picks (pycodestyle, pyflakes, import order,
bugbear, pyupgrade) on all of our Python, and ESLint with eslint.config.mjs's (@eslint/js's
recommended, each file's globals) on our browser JavaScript, static/*.js."""

from __future__ import annotations

import subprocess
import sys

from server.config import ROOT


def test_ruff_finds_nothing() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_eslint_finds_nothing_in_our_javascript() -> None:
    """ESLint as scripts/setup --test installs it (package-lock.json's pins); warnings count too."""
    eslint = ROOT / "node_modules" / ".bin" / "eslint"
    assert eslint.exists(), "ESLint is not installed: run scripts/setup --test"
    done = subprocess.run([str(eslint), "--max-warnings", "0", "static/*.js"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
