"""Attaching files in the client (webapp/app.py, webapp/files.py) under CPython: the page's side
(static/files.js: the held files and the IndexedDB store they are kept in) is ``Disk``, which
outlives a reload as IndexedDB does; what the page then draws is tests/e2e/test_attachments.py's."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import os
import tarfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from quart import Quart

from server.app import create_app
from server.transfer import EXPORT_MEMBER, _read_tar
from server.transfer import FILES as FILES_MEMBERS
from shared.assistants import Turn
from shared.followups import MAX_QUEUED
from shared.ids import Uuid7Generator
from shared.prompt import MAX_FILE_CHARS, PdfReader
from tests.server.test_runs_attachments import minimal_pdf
from tests.waiting import until
from tests.webapp.inprocess import InProcessTransport
from tests.webapp.page import FakePage
from tests.webapp.test_client import TICKS, EchoModel, FakeAuth, OfflineTransport
from tests.webapp.test_uploads import Network, app, new_account, no_wait, pattern, settings_for  # noqa: F401 (app: a fixture)
from webapp import ui, uploads
from webapp.app import Client, Services
from webapp.assistants import DEVICE_MODEL_ID, DeviceModel
from webapp.database import FilePersistence
from webapp.files import OFFLINE, Files
from webapp.store import LocalStore
from webapp.sync import SyncEngine
from webapp.transport import AssistantInfo, NetworkError
from webapp.uploads import Chunk, UploadEngine

T = "2026-12-04T12:00:00.000Z"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(200)


class Disk:
    """The page's files: those held since they were picked (by token) and those kept in
    IndexedDB (by SHA-256). ``FilesHost`` and ``BlobSource`` both."""

    def __init__(self) -> None:
        self.held: dict[str, tuple[bytes, str]] = {}
        self.kept: dict[str, bytes] = {}
        self.sliced = 0  # the most bytes Python asked for at once
        self.hashes = True  # (False: the page's worker fails, Python hashes the file itself)
        self.exported: tuple[str, bytes] | None = None

    def hold(self, data: bytes, mime: str) -> str:
        token = f"held-{len(self.held)}"
        self.held[token] = (data, mime)
        return token

    async def digest(self, token: str) -> str:
        if not self.hashes:
            raise RuntimeError("the hashing worker failed")
        return hashlib.sha256(self.held[token][0]).hexdigest()  # (as the page's worker does, a slice at a time)

    async def slice(self, token: str, start: int, end: int) -> bytes:
        self.sliced = max(self.sliced, end - start)
        return self.held[token][0][start:end]

    async def keep(self, token: str, sha256: str) -> None:
        self.kept[sha256] = self.held[token][0]

    async def image_size(self, token: str) -> tuple[int, int] | None:
        return (640, 480) if self.held[token][1] == "image/png" else None

    def held_url(self, token: str, sha256: str) -> str:
        return f"blob:held/{sha256}"

    def preview_url(self, token: str) -> str:
        return f"blob:preview/{token}"

    def release(self, token: str) -> None:
        self.held.pop(token, None)

    async def clear(self) -> None:
        self.kept.clear()

    async def want(self, sha256: str) -> tuple[str | None, str | None]:
        return (f"blob:kept/{sha256}", None) if sha256 in self.kept else (None, "offline")

    async def export(self, filename: str, text: str, digests: list[str]) -> list[str]:
        """As the page does: a tar of the JSON and the files kept here (the CLI's format)."""
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for name, data in [(EXPORT_MEMBER, text.encode())] + [(FILES_MEMBERS + d, self.kept[d]) for d in digests if d in self.kept]:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        self.exported = (filename, out.getvalue())
        return [d for d in digests if d not in self.kept]

    def hold_export(self, raw: bytes) -> tuple[str, list[dict[str, object]]]:
        """As the page does with a tar chosen to import: its JSON, and its files held."""
        text, files = _read_tar(raw)
        return text.decode(), [{"token": self.hold(data, ""), "sha256": d, "size": len(data)} for d, data in files.items()]

    async def file_bytes(self, sha256: str, most: int | None) -> bytes | None:
        data = self.kept.get(sha256)
        return None if data is None else data[:most]

    async def size(self, sha256: str) -> int | None:
        data = self.kept.get(sha256)
        return None if data is None else len(data)

    async def read(self, sha256: str, offset: int, length: int) -> Chunk:
        data = self.kept[sha256][offset : offset + length]
        return Chunk(len(data), data)


class Listing(OfflineTransport):
    """Offline, but the server listed its assistants once: one reads images, one does not."""

    async def assistants(self) -> list[AssistantInfo]:  # type: ignore[override]
        return [AssistantInfo("demo", "Demo model", "remote", "demo"), AssistantInfo("eyes", "Eyes", "remote", "eyes", vision=True)]


def client_on(path: Path, disk: Disk, transport: object | None = None) -> tuple[Client, FakePage]:
    page = FakePage()
    services = Services(
        store=LocalStore(str(path), FilePersistence()),
        view=page,
        auth=FakeAuth(),
        transport=transport or OfflineTransport(),  # type: ignore[arg-type]
        new_id=Uuid7Generator(TICKS.__next__, os.urandom),
        now=lambda: T,
        schedule_frame=page.schedule_frame,
        files=disk,
    )
    return Client(services), page


async def signed_in(path: Path, disk: Disk, transport: object | None = None) -> tuple[Client, FakePage]:
    client, page = client_on(path, disk, transport)
    await client.dispatch("signin", {"username": "ann", "password": "right one"})
    await client.dispatch("new-chat", {})
    return client, page


async def attach(client: Client, disk: Disk, data: bytes, name: str, mime: str) -> None:
    token = disk.hold(data, mime)
    await client.dispatch("attach", {"chat": client.selected, "files": [{"token": token, "name": name, "type": mime, "size": len(data)}]})


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def test_attached_files_are_kept_before_the_draft_names_them_and_come_back_after_a_reload(tmp_path: Path) -> None:
    disk = Disk()
    client, page = await signed_in(tmp_path / "local.db", disk)
    chat = client.selected or ""
    notes = pattern(3 * 1024 * 1024 + 5, seed=1)
    await attach(client, disk, PNG, "cat.png", "image/png")
    await attach(client, disk, notes, "notes.txt", "text/plain")
    assert disk.sliced == 0  # hashed by the page: no byte of it came into Python
    disk.hashes = False  # the page's worker failing: Python hashes a slice at a time, never the whole file
    await attach(client, disk, notes + b"!", "more.txt", "text/plain")
    assert disk.sliced == 1024 * 1024 and client.store.draft_files(chat)[-1].sha256 == sha(notes + b"!")
    await client.dispatch("remove-file", {"sha256": sha(notes + b"!")})
    disk.kept.pop(sha(notes + b"!"))
    assert set(disk.kept) == {sha(PNG), sha(notes)} and not disk.held  # kept, and let go of by the page
    chips = page.regions["composer-files"]
    assert 'aria-label="Remove cat.png"' in chips and 'aria-label="Remove notes.txt"' in chips
    assert "3.0 MB" in chips and f'src="blob:held/{sha(PNG)}"' in chips
    assert ">Draft<" in page.regions["chat-list"]
    [image, text] = client.store.draft_files(chat)
    assert (image.width, image.height, text.width) == (640, 480, None)

    client.store.close()  # the tab is closed (or killed): the draft and IndexedDB stay
    client, page = client_on(tmp_path / "local.db", disk)
    client.start()
    await client.dispatch("select-chat", {"id": chat})
    await _settle()  # (the page said where the file is)
    chips = page.regions["composer-files"]
    assert 'aria-label="Remove cat.png"' in chips and 'aria-label="Remove notes.txt"' in chips
    assert f'src="blob:kept/{sha(PNG)}"' in chips  # shown from IndexedDB now
    await client.dispatch("remove-file", {"sha256": sha(notes)})
    assert "notes.txt" not in page.regions["composer-files"] and [a.name for a in client.store.draft_files(chat)] == ["cat.png"]


async def test_a_file_over_the_limit_is_refused_in_words_and_nothing_typed_is_lost(tmp_path: Path) -> None:
    disk = Disk()
    client, page = await signed_in(tmp_path / "local.db", disk)
    chat = client.selected or ""
    await client.dispatch("draft", {"text": "the report, attached", "chat": chat})
    client.files.max_file_bytes = 1000
    await attach(client, disk, bytes(1001), "report.pdf", "application/pdf")
    assert "report.pdf is 1001 bytes: the largest file the server takes is 1000 bytes." in page.regions["composer-files"]
    assert 'role="alert"' in page.regions["composer-files"]
    assert not disk.kept and not disk.held and client.store.draft_files(chat) == []
    assert client.store.draft(chat) == "the report, attached"


async def test_the_servers_largest_file_is_learnt_online_and_kept_for_offline_starts(database_url: str, tmp_path: Path) -> None:
    small = create_app(settings_for(database_url, max_file_bytes=1000))
    async with small.test_app():
        _, token = await new_account(small)
        disk = Disk()
        client, page = await signed_in(tmp_path / "local.db", disk, InProcessTransport(small.test_client(use_cookies=False), token))
        client._on_online()  # (as the sync engine calls it)
        await until(lambda: client.files.max_file_bytes == 1000)
    client.store.close()
    client, page = client_on(tmp_path / "local.db", disk)  # offline from the start
    client.start()
    await attach(client, disk, bytes(1001), "big.bin", "application/octet-stream")
    assert "big.bin is 1001 bytes: the largest file the server takes is 1000 bytes." in page.regions["composer-files"]


class Remembered:
    """What Python hands the page for its screen before Python (Services.remember_*)."""

    def __init__(self) -> None:
        self.rooms: list[int | None] = []
        self.notes: list[dict[str, str | None]] = []


def client_with_uploads(path: Path, disk: Disk, transport: object, remembered: Remembered) -> tuple[Client, FakePage]:
    page = FakePage()
    services = Services(
        store=LocalStore(str(path), FilePersistence()), view=page, auth=FakeAuth(), transport=transport,  # type: ignore[arg-type]
        new_id=Uuid7Generator(TICKS.__next__, os.urandom), now=lambda: T, schedule_frame=page.schedule_frame,
        files=disk, blobs=disk, remember_room=remembered.rooms.append, remember_image_notes=remembered.notes.append,
    )  # fmt: skip
    return Client(services), page


async def test_a_file_over_what_the_account_may_still_upload_is_refused_in_words_and_nothing_typed_is_lost(
    database_url: str, tmp_path: Path
) -> None:
    """The server says what the account may still upload (OPTIONS /blobs, Upload-Account-Free),
    asked when online and once the uploads are done, never while one is under way (the server
    counts it, and so does the client); the client takes off what it has not uploaded yet (the
    drafts' files and those queued) and refuses a file over the rest, in words, before anything
    is kept. The figure is kept for offline starts, and handed to the page for its screen before
    Python."""
    small = create_app(settings_for(database_url, max_account_bytes=10_000))
    first, second, third = pattern(6000, seed=1), pattern(5000, seed=2), pattern(3000, seed=3)
    async with small.test_app():
        _, token = await new_account(small)
        disk, remembered = Disk(), Remembered()
        server = InProcessTransport(small.test_client(use_cookies=False), token)
        client, page = client_with_uploads(tmp_path / "local.db", disk, server, remembered)
        await client.dispatch("signin", {"username": "ann", "password": "right one"})
        await client.dispatch("new-chat", {})
        client.stop()  # (the sync and the uploads as the test says: one upload engine at a time)
        chat = client.selected or ""
        await attach(client, disk, pattern(20_000, seed=7), "any.bin", "application/octet-stream")  # never told: nothing refused
        assert client.files.account_free is None and remembered.rooms[-1] is None
        await client.dispatch("remove-file", {"sha256": sha(pattern(20_000, seed=7))})
        await attach(client, disk, first, "first.bin", "application/octet-stream")
        await client.dispatch("send", {"text": "the first", "chat": chat, "assistant": ""})
        await client._learn_limits()  # (online: as the sync engine has it done) while first.bin waits to upload: not taken
        assert client.store.setting("max_file_bytes") == str(20 * 1024 * 1024) and client.files.account_free is None
        assert client.uploads is not None
        assert await client.uploads.upload_all()  # first.bin uploaded: asked again, and taken
        await until(lambda: client.files.account_free == 4000)
        assert remembered.rooms[-1] == 4000

        await client.dispatch("draft", {"text": "the report, attached", "chat": chat})
        await attach(client, disk, second, "second.bin", "application/octet-stream")
        refusal = "second.bin is 4.9 KB: this account has only 3.9 KB left on the server for files (counting those not uploaded yet)."
        assert refusal in page.regions["composer-files"] and 'role="alert"' in page.regions["composer-files"]
        assert sha(second) not in disk.kept and not disk.held and client.store.draft_files(chat) == []
        assert client.store.draft(chat) == "the report, attached"
        await attach(client, disk, third, "third.bin", "application/octet-stream")
        assert [a.name for a in client.store.draft_files(chat)] == ["third.bin"] and remembered.rooms[-1] == 1000
        await client.dispatch("send", {"text": "the third", "chat": chat, "assistant": ""})  # queued: counted still
        await attach(client, disk, pattern(1001, seed=4), "fourth.bin", "application/octet-stream")
        assert "fourth.bin is 1001 bytes: this account has only 1000 bytes left" in page.regions["composer-files"]
        assert await client.uploads.upload_all()
        await until(lambda: client.files.account_free == 1000)
        await client.dispatch("remove-message", {"id": next(m.id for m in client.store.messages(chat) if m.content == "the third")})
        client.store.close()
    client, page = client_on(tmp_path / "local.db", disk)  # offline from the start: as the server last said
    client.start()
    await client.dispatch("select-chat", {"id": chat})
    await attach(client, disk, pattern(1001, seed=5), "fifth.bin", "application/octet-stream")
    assert "fifth.bin is 1001 bytes: this account has only 1000 bytes left" in page.regions["composer-files"]
    await attach(client, disk, pattern(1000, seed=6), "sixth.bin", "application/octet-stream")
    await attach(client, disk, b"x", "seventh.txt", "text/plain")
    assert "seventh.txt is 1 bytes: this account has no room left" in page.regions["composer-files"]
    assert [a.name for a in client.store.draft_files(chat)] == ["sixth.bin"]


async def test_the_note_on_images_of_each_choice_is_handed_to_the_page(tmp_path: Path) -> None:
    """Python's note for each value of the chooser, for the page to show before Python is up
    (static/early-files.js): No answer none, an assistant that reads images none, a preset as its
    assistant; handed over again when it changes."""
    disk, remembered = Disk(), Remembered()
    client, page = client_with_uploads(tmp_path / "local.db", disk, Listing(), remembered)
    await client.dispatch("signin", {"username": "ann", "password": "right one"})
    await client.dispatch("new-chat", {})
    await client.choice.refresh()
    await client.dispatch("new-preset", {})
    preset = next(p for p in client.store.presets())
    await client.dispatch("save-preset", {"id": preset.id, "name": "Seeing", "presetAssistant": "eyes", "instructions": "",
                                          "temperature": "", "maxTokens": ""})  # fmt: skip
    await attach(client, disk, PNG, "cat.png", "image/png")
    demo = "Demo model does not read images: they are left out of what it is sent."
    assert remembered.notes[-1] == {
        "": None, "demo": demo, "eyes": None, "local-tools": "Local helper (offline, tools) does not read images: they are left out of what it is sent.",
        f"preset:{preset.id}": None,
    }  # fmt: skip
    assert page.regions["composer-files"].count(demo) == 1  # (the words the page shows are these)
    count = len(remembered.notes)
    await attach(client, disk, b"text", "a.txt", "text/plain")
    assert len(remembered.notes) == count  # (not handed over again when nothing changed)
    await client.dispatch("choose-assistant", {"assistant": ""})
    assert "does not read images" not in page.regions["composer-files"]  # (No answer: nothing is left out)


async def test_an_assistant_that_does_not_read_images_is_named_before_send(tmp_path: Path) -> None:
    disk = Disk()
    client, page = await signed_in(tmp_path / "local.db", disk, Listing())
    await client.choice.refresh()
    await attach(client, disk, b"just text", "a.txt", "text/plain")
    assert "does not read images" not in page.regions["composer-files"]  # no image: nothing to say
    await attach(client, disk, PNG, "cat.png", "image/png")
    assert "Demo model does not read images: they are left out of what it is sent." in page.regions["composer-files"]
    await client.dispatch("choose-assistant", {"assistant": "eyes"})
    assert "does not read images" not in page.regions["composer-files"]
    await client.dispatch("choose-assistant", {"assistant": "local-tools"})
    assert "Local helper (offline, tools) does not read images" in page.regions["composer-files"]


async def test_a_message_takes_the_drafts_files_and_queues_them_before_it_is_in_the_outbox(tmp_path: Path) -> None:
    disk = Disk()
    client, page = await signed_in(tmp_path / "local.db", disk)
    chat = client.selected or ""
    await attach(client, disk, PNG, "cat.png", "image/png")
    await client.dispatch("send", {"text": "", "chat": chat, "assistant": ""})  # files only: a message too
    [message] = client.store.messages(chat)
    assert [a.name for a in message.attachments] == ["cat.png"] and message.content == ""
    assert client.store.draft_files(chat) == [] and page.regions["composer-files"] == ""
    assert client.store.upload_state(sha(PNG)).sentence == "Waiting for the connection"  # type: ignore[union-attr]
    page.paint()
    [item] = page.items.values()
    assert 'aria-label="Open cat.png"' in item and "Waiting for the connection" in item


async def test_a_file_this_device_does_not_have_is_shown_once_online() -> None:
    disk, changes = Disk(), []
    files = Files(disk, lambda: changes.append(1))
    assert files.show("f" * 64).url is None
    await _settle()
    assert files.show("f" * 64).note == OFFLINE and changes == [1]
    disk.kept["f" * 64] = b"fetched"
    files.online()
    assert changes == [1, 1]
    files.show("f" * 64)
    await _settle()
    assert files.show("f" * 64).url == f"blob:kept/{'f' * 64}"


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


# --- any interleaving ----------------------------------------------------------------------------

FILES = [pattern(size, seed=n) for n, size in enumerate((150, 300, 70))]
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("attach"), st.integers(0, len(FILES) - 1)),
        st.tuples(st.just("remove"), st.integers(0, len(FILES) - 1)),
        st.tuples(st.sampled_from(["send", "delete", "kill", "sync", "resync", "upload", "offline-upload"]), st.none()),
    ),
    max_size=14,
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
async def test_whatever_is_done_every_reference_resolves_here_and_no_file_is_uploaded_twice(
    app: Quart,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    steps: list[Any],
) -> None:
    """Attach, remove, send, delete a message, a killed tab, a sync, a resync and uploads in any
    order: every file the draft or a message on this device names is in its IndexedDB, and every
    byte of every file sent reaches the server once."""
    monkeypatch.setattr(uploads, "MAX_CHUNK_BYTES", 64)
    _, token = await new_account(app)
    path, disk = tmp_path_factory.mktemp("device") / "local.db", Disk()
    client, _ = await signed_in(path, disk)
    chat = client.selected or ""
    server = InProcessTransport(app.test_client(use_cookies=False), token)
    network = Network(server)
    received: Counter[str] = Counter()
    sent: set[str] = set()

    def engine() -> UploadEngine:
        return UploadEngine(client.store, network, disk, sleep=no_wait)  # type: ignore[arg-type]

    for step, value in steps:
        if step == "attach":
            await attach(client, disk, FILES[value], f"file{value}.bin", "application/octet-stream")
        elif step == "remove":
            await client.dispatch("remove-file", {"sha256": sha(FILES[value])})
        elif step == "send":
            sent |= {a.sha256 for a in client.store.draft_files(chat)}
            await client.dispatch("send", {"text": "with files", "chat": chat, "assistant": ""})
        elif step == "delete":
            mine = [m for m in client.store.messages(chat) if m.attachments]
            if mine:
                await client.dispatch("remove-message", {"id": mine[-1].id})
        elif step == "kill":
            received += network.received
            network = Network(server)
            client.store.close()
            client, _ = client_on(path, disk)
            client.start()
            await client.dispatch("select-chat", {"id": chat})
        elif step in ("sync", "resync"):
            sync = SyncEngine(client.store, server, lambda: None, lambda s: None)
            for part in (sync.pull, sync.push, sync.resync if step == "resync" else sync.pull):
                await part()
        else:
            await server.set_offline(step == "offline-upload")
            try:
                await engine().upload_all()
            except NetworkError:
                pass
            await server.set_offline(False)
        named = {a.sha256 for a in client.store.draft_files(chat)} | {a.sha256 for m in client.store.all_messages() for a in m.attachments}
        assert named <= set(disk.kept), "a file named here is not on this device"

    assert await engine().upload_all()
    received += network.received
    for digest in sent:
        response = await server.client.get(f"/blobs/{digest}", headers=server.headers)
        assert response.status_code == 200 and hashlib.sha256(await response.get_data()).hexdigest() == digest
        assert received[digest] == len(disk.kept[digest])  # every byte once
    assert set(received) <= sent
    client.store.close()


