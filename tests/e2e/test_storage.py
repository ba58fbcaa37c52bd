"""The local database's storage in IndexedDB (static/storage.js): a database that an earlier
version stored whole in an IDBFS database is carried over into chunks, with nothing lost."""

from __future__ import annotations

import uuid

from playwright.sync_api import Browser, expect

from tests.e2e.pages import BOOT_TIMEOUT, open_app, send, sign, wait_for_service_worker
from tests.processes import Server

# In the running app: stop it, and store its database the way the IDBFS version did (the file
# whole, in an IndexedDB database named after the mount point /data), with no chunks left.
STORE_AS_IDBFS = """async () => {
  await pyodide.runPythonAsync(
    "chat_client.stop()\\nchat_client.store.conn.execute('PRAGMA wal_checkpoint(TRUNCATE)')");
  const FS = pyodide.FS;
  const bytes = FS.readFile("/data/chat.db");
  FS.mount(FS.filesystems.IDBFS, {}, "/data");
  FS.writeFile("/data/chat.db", bytes);
  await new Promise((resolve, reject) => FS.syncfs(false, (e) => (e ? reject(e) : resolve())));
  FS.unmount("/data");
  await new Promise((resolve, reject) => {
    const deleting = indexedDB.deleteDatabase("chat-files");
    deleting.onsuccess = resolve;
    deleting.onerror = () => reject(deleting.error);
  });
  return (await indexedDB.databases()).map((d) => d.name).sort();
}"""


def test_a_database_stored_whole_by_the_idbfs_version_is_carried_over(browser: Browser, server: Server) -> None:
    context = browser.new_context(base_url=server.url)
    page = context.new_page()
    open_app(page)
    sign(page, f"upgrade{uuid.uuid4().hex[:8]}", "a long password", signup=True)
    wait_for_service_worker(page)
    page.click("[data-action=new-chat]")
    send(page, "sent before the upgrade")
    expect(page.locator(".message:not(.pending)", has_text="sent before the upgrade")).to_be_visible()
    context.set_offline(True)
    send(page, "still in the outbox")
    expect(page.locator(".message.pending", has_text="still in the outbox")).to_be_visible()

    assert page.evaluate(STORE_AS_IDBFS) == ["/data"]

    page.reload()  # offline: the service worker serves the new version, which finds the old copy
    page.wait_for_selector("body[data-ready=true]", timeout=BOOT_TIMEOUT)
    expect(page.locator(".message:not(.pending)", has_text="sent before the upgrade")).to_be_visible()
    expect(page.locator(".message.pending", has_text="still in the outbox")).to_be_visible()
    page.wait_for_function("() => indexedDB.databases().then((all) => all.every((d) => d.name !== '/data'))")

    page.reload()  # from the chunks now
    page.wait_for_selector("body[data-ready=true]", timeout=BOOT_TIMEOUT)
    expect(page.locator(".message.pending", has_text="still in the outbox")).to_be_visible()
    context.set_offline(False)
    expect(page.locator(".message.pending")).to_have_count(0, timeout=20_000)
    for text in ("sent before the upgrade", "still in the outbox"):  # each once (whatever answered them)
        expect(page.locator(".message", has=page.get_by_text(text, exact=True))).to_have_count(1)
    context.close()
