"""The same ``shared`` reducer gives the same results under Pyodide (in Node.js) as under CPython."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from server.assets import python_bundle
from server.config import ROOT
from tests.shared.vectors import DESCRIBE, VECTORS

VENDOR = ROOT / "static" / "vendor"


def run_in_pyodide(tmp_path: Path, script: str) -> dict[str, Any]:
    assert (VENDOR / "app-lock.json").exists(), "browser assets missing: run scripts/setup first"
    bundle = tmp_path / "bundle.zip"
    bundle.write_bytes(python_bundle())
    source = tmp_path / "script.py"
    source.write_text(script)
    done = subprocess.run(
        ["node", str(Path(__file__).with_name("pyodide_run.mjs")), str(VENDOR), str(bundle), str(source)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def test_reducer_matches_under_pyodide(tmp_path: Path) -> None:
    script = DESCRIBE + f"\nresult = [describe(v) for v in json.loads({json.dumps(json.dumps(VECTORS))})]\n"
    namespace: dict[str, Any] = {}
    exec(script, namespace)
    # JSON round trip: tuples become lists, as they do on the Pyodide side.
    expected = json.loads(json.dumps(namespace["result"]))

    pyodide = run_in_pyodide(tmp_path, script)

    assert pyodide["version"].startswith("3.14"), pyodide["version"]
    assert pyodide["result"] == expected
    assert len(expected) == len(VECTORS)