@pytest.mark.parametrize("how", ["another account signs in", "signed out, kept, another signs in", "signed out and removed"])
async def test_the_files_of_an_account_leave_the_device_on_every_path_that_replaces_or_removes_it(
    tmp_path: Path, how: str
) -> None:
    disk = Disk()
    client, page = await signed_in(tmp_path / "local.db", disk)
    await attach(client, disk, PNG, "cat.png", "image/png")
    await client.dispatch("send", {"text": "a cat", "chat": client.selected, "assistant": ""})
    assert set(disk.kept) == {sha(PNG)} and client.files.shown
    if how == "signed out and removed":
        await client.dispatch("confirm-signout", {"remove": True})
    else:
        if how.startswith("signed out"):
            await client.dispatch("confirm-signout", {})
            assert set(disk.kept) == {sha(PNG)}  # (kept for ann's next sign-in)
        await client.dispatch("signin", {"username": "bob", "password": "right one"})
        if client._signin is not None:  # (ann's unsent message: given up when asked)
            await client.dispatch("confirm-replace-account", {})
        assert client.store.account().username == "bob"  # type: ignore[union-attr]
    assert disk.kept == {} and client.files.shown == {}


async def test_the_same_account_signing_in_again_keeps_its_files(tmp_path: Path) -> None:
    disk = Disk()
    client, page = await signed_in(tmp_path / "local.db", disk)
    chat = client.selected or ""
    await attach(client, disk, PNG, "cat.png", "image/png")
    await client.dispatch("confirm-signout", {})
    await client.dispatch("signin", {"username": "ann", "password": "right one"})
    assert set(disk.kept) == {sha(PNG)} and [a.name for a in client.store.draft_files(chat)] == ["cat.png"]


