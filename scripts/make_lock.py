"""Write ``app-lock.json``: Pyodide's lock ``info`` plus one entry per wheel we serve.

Pyodide resolves ``loadPyodide({lockFileURL, packages})`` against this file and checks every
wheel's sha256 (SRI), so the hashes are of the exact files in ``<vendor>/wheels``.
Usage: python scripts/make_lock.py static/vendor static/vendor/pyodide/<version>/pyodide-lock.json
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import zipfile
from email.parser import Parser
from pathlib import Path


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_entry(path: Path) -> dict[str, object]:
    with zipfile.ZipFile(path) as wheel:
        meta_name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(wheel.read(meta_name).decode())
        top_level = sorted(
            {n.split("/")[0] for n in wheel.namelist() if not n.split("/")[0].endswith(".dist-info")}
        )
    requires = [
        canonical(re.split(r"[ ;<>=!~\[(]", req, maxsplit=1)[0])
        for req in meta.get_all("Requires-Dist") or []
        if "extra ==" not in req
    ]
    imports = [t.removesuffix(".py") for t in top_level if not t.endswith(".pth")]
    return {
        "name": canonical(meta["Name"]),
        "version": meta["Version"],
        "file_name": f"wheels/{path.name}",
        "install_dir": "site",
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "package_type": "package",
        "imports": imports,
        "depends": requires,
        "unvendored_tests": False,
    }


def main(vendor: Path, pyodide_lock: Path) -> None:
    info = json.loads(pyodide_lock.read_text())["info"]
    entries = [wheel_entry(p) for p in sorted((vendor / "wheels").glob("*.whl"))]
    names = {e["name"] for e in entries}
    for entry in entries:
        missing = set(entry["depends"]) - names  # type: ignore[arg-type]
        if missing:
            raise SystemExit(f"{entry['name']} needs {sorted(missing)}, which no wheel provides")
    lock = {"info": info, "packages": {str(e["name"]): e for e in entries}}
    (vendor / "app-lock.json").write_text(json.dumps(lock, indent=1))
    print(f"wrote {vendor / 'app-lock.json'} with {len(entries)} packages")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
