"""The service worker in Chromium: a first visit downloads each file once (the worker's precache
included, counted by a proxy in front of the server), and a new version installs and is taken
with the "Reload" banner. One test, so that one cold boot serves both."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from server.assets import versioned_dir
from server.config import ROOT
from tests.bench.first_visit import CountingProxy
from tests.e2e.pages import BOOT_TIMEOUT, open_app, wait_for_next_start, wait_for_service_worker
from tests.processes import Server

WASM = f"/static/{versioned_dir(ROOT / 'static', 'pyodide')}/pyodide.asm.wasm"


@pytest.fixture
def own_static(tmp_path: Path) -> Iterator[tuple[Server, Path]]:
    """A server of its own over a copy of the shell (the vendor files linked), to change a file."""
    static = tmp_path / "static"
    shutil.copytree(ROOT / "static", static, ignore=shutil.ignore_patterns("vendor"))
    (static / "vendor").symlink_to(ROOT / "static" / "vendor")
    running = Server(f"sqlite:///{tmp_path / 'chat.db'}", tmp_path / "server.log", static_dir=str(static))
    running.start()
    yield running, static
    running.stop()


def test_a_first_visit_downloads_each_file_once_and_a_new_version_installs(
    browser: Browser, own_static: tuple[Server, Path]
) -> None:
    server, static = own_static
    with CountingProxy(server.port) as proxy:
        context = browser.new_context(base_url=proxy.url)
        page = context.new_page()
        open_app(page)
        wait_for_service_worker(page)  # (it activates once its precache is complete)
        wait_for_next_start(page)  # the last of a first visit: nothing more is fetched after it
        twice = {path: n for path, n in proxy.downloads.items() if n > 1 and path.startswith(("/static/", "/py/"))}
        assert twice == {}, twice
        assert proxy.downloads[WASM] == 1
        assert proxy.received[WASM] < 3_000_000  # brotli, precompressed: 9.6 MB as it is
        assert proxy.total_received < 8_000_000, proxy.total_received

        css = "() => fetch('/static/app.css').then((r) => r.text())"
        assert "/* version 2 */" not in page.evaluate(css)
        server.stop()  # a new version: one file changed
        (static / "app.css").write_text((static / "app.css").read_text() + "\n/* version 2 */\n")
        server.start()
        page.reload()  # the old worker serves the page; the browser finds the new one and installs it
        page.wait_for_selector("body[data-ready=true]", timeout=BOOT_TIMEOUT)
        expect(page.locator("#update")).to_be_visible(timeout=30_000)
        assert "/* version 2 */" not in page.evaluate(css)  # (the old version until asked)
        with page.expect_navigation():
            page.get_by_role("button", name="Reload").click()
        page.wait_for_selector("body[data-ready=true]", timeout=BOOT_TIMEOUT)
        expect(page.locator("#update")).to_be_hidden()
        assert "/* version 2 */" in page.evaluate(css)
        context.close()