async def test_export_everything_carries_the_files_and_an_import_keeps_and_queues_those_its_messages_name(tmp_path: Path) -> None:
    disk = Disk()
    client, page = await signed_in(tmp_path / "ann.db", disk)
    await attach(client, disk, PNG, "cat.png", "image/png")
    await client.dispatch("send", {"text": "a cat", "chat": client.selected, "assistant": ""})
    await client.dispatch("export-all", {})
    assert disk.exported is not None and page.regions["data-note"] == "Exported with 1 file."
    filename, raw = disk.exported
    assert filename == f"chats-{T[:10]}.tar"
    text, files = _read_tar(raw)  # (what `python -m server import` reads)
    assert files == {sha(PNG): PNG} and "cat.png" in text.decode()

    other = Disk()
    client, page = await signed_in(tmp_path / "bob.db", other)
    text_of, held = other.hold_export(raw)
    stray = other.hold(b"no message names this", "")
    held.append({"token": stray, "sha256": sha(b"no message names this"), "size": 21})
    await client.dispatch("import", {"name": "chats.tar", "text": text_of, "files": held})
    assert page.regions["data-note"] == "Imported 1 chat and 1 messages, 1 file (0 already on this device)."
    assert set(other.kept) == {sha(PNG)} and not other.held  # kept (the stray let go), none held
    assert client.store.upload_state(sha(PNG)).sentence == "Waiting for the connection"  # type: ignore[union-attr]
    [message] = [m for m in client.store.all_messages() if m.content == "a cat"]
    assert [a.sha256 for a in message.attachments] == [sha(PNG)]


