"""The one module that knows it runs in a browser: IndexedDB persistence, fetch, WebSocket, DOM.

Everything else in ``webapp`` is plain Python and is tested under CPython.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import time
from collections.abc import AsyncGenerator, Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import js
from pydantic import TypeAdapter
from pyodide.ffi import create_proxy, to_js
from pyodide.http import pyfetch

from shared.assistants import DEFAULT_SAMPLING, Piece, Sampling, Turn, UpstreamError, completion_pieces, completion_request
from shared.ids import Uuid7Generator
from shared.models import (
    DomainEvent,
    Frame,
    RunSummary,
    Session,
    SubmitResponse,
    UpdatesResponse,
    format_time,
)
from shared.sse import SseDecoder
from webapp import device_model
from webapp.app import AuthFailed, Client, Services
from webapp.chunks import ChunkPersistence, Writes
from webapp.state_page import StatePage, prepare_reader, read_state_page
from webapp.store import LocalStore
from webapp.transport import (
    CHUNK_TYPE,
    TUS_HEADERS,
    AnyFrame,
    AssistantInfo,
    BlobLimits,
    CursorExpiredError,
    NetworkError,
    ServerError,
    Unauthorized,
    blob_error,
    blob_limits,
    blob_progress,
    close_error,
)
from webapp.uploads import Chunk

DB_PATH = "/data/chat.db"  # in Pyodide's in-memory FS, stored as chunks in IndexedDB by static/storage.js
FRAME = TypeAdapter(Frame)


# A local helper's Python snippet gets this long (the worker's start-up included) before it is stopped.
PYTHON_TOOL_SECONDS = 20


async def _run_python(code: str) -> str:
    """The local helper's Python tool, in a worker of its own that a runaway snippet cannot freeze
    the page from (static/app.js: runPython)."""
    try:
        return str(await js.chatHost.runPython(code, PYTHON_TOOL_SECONDS))
    except Exception as error:  # the worker's report, as the tool's failure
        message = str(getattr(error, "message", None) or error)
        raise RuntimeError(message.removeprefix("Error: ")) from None


# A PDF's text gets this long (the worker's start-up and pypdf's loading included) before the
# worker is stopped and the PDF left out with a note: a PDF made to be slow cannot hold up the answer.
PDF_SECONDS = 60


async def _read_pdf(data: bytes) -> str | None:
    """A PDF's text for the model on this device: shared/pdf.py's ``pdf_text``, run in the Python
    worker (static/python-worker.js), which loads pypdf only then (so it never slows the start),
    from this origin; off the page's thread. None when it cannot be read (nor pypdf loaded)."""
    try:
        found = str(await js.chatHost.readPdf(to_js(data), PDF_SECONDS))  # ("" when it has none)
    except Exception as error:  # the worker's report: the PDF is left out with a note
        js.console.warn(f"a PDF's text could not be read: {getattr(error, 'message', None) or error}")
        return None
    return found or None


async def _store_chunks(writes: Writes) -> None:
    """One strict IndexedDB transaction with these chunks and the files' sizes (static/app.js
    runs them one at a time, and only while this tab owns the database)."""
    await js.chatHost.persist(json.dumps(writes))


UNREACHABLE = "the server could not be reached"  # (a person reads it: "Not sent yet: …")


async def _request(method: str, path: str, body: Any = None) -> Any:
    """One JSON request to our own origin; maps failures to the transport's exceptions."""
    kwargs: dict[str, Any] = {"method": method, "credentials": "same-origin"}
    if body is not None:
        kwargs["body"] = json.dumps(body)
        kwargs["headers"] = {"Content-Type": "application/json"}
    try:
        response = await pyfetch(path, **kwargs)
        body_bytes = await response.bytes()
    except Exception:  # fetch rejects with a TypeError ("Failed to fetch") on any network failure
        raise NetworkError(UNREACHABLE) from None
    return _answer(int(response.status), body_bytes)


def _answer(status: int, body_bytes: bytes, raw: bool = False) -> Any:
    """An answer's JSON, or its error raised as the transport's exceptions. With ``raw``, a
    successful answer is given as its bytes (for pydantic to parse as it validates, without
    decoding them to a string first: a page of /sync/state is the biggest answer there is)."""
    if raw and status < 400:
        return body_bytes
    data = json.loads(body_bytes) if body_bytes else None
    if status == 401:
        raise Unauthorized((data or {}).get("message", "unauthorized"))
    if status == 410:
        raise CursorExpiredError((data or {}).get("message", "cursor_expired"))
    if status >= 500:
        raise NetworkError(f"server error {status}")
    if status >= 400:
        raise ServerError((data or {}).get("message", f"error {status}"))
    return data


