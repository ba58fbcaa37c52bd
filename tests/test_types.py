"""`mypy --strict` passes on our packages (STYLE.md, 9): the server's, the shared one, and the
browser's (its `js` and `pyodide` typed by stubs/, as webapp/browser.py uses them)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from server.config import ROOT


def test_shared_server_and_webapp_type_check_strictly() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "shared", "server", "webapp"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_browser_globals_are_typed_not_any(tmp_path: Path) -> None:
    """``js`` is typed by stubs/js.pyi, not ``Any``: a page function called wrongly, a misspelt one
    and an unknown global are each an error (none would be with ``js`` untyped)."""
    (tmp_path / "uses_js.py").write_text(
        "import js\n"
        "\n"
        "js.chatView.setHtml('messages')\n"
        "js.chatView.setHTML('messages', '')\n"
        "js.notAGlobal.focus()\n"
        "js.chatView.morph('messages', '')\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--config-file", str(ROOT / "pyproject.toml"), "uses_js.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    reported = {int(line.split(":")[1]) for line in done.stdout.splitlines() if line.startswith("uses_js.py:") and ": error:" in line}
    assert reported == {3, 4, 5}, done.stdout


def test_a_new_event_type_or_payload_fails_type_checking_until_every_place_handles_it(tmp_path: Path) -> None:
    """The places that branch on event types (the reducer, the write path's validation) and on
    payloads (validation and footprints) end in ``assert_never``: a copy of the code with a test-only event type and a
    test-only payload added to the models, and nothing else, does not type-check, and mypy names
    each place."""
    for package in ("shared", "server"):
        shutil.copytree(ROOT / package, tmp_path / package)
    models = tmp_path / "shared" / "models.py"
    text = models.read_text()
    text = text.replace(
        '    ASSISTANT_RUN_CANCELLED = "AssistantRunCancelled"\n',
        '    ASSISTANT_RUN_CANCELLED = "AssistantRunCancelled"\n    TEST_ONLY = "TestOnly"\n',
    )
    text = text.replace("Payload = Chat | Message", "class TestOnlyRef(Wire):\n    id: str\n\n\nPayload = TestOnlyRef | Chat | Message")
    assert "TEST_ONLY" in text and "TestOnlyRef" in text
    models.write_text(text)
    # From what the whole-tree check above left in the cache, when it has run: the copy's files
    # other than the models have the same paths, sizes and times as the originals, so mypy checks
    # again only what the change reaches (a third of the time; everything when there is no cache).
    cache = tmp_path / "mypy-cache"
    if (ROOT / ".mypy_cache").is_dir():
        shutil.copytree(ROOT / ".mypy_cache", cache)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(cache), "--config-file", str(ROOT / "pyproject.toml"), "shared", "server"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0
    for place in ("shared/reducer.py", "server/validation.py"):  # every assert_never there is reported
        calls = {n for n, line in enumerate((ROOT / place).read_text().splitlines(), 1) if "assert_never(" in line}
        reported = {int(line.split(":")[1]) for line in done.stdout.splitlines() if line.startswith(place) and "assert_never" in line}
        assert calls and reported == calls, done.stdout