async def test_export_everything_without_files_is_the_json(tmp_path: Path) -> None:
    disk = Disk()
    client, page = await signed_in(tmp_path / "ann.db", disk)
    await client.dispatch("send", {"text": "no files", "chat": client.selected, "assistant": ""})
    await client.dispatch("export-all", {})
    [(filename, mime, text)] = page.downloads
    assert filename.endswith(".json") and mime == "application/json" and '"no files"' in text and disk.exported is None


class SlowDisk(Disk):
    """A page whose IndexedDB is slow to keep a file (until ``go`` is set)."""

    def __init__(self) -> None:
        super().__init__()
        self.go = asyncio.Event()

    async def keep(self, token: str, sha256: str) -> None:
        await self.go.wait()
        await super().keep(token, sha256)


async def test_a_file_shows_at_once_while_it_is_attached_and_a_send_meanwhile_takes_it(tmp_path: Path) -> None:
    disk = SlowDisk()
    client, page = await signed_in(tmp_path / "local.db", disk)
    chat = client.selected or ""
    token = disk.hold(PNG, "image/png")
    attaching = asyncio.ensure_future(
        client.dispatch("attach", {"chat": chat, "files": [{"token": token, "name": "cat.png", "type": "image/png", "size": len(PNG)}]})
    )
    await until(lambda: "Attaching…" in page.regions.get("composer-files", ""))
    chips = page.regions["composer-files"]
    assert f'<img alt="cat.png" src="blob:preview/{token}">' in chips and "Remove cat.png" not in chips  # (not removable yet)
    sending = asyncio.ensure_future(client.dispatch("send", {"text": "this cat", "chat": chat, "assistant": ""}))
    await _settle()
    assert not sending.done() and client.store.messages(chat) == []  # the send waits for the file
    disk.go.set()
    await attaching
    await sending
    [message] = client.store.messages(chat)
    assert message.content == "this cat" and [a.name for a in message.attachments] == ["cat.png"]
    assert client.store.draft_files(chat) == [] and "Attaching" not in page.regions["composer-files"]


