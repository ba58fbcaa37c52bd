"""The browser's files come from our own origin, with the right types and cache headers."""

from __future__ import annotations

import io
import json
import re
import shutil
import zipfile
from pathlib import Path

from quart.typing import TestClientProtocol as Client

from server.assets import Assets, versioned_dir
from server.config import ROOT

PYODIDE = versioned_dir(ROOT / "static", "pyodide")


async def test_shell_and_vendored_assets_are_served_with_their_types(client: Client) -> None:
    expected = {
        "/": "text/html",
        "/static/app.js": "text/javascript",
        "/static/manifest.webmanifest": "application/manifest+json",
        f"/static/{PYODIDE}/pyodide.asm.wasm": "application/wasm",
        f"/static/{PYODIDE}/pyodide.mjs": "text/javascript",
        "/static/vendor/app-lock.json": "application/json",
        "/py/app.zip": "application/zip",
        "/sw.js": "text/javascript",
    }
    for path, kind in expected.items():
        response = await client.get(path)
        assert response.status_code == 200, path
        assert response.content_type.startswith(kind), (path, response.content_type)
        versioned = path.startswith(f"/static/{PYODIDE}/")
        assert response.headers["Cache-Control"] == ("public, max-age=31536000, immutable" if versioned else "no-cache"), path


async def test_wasm_revalidates_with_304(client: Client) -> None:
    first = await client.get(f"/static/{PYODIDE}/pyodide.asm.wasm")
    again = await client.get(f"/static/{PYODIDE}/pyodide.asm.wasm", headers={"If-None-Match": first.headers["ETag"]})
    assert again.status_code == 304


async def test_wheels_are_immutable_and_match_the_lock(client: Client) -> None:
    lock = json.loads((ROOT / "static/vendor/app-lock.json").read_text())
    assert {"pydantic", "pydantic-core"} <= set(lock["packages"])
    assert lock["info"]["abi_version"] == "2026_0"
    for package in lock["packages"].values():
        response = await client.get(f"/static/vendor/{package['file_name']}")
        assert response.status_code == 200
        assert "immutable" in response.headers["Cache-Control"]
    core = lock["packages"]["pydantic-core"]["file_name"]
    assert "pyemscripten_2026_0_wasm32" in core


async def test_the_python_bundle_holds_shared_and_webapp(client: Client) -> None:
    response = await client.get("/py/app.zip")
    names = zipfile.ZipFile(io.BytesIO(await response.get_data())).namelist()
    assert "shared/reducer.py" in names and "webapp/browser.py" in names
    assert not any(n.startswith("server/") for n in names)


async def test_the_service_worker_precaches_everything_under_one_version(client: Client) -> None:
    source = (await (await client.get("/sw.js")).get_data()).decode()
    version = re.search(r'const VERSION = "([0-9a-f]{16})"', source)
    precache = json.loads(re.search(r"const PRECACHE = (\[.*\]);", source).group(1))  # type: ignore[union-attr]
    assert version is not None
    assert "/" in precache and "/py/app.zip" in precache
    assert f"/static/{PYODIDE}/pyodide.asm.wasm" in precache
    for url in precache:
        assert (await client.get(url)).status_code == 200, url
        assert url.startswith("/"), "everything comes from our own origin"


def test_the_cache_version_follows_the_files(tmp_path: Path) -> None:
    static = tmp_path / "static"
    shutil.copytree(ROOT / "static", static)
    before = Assets.load(static)
    assert Assets.load(static).version == before.version
    (static / "app.css").write_text((static / "app.css").read_text() + "\n/* changed */\n")
    after = Assets.load(static)
    assert after.version != before.version
    assert after.version in after.service_worker() and before.version not in after.service_worker()


def test_pages_name_no_other_origin() -> None:
    for name in ("index.html", "app.js", "view.js", "sw.js", "manifest.webmanifest"):
        text = (ROOT / "static" / name).read_text()
        assert not re.search(r"https?://", text), name


async def test_the_openapi_description_and_its_docs_page(client: Client) -> None:
    spec = await (await client.get("/openapi.json")).get_json()
    assert spec["openapi"].startswith("3.1")
    assert {"/auth/signup", "/auth/login", "/auth/logout", "/sync/events", "/sync/updates", "/sync/state"} <= set(
        spec["paths"]
    )
    assert "DomainEvent" in spec["components"]["schemas"]
    assert "docs/protocol.md" in spec["info"]["description"] and (ROOT / "docs/protocol.md").is_file()  # the contract
    page = (await (await client.get("/docs")).get_data()).decode()
    assert "/openapi.json" in page and not re.search(r"https?://", page)  # nothing from elsewhere