async def _blob_request(method: str, sha256: str, headers: dict[str, str]) -> tuple[int, dict[str, str]]:
    """One tus request with no body to ``/blobs/{sha256}``: its status and headers (names
    lowercase), an error answer raised as the transport's exceptions (``blob_error``), 404 given
    back as it is."""
    try:
        response = await pyfetch(f"/blobs/{sha256}", method=method, credentials="same-origin", headers={**TUS_HEADERS, **headers})
        body = await response.bytes()
    except Exception:  # fetch rejects with a TypeError ("Failed to fetch") on any network failure
        raise NetworkError(UNREACHABLE) from None
    return _blob_answer(int(response.status), body, {k.lower(): v for k, v in response.headers.items()})


async def _blob_send(
    sha256: str, headers: dict[str, str], chunk: Any, progress: Callable[[int], None] | None
) -> tuple[int, dict[str, str]]:
    """A PATCH of ``chunk`` (the Blob the page sliced from IndexedDB: PageBlobs) to
    ``/blobs/{sha256}``, as ``_blob_request``, sent by static/files.js (``send``: XMLHttpRequest,
    whose upload events tell ``progress`` how much has gone; fetch tells nothing of a body)."""
    told = None if progress is None else create_proxy(lambda sent: progress(int(sent)))
    options = to_js({**TUS_HEADERS, **headers}, dict_converter=js.Object.fromEntries)
    try:
        status, raw, text = await js.chatFiles.send(f"/blobs/{sha256}", "PATCH", options, chunk, told)
    except Exception:  # (the request failed: the page's TypeError, as fetch's)
        raise NetworkError(UNREACHABLE) from None
    finally:
        if told is not None:
            told.destroy()
    answer = {}
    for line in str(raw).split("\r\n"):
        name, colon, value = line.partition(":")
        if colon:
            answer[name.strip().lower()] = value.strip()
    return _blob_answer(int(status), str(text).encode(), answer)


def _blob_answer(status: int, body: bytes, answer: dict[str, str]) -> tuple[int, dict[str, str]]:
    if status >= 400 and status != 404:
        raise blob_error(status, body, answer)
    return status, answer


class BrowserLiveSocket:
    def __init__(self, url: str) -> None:
        self._queue: asyncio.Queue[tuple[str, Any, Any]] = asyncio.Queue()
        self._ws = js.WebSocket.new(url)
        self._proxies = [
            create_proxy(lambda e: self._queue.put_nowait(("frame", e.data, None))),
            create_proxy(lambda e: self._queue.put_nowait(("close", e.code, e.reason))),
        ]
        self._ws.onmessage, self._ws.onclose = self._proxies

    async def receive(self) -> AnyFrame:
        kind, a, b = await self._queue.get()
        if kind == "close":
            self._queue.put_nowait((kind, a, b))  # stay closed for later calls
            raise close_error(int(a), str(b))
        return FRAME.validate_json(str(a))

    def ready(self) -> AnyFrame | None:
        if self._queue.empty():
            return None
        kind, a, b = self._queue.get_nowait()
        if kind == "close":
            self._queue.put_nowait((kind, a, b))  # (the socket's last word: receive raises it)
            return None
        return FRAME.validate_json(str(a))

    async def close(self) -> None:
        if self._ws.readyState < 2:
            self._ws.close()