async def on_device(
    tmp_path: Path, disk: Disk, read_pdf: PdfReader | None = None, vision: bool = False
) -> tuple[Client, FakePage, EchoModel]:
    """Signed in offline, a chat open, "Model on this device" set up (reading images or not);
    its PDFs read by ``read_pdf`` (the browser's reads them in its worker), else here."""
    model, page = EchoModel(), FakePage()
    services = Services(
        store=LocalStore(str(tmp_path / "local.db"), FilePersistence()), view=page, auth=FakeAuth(),
        transport=OfflineTransport(), new_id=Uuid7Generator(TICKS.__next__, os.urandom), now=lambda: T,  # type: ignore[arg-type]
        device_model=lambda url, name: model, schedule_frame=page.schedule_frame, files=disk,  # type: ignore[arg-type,return-value]
        read_pdf=read_pdf,
    )  # fmt: skip
    client = Client(services)
    await client.dispatch("signin", {"username": "ann", "password": "right one"})
    await client.dispatch("new-chat", {})
    settings = {"url": "http://127.0.0.1:1/v1", "model": "echo"}
    await client.dispatch("device-model", {**settings, "vision": "on"} if vision else settings)  # (a form: "on" when ticked)
    await client.dispatch("choose-assistant", {"assistant": DEVICE_MODEL_ID})
    return client, page, model


