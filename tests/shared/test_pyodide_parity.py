"""The same ``shared`` reducer gives the same results under Pyodide (in Node.js) as under CPython;
and the text of a PDF (shared/pdf.py, with the vendored pypdf) is the same too."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path
from typing import Any

from server.assets import python_bundle
from server.config import ROOT
from shared.pdf import pdf_text
from tests.server.test_runs_attachments import minimal_pdf
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


def test_a_pdfs_text_is_the_same_under_pyodide_without_pydantic(tmp_path: Path) -> None:
    """What the browser's Python worker runs for "Model on this device" (static/python-worker.js:
    the standard library and pypdf, no pydantic): the server's text, byte for byte."""
    pdf = minimal_pdf("Quarterly figures, page one")
    script = (
        "import base64, sys\n"
        "from shared.pdf import pdf_text\n"
        f"result = [pdf_text(base64.b64decode({base64.b64encode(pdf).decode()!r})), pdf_text(b'%PDF-1.4 broken'),\n"
        "          'pydantic' in sys.modules]\n"
    )
    assert run_in_pyodide(tmp_path, script)["result"] == [pdf_text(pdf), None, False]
    assert pdf_text(pdf) == "Quarterly figures, page one"