class BrowserTransport:
    async def assistants(self) -> list[AssistantInfo]:
        return [AssistantInfo.from_wire(a) for a in await _request("GET", "/assistants")]

    async def runs(self, chat_id: str) -> list[RunSummary]:
        return [RunSummary.model_validate(r) for r in await _request("GET", f"/runs?chatId={chat_id}")]

    async def updates(self, after_seq: int, limit: int) -> UpdatesResponse:
        data = await _request("GET", f"/sync/updates?afterSeq={after_seq}&limit={limit}")
        return UpdatesResponse.model_validate(data)

    async def state(self, up_to_seq: int | None, page: str | None, limit: int = 500) -> StatePage:
        query = f"limit={limit}"
        if up_to_seq is not None:
            query += f"&upToSeq={up_to_seq}"
        if page is not None:
            query += f"&page={js.encodeURIComponent(page)}"
        # Sent now, in this coroutine's first step, and its body read by the page as soon as its
        # headers come, Python busy or not (static/app.js: fetchBytes): the sync asks for the
        # next page and then stores this one, which holds the page's thread for ~100 ms. (Sent
        # from a task of its own, the request went out only once that store was over.)
        answer = js.chatHost.fetchBytes(f"/sync/state?{query}")
        prepare_reader()  # (the first time, ~18 ms under Pyodide: made while the server answers)
        try:
            status, body = await answer
        except Exception:  # (as _request)
            raise NetworkError(UNREACHABLE) from None
        return read_state_page(_answer(int(status), body.to_bytes(), raw=True))

    async def submit(self, events: list[DomainEvent]) -> SubmitResponse:
        data = await _request("POST", "/sync/events", {"events": [e.wire() for e in events]})
        return SubmitResponse.model_validate(data)

    async def live(self, after_seq: int) -> BrowserLiveSocket:
        scheme = "wss" if js.location.protocol == "https:" else "ws"
        return BrowserLiveSocket(f"{scheme}://{js.location.host}/sync/live?afterSeq={after_seq}")

    async def blob_limits(self) -> BlobLimits:
        try:
            response = await pyfetch("/blobs", method="OPTIONS", credentials="same-origin", headers=TUS_HEADERS)
        except Exception:  # (as _request)
            raise NetworkError(UNREACHABLE) from None
        limits = blob_limits({k.lower(): v for k, v in response.headers.items()})
        if limits.max_file is not None:  # (the page refuses a file over it itself before Python is up: static/early-files.js)
            js.chatHost.rememberFileLimit(limits.max_file)
        return limits

    async def blob_offset(self, sha256: str) -> tuple[int, int] | None:
        status, headers = await _blob_request("HEAD", sha256, {})
        return None if status == 404 else blob_progress(headers)

    async def blob_append(
        self, sha256: str, offset: int, length: int, chunk: Any, progress: Callable[[int], None] | None = None
    ) -> int:
        headers = {"Content-Type": CHUNK_TYPE, "Upload-Offset": str(offset), "Upload-Length": str(length)}
        status, answer = await _blob_send(sha256, headers, chunk, progress)
        if status == 404:
            raise ServerError("The server has no uploads here.")
        return blob_progress(answer)[0]


class FetchModel:
    """An OpenAI-compatible chat-completions endpoint called from the page with fetch, read as a
    stream (server-sent events): a model on this device (Ollama, LM Studio, llama.cpp). Its
    failures are webapp/device_model.py's sentences, which the person reads under the reply."""

    def __init__(self, base_url: str, model: str) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model

    async def stream(self, turns: list[Turn], sampling: Sampling = DEFAULT_SAMPLING) -> AsyncGenerator[Piece, None]:
        init = {"method": "POST", "headers": {"Content-Type": "application/json"}}
        init["body"] = json.dumps(completion_request(self.model, turns, sampling))
        try:
            response = await js.fetch(self.url, to_js(init, dict_converter=js.Object.fromEntries))
        except Exception:
            raise UpstreamError(device_model.unreachable(self.url)) from None
        if not response.ok:
            raise UpstreamError(device_model.refused(self.url, self.model, int(response.status)))
        reader, text, events = response.body.getReader(), js.TextDecoder.new(), SseDecoder()
        options = to_js({"stream": True}, dict_converter=js.Object.fromEntries)
        while True:
            try:
                chunk = await reader.read()
            except Exception:
                raise UpstreamError(device_model.broke_off()) from None
            if chunk.done:
                raise UpstreamError(device_model.ended_early())
            for event in events.feed(str(text.decode(chunk.value, options))):
                try:
                    pieces = completion_pieces(event.data)
                except ValueError:
                    raise UpstreamError(device_model.not_completions()) from None
                if pieces is None:
                    await reader.cancel()
                    return
                for piece in pieces:
                    yield piece