async def ask_on_device(client: Client, model: EchoModel, text: str) -> list[Turn]:
    asked = len(model.asked)
    await client.dispatch("send", {"text": text, "chat": client.selected, "assistant": DEVICE_MODEL_ID})
    await until(lambda: len(model.asked) > asked)
    return model.asked[-1]


async def test_a_model_on_this_device_is_sent_a_text_file_as_text_and_told_an_image_was_left_out(tmp_path: Path) -> None:
    """The same content parts as the server's runs build (shared/prompt.py), from this device's files."""
    disk = Disk()
    client, page, model = await on_device(tmp_path, disk)
    await attach(client, disk, b"line one\nline two\n", "notes.md", "text/markdown")
    await attach(client, disk, PNG, "cat.png", "image/png")
    assert "On this device: echo does not read images: they are left out of what it is sent." in page.regions["composer-files"]
    [turn] = await ask_on_device(client, model, "read these")
    assert turn.content.startswith("read these")
    assert 'The attached file "notes.md":\n```\nline one\nline two\n\n```' in turn.content
    assert '[The attached file "cat.png" (image/png) was left out: this assistant does not read images.]' in turn.content
    assert not turn.parts  # (no image part: it reads none)


async def test_a_model_on_this_device_that_reads_images_gets_each_as_a_data_url_of_its_bytes_on_every_turn(tmp_path: Path) -> None:
    """Marked as reading images, it is sent each image of the question and of the turns before
    as the content part a server assistant with ``vision`` gets, of the type its bytes say (a
    PNG that claims to be a JPEG goes as a PNG), and a PDF's text (read here: pypdf)."""
    disk = Disk()
    client, page, model = await on_device(tmp_path, disk)
    picture = PNG + b"the rest of the picture"
    await attach(client, disk, picture, "cat.jpg", "image/jpeg")
    assert "On this device: echo does not read images" in page.regions["composer-files"]
    await client.dispatch("device-model", {"url": "http://127.0.0.1:1/v1", "model": "echo", "vision": "on"})
    assert "does not read images" not in page.regions["composer-files"]  # said before Send, gone once it reads them
    assert 'name="vision" checked' in ui.layout("ann", "http://127.0.0.1:1/v1", "echo", client.choice.device_model().vision)  # type: ignore[union-attr]
    await attach(client, disk, minimal_pdf("Quarterly figures"), "report.pdf", "application/pdf")
    [turn] = await ask_on_device(client, model, "what is in these?")
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(picture).decode()}}
    assert turn.parts == ({"type": "text", "text": turn.content}, image)
    assert turn.content == 'what is in these?\n\nThe attached file "report.pdf":\n```\nQuarterly figures\n```'
    question, answer, again = await ask_on_device(client, model, "and now?")
    assert question.parts == turn.parts and answer.role == "assistant"  # the earlier turn's image, built again
    assert again.content == "and now?" and not again.parts


async def test_a_pdf_for_a_model_on_this_device_is_read_by_the_reader_it_is_given_within_the_servers_limits(tmp_path: Path) -> None:
    """The browser reads a PDF in its worker (``read_pdf``); what it reads is cut as the server
    cuts it (``MAX_FILE_CHARS``), and a PDF it cannot read is left out with the server's note."""
    read: list[bytes] = []

    async def long_text(data: bytes) -> str | None:
        read.append(data)
        return None if b"broken" in data else "x" * (MAX_FILE_CHARS + 10)

    disk = Disk()
    client, _, model = await on_device(tmp_path, disk, read_pdf=long_text)
    pdf = minimal_pdf("Long")
    await attach(client, disk, pdf, "long.pdf", "application/pdf")
    await attach(client, disk, b"%PDF-1.4 broken", "broken.pdf", "application/pdf")
    [turn] = await ask_on_device(client, model, "summarise")
    assert read == [pdf, b"%PDF-1.4 broken"]
    cut = "x" * MAX_FILE_CHARS + f"\n```\n[... the rest of the file, {MAX_FILE_CHARS:,} characters on, is left out]"
    assert turn.content == (
        f'summarise\n\nThe attached file "long.pdf":\n```\n{cut}'
        '\n\n[The attached file "broken.pdf" (a PDF) was left out: no text could be read from it.]'
    )


async def test_whether_the_model_on_this_device_reads_images_is_kept_on_this_device(tmp_path: Path) -> None:
    disk = Disk()
    client, page, _ = await on_device(tmp_path, disk, vision=True)
    client.store.close()
    client, page = client_on(tmp_path / "local.db", disk)
    client.start()
    assert client.choice.device_model() == DeviceModel("http://127.0.0.1:1/v1", "echo", vision=True)
    assert '<input type="checkbox" name="vision" checked> Reads images' in page.regions["root"]
    await client.dispatch("device-model", {"url": "http://127.0.0.1:1/v1", "model": "echo"})  # (unticked: not sent)
    assert client.choice.device_model() == DeviceModel("http://127.0.0.1:1/v1", "echo", vision=False)


def reference(data: bytes, name: str, mime: str, **size: int) -> dict[str, object]:
    """A file's reference as the page makes it before Python is up (static/early-files.js)."""
    return {"sha256": sha(data), "name": name, "mime": mime, "size": len(data), **size}


