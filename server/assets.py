"""What the browser loads from our own origin: the shell, Pyodide, wheels, and our Python as a zip.

The service worker's precache list and cache version are derived here from the files themselves,
so any change to what the browser runs installs a new service worker.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from server.config import ROOT

PYTHON_PACKAGES = ("shared", "webapp")

# Without a charset: the response adds "; charset=utf-8" to every text/* type itself.
CONTENT_TYPES = {
    ".wasm": "application/wasm",
    ".mjs": "text/javascript",
    ".js": "text/javascript",
    ".json": "application/json",
    ".webmanifest": "application/manifest+json",
    ".html": "text/html",
    ".css": "text/css",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".zip": "application/zip",
    ".whl": "application/zip",
}

# Files the shell needs, beside the vendored Pyodide core, idiomorph, wheels and lock file.
SHELL = (
    "index.html", "paint.js", "app.js", "pending.js", "files.js", "early-files.js", "python-start.js", "no-jspi.js",
    "storage.js", "view.js", "python-worker.js", "warm-worker.js", "hash-worker.js", "app.css", "manifest.webmanifest", "icon.svg",
    "vendor/highlight.css",
)  # fmt: skip
# Under vendor/pyodide/<version>/, as npm ships them; the standard library is set-up's trimmed
# copy, vendor/python_stdlib.zip (loadPyodide's stdLibURL).
PYODIDE_CORE = ("pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm")
STDLIB = "vendor/python_stdlib.zip"


# Vendor files whose URL changes whenever their content does: Pyodide, idiomorph and hash-wasm under their
# pinned version, wheels named with theirs. Everything else keeps its URL across versions.
VERSIONED = re.compile(r"vendor/(pyodide|idiomorph|hash-wasm)/\d[^/]*/[^/]+|vendor/wheels/[^/]+\.whl")


def content_type(path: str) -> str:
    return CONTENT_TYPES.get(Path(path).suffix, "application/octet-stream")


def immutable(path: str) -> bool:
    """Whether the static file at ``path`` (under /static/) may be cached for good."""
    return VERSIONED.fullmatch(path) is not None


_loaded: dict[Path, tuple[tuple[tuple[str, int, int], ...], Assets]] = {}  # static dir -> (its files' stats, what they gave)


def versioned_dir(static_dir: Path, name: str) -> str:
    """``vendor/<name>/<version>``: the one version set-up put there."""
    found = sorted(p.name for p in (static_dir / "vendor" / name).glob("*") if p.is_dir())
    if len(found) != 1:
        raise SystemExit(f"static/vendor/{name} holds {found or 'nothing'}: run scripts/setup")
    return f"vendor/{name}/{found[0]}"


def _bundle_sources(root: Path = ROOT) -> list[Path]:
    return [path for package in PYTHON_PACKAGES for path in sorted((root / package).rglob("*.py"))]


def python_bundle(root: Path = ROOT) -> bytes:
    """A zip of the ``shared`` and ``webapp`` packages, unpacked by the bootstrap into Pyodide.
    Stored, not deflated: it goes out br/gzip compressed, one stream over all the files (smaller)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as bundle:
        for path in _bundle_sources(root):
            info = zipfile.ZipInfo(str(path.relative_to(root)), date_time=(2020, 1, 1, 0, 0, 0))
            bundle.writestr(info, path.read_bytes(), zipfile.ZIP_STORED)
    return buffer.getvalue()


@dataclass(frozen=True)
class Assets:
    """What ``load`` derived from the files of a static directory (frozen: shared by the apps of
    a process while those files stay as they were)."""

    static_dir: Path
    bundle: bytes
    bundle_etag: str
    precache: tuple[str, ...]
    version: str

    @classmethod
    def load(cls, static_dir: Path) -> Assets:
        vendor = static_dir / "vendor"
        lock_path = vendor / "app-lock.json"
        if not lock_path.exists():
            raise SystemExit(
                f"{lock_path} is missing: run scripts/setup to fetch Pyodide and the browser wheels"
            )
        lock = json.loads(lock_path.read_text())
        wheels = [f"vendor/{p['file_name']}" for p in lock["packages"].values()]
        pyodide = versioned_dir(static_dir, "pyodide")
        idiomorph = versioned_dir(static_dir, "idiomorph")
        hash_wasm = versioned_dir(static_dir, "hash-wasm")
        files = [
            *SHELL, f"{idiomorph}/idiomorph.esm.js", f"{hash_wasm}/sha256.umd.min.js",
            *(f"{pyodide}/{f}" for f in PYODIDE_CORE), STDLIB,
            "vendor/app-lock.json", *wheels,
        ]  # fmt: skip
        # (Made again only when a file changed: the tests make an app for each test, and hashing
        # 20 MB each time was a tenth of a second of every one of them.)
        paths = [static_dir / name for name in files] + _bundle_sources()
        signature = tuple((str(p), stat.st_mtime_ns, stat.st_size) for p in paths for stat in [p.stat()])
        kept = _loaded.get(static_dir)
        if kept is not None and kept[0] == signature:
            return kept[1]
        bundle = python_bundle()
        digest = hashlib.sha256(bundle)
        bundle_etag = digest.hexdigest()[:32]  # (the bundle's own; the version goes on to the files)
        for name in files:
            digest.update(name.encode())
            digest.update(hashlib.sha256((static_dir / name).read_bytes()).digest())
        version = digest.hexdigest()[:16]
        urls = ["/", *(f"/static/{f}" for f in files if f != "index.html"), "/py/app.zip"]
        assets = cls(
            static_dir=static_dir,
            bundle=bundle,
            bundle_etag=bundle_etag,
            precache=tuple(urls),
            version=version,
        )
        _loaded[static_dir] = (signature, assets)
        return assets

    def service_worker(self) -> str:
        template = (self.static_dir / "sw.js").read_text()
        return template.replace("__VERSION__", self.version).replace(
            "__PRECACHE__", json.dumps(list(self.precache))
        )
