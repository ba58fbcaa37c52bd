"""scripts/slim_assets.py compress, as set-up runs it: a .br and a .gz beside each file, and a body
compressed before (in any checkout) copied from the cache rather than compressed again."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import brotli

from server.config import ROOT


def _compress(directory: Path, cache_home: Path) -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts/slim_assets.py"), "compress", str(directory)],
        env={**os.environ, "XDG_CACHE_HOME": str(cache_home)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_second_checkout_gets_its_variants_from_the_cache(tmp_path: Path) -> None:
    data = b"".join(b"line %d of a file worth compressing\n" % n for n in range(2000))
    first, second = tmp_path / "first", tmp_path / "second"
    for checkout in (first, second):
        checkout.mkdir()
        (checkout / "app.js").write_bytes(data)
        (checkout / "tiny.js").write_bytes(b"x")  # (compression would not make it smaller)
    cache = tmp_path / "cache"
    _compress(first, cache)
    kept = sorted((cache / "offline-chat" / "compressed").iterdir())
    assert len(kept) == 4, kept  # (both files, both encodings: a skip is decided from the body)
    assert brotli.decompress((first / "app.js.br").read_bytes()) == data
    assert gzip.decompress((first / "app.js.gz").read_bytes()) == data
    assert (first / "tiny.js.br.skip").exists() and not (first / "tiny.js.br").exists()

    # The cache's bodies are what the second checkout gets: tampered with here, they show up there.
    for body in kept:
        if body.name.endswith(".br-q11-w24") and len(body.read_bytes()) > 10:
            body.write_bytes(brotli.compress(data + b"from the cache"))
    _compress(second, cache)
    assert brotli.decompress((second / "app.js.br").read_bytes()) == data + b"from the cache"
    assert gzip.decompress((second / "app.js.gz").read_bytes()) == data
    assert (second / "tiny.js.gz.skip").exists()

    # A variant newer than its file is kept: a run with nothing to do writes nothing.
    assert _compress(second, cache) == ""
