"""Content-Encoding by Accept-Encoding: static files (precompressed by set-up, or small ones in
memory), /py/app.zip, /sw.js, and /sync/state and /sync/updates; cache headers; the trimmed stdlib."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import zipfile
from pathlib import Path

import brotli
import pytest
from quart.typing import TestClientProtocol as Client

from server.assets import Assets, versioned_dir
from server.compression import GZIP_LEVEL, StaticFiles, negotiate
from server.config import ROOT
from tests.server.conftest import bearer, signup
from tests.server.events import chat_created, message, new_id

STATIC = ROOT / "static"
PYODIDE = versioned_dir(STATIC, "pyodide")
IDIOMORPH = versioned_dir(STATIC, "idiomorph")
IMMUTABLE = "public, max-age=31536000, immutable"


def decode(body: bytes, encoding: str | None) -> bytes:
    if encoding == "br":
        return bytes(brotli.decompress(body))
    if encoding == "gzip":
        return gzip.decompress(body)
    assert encoding is None, encoding
    return body


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, None),  # no header: the plain body
        ("", None),
        ("identity", None),
        ("gzip", "gzip"),
        ("br", "br"),
        ("gzip, deflate, br, zstd", "br"),  # (what Chromium sends) ours preferred among equals
        ("br;q=0.5, gzip", "gzip"),
        ("br;q=0.5, gzip;q=0.8", "gzip"),
        ("BR;Q=1, gzip;q=0.9", "br"),
        ("gzip;q=0, br;q=0", None),
        ("br;q=0", None),
        ("*", "br"),
        ("*;q=0.1, br;q=0", "gzip"),
        ("gzip;q=0.5, identity", None),  # identity named higher than every coding we have
        ("gzip;q=abc", None),  # a malformed q is 0
        ("deflate, zstd", None),  # none of ours
        (" , ;q=1, gzip ; q=0.7 ", "gzip"),
    ],
)
def test_negotiation_respects_q_values(header: str | None, expected: str | None) -> None:
    assert negotiate(header, ["br", "gzip"]) == expected


FILES = {
    # path: (content type, whether set-up precompressed it)
    f"/static/{PYODIDE}/pyodide.asm.wasm": "application/wasm",
    f"/static/{PYODIDE}/pyodide.asm.mjs": "text/javascript; charset=utf-8",
    "/static/vendor/python_stdlib.zip": "application/zip",
    "/static/app.js": "text/javascript; charset=utf-8",  # (compressed by the server, once)
    "/": "text/html; charset=utf-8",
    "/py/app.zip": "application/zip",
    "/sw.js": "text/javascript; charset=utf-8",
}


@pytest.mark.parametrize("path", list(FILES))
async def test_files_go_out_in_the_encoding_the_client_accepts(client: Client, path: str) -> None:
    plain = await client.get(path)
    assert plain.status_code == 200
    identity = await plain.get_data()
    assert "Content-Encoding" not in plain.headers
    assert plain.headers["Vary"] == "Accept-Encoding"
    assert int(plain.headers["Content-Length"]) == len(identity)
    if path.startswith("/static/") and path != "/static/app.js":
        assert identity == (STATIC / path.removeprefix("/static/")).read_bytes()
    etags = {plain.headers["ETag"]}
    for header, encoding in (("identity", None), ("gzip", "gzip"), ("gzip, deflate, br", "br"), ("br;q=0.1, gzip", "gzip")):
        response = await client.get(path, headers={"Accept-Encoding": header})
        body = await response.get_data()
        assert response.status_code == 200
        assert response.headers.get("Content-Encoding") == encoding, (path, header)
        assert response.headers["Content-Type"] == FILES[path]
        assert response.headers["Vary"] == "Accept-Encoding"
        assert int(response.headers["Content-Length"]) == len(body)
        assert decode(body, encoding) == identity
        if encoding is not None:
            assert len(body) < len(identity)
        etags.add(response.headers["ETag"])
        # The same ETag revalidates, in the same encoding; another encoding's does not.
        again = await client.get(path, headers={"Accept-Encoding": header, "If-None-Match": response.headers["ETag"]})
        assert again.status_code == 304 and await again.get_data() == b""
        assert again.headers["ETag"] == response.headers["ETag"]
        assert again.headers["Cache-Control"] == response.headers["Cache-Control"]
        other = "identity" if encoding else "br"
        moved = await client.get(path, headers={"Accept-Encoding": other, "If-None-Match": response.headers["ETag"]})
        assert moved.status_code == 200
    assert len(etags) == 3  # identity, gzip and br each have their own


async def test_versioned_vendor_files_are_immutable_and_the_shell_revalidates(client: Client) -> None:
    lock = json.loads((STATIC / "vendor/app-lock.json").read_text())
    immutable = [
        f"/static/{PYODIDE}/pyodide.mjs", f"/static/{PYODIDE}/pyodide.asm.mjs", f"/static/{PYODIDE}/pyodide.asm.wasm",
        f"/static/{IDIOMORPH}/idiomorph.esm.js", *(f"/static/vendor/{p['file_name']}" for p in lock["packages"].values()),
        *(f"/static/{p.relative_to(STATIC)}" for p in (STATIC / "vendor/hash-wasm").glob("*/sha256.umd.min.js")),
    ]  # fmt: skip
    revalidated = [
        "/", "/sw.js", "/py/app.zip", "/static/app.js", "/static/index.html", "/static/vendor/app-lock.json",
        "/static/vendor/python_stdlib.zip", "/static/vendor/highlight.css",
    ]  # fmt: skip
    for path in immutable:
        response = await client.get(path, headers={"Accept-Encoding": "br, gzip"})
        assert response.status_code == 200 and response.headers["Cache-Control"] == IMMUTABLE, path
    for path in revalidated:
        response = await client.get(path, headers={"Accept-Encoding": "br, gzip"})
        assert response.status_code == 200 and response.headers["Cache-Control"] == "no-cache", path


def test_the_pages_load_pyodide_and_idiomorph_from_the_versioned_paths() -> None:
    """The immutable URLs change with the pins: what set-up made is what the pages name."""
    for name in ("python-start.js", "python-worker.js", "warm-worker.js"):
        text = (STATIC / name).read_text()
        assert f'from "/static/{PYODIDE}/pyodide.mjs"' in text, name
        assert set(re.findall(r"/static/vendor/pyodide/[^/\"'`]*/", text)) == {f"/static/{PYODIDE}/"}, name
        if name != "warm-worker.js":  # (which is given the page's options)
            assert 'stdLibURL: "/static/vendor/python_stdlib.zip"' in text, name  # (no query string: a stable URL)
    assert "/static/vendor/pyodide/" not in (STATIC / "app.js").read_text()  # (python-start.js starts it)
    assert f'from "/static/{IDIOMORPH}/idiomorph.esm.js"' in (STATIC / "view.js").read_text()
    setup = (ROOT / "scripts/setup").read_text()
    pins = dict(re.findall(r"^(PYODIDE_VERSION|IDIOMORPH_VERSION|HASH_WASM_VERSION)=(\S+)", setup, re.M))
    assert PYODIDE == f"vendor/pyodide/{pins['PYODIDE_VERSION']}"
    assert IDIOMORPH == f"vendor/idiomorph/{pins['IDIOMORPH_VERSION']}"
    hash_wasm = f"/static/vendor/hash-wasm/{pins['HASH_WASM_VERSION']}/sha256.umd.min.js"
    assert f'importScripts("{hash_wasm}")' in (STATIC / "hash-worker.js").read_text()
    precache = Assets.load(STATIC).precache
    assert f"/static/{PYODIDE}/pyodide.asm.wasm" in precache and "/static/vendor/python_stdlib.zip" in precache
    assert f"/static/{IDIOMORPH}/idiomorph.esm.js" in precache and hash_wasm in precache
    assert "/static/hash-worker.js" in precache


async def test_precompressed_variants_are_not_served_by_their_own_names(client: Client) -> None:
    assert (STATIC / PYODIDE / "pyodide.asm.wasm.br").exists()
    for suffix in (".br", ".gz"):
        response = await client.get(f"/static/{PYODIDE}/pyodide.asm.wasm{suffix}")
        assert response.status_code == 404
        assert (await response.get_json())["error"] == "not_found"
    for path in ("/static/../server/app.py", "/static/vendor/", "/static/%2e%2e/pyproject.toml"):
        assert (await client.get(path)).status_code == 404, path


async def test_a_stale_precompressed_variant_is_ignored(tmp_path: Path) -> None:
    big = tmp_path / "big.js"
    big.write_bytes(b"let x = 1;\n" * 100_000)  # over the in-memory limit
    small = tmp_path / "small.js"
    small.write_bytes(b"let y = 2;\n" * 1000)
    for path in (big, small):
        path.with_name(path.name + ".gz").write_bytes(gzip.compress(b"old content"))
        os.utime(path, ns=(path.stat().st_mtime_ns + 10**9, path.stat().st_mtime_ns + 10**9))  # edited since
    files = StaticFiles(tmp_path)
    assert set((await files.encoded(big)).variants) == {None}  # never compressed per request
    variants = (await files.encoded(small)).variants  # compressed in memory, from the file as it is now
    assert set(variants) == {None, "br", "gzip"}
    assert gzip.decompress(variants["gzip"].data or b"") == small.read_bytes()
    fresh = big.with_name("big.js.gz")
    fresh.write_bytes(gzip.compress(big.read_bytes()))
    os.utime(fresh, ns=(big.stat().st_mtime_ns + 1, big.stat().st_mtime_ns + 1))
    assert set((await files.encoded(big)).variants) == {None, "gzip"}


async def test_sync_responses_are_gzipped_only_when_accepted(client: Client) -> None:
    session = await signup(client)
    chat = new_id()
    batch = [chat_created(chat), *(message("MessageAppended", new_id(), chat, f"message {n} " * 20) for n in range(20))]
    response = await client.post("/sync/events", json={"events": batch}, headers=bearer(session))
    assert response.status_code == 200
    for path in ("/sync/updates?afterSeq=0", "/sync/state", "/sync/state?limit=5"):
        plain = await client.get(path, headers=bearer(session))
        identity = await plain.get_data()
        assert plain.status_code == 200 and "Content-Encoding" not in plain.headers
        assert plain.headers["Vary"] == "Accept-Encoding"
        assert plain.headers["Content-Type"] == "application/json"
        for header in ("identity", "br", "gzip;q=0", "deflate"):
            same = await client.get(path, headers={**bearer(session), "Accept-Encoding": header})
            assert "Content-Encoding" not in same.headers, header
            assert await same.get_data() == identity
        zipped = await client.get(path, headers={**bearer(session), "Accept-Encoding": "gzip, deflate, br"})
        body = await zipped.get_data()
        assert zipped.headers["Content-Encoding"] == "gzip"
        assert zipped.headers["Vary"] == "Accept-Encoding"
        assert int(zipped.headers["Content-Length"]) == len(body) < len(identity)
        assert gzip.decompress(body) == identity  # (byte for byte)
    assert GZIP_LEVEL == 1


async def test_a_small_sync_response_is_sent_plain(client: Client) -> None:
    session = await signup(client)
    response = await client.get("/sync/updates?afterSeq=0", headers={**bearer(session), "Accept-Encoding": "gzip"})
    assert response.status_code == 200 and "Content-Encoding" not in response.headers
    assert response.headers["Vary"] == "Accept-Encoding"
    error = await client.get("/sync/updates?afterSeq=-1", headers={**bearer(session), "Accept-Encoding": "gzip"})
    assert error.status_code == 400


def test_the_trimmed_stdlib_lacks_what_the_app_never_imports() -> None:
    original = zipfile.ZipFile(next((ROOT / "build").glob("python_stdlib-*.zip")))
    trimmed = zipfile.ZipFile(STATIC / "vendor/python_stdlib.zip")
    names = trimmed.namelist()
    tops = {n.split("/")[0] for n in names}
    for gone in ("unittest", "doctest.py", "pdb.py", "pydoc.py", "_pyrepl", "multiprocessing", "wsgiref", "xmlrpc",
                 "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data", "test"):  # fmt: skip
        assert gone not in tops, gone
    assert not [n for n in names if re.search(r"(^|/)(tests?|idle_test)/", n)]
    for kept in ("asyncio", "json", "sqlite3", "email", "encodings", "zipfile", "typing.py", "statistics.py",
                 "pyodide", "_pyodide", "importlib", "html", "re", "dataclasses.py"):  # fmt: skip
        assert kept in tops, kept
    assert len(names) < len(original.namelist())
    assert all(i.compress_type == zipfile.ZIP_STORED for i in trimmed.infolist())  # (br/gzip compress it whole)
    for name in ("asyncio/__init__.py", "typing.py"):
        assert trimmed.read(name) == original.read(name)


def test_the_wheels_are_stored_and_unchanged_inside() -> None:
    for wheel in (STATIC / "vendor/wheels").glob("*.whl"):
        with zipfile.ZipFile(wheel) as z:
            assert all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist()), wheel.name
            assert z.testzip() is None
    bundle = zipfile.ZipFile(io.BytesIO(Assets.load(STATIC).bundle))
    assert all(i.compress_type == zipfile.ZIP_STORED for i in bundle.infolist())
