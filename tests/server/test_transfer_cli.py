"""`python -m server export` and `import`: an account's chats from SQLite to PostgreSQL and back,
the same state on arrival, a second import that changes nothing, and clear refusals."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

from server.app import open_attachments
from server.config import ROOT, Settings
from server.databases import open_database
from server.event_store import SqlEventStore
from shared.models import SETTINGS_ID, DomainEvent
from tests.conftest import drop_schema, postgres_schema
from tests.server.events import event, new_id
from tests.server.stores import Clock

T = "2026-11-30T12:00:00.000Z"


def cli(*args: str, input: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "server", *args], cwd=ROOT, input=input, capture_output=True, text=True, timeout=60
    )


async def run(*args: str, input: str = "") -> subprocess.CompletedProcess[str]:
    done = await asyncio.to_thread(cli, *args, input=input)
    assert "Traceback" not in done.stderr, done.stderr
    return done


async def opened(url: str) -> SqlEventStore:
    store = SqlEventStore(open_database(url), Clock())
    await store.open()
    return store


async def account(store: SqlEventStore, username: str) -> str:
    account_id = new_id()
    await store.create_account(account_id, username, "not a real hash")
    return account_id


def msg(id: str, chat: str, role: str = "user", content: str = "hi", parent: str | None = None, **more: Any) -> dict[str, Any]:
    return {"id": id, "chatId": chat, "role": role, "content": content, "parentId": parent, "createdAt": T, **more}


async def seed(store: SqlEventStore, account_id: str) -> int:
    """The account's settings and a preset, a renamed chat with instructions and the preset, with a
    branch (two answers to one question, one with all an answer records), an edited and a deleted
    message (and the follow-up of the deleted one), a follow-up still queued, a chat of tools with
    a run still queued and a reply still streaming, and a chat deleted with its messages. Returns
    how many messages remain."""
    trip, tools, gone, terse = new_id(), new_id(), new_id(), new_id()
    q1, a1, a2, q2, q3, after, later = (new_id() for _ in range(7))
    call, result, error, streaming, queued, doomed = (new_id() for _ in range(6))
    demo = {"assistantId": "demo", "runId": new_id()}
    recorded = {"presetId": terse, "instructions": "Metric units.\n\nBe terse.", "finishReason": "length",
                "usage": {"promptTokens": 20, "completionTokens": 2, "estimated": True}}  # fmt: skip
    events = [
        event("SettingsUpdated", {"id": SETTINGS_ID, "instructions": "Metric units.", "defaultPresetId": terse, "createdAt": T}),
        event("PresetCreated", {"id": terse, "name": "Terse", "assistantId": "demo", "instructions": "Be terse.",
                                "temperature": 0.3, "maxTokens": 50, "createdAt": T}),  # fmt: skip
        event("ChatCreated", {"id": trip, "title": "Trip", "createdAt": T}),
        event("ChatUpdated", {"id": trip, "title": "Trip to Lisbon ✈", "createdAt": T, "instructions": "Two of us.", "presetId": terse}),
        event("MessageAppended", msg(q1, trip, content="Where should we stay?")),
        event("MessageAppended", msg(a1, trip, "assistant", "Alfama.", q1, **demo, **recorded)),
        event("MessageAppended", msg(a2, trip, "assistant", "Príncipe Real.", q1, status="cancelled", **demo)),
        event("MessageAppended", msg(q2, trip, content="And to eat?", parent=a1)),
        event("MessageEdited", msg(q2, trip, content="And where to eat?", parent=a1)),
        event("MessageAppended", msg(q3, trip, content="Typo", parent=a2)),
        event("MessageAppended", msg(after, trip, content="Follows the typo", parent=q3)),
        event("MessageDeleted", {"id": q3, "chatId": trip}),
        event("MessageAppended", msg(later, trip, content="And the trams?", parent=q2, status="queued", presetId=terse)),
        event("ChatCreated", {"id": tools, "title": "Sums", "createdAt": T}),
        event("ToolCallRequested", msg(call, tools, "tool_call", '{"tool": "calc", "input": "6*7"}')),
        event("ToolCallSucceeded", msg(result, tools, "tool_result", "42", call)),
        event("ToolCallFailed", msg(error, tools, "error", "division by zero", result)),
        event("MessageAppended", msg(streaming, tools, "assistant", "Half an ans", error, status="streaming", **demo)),
        event(
            "AssistantRunRequested",
            {"runId": new_id(), "chatId": tools, "parentId": error, "messageId": queued, "assistantId": "demo"},
        ),
        event("ChatCreated", {"id": gone, "title": "Gone", "createdAt": T}),
        event("MessageAppended", msg(doomed, gone)),
        event("ChatDeleted", {"id": gone}),
    ]
    results, _ = await store.append(account_id, "dev", [DomainEvent.model_validate(e) for e in events])
    assert all(r.status == "accepted" for r in results), results
    return 11


async def state(store: SqlEventStore, account_id: str) -> dict[str, Any]:
    page = await store.read_state(account_id, None, None, 10_000, None)
    assert page.next_page is None
    return {"seq": page.current_seq, **page.snapshot.model_dump()}


def comparable(full: dict[str, Any]) -> dict[str, Any]:
    """The state without what the server fills in, runs still going and follow-ups still queued
    as imported (cancelled; sent)."""
    fills = ("updated_at", "last_seq")
    messages = [{k: v for k, v in m.items() if k not in fills} for m in full["messages"]]
    for m in messages:
        if m["status"] == "queued" and m["role"] == "user":
            m["status"] = "completed"
        elif m["status"] in ("queued", "streaming"):
            m["status"], m["finish_reason"] = "cancelled", "cancelled"

    def rows(kind: str) -> list[dict[str, Any]]:
        return sorted(({k: v for k, v in c.items() if k not in fills} for c in full[kind]), key=lambda c: c["id"])

    return {"chats": rows("chats"), "messages": sorted(messages, key=lambda m: m["id"]), "settings": rows("settings"),
            "presets": rows("presets")}  # fmt: skip


async def test_an_account_moves_between_sqlite_and_postgresql_and_back(tmp_path: Path) -> None:
    lite_url = f"sqlite:///{tmp_path / 'chat.db'}"
    schema, pg_url = await postgres_schema()
    lite, pg = await opened(lite_url), await opened(pg_url)
    try:
        alice, bob, carol = await account(lite, "alice"), await account(pg, "bob"), await account(lite, "carol")
        messages = await seed(lite, alice)
        original = await state(lite, alice)
        assert (len(original["chats"]), len(original["messages"])) == (2, messages)
        assert (len(original["settings"]), len(original["presets"])) == (1, 1)

        exported = await run("export", "--database-url", lite_url, "--user", "alice")
        assert exported.returncode == 0, exported.stderr
        assert f"exported 2 chats, {messages} messages, 1 presets, the settings of alice" in exported.stderr
        wire = json.loads(exported.stdout)
        assert (wire["format"], wire["version"]) == ("chat-export", 1)
        assert {m["id"]: m["lastSeq"] for m in wire["messages"]} == {m["id"]: m["last_seq"] for m in original["messages"]}
        assert wire["settings"][0]["instructions"] == "Metric units." and wire["presets"][0]["name"] == "Terse"
        entities = 2 + messages + 2  # (and the settings and the preset)

        # SQLite -> PostgreSQL (three events a transaction: the order holds across batches).
        imported = await run(
            "import", "--database-url", pg_url, "--user", "bob", "--max-batch-events", "3", input=exported.stdout
        )
        assert imported.returncode == 0, imported.stderr
        assert f"imported 2 chats, {messages} messages, 1 presets, the settings (0 duplicates, 0 rejected)" in imported.stderr
        arrived = await state(pg, bob)
        assert comparable(arrived) == comparable(original)
        assert {m["status"] for m in arrived["messages"]} == {"completed", "cancelled"}  # no run is left going

        # Again: the settings are the account's own now, so the file's are left out.
        again = await run("import", "--database-url", pg_url, "--user", "bob", input=exported.stdout)
        assert again.returncode == 0, again.stderr
        assert f"imported 0 chats, 0 messages, 0 presets ({entities - 1} duplicates, 0 rejected)" in again.stderr
        assert await state(pg, bob) == arrived  # not a row, not a seq changed

        # PostgreSQL -> SQLite.
        back = await run("export", "--database-url", pg_url, "--user", "bob")
        assert back.returncode == 0, back.stderr
        home = await run("import", "--database-url", lite_url, "--user", "carol", input=back.stdout)
        assert home.returncode == 0, home.stderr
        assert f"imported 2 chats, {messages} messages, 1 presets, the settings (0 duplicates, 0 rejected)" in home.stderr
        assert comparable(await state(lite, carol)) == comparable(original)

        # The export of an imported account is the same events as the file it came from.
        same = await run("import", "--database-url", lite_url, "--user", "carol", input=exported.stdout)
        assert f"imported 0 chats, 0 messages, 0 presets ({entities - 1} duplicates, 0 rejected)" in same.stderr

        # An import never overwrites: into the account it came from, everything is there already
        # (and its own settings are kept).
        before = await state(lite, alice)
        onto_itself = await run("import", "--database-url", lite_url, "--user", "alice", input=exported.stdout)
        assert onto_itself.returncode == 3
        assert f"imported 0 chats, 0 messages, 0 presets (0 duplicates, {entities - 1} rejected)" in onto_itself.stderr
        assert "already exists" in onto_itself.stderr
        assert await state(lite, alice) == before
    finally:
        await lite.close()
        await pg.close()
        await drop_schema(schema)


async def test_what_the_server_refuses_is_reported_and_the_rest_goes_in(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'chat.db'}"
    store = await opened(url)
    try:
        alice, dora = await account(store, "alice"), await account(store, "dora")
        chat, short, long, child = new_id(), new_id(), new_id(), new_id()
        events = [
            event("ChatCreated", {"id": chat, "title": "Limits", "createdAt": T}),
            event("MessageAppended", msg(short, chat, content="short")),
            event("MessageAppended", msg(long, chat, content="far too long", parent=short)),
            event("MessageAppended", msg(child, chat, content="ok", parent=long)),
        ]
        await store.append(alice, "dev", [DomainEvent.model_validate(e) for e in events])
        exported = await run("export", "--database-url", url, "--user", "alice")
        # A message of a chat that is not in the file is skipped.
        wire = json.loads(exported.stdout)
        wire["messages"].append({**wire["messages"][0], "id": new_id(), "chatId": new_id()})

        done = await run(
            "import", "--database-url", url, "--user", "dora", "--max-content-chars", "5", input=json.dumps(wire)
        )
        assert done.returncode == 3
        assert f"rejected message {long}: the message is longer than 5 characters" in done.stderr
        assert "skipped 1 messages whose chat is not in the file" in done.stderr
        assert "imported 1 chats, 2 messages (0 duplicates, 1 rejected)" in done.stderr
        kept = {m["id"]: m["parent_id"] for m in (await state(store, dora))["messages"]}
        assert kept == {short: None, child: long}  # its parent refused, the follow-up stays
    finally:
        await store.close()


async def test_a_file_that_is_not_an_export_or_an_unknown_user_is_refused_plainly(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'chat.db'}"
    store = await opened(url)
    try:
        await account(store, "alice")
        good = (await run("export", "--database-url", url, "--user", "alice")).stdout
        newer = json.dumps({**json.loads(good), "version": 2})
        for text, complaint in [("not json at all", "Invalid JSON"), ("", "EOF"), (newer, "version"), ("[]", "the file")]:
            done = await run("import", "--database-url", url, "--user", "alice", input=text)
            assert done.returncode == 2, done.stderr
            assert "cannot import: this is not a chat export" in done.stderr and complaint in done.stderr, done.stderr
        for command, text in (("import", good), ("export", "")):
            done = await run(command, "--database-url", url, "--user", "nobody", input=text)
            assert done.returncode == 1 and done.stdout == ""
            assert f"cannot {command}: there is no account 'nobody'" in done.stderr, done.stderr
        assert (await state(store, (await store.find_account("alice")).id))["seq"] == 0  # type: ignore[union-attr]
    finally:
        await store.close()


def cli_bytes(*args: str, input: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "server", *args], cwd=ROOT, input=input, capture_output=True, timeout=60)


async def test_an_export_with_files_takes_the_attachments_along(tmp_path: Path) -> None:
    """``export --with-files``: a tar of the export and the files its messages reference that the
    account holds; ``import`` restores them (checked against their digests) before the messages."""
    lite_url = f"sqlite:///{tmp_path / 'chat.db'}"
    schema, pg_url = await postgres_schema()
    lite, pg = await opened(lite_url), await opened(pg_url)
    picture, notes = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 64, "Notizen \u00fcber alles\n".encode()
    digests = {hashlib.sha256(d).hexdigest(): d for d in (picture, notes)}
    try:
        alice, bob = await account(lite, "alice"), await account(pg, "bob")
        files = open_attachments(lite, Settings(database_url=lite_url), Clock())
        for digest, data in digests.items():
            assert await files.restore(alice, digest, data)
        await files.restore(alice, hashlib.sha256(b"unreferenced").hexdigest(), b"unreferenced")  # (not exported)
        chat, message_id = new_id(), new_id()
        attachments = [
            {"sha256": hashlib.sha256(picture).hexdigest(), "name": "p.png", "mime": "image/png", "size": len(picture)},
            {"sha256": hashlib.sha256(notes).hexdigest(), "name": "notes.txt", "mime": "text/plain", "size": len(notes)},
            {"sha256": "ab" * 32, "name": "never.bin", "mime": "", "size": 3},  # (never uploaded: not in the file)
        ]
        events = [
            event("ChatCreated", {"id": chat, "title": "Files", "createdAt": T}),
            event("MessageAppended", msg(message_id, chat, content="see attached", attachments=attachments)),
        ]
        results, _ = await lite.append(alice, "test", [DomainEvent.model_validate(e) for e in events])
        assert [r.status for r in results] == ["accepted", "accepted"]

        exported = await asyncio.to_thread(cli_bytes, "export", "--database-url", lite_url, "--user", "alice", "--with-files")
        assert exported.returncode == 0, exported.stderr
        assert b"exported 1 chats, 1 messages, 2 files of alice" in exported.stderr
        with tarfile.open(fileobj=io.BytesIO(exported.stdout)) as tar:
            names = tar.getnames()
            assert names[0] == "chat-export.json"
            assert sorted(names[1:]) == sorted(f"files/{d}" for d in digests)
            member = tar.extractfile(f"files/{hashlib.sha256(picture).hexdigest()}")
            assert member is not None and member.read() == picture

        imported = await asyncio.to_thread(cli_bytes, "import", "--database-url", pg_url, "--user", "bob", input=exported.stdout)
        assert imported.returncode == 0, imported.stderr
        assert b"restored 2 of 2 files" in imported.stderr and b"imported 1 chats, 1 messages" in imported.stderr
        bobs = open_attachments(pg, Settings(database_url=pg_url), Clock())
        for digest, data in digests.items():
            assert await bobs.bytes_of(bob, digest) == data
        [arrived] = (await pg.read_state(bob, None, None, 100, None)).snapshot.messages
        assert [a.wire() for a in arrived.attachments] == attachments

        # A file whose bytes are not its name's is skipped, and said so; the rest goes in.
        forged = io.BytesIO()
        with tarfile.open(fileobj=forged, mode="w") as tar, tarfile.open(fileobj=io.BytesIO(exported.stdout)) as old:
            for info in old.getmembers():
                data = old.extractfile(info).read()  # type: ignore[union-attr]
                if info.name.startswith("files/"):
                    data = data[::-1]
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        carol = await account(pg, "carol")
        refused = await asyncio.to_thread(cli_bytes, "import", "--database-url", pg_url, "--user", "carol", input=forged.getvalue())
        assert refused.returncode == 0, refused.stderr
        assert b"restored 0 of 2 files" in refused.stderr and b"skipped the file" in refused.stderr
        assert await bobs.held(carol) == {}
    finally:
        await lite.close()
        await pg.close()
        await drop_schema(schema)