async def test_files_the_page_attached_before_python_are_adopted_into_the_drafts_each_once(tmp_path: Path) -> None:
    """What static/early-files.js kept while Python was not up ({chat, sha256, attachment |
    removed, at, url}): added to the drafts (the page's object URL shown), a file taken off
    there taken off Python's draft, once each however often it is handed over; over the limit
    or past a message's number of files, refused in words. The page may forget every entry."""
    disk = Disk()
    client, page = await signed_in(tmp_path / "local.db", disk)
    chat = client.selected or ""
    await attach(client, disk, b"attached while Python was up", "old.txt", "text/plain")
    disk.kept[sha(PNG)] = PNG  # (the page keeps the bytes before the reference)
    disk.kept[sha(b"notes")] = b"notes"
    entries = [
        {"chat": chat, "sha256": sha(PNG), "attachment": reference(PNG, "cat.png", "image/png", width=64, height=48), "at": 5,
         "url": "blob:page/cat"},
        {"chat": chat, "sha256": sha(b"notes"), "attachment": reference(b"notes", "notes.txt", "text/plain"), "at": 6},
        {"chat": chat, "sha256": sha(b"attached while Python was up"), "removed": True, "at": 7},
        {"chat": "", "sha256": sha(b"x"), "attachment": reference(b"x" * 2000, "big.bin", "application/octet-stream"), "at": 8},
        {"chat": chat, "sha256": "not a digest", "attachment": {"name": "bad"}, "at": 9},
    ]  # fmt: skip
    client.files.max_file_bytes = 1000
    gone = await client.adopt_draft_files(entries)
    assert gone == [(e["chat"], e["sha256"], e["at"]) for e in entries]  # (all of them: the page forgets them)
    assert [a.name for a in client.store.draft_files(chat)] == ["cat.png", "notes.txt"]
    assert client.store.draft_files("") == []
    await client.dispatch("adopt-files", {"files": entries[:2]})  # handed over again: nothing changes
    assert [(a.name, a.width, a.height) for a in client.store.draft_files(chat)] == [("cat.png", 64, 48), ("notes.txt", None, None)]
    chips = page.regions["composer-files"]
    assert chips.count('aria-label="Remove cat.png"') == 1 and 'src="blob:page/cat"' in chips
    assert "old.txt" not in chips and 'aria-label="Remove notes.txt"' in chips
    assert 'data-attachment="' in chips  # (the reference a Send before Python carries)
    assert "big.bin is 2.0 KB: the largest file the server takes is 1000 bytes." in client._refused[""][0]

    full = [{"chat": chat, "sha256": f"{n:064x}", "attachment": {**reference(b"", f"{n}.txt", "text/plain"), "sha256": f"{n:064x}"},
             "at": 10 + n} for n in range(40)]  # fmt: skip
    await client.dispatch("adopt-files", {"files": full})
    assert len(client.store.draft_files(chat)) == 32  # a message's files at most
    assert "39.txt is not attached: a message takes at most 32 files." in page.regions["composer-files"]


async def test_a_send_from_before_python_takes_exactly_the_files_it_names(tmp_path: Path) -> None:
    """A Send on the painted screen names its files (``files``): the message carries exactly
    those, once each, and only they leave the draft (a file attached after it, and adopted before
    Python got the send, stays); given again after a reload, nothing more is saved. Once Python
    is up, a send naming the files the page was still attaching (``draft``) takes the draft's too."""
    disk = Disk()
    client, page = await signed_in(tmp_path / "local.db", disk)
    chat = client.selected or ""
    for data in (PNG, b"later"):
        disk.kept[sha(data)] = data
    later = {"chat": chat, "sha256": sha(b"later"), "attachment": reference(b"later", "later.txt", "text/plain"), "at": 3}
    await client.adopt_draft_files([later])
    cat = reference(PNG, "cat.png", "image/png", width=640, height=480)
    send = {"id": "01a00000-0000-7000-8000-000000000001", "chat": chat, "text": "sent before Python", "assistant": "", "files": [cat, cat]}
    await client.dispatch("send", send)
    await client.dispatch("send", send)  # (the page gave it again after a reload)
    [message] = client.store.messages(chat)
    assert [a.name for a in message.attachments] == ["cat.png"] and message.content == "sent before Python"
    assert [a.name for a in client.store.draft_files(chat)] == ["later.txt"]  # (not this message's)
    assert client.store.upload_state(sha(PNG)) is not None and client.store.upload_state(sha(b"later")) is None

    await attach(client, disk, b"attached with Python up", "up.txt", "text/plain")
    await client.dispatch("send", {"id": "01a00000-0000-7000-8000-000000000002", "chat": chat, "text": "both", "assistant": "",
                                   "files": [reference(b"early", "early.txt", "text/plain")], "draft": True})  # fmt: skip
    both = next(m for m in client.store.messages(chat) if m.content == "both")
    assert [a.name for a in both.attachments] == ["later.txt", "up.txt", "early.txt"]
    assert client.store.draft_files(chat) == [] and "Remove" not in page.regions["composer-files"]


async def test_a_send_from_before_python_that_is_not_taken_puts_its_files_back_in_the_draft(tmp_path: Path) -> None:
    """Refused (the chat's queue full), the message's text goes back to the composer, and the
    files it named go back to the draft the page had taken them off."""
    disk = Disk()
    client, page = await signed_in(tmp_path / "local.db", disk, Listing())
    await client.choice.refresh()
    chat = client.selected or ""
    await client.dispatch("send", {"text": "first", "chat": chat, "assistant": "demo"})
    for i in range(MAX_QUEUED):
        await client.dispatch("send", {"text": f"then {i}", "chat": chat, "assistant": "demo"})
    disk.kept[sha(PNG)] = PNG
    cat = reference(PNG, "cat.png", "image/png", width=640, height=480)
    send = {"id": "01a00000-0000-7000-8000-000000000003", "chat": chat, "text": "one too many", "assistant": "demo", "files": [cat]}
    await client.dispatch("send", send)
    assert client.store.message(send["id"]) is None and (chat, "one too many") in page.put_backs
    assert page.ended_sending == [send["id"]]  # (the page's drawing of it goes)
    assert [a.name for a in client.store.draft_files(chat)] == ["cat.png"]
    assert 'aria-label="Remove cat.png"' in page.regions["composer-files"]
    assert f"at most {MAX_QUEUED} queued messages" in page.regions["composer-files"]