class BrowserAuth:
    async def signin(self, username: str, password: str, signup: bool) -> Session:
        body = {"username": username, "password": password, "deviceName": _device_name()}
        try:
            data = await _request("POST", "/auth/signup" if signup else "/auth/login", body)
        except NetworkError:
            raise AuthFailed("The server can't be reached: check your connection and try again.") from None
        except (Unauthorized, ServerError) as e:
            raise AuthFailed(str(e)) from None
        return Session.model_validate(data)

    async def signout(self) -> None:
        try:
            await _request("POST", "/auth/logout")
        except (Unauthorized, ServerError):
            pass  # (the session had ended already)


def _device_name() -> str:
    agent = str(js.navigator.userAgent)
    return next((b for b in ("Firefox", "Edg", "Chrome", "Safari") if b in agent), "Browser")


class DomView:
    """The page, through static/view.js (which changes only what differs)."""

    def set_html(self, region: str, html: str) -> None:
        js.chatView.setHtml(region, html)

    def morph(self, region: str, html: str) -> None:
        js.chatView.morph(region, html)

    def patch_messages(
        self,
        order: list[str] | None,
        changed: dict[str, str],
        opened: bool,
        earlier: bool,
        streams: dict[str, tuple[int, str]],
    ) -> None:
        patch = {"order": order, "changed": changed, "opened": opened, "earlier": earlier, "streams": streams}
        js.chatView.patchMessages(json.dumps(patch))

    def set_composer(self, chat_id: str, text: str | None, note: str | None) -> None:
        js.chatView.setComposer(json.dumps({"chat": chat_id, "text": text, "note": note}))

    def set_status(self, status: str, text: str) -> None:
        element = js.document.getElementById("status")
        assert element is not None, "static/index.html has #status"
        element.textContent = text
        element.dataset.state = status

    def focus(self, selector: str) -> None:
        element = js.document.querySelector(selector)
        if element is not None:
            element.focus()

    def restore_text(self, selector: str, text: str) -> None:
        js.chatView.restoreText(selector, text)

    def put_back(self, chat_id: str, text: str, draft: str) -> None:
        js.chatView.putBack(chat_id, text, draft)

    def end_sending(self, message_id: str) -> None:
        js.chatView.endSending(message_id)

    def sending_taken(self, message_id: str) -> None:
        js.chatView.sendingTaken(message_id)

    def reveal(self, key: str) -> None:
        js.chatView.reveal(key)

    def toggle_chats(self, open: bool | None = None) -> None:
        js.chatView.toggleChats(open)

    def download(self, filename: str, mime: str, text: str) -> None:
        js.chatView.download(filename, mime, text)

    def show_dialog(self, dialog_id: str) -> None:
        js.chatView.showDialog(dialog_id)

    def remember(self, account_id: str | None, layout: str) -> None:
        js.chatView.remember(account_id, layout)

    def cached(self, account_id: str, layout: str) -> str | None:
        shown = js.chatView.cached(account_id, layout)
        return None if shown is None else str(shown)


class PageFiles:
    """The page's side of attachments (static/files.js; webapp/files.py says who does what)."""

    async def digest(self, token: str) -> str:
        return str(await js.chatFiles.digest(token))

    async def slice(self, token: str, start: int, end: int) -> bytes:
        return bytes((await js.chatFiles.slice(token, start, end)).to_bytes())

    async def keep(self, token: str, sha256: str) -> None:
        await js.chatFiles.keep(token, sha256)

    async def image_size(self, token: str) -> tuple[int, int] | None:
        size = list(await js.chatFiles.imageSize(token))
        return (int(size[0]), int(size[1])) if len(size) == 2 else None

    def held_url(self, token: str, sha256: str) -> str:
        return str(js.chatFiles.heldUrl(token, sha256))

    def preview_url(self, token: str) -> str:
        return str(js.chatFiles.previewUrl(token))

    def release(self, token: str) -> None:
        js.chatFiles.release(token)

    async def clear(self) -> None:
        await js.chatFiles.clearAll()

    async def want(self, sha256: str) -> tuple[str | None, str | None]:
        url, why = (str(v) for v in await js.chatFiles.want(sha256))
        return url or None, why or None

    async def file_bytes(self, sha256: str, most: int | None) -> bytes | None:
        found = await js.chatFiles.bytesOf(sha256, most)
        return None if found is None else bytes(found.to_bytes())

    async def export(self, filename: str, text: str, digests: list[str]) -> list[str]:
        return [str(d) for d in await js.chatFiles.exportFile(filename, text, to_js(digests))]


