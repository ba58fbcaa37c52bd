"""Assistant runs of messages with attachments, through the real app and the fake upstream
(shared/prompt.py): an image reaches a vision model as a data-URL content part with exactly the
file's bytes, on later turns too; a model without vision is told what was left out; text files
and PDFs go as text; a run waits for an attachment that has not reached the server, then goes;
the demo model names the attachments."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from quart import Quart
from quart.typing import TestClientProtocol as Client

from server.app import create_app
from shared.prompt import pdf_text
from tests.fake_upstream import FakeUpstream
from tests.server.conftest import bearer, signup
from tests.server.events import chat_created, event, new_id
from tests.server.test_attachments_api import PNG, sha, upload
from tests.server.test_runs import post, run_request, run_row, run_settings, until_run, until_status

T = "2026-11-30T12:00:00.000Z"


def assistants(upstream: FakeUpstream) -> str:
    base = json.loads(upstream.config())[0]
    return json.dumps([
        {**base, "id": "seer", "name": "Seer", "vision": True},
        {**base, "id": "blind", "name": "Blind"},
        {"id": "demo", "name": "Demo", "provider": "demo"},
    ])  # fmt: skip


@pytest.fixture
async def app(database_url: str, upstream: FakeUpstream) -> AsyncIterator[Quart]:
    app = create_app(run_settings(database_url, upstream, assistants=assistants(upstream), demo_seconds_per_word=0))
    async with app.test_app():
        yield app


def minimal_pdf(text: str) -> bytes:
    """A one-page PDF showing ``text`` (Helvetica), with a correct cross-reference table."""
    content = f"BT /F1 24 Tf 72 700 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out, offsets = b"%PDF-1.4\n", []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1) + b"".join(b"%010d 00000 n \n" % o for o in offsets)
    return out + b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)


def attachment(data: bytes, name: str, mime: str) -> dict[str, Any]:
    return {"sha256": sha(data), "name": name, "mime": mime, "size": len(data)}


async def ask(
    client: Client, session: dict[str, Any], assistant: str, files: list[dict[str, Any]], chat: str | None = None,
    text: str = "What is this?", parent: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """A question with these attachments (in a new chat, or after ``parent``), and a run asked for its answer."""
    events = []
    if chat is None:
        chat = new_id()
        events.append(chat_created(chat))
    question = new_id()
    payload = {"id": question, "chatId": chat, "role": "user", "content": text, "attachments": files, "parentId": parent, "createdAt": T}
    request = run_request(chat, question, assistant)
    events += [event("MessageAppended", payload), request]
    assert [r["status"] for r in await post(client, session, *events)] == ["accepted"] * len(events)
    return chat, request


def user_contents(body: dict[str, Any]) -> list[Any]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


async def test_an_image_reaches_a_vision_model_as_a_data_url_of_its_exact_bytes_on_every_turn(
    app: Quart, client: Client, upstream: FakeUpstream
) -> None:
    session = await signup(client)
    await upload(client, bearer(session), PNG)
    chat, request = await ask(client, session, "seer", [attachment(PNG, "cat.png", "image/png")])
    answer = await until_status(client, session, chat, request["payload"]["messageId"], "completed")
    [content] = user_contents(upstream.requests[-1])
    assert content[0] == {"type": "text", "text": "What is this?"}
    [image] = content[1:]
    assert image["type"] == "image_url"
    prefix = "data:image/png;base64,"
    assert image["image_url"]["url"].startswith(prefix)
    assert base64.b64decode(image["image_url"]["url"][len(prefix):]) == PNG
    # The next turn sends the image again (built anew: nothing of it is stored).
    _, again = await ask(client, session, "seer", [], chat=chat, text="And now?", parent=answer["id"])
    await until_status(client, session, chat, again["payload"]["messageId"], "completed")
    first, second = user_contents(upstream.requests[-1])
    assert first == content and second == "And now?"
    log = (await client.get("/sync/updates?limit=1000", headers=bearer(session))).get_data
    assert base64.b64encode(PNG).decode()[:40] not in (await log()).decode()  # never in the log


async def test_a_model_without_vision_is_told_the_image_was_left_out(app: Quart, client: Client, upstream: FakeUpstream) -> None:
    session = await signup(client)
    await upload(client, bearer(session), PNG)
    chat, request = await ask(client, session, "blind", [attachment(PNG, "cat.png", "image/png")])
    await until_status(client, session, chat, request["payload"]["messageId"], "completed")
    [content] = user_contents(upstream.requests[-1])
    assert isinstance(content, str) and content.startswith("What is this?")
    assert '"cat.png" (image/png) was left out: this assistant does not read images' in content
    assert "base64" not in content
    listed = await (await client.get("/assistants", headers=bearer(session))).get_json()
    assert {a["id"]: a["vision"] for a in listed} == {"seer": True, "blind": False, "demo": False}


async def test_text_files_and_pdfs_go_as_text_with_their_names(app: Quart, client: Client, upstream: FakeUpstream) -> None:
    session = await signup(client)
    notes, table, pdf, binary = b"# Notes\nbuy milk\n", b"a,b\n1,2\n", minimal_pdf("Quarterly figures"), b"\x00\x01\x02\x03"
    for data in (notes, table, pdf, binary):
        await upload(client, bearer(session), data)
    files = [
        attachment(notes, "notes.md", "text/markdown"), attachment(table, "t.csv", "text/csv"),
        attachment(pdf, "report.pdf", "application/pdf"), attachment(binary, "x.bin", "application/x-thing"),
    ]  # fmt: skip
    chat, request = await ask(client, session, "blind", files)
    await until_status(client, session, chat, request["payload"]["messageId"], "completed")
    [content] = user_contents(upstream.requests[-1])
    assert 'The attached file "notes.md":\n```\n# Notes\nbuy milk\n\n```' in content
    assert 'The attached file "t.csv":\n```\na,b\n1,2\n\n```' in content
    assert 'The attached file "report.pdf":\n```\nQuarterly figures\n```' in content
    assert '"x.bin" (application/x-thing) was left out: not a kind of file this assistant reads' in content


def test_a_broken_pdf_has_no_text() -> None:
    assert pdf_text(minimal_pdf("Hello")) == "Hello"
    assert pdf_text(b"%PDF-1.4\nnot really") is None


async def test_a_run_waits_for_an_attachment_not_on_the_server_then_goes(
    app: Quart, client: Client, upstream: FakeUpstream
) -> None:
    session = await signup(client)
    chat, request = await ask(client, session, "seer", [attachment(PNG, "cat.png", "image/png")])
    reply_id, run_id = request["payload"]["messageId"], request["payload"]["runId"]
    await asyncio.sleep(0.5)  # (the worker polls every 0.1 s: it has looked, several times)
    assert upstream.calls == 0
    assert (await until_status(client, session, chat, reply_id, "queued"))["status"] == "queued"
    row = await run_row(app, run_id)
    assert (row["status"], row["calls"]) == ("queued", 0)
    # A later question of the chat waits its turn behind it.
    other = bearer(await signup(client, "bob"))
    await upload(client, other, PNG)  # (another account's copy does not count for this one)
    await asyncio.sleep(0.3)
    assert upstream.calls == 0
    await upload(client, bearer(session), PNG)
    await until_status(client, session, chat, reply_id, "completed")
    done = await until_run(app, run_id, "completed")
    assert done["calls"] == 1 and upstream.calls == 1
    [content] = user_contents(upstream.requests[-1])
    assert base64.b64decode(content[1]["image_url"]["url"].split(",", 1)[1]) == PNG


async def test_an_older_turn_s_missing_file_is_left_out_and_holds_nothing_up(
    app: Quart, client: Client, upstream: FakeUpstream
) -> None:
    session = await signup(client)
    chat, first = await ask(client, session, "demo", [attachment(b"never sent", "lost.txt", "text/plain")], text="one")
    reply_id = first["payload"]["messageId"]
    await asyncio.sleep(0.3)
    await post(client, session, event("AssistantRunCancelled", {"runId": first["payload"]["runId"], "messageId": reply_id}))
    await until_status(client, session, chat, reply_id, "cancelled")
    _, second = await ask(client, session, "blind", [], chat=chat, text="two", parent=reply_id)
    await until_status(client, session, chat, second["payload"]["messageId"], "completed")
    first_turn = user_contents(upstream.requests[-1])[0]
    assert '"lost.txt" is not on the server' in first_turn


async def test_the_demo_model_names_the_attachments(app: Quart, client: Client, upstream: FakeUpstream) -> None:
    session = await signup(client)
    notes = b"hello" * 300
    await upload(client, bearer(session), PNG)
    await upload(client, bearer(session), notes)
    files = [attachment(PNG, "cat.png", "image/png"), attachment(notes, "notes.txt", "text/plain")]
    chat, request = await ask(client, session, "demo", files)
    answer = await until_status(client, session, chat, request["payload"]["messageId"], "completed")
    assert "You attached 2 files: cat.png (image/png, 2.1 KB), notes.txt (text/plain, 1.5 KB)." in answer["content"]
    assert upstream.calls == 0