class Blobs(OfflineTransport):
    """A server that takes every chunk (tus: HEAD, then PATCHes), and nothing else."""

    def __init__(self) -> None:
        self.have: dict[str, int] = {}

    async def blob_offset(self, sha256: str) -> tuple[int, int] | None:  # type: ignore[override]
        return None

    async def blob_append(  # type: ignore[override]
        self, sha256: str, offset: int, length: int, chunk: Any, progress: Callable[[int], None] | None = None
    ) -> int:
        assert progress is not None
        progress(len(chunk) // 2)  # (as the browser's upload events tell it: drawn after 250 ms)
        await asyncio.sleep(0.3)
        progress(len(chunk))
        self.have[sha256] = offset + len(chunk)
        return self.have[sha256]


async def uploading_client(store: LocalStore, disk: Disk, server: Blobs, page: FakePage) -> tuple[Client, str]:
    """A client signed in, with its files on ``disk`` and blobs sent to ``server``, and a new chat."""
    services = Services(
        store=store, view=page, auth=FakeAuth(), transport=server,  # type: ignore[arg-type]
        new_id=Uuid7Generator(TICKS.__next__, os.urandom), now=lambda: T, schedule_frame=page.schedule_frame,
        files=disk, blobs=disk,
    )  # fmt: skip
    client = Client(services)
    await client.dispatch("signin", {"username": "ann", "password": "right one"})
    await client.dispatch("new-chat", {})
    return client, client.selected or ""


async def test_an_upload_moving_on_draws_again_only_the_messages_that_carry_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As it moves: not the whole list, nor the composer (a whole draw asked the database a
    dozen questions and drew the composer's chips anew, each time)."""
    disk, server, page = Disk(), Blobs(), FakePage()
    client, chat = await uploading_client(LocalStore(str(tmp_path / "local.db"), FilePersistence()), disk, server, page)
    for text in ("one", "two"):
        await client.dispatch("send", {"text": text, "chat": chat, "assistant": ""})
    data = pattern(4500, seed=3)
    await attach(client, disk, data, "notes.bin", "application/octet-stream")
    await client.dispatch("send", {"text": "the notes", "chat": chat, "assistant": ""})
    await attach(client, disk, PNG, "cat.png", "image/png")  # (a chip in the composer meanwhile)
    [carrier] = [m for m in client.store.messages(chat) if m.attachments]
    key = f"m-{carrier.id}"
    page.paint()
    assert "Waiting for the connection" in page.items[key]
    patches, drawn = len(page.patches), len(page.drawn)
    assert client.uploads is not None
    assert await client.uploads.upload_all()
    assert server.have == {sha(data): 4500}
    moved = page.patches[patches:]
    assert [list(p) for p in moved] == [[key], [key]]  # (its percent after 250 ms, then done)
    assert page.drawn[drawn:] == []  # (the composer and the rest as they were)
    assert "data-upload" not in page.items[key] and "cat.png" in page.regions["composer-files"]


async def test_a_sends_upload_starts_at_the_next_frame_once_its_message_is_drawn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not in the Send's own task: its requests and reads kept out of the way of the frame that
    shows the message (in the browser a frame, or a moment later in a hidden tab: webapp/browser.py)."""
    disk, server, page = Disk(), Blobs(), FakePage()
    client, chat = await uploading_client(LocalStore(str(tmp_path / "local.db"), FilePersistence()), disk, server, page)
    await client.dispatch("send", {"text": "first", "chat": chat, "assistant": ""})
    page.paint()
    assert client.uploads is not None
    kicked: list[bool] = []
    monkeypatch.setattr(client.uploads, "kick", lambda: kicked.append(any("the notes" in html for html in page.items.values())))
    await attach(client, disk, pattern(4500, seed=5), "notes.bin", "application/octet-stream")
    await client.dispatch("send", {"text": "the notes", "chat": chat, "assistant": ""})
    assert kicked == []
    page.paint()
    assert kicked == [True]
    page.paint()  # (once)
    assert kicked == [True]


class SeenFlushes(FilePersistence):
    """What each write made durable: (files queued for upload, events in the outbox)."""

    def __init__(self) -> None:
        self.store: LocalStore | None = None
        self.seen: list[tuple[int, int]] = []

    async def flush(self, checkpoint: Any) -> None:
        assert self.store is not None
        self.seen.append((len(self.store.queued_uploads()), self.store.pending_count()))


async def test_a_message_with_files_is_made_durable_with_its_uploads_in_one_write(tmp_path: Path) -> None:
    """The upload queue's rows and the outbox's event are stored by one IndexedDB write (each
    one costs the send a strict transaction in the browser, before its upload starts), the rows
    first in it: a message never waits for a file that was not queued."""
    disk, persistence = Disk(), SeenFlushes()
    persistence.store = store = LocalStore(str(tmp_path / "local.db"), persistence)
    client, chat = await uploading_client(store, disk, Blobs(), FakePage())
    data = pattern(4500, seed=4)
    await attach(client, disk, data, "notes.bin", "application/octet-stream")
    before = len(persistence.seen)
    pending = store.pending_count()
    await client.dispatch("send", {"text": "the notes", "chat": chat, "assistant": ""})
    assert persistence.seen[before] == (1, pending + 1)  # (the send's first write: both)
    assert [q.sha256 for q in store.queued_uploads()] == [sha(data)]