class PageBlobs:
    """The upload engine's bytes (webapp/uploads.py: BlobSource), from the page's IndexedDB."""

    async def size(self, sha256: str) -> int | None:
        size = int(await js.chatFiles.size(sha256))
        return None if size < 0 else size

    async def read(self, sha256: str, offset: int, length: int) -> Chunk:
        # (A Blob: sent as it is. Sliced at once from the file being uploaded, whose Blob ``size``
        # read: no turn of the event loop to wait for, which a busy page makes long.)
        sliced = js.chatFiles.uploadingSlice(sha256, offset, length)
        if sliced is None:
            sliced = await js.chatFiles.read(sha256, offset, length)
        return Chunk(int(sliced.size), sliced)


FRAME_FALLBACK_MS = 100  # how long what waits for a frame waits when none comes


def _next_frame(draw: Callable[[], None]) -> None:
    """``draw`` at the next animation frame or, should none come (a hidden page draws none), a
    moment later: once, whichever is first (static/app.js ``painted`` does the same for its own).
    What waits for a frame goes on in a tab left in the background (an upload started after a
    Send's frame, webapp/app.py)."""

    def once(*_: Any) -> None:
        js.cancelAnimationFrame(frame)
        js.clearTimeout(timer)
        proxy.destroy()
        draw()

    proxy = create_proxy(once)
    frame = js.requestAnimationFrame(proxy)
    timer = js.setTimeout(proxy, FRAME_FALLBACK_MS)


def _now() -> str:
    return format_time(datetime.now(UTC))


def _local_now() -> datetime:
    """The page's time, in its time zone's offset now (Python's own clock here is UTC)."""
    return datetime.now(timezone(timedelta(minutes=-int(js.Date.new().getTimezoneOffset()))))


async def main() -> Client:
    """Open the local database and start the client; called by static/app.js."""
    js.performance.mark("chat:imported")
    stored = json.loads(js.chatHost.stored)  # what IndexedDB held at start-up: {file name: size}
    store = LocalStore(DB_PATH, ChunkPersistence(DB_PATH, stored, _store_chunks))
    await store.open()
    js.performance.mark("chat:database opened")
    new_id = Uuid7Generator(lambda: int(time.time() * 1000), os.urandom)
    client = Client(
        Services(
            store=store,
            view=DomView(),
            auth=BrowserAuth(),
            transport=BrowserTransport(),
            new_id=new_id,
            now=_now,
            local_now=_local_now,
            device_model=FetchModel,
            python_tool=_run_python,
            read_pdf=_read_pdf,
            schedule_frame=_next_frame,
            files=PageFiles(),
            blobs=PageBlobs(),
            freeze_heap=gc.freeze,
            # (kept in localStorage for the screen painted before Python: static/early-files.js)
            remember_room=lambda room: js.chatHost.rememberRoom(json.dumps(room)),
            remember_image_notes=lambda notes: js.chatHost.rememberImageNotes(json.dumps(notes)),
        )
    )

    def dispatch(action: str, data: str) -> asyncio.Task[None]:
        """Runs the action; the page may await what this returns (a PyProxy it then destroys)."""
        task = asyncio.ensure_future(client.dispatch(action, json.loads(data)))
        task.add_done_callback(_report)
        return task

    # What the page kept of the composer's text (static/pending.js) is taken in before anything
    # draws the composer.
    gone = await client.adopt_drafts(json.loads(await js.chatHost.drafts()))
    js.chatHost.forgetDrafts(json.dumps(gone))
    # ...and so are the files it attached to drafts, or took off them, before Python was up.
    adopted = await client.adopt_draft_files(json.loads(await js.chatHost.draftFiles()))
    await js.chatHost.forgetFiles(json.dumps(adopted))
    js.chatHost.rememberFileLimit(client.files.max_file_bytes)
    js.globalThis.chatDispatch = create_proxy(dispatch)
    js.globalThis.chatSource = create_proxy(client.source)
    js.globalThis.chatOnline = create_proxy(lambda *_: client.online_again())
    js.globalThis.chatStop = create_proxy(lambda *_: client.stop())  # another tab took over
    client.start()
    js.performance.mark("chat:drawn")
    return client


def _report(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        js.console.error(f"action failed: {task.exception()!r}")
