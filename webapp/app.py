"""The client, the package's one facade: reacts to the user's actions and to sync, and redraws
from the local database. ``dispatch`` hands the chat list's actions to ``Chats`` (webapp/chats.py)
and the assistant's choice to ``AssistantChoice`` (webapp/assistants.py); sending, answers,
editing and sessions are here."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any, Protocol

from pydantic import ValidationError

from shared.assistants import DEFAULT_SAMPLING, Assistant, Model, ModelAssistant, RunInput, Sampling, failure_message
from shared.followups import MAX_QUEUED, Sender, send_next
from shared.instructions import layers_for, system_message
from shared.models import (
    UNFINISHED,
    Attachment,
    Chat,
    DeltaFrame,
    DomainEvent,
    EventType,
    Message,
    MessageRef,
    Payload,
    RunCancel,
    RunContinue,
    RunRequest,
    Session,
)
from shared.prompt import PdfReader
from shared.thread import ROOT, children, path_to
from webapp import device_model, markdown, message_html, ui
from webapp.assistants import DEVICE_MODEL_ID, LOCAL_TOOLS_ID, AssistantChoice, RemoteAssistant
from webapp.chats import DEFAULT_TITLE, Chats, ChatsHost, ChatsView, title_from
from webapp.files import MAX_FILES, Files, FilesHost, Held, Shown, TooLarge, any_image, composer_files, message_files
from webapp.outbox import Rejection
from webapp.overlay import is_pending
from webapp.pane import MessagePane, MessagesView
from webapp.steering import Steering, SteeringHost
from webapp.store import Account, LocalStore
from webapp.sync import Status, SyncEngine
from webapp.transport import ASK_SECONDS, NetworkError, ServerError, Transport, answered_within
from webapp.uploads import DONE, EVENTS_FIRST_SECONDS, BlobSource, UploadEngine

NO_ASSISTANT = ""  # chosen in the composer: a message with no answer
LOCAL_ASSISTANTS = (LOCAL_TOOLS_ID, DEVICE_MODEL_ID)  # those that answer on this device
# After start-up, what rendering does slowly the first time is done ahead, a step per task of the
# page (webapp/markdown.py: warm_steps), before a person's first message or code block needs it.
WARM_AFTER_SECONDS = 0.25
SIGNIN_NO_ANSWER = "The server did not answer: check your connection and try again."

log = logging.getLogger(__name__)


def _uuid(value: object) -> str | None:
    """An id the page made (a UUID), in its canonical form; None for anything else."""
    try:
        return str(uuid.UUID(str(value))) if value else None
    except ValueError:
        return None


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("background task failed: %s", task.get_coro(), exc_info=task.exception())


class View(MessagesView, ChatsView, Protocol):
    def set_html(self, region: str, html: str) -> None:
        """Replace the content of the element with this id."""

    def morph(self, region: str, html: str) -> None:
        """Make the content of the element with this id this HTML, keeping the nodes that stay
        (and so their focus and selection)."""

    def set_composer(self, chat_id: str, text: str | None, note: str | None) -> None:
        """The composer now writes in this chat; ``text``, when given, replaces what it holds;
        ``note`` is shown above it while it edits a message (None: it writes a new one)."""

    def set_status(self, status: str, text: str) -> None: ...

    def focus(self, selector: str) -> None: ...

    def restore_text(self, selector: str, text: str) -> None:
        """Put text back into an input the user has not typed into again since."""

    def put_back(self, chat_id: str, text: str, draft: str) -> None:
        """A message not taken: its text back as the draft of ``chat_id`` (``draft``: that draft
        as the database has it), before what was typed there since, which stays."""

    def end_sending(self, message_id: str) -> None:
        """The page drew this message itself as it was sent (static/view.js: showSending), and
        Python does not take it: the page's drawing goes. (One Python takes stays until Python's
        own drawing of it morphs that node in place: it is never off the screen in between.)"""

    def sending_taken(self, message_id: str) -> None:
        """Python has this message the page drew as it was sent: the next drawing of the list
        morphs the page's node in place, or removes it should the message not be drawn under its
        own id then (refused by the server before Python first drew it: drawn under the event's)."""

    def reveal(self, key: str) -> None:
        """Scroll the message list to this item and mark it for a moment (a search result)."""

    def toggle_chats(self, open: bool | None = None) -> None:
        """On a narrow screen: open or close the chat list's drawer (None: the other way)."""

    def remember(self, account_id: str | None, layout: str) -> None:
        """Keep what is drawn from now on as this account's render cache, painted at the next
        start before Python (static/paint.js); None forgets every account's cache."""

    def cached(self, account_id: str, layout: str) -> str | None:
        """The id of the chat the page shows ("" for none) when it shows this account's render
        cache drawn with this layout (its DOM is then taken over as it is); else None."""

    def show_dialog(self, dialog_id: str) -> None:
        """Open this <dialog> (modal; Escape or Close closes it)."""


class AuthApi(Protocol):
    async def signin(self, username: str, password: str, signup: bool) -> Session:
        """Raises AuthFailed with a sentence for the user."""

    async def signout(self) -> None:
        """End the session on the server (POST /auth/logout). Raises NetworkError when it cannot
        be reached."""


class AuthFailed(Exception):
    pass


@dataclass
class Services:
    store: LocalStore
    view: View
    auth: AuthApi
    transport: Transport
    new_id: Callable[[], str]
    now: Callable[[], str]
    # A model served on this device (base URL, model name): an OpenAI-compatible endpoint such as
    # Ollama's, called from here (in the browser: with fetch). None where there is no way to.
    device_model: Callable[[str, str], Model] | None = None
    # Runs the local helper's Python snippets (in the browser: a worker that can be stopped).
    python_tool: Callable[[str], Awaitable[str]] | None = None
    # Reads a PDF's text for the model on this device (shared/pdf.py; in the browser: in that
    # worker, which loads pypdf only then). None: in this interpreter.
    read_pdf: PdfReader | None = None
    # Runs a callback before the next paint (in the browser: requestAnimationFrame).
    schedule_frame: Callable[[Callable[[], None]], None] = lambda draw: draw()
    # This device's time with its UTC offset (in the browser, the page's: Pyodide's clock is UTC).
    local_now: Callable[[], datetime] = lambda: datetime.now(UTC)
    # Where attached files are held and kept (the page's IndexedDB), and where the upload engine
    # reads them; None where files cannot be attached.
    files: FilesHost | None = None
    # What the page keeps for its screen before Python is up (static/early-files.js): how many
    # more bytes of files may be attached (None: not known), and the composer's note on images
    # for each value of the assistant chooser (None: no note).
    remember_room: Callable[[int | None], None] = lambda room: None
    remember_image_notes: Callable[[dict[str, str | None]], None] = lambda notes: None
    blobs: BlobSource | None = None
    # Called once start-up and the warm-up have made what lives as long as the page (modules,
    # parsers, the lexer): in the browser, gc.freeze(), so that the cyclic garbage collector's
    # passes no longer go through it all (20-170 ms each on the page otherwise).
    freeze_heap: Callable[[], None] = lambda: None


@dataclass(frozen=True)
class SignIn:
    username: str
    password: str
    signup: bool


@dataclass(frozen=True)
class Editing:
    """What the composer is editing: a message (in place, or as a new branch once answered), or
    a change the server refused (sent again as corrected)."""

    message_id: str
    rejection: Rejection | None = None


class Client:
    def __init__(self, services: Services) -> None:
        self.s = services
        self.store = services.store
        self.view = services.view
        self.engine = SyncEngine(
            self.store,
            services.transport,
            self._redraw_soon,
            self._status,
            on_delta=self._on_delta,
            on_online=self._on_online,
        )
        self.files = Files(services.files, self._files_changed)
        if (known := self.store.setting("max_file_bytes")) is not None:
            self.files.max_file_bytes = int(known)  # (as the server last said)
        self.files.account_free = self._known_free()
        self._uploaded_since: dict[str, int] = {}  # files uploaded since the account's figure was asked
        self._remembered: tuple[int | None, str] | None = None  # (room, image notes) as the page last had them
        self.uploads = None if services.blobs is None else UploadEngine(
            self.store, services.transport, services.blobs, on_change=self._upload_changed,
            events_first=partial(self.engine.pushed, EVENTS_FIRST_SECONDS),
        )  # fmt: skip
        self._uploads_task: asyncio.Task[None] | None = None
        self._refused: dict[str, list[str]] = {}  # chat -> files not attached, and why (until the next attach)
        self._attaching: dict[str, list[Held]] = {}  # chat -> files being hashed and kept, shown meanwhile
        self._attaches: dict[str, set[asyncio.Future[None]]] = {}  # chat -> its attaches under way
        self.pane = MessagePane(self.store, self.view, services.schedule_frame, self._message_files)
        self.chats = Chats(self.store, self.view, ChatsHost(
            selected=lambda: self.selected, open_chat=self._show_message, submit=self._submit_and_draw,
            kick=self.engine.kick, now=services.now, local_now=services.local_now,
            export_files=self._export_files, restore_files=self._restore_files,
        ))  # fmt: skip
        self.choice = AssistantChoice(
            self.store, self.view, services.transport, services.python_tool, services.device_model, self._draw_composer_files,
            read_file=self.files.read if services.files is not None else None, read_pdf=services.read_pdf,
        )  # fmt: skip
        self.choice.chat_preset = self._chat_preset
        self.steering = Steering(self.store, self.view, SteeringHost(
            submit=self._submit, now=services.now, new_id=services.new_id,
            assistants=lambda: [(a.id, a.name) for a in self.choice.offered()], changed=self.choice.draw,
        ))  # fmt: skip
        self.selected: str | None = None
        self.editing: Editing | None = None  # what the composer is editing, if anything
        self.local_runs: dict[str, asyncio.Task[Any]] = {}  # replies being written here, by id
        self._sync_task: asyncio.Task[None] | None = None
        self._sending: set[str] = set()  # chats whose next queued follow-up is being sent here
        self._signin: SignIn | None = None  # a sign-in waiting for the user to give up unsent changes
        self._layout = False  # the chats are on screen (else the page is a sign-in form)
        self._warming = False  # the warm-up has begun (once per page)
        self._redraw_asked = False  # a redraw is asked for the next frame (_redraw_soon)
        self.ask_seconds = ASK_SECONDS  # (a test's is shorter)

    # --- from the sync engine ---------------------------------------------------------------------

    def _on_online(self) -> None:
        """Online again: the server's assistants are asked for (kept for offline starts)."""
        asyncio.ensure_future(self.choice.refresh(self.ask_seconds)).add_done_callback(_log_failure)
        asyncio.ensure_future(self._learn_limits()).add_done_callback(_log_failure)
        if self.uploads is not None:
            self.uploads.kick()
        self.files.online()

    async def _learn_limits(self) -> None:
        """The largest file the server takes (tus's Tus-Max-Size) and how many more bytes the
        account may upload (Upload-Account-Free), kept for offline starts: a file over either
        is refused when attached, not when its upload fails. Asked when online again and when
        the uploads are done. The account's figure is taken only when this device had no upload
        under way from the question to the answer: the server counts an upload under way whole,
        and ``_room`` counts every file this device has not uploaded, so one would count twice."""
        idle = not self.store.queued_uploads()
        try:
            limits = await answered_within(self.s.transport.blob_limits, self.ask_seconds)
        except (NetworkError, ServerError):
            return
        if limits.max_file is not None and str(limits.max_file) != self.store.setting("max_file_bytes"):
            self.files.max_file_bytes = limits.max_file
            await self.store.set_setting("max_file_bytes", str(limits.max_file))
        if limits.account_free is not None and idle and not self.store.queued_uploads():
            self._uploaded_since.clear()
            self.files.account_free = limits.account_free
            if str(limits.account_free) != self.store.setting("account_free_bytes"):
                await self.store.set_setting("account_free_bytes", str(limits.account_free))
        self._remember_for_page()

    def _known_free(self) -> int | None:
        known = self.store.setting("account_free_bytes")
        return None if known is None else int(known)

    def _room(self) -> int | None:
        """How many more bytes of files may be attached here: what the account may still upload
        (as the server last said), less the files this device has not uploaded yet (drafts'
        and queued) and those it uploaded since the server said it; None when never said."""
        free = self.files.account_free
        if free is None:
            return None
        unsent = {**self._uploaded_since, **self.store.unsent_files()}
        return free - sum(unsent.values())

    def _remember_for_page(self) -> None:
        """What the page needs to refuse a file, and to say an assistant does not read images,
        on its screen before Python is up (static/early-files.js); handed over when it changed."""
        room, notes = self._room(), self.choice.image_notes()
        remembered = (room, json.dumps(notes, sort_keys=True))
        if remembered == self._remembered:
            return
        if self._remembered is None or room != self._remembered[0]:
            self.s.remember_room(room)
        if self._remembered is None or remembered[1] != self._remembered[1]:
            self.s.remember_image_notes(notes)
        self._remembered = remembered

    def online_again(self) -> None:
        """The browser says it is online: sync and uploads try now, not at their backoff's end."""
        self.engine.retry_now()
        if self.uploads is not None:
            self.uploads.kick()

    def _on_delta(self, frame: DeltaFrame) -> None:
        """Streamed tokens of a reply: shown at the next frame, never stored (the log brings
        checkpoints and the final text). A piece that does not follow what we have is left for
        the next checkpoint to fill in."""
        reply = self.store.message(frame.message_id)
        if reply is None or reply.status not in UNFINISHED:
            return
        have = max(self.pane.streaming.get(reply.id, ""), reply.content, key=len)
        if frame.offset > len(have) or frame.offset + len(frame.text) <= len(have):
            return  # a gap, or nothing new
        self.pane.stream(reply.id, have[: frame.offset] + frame.text)

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        account = self.store.account()
        if account is None or self.store.signed_out():
            kept = None
            if account is not None:
                kept = f"Signed out. The chats of {account.username} are still on this device: sign in to get back to them."
            self.view.remember(None, "")
            self._show_sign_in_page(ui.auth_form(note=kept))
            self.view.focus("input[name=username]")
            return
        device = self.choice.device_model()
        layout = ui.layout(account.username, device.url, device.model, device.vision) if device else ui.layout(account.username)
        key = hashlib.sha1(layout.encode()).hexdigest()[:16]
        shown = self.view.cached(account.user_id, key)  # painted before Python: taken over as it is
        if shown is None:
            self.view.set_html("root", layout)
        self.view.remember(account.user_id, key)
        self._layout = True
        self.chats.reset()
        self.files.account_free = self._known_free()  # (this account's: another may have been signed in)
        self._uploaded_since.clear()
        chats = self.store.chats()
        self.selected = shown if any(c.id == shown for c in chats) else chats[0].id if chats else None
        self.editing = None
        self.choice.reset()
        self.choice.draw()
        self.redraw(chat_changed=True)
        self._status(self.engine.status)
        self._start_sync()
        asyncio.ensure_future(self._end_orphaned_local_replies()).add_done_callback(_log_failure)
        if not self._warming:
            self._warming = True
            asyncio.get_running_loop().call_later(WARM_AFTER_SECONDS, self._warm, markdown.warm_steps())

    def _warm(self, steps: Iterator[None]) -> None:
        """One step of the warm-up; the next one is a callback of its own (in the browser, a task
        of its own: the page handles input and draws frames between two). Then the heap is
        frozen (Services.freeze_heap)."""
        try:
            next(steps)
        except StopIteration:
            self.s.freeze_heap()
            return
        except Exception:  # (only ever ahead of time: rendering does it itself when it needs it)
            log.exception("the warm-up failed")
            return
        asyncio.get_running_loop().call_soon(self._warm, steps)

    def _start_sync(self) -> None:
        self._sync_task = asyncio.ensure_future(self.engine.run())
        self._sync_task.add_done_callback(_log_failure)
        if self.uploads is not None:  # beside the sync, never in its way
            self._uploads_task = asyncio.ensure_future(self.uploads.run())
            self._uploads_task.add_done_callback(_log_failure)

    def stop(self) -> None:
        """Stop syncing (this tab no longer owns the database, or the session changes)."""
        if self._sync_task is not None:
            self._sync_task.cancel()
            self._sync_task = None
        if self._uploads_task is not None:
            self._uploads_task.cancel()
            self._uploads_task = None

    def _status(self, status: Status) -> None:
        self.view.set_status(str(status), ui.status_text(status, self.engine.progress))
        account = self.store.account()
        if status is Status.SIGNED_OUT and account is not None and self._signin is None:
            # The chats stay on screen and writable (changes wait in the outbox), beside a sign-in.
            self.view.set_html("session", ui.session_ended(account.username))

    def _redraw_soon(self) -> None:
        """What the sync engine changed, drawn at the next frame, once for every change before it:
        in the browser a task of its own, apart from the engine's work on the change."""
        if not self._redraw_asked:
            self._redraw_asked = True
            self.s.schedule_frame(self._redraw_frame)

    def _redraw_frame(self) -> None:
        self._redraw_asked = False
        if self._layout:  # (not when the page has become a sign-in since)
            self.redraw()

    def redraw(self, chat_changed: bool = False) -> None:
        """Draw what the database holds now: the chat list, and the open chat (opened anew when it
        changed: its title, the composer's chat and draft, its messages from the latest). The
        messages of a chat left open are drawn at the next frame (MessagePane.draw_soon)."""
        listed = self.store.listed()
        chats = [chat for chat, _ in listed]
        if all(c.id != self.selected for c in chats):  # none chosen yet, or it was deleted
            first = chats[0].id if chats else None
            chat_changed = chat_changed or first != self.selected
            self.selected = first
        self.chats.draw_list(listed)
        if chat_changed:
            self._open_chat(next((c for c in chats if c.id == self.selected), None))
        else:
            self.chats.draw_head(next((c for c in chats if c.id == self.selected), None))
            self.pane.draw_soon()
        if self.selected is not None:
            self.choice.draw()  # (the chat's preset, as this device or another chose it)
            self._send_local_follow_up(self.selected)

    def _open_chat(self, chat: Chat | None) -> None:
        editing = self.editing
        if editing is not None and editing.rejection is None and self.store.message(editing.message_id) is None:
            self.editing = None  # the message being edited was deleted (here or elsewhere)
        self.chats.draw_head(chat)
        self._draw_composer()
        self.pane.open(chat.id if chat else None)

    def _draw_composer(self, text: str | None = None) -> None:
        """The composer of the open chat: its draft, or the message being edited."""
        chat_id = self.selected or ""
        self._draw_composer_files()
        if self.editing is None:
            self.view.set_composer(chat_id, self.store.draft(chat_id) if text is None else text, None)
            return
        note = ui.editing_note(self._edit_branches(self.editing.message_id), self.editing.rejection is not None)
        self.view.set_composer(chat_id, text, note)

    # --- attachments ----------------------------------------------------------------------------

    def _draw_composer_files(self) -> None:
        chat_id = self.selected or ""
        attached = [] if self.editing is not None else self.store.draft_files(chat_id)
        attaching = [] if self.editing is not None else self._attaching.get(chat_id, [])
        refused = self._refused.get(chat_id, [])
        note = self.choice.image_note() if any_image(attached) else None  # (looked up only when needed: uploads redraw this)
        self.view.set_html("composer-files", composer_files(attached, self.files, refused, note, attaching))
        self._remember_for_page()

    def _files_changed(self) -> None:
        """The page can show a file now, or a failed upload is tried again."""
        self._draw_composer_files()
        self.pane.draw()

    def _upload_changed(self, sha256: str) -> None:
        """A file's upload moved on (its progress, at most every 250 ms): the messages that carry
        it say so. (The composer's chips do not show uploads.) Once the last one is done, the server is asked
        again what the account may still upload."""
        self.pane.draw_file(sha256)
        state = self.store.upload_state(sha256)
        if state is not None and state.state == DONE:
            self._uploaded_since[sha256] = state.size
            if not self.store.queued_uploads():
                asyncio.ensure_future(self._learn_limits()).add_done_callback(_log_failure)

    def _message_files(self, message: Message) -> str:
        if not message.attachments:
            return ""
        uploads = {a.sha256: state for a in message.attachments if (state := self.store.upload_state(a.sha256)) is not None}
        return message_files(message.attachments, self.files, uploads)

    async def _on_attach(self, data: dict[str, Any]) -> None:
        """Files picked, dropped or pasted in the composer of ``chat`` (held by the page under
        tokens: webapp/files.py): each hashed, kept on this device, and added to the draft."""
        chat_id = str(data.get("chat", self.selected or ""))
        refused: list[str] = []
        have = len(self.store.draft_files(chat_id))
        # Shown at once, from the held files (name, size, an image as it is), until each is
        # hashed and kept; a Send meanwhile waits for them (``_attached``).
        pending = [self.files.pending(str(h["token"]), str(h.get("name", "")), str(h.get("type", "")), int(h["size"]))
                   for h in data.get("files", [])]  # fmt: skip
        attaching = self._attaching.setdefault(chat_id, [])
        attaching += pending
        done = asyncio.get_running_loop().create_future()
        self._attaches.setdefault(chat_id, set()).add(done)
        if chat_id == (self.selected or ""):
            self._draw_composer_files()
        try:
            for held in pending:
                if have >= MAX_FILES:
                    self.files.let_go(held)
                    refused.append(f"{held.name} is not attached: a message takes at most {MAX_FILES} files.")
                    continue
                try:
                    attachment = await self.files.attach(held.token, held.name, held.mime, held.size, self._room())
                except TooLarge as e:
                    refused.append(str(e))
                    continue
                finally:
                    attaching.remove(held)
                await self.store.add_draft_file(chat_id, attachment)
                have += 1
        finally:
            for held in pending:
                if held in attaching:
                    attaching.remove(held)
            self._attaches[chat_id].discard(done)
            done.set_result(None)
        self._refused[chat_id] = refused
        if chat_id == (self.selected or ""):
            self._draw_composer_files()
        self.chats.draw_list()  # (its Draft marks)

    async def _attached(self, chat_id: str) -> None:
        """Until the files being attached in the chat's composer are in its draft (or refused)."""
        while self._attaches.get(chat_id):
            await asyncio.wait(set(self._attaches[chat_id]))

    async def _on_remove_file(self, data: dict[str, Any]) -> None:
        chat_id = self.selected or ""
        await self.store.remove_draft_file(chat_id, str(data["sha256"]))
        self._refused.pop(chat_id, None)
        self._draw_composer_files()
        self.chats.draw_list()

    async def _export_files(self, filename: str, text: str, digests: list[str]) -> list[str]:
        if self.s.files is None:
            return digests
        return await self.s.files.export(filename, text, digests)

    async def _restore_files(self, held: list[dict[str, Any]], messages: list[Message]) -> int:
        """The files of an imported tar (held by the page, each named by its digest): those the
        imported messages name are kept on this device, before the messages are, hashed again
        (a file whose bytes are not its name is left out), and queued for upload; how many."""
        named = {a.sha256: a for m in messages for a in m.attachments}
        kept: list[Attachment] = []
        for item in held:
            token, digest = str(item["token"]), str(item["sha256"])
            reference = named.get(digest)
            if reference is None or self.s.files is None:
                if self.s.files is not None:
                    self.s.files.release(token)
                continue
            try:
                attachment = await self.files.attach(token, reference.name, reference.mime, int(item["size"]))
            except TooLarge:
                continue
            if attachment.sha256 == digest and digest not in {k.sha256 for k in kept}:
                kept.append(reference)
        if kept:
            await self.store.enqueue_uploads(kept)
            if self.uploads is not None:
                self.uploads.kick()
        return len(kept)

    async def _on_retry_upload(self, data: dict[str, Any]) -> None:
        if await self.store.retry_upload(str(data["sha256"])) and self.uploads is not None:
            self.uploads.kick()
        self._files_changed()

    # --- actions -------------------------------------------------------------------------------

    async def dispatch(self, action: str, data: dict[str, Any]) -> None:
        name = action.replace("-", "_")
        handler: Callable[[dict[str, Any]], Awaitable[None]] | None = (
            getattr(self, "_on_" + name, None) or getattr(self.chats, "on_" + name, None)
            or getattr(self.steering, "on_" + name, None) or getattr(self.choice, "on_" + name, None)
        )  # fmt: skip
        if handler is None:
            raise ValueError(f"unknown action {action!r}")
        await handler(data)

    # --- sessions --------------------------------------------------------------------------------

    async def _on_signin(self, data: dict[str, Any]) -> None:
        """Sign in from the form (nobody signed in here yet, or signed out) or from the banner of
        an ended session. Before anyone else signs in here, the unsent changes of the one who was
        are shown and must be given up: they would never reach their account."""
        attempt = SignIn(str(data.get("username", "")).strip(), str(data.get("password", "")), data.get("mode") == "signup")
        previous = self.store.account()
        unsent = self.store.pending_count() if previous is not None and previous.username != attempt.username else 0
        if unsent and previous is not None:  # (unsent counts only with a previous account)
            self._signin = attempt
            self._show_auth(ui.replace_account(previous.username, attempt.username, unsent))
            return
        await self._sign_in(attempt)

    async def _on_confirm_replace_account(self, data: dict[str, Any]) -> None:
        attempt, self._signin = self._signin, None
        if attempt is not None:
            await self._sign_in(attempt)

    async def _on_cancel_replace_account(self, data: dict[str, Any]) -> None:
        self._signin = None
        account = self.store.account()
        self._show_auth(ui.session_ended(account.username) if account and not self.store.signed_out() else ui.auth_form())

    def _show_sign_in_page(self, html: str) -> None:
        """The page is a sign-in form (no chats on screen), and the status says so: nothing syncs."""
        self.view.set_html("root", html)
        self.view.set_status("none", ui.NOT_SIGNED_IN)
        self._layout = False

    def _show_auth(self, html: str) -> None:
        """A sign-in or its question: beside the chats when they are on screen, else the page."""
        self.view.set_html("session" if self._layout else "root", html)

    async def _sign_in(self, attempt: SignIn) -> None:
        previous = self.store.account()
        resuming = self._layout
        self.stop()  # nothing of the old session goes out under the new one
        if previous is None or previous.username != attempt.username:
            self.view.remember(None, "")  # (before anything of another account is stored)
        try:
            signin = partial(self.s.auth.signin, attempt.username, attempt.password, signup=attempt.signup)
            session = await answered_within(signin, self.ask_seconds)
        except (AuthFailed, NetworkError) as e:
            why = SIGNIN_NO_ANSWER if isinstance(e, NetworkError) else str(e)
            self._show_auth(ui.session_ended(attempt.username, why) if resuming else ui.auth_form(why, username=attempt.username))
            return
        same = previous is not None and previous.user_id == session.user_id
        if previous is not None and not same:
            # Another account replaces this device's copy: the files of the one before go first
            # (a crash between the two leaves no file of theirs under the new account).
            await self.files.clear()
        await self.store.set_account(Account(session.user_id, session.device_id, attempt.username))
        if same and resuming:  # the same chat, as it was: only the sync starts again
            self.view.set_html("session", "")
            self._start_sync()
            self.engine.kick()
        else:
            self.start()

    async def _on_signout(self, data: dict[str, Any]) -> None:
        account = self.store.account()
        if account is not None:
            self.view.toggle_chats(False)  # (on a narrow screen the question is under the drawer)
            self.view.set_html("session", ui.sign_out(account.username, self.store.pending_count()))

    async def _on_cancel_signout(self, data: dict[str, Any]) -> None:
        self.view.set_html("session", "")
        self._status(self.engine.status)

    async def _on_confirm_signout(self, data: dict[str, Any]) -> None:
        """The session ends on the server (its token and cookie stop working); this device's copy
        is removed if asked, else kept for the next sign-in of the same user."""
        self.stop()
        self.view.remember(None, "")
        note = None
        try:
            await answered_within(self.s.auth.signout, self.ask_seconds)
        except NetworkError:
            note = "The server could not be reached: this device is signed out, but the session ends on the server only when it expires."
        if data.get("remove"):
            await self.store.forget_account()
            await self.files.clear()
        else:
            await self.store.mark_signed_out()
        self.selected, self.editing = None, None
        account = self.store.account()
        kept = f"The chats of {account.username} are still on this device." if account else "The copy on this device was removed."
        self._show_sign_in_page(ui.auth_form(note=f"Signed out. {kept}" + (f" {note}" if note else "")))

    async def _on_select_chat(self, data: dict[str, Any]) -> None:
        self.selected, self.editing = str(data["id"]), None
        self.redraw(chat_changed=True)
        self.view.toggle_chats(False)
        self.view.focus("#composer-text")

    async def _on_toggle_chats(self, data: dict[str, Any]) -> None:
        self.view.toggle_chats()

    async def _show_message(self, chat_id: str, message_id: str | None) -> None:
        """Open a chat at one of its messages (a search result): the branch that holds it is
        shown, and the pane goes to it."""
        if self.store.chat(chat_id) is None:
            return
        if message_id is not None and self.store.message(message_id) is not None:
            await self.store.show_path(chat_id, path_to(self.store.links(chat_id), message_id))
        self.selected, self.editing = chat_id, None
        self.redraw(chat_changed=True)
        self.view.toggle_chats(False)
        if message_id is not None and self.pane.reach(message_id):
            self.view.reveal(message_html.item_key(message_id))

    async def _on_new_chat(self, data: dict[str, Any]) -> None:
        await self._new_chat()
        self.view.toggle_chats(False)
        self.view.focus("#composer-text")

    async def _new_chat(self) -> None:
        await self._submit(EventType.CHAT_CREATED, self._chat_made())
        self.redraw(chat_changed=True)

    def _chat_made(self, chat_id: str | None = None, title: str = DEFAULT_TITLE) -> Chat:
        """A new chat, opened (its ChatCreated for the caller to submit)."""
        settings = self.store.settings()
        default = settings.default_preset_id if settings is not None else None
        preset = default if default is not None and self.store.preset(default) is not None else None
        chat = Chat(id=chat_id or self.s.new_id(), title=title, created_at=self.s.now(), preset_id=preset)
        self.selected, self.editing = chat.id, None
        # At once: what is typed from now on is the new chat's (the page names a chat it made
        # itself for a message sent in no chat, and then keeps what is typed there since).
        self.view.set_composer(chat.id, "" if chat_id is None else None, None)
        return chat

    async def _on_show_earlier(self, data: dict[str, Any]) -> None:
        self.pane.show_earlier()

    async def _on_show_branch(self, data: dict[str, Any]) -> None:
        if self.selected is not None:
            await self.store.choose_branch(self.selected, str(data.get("fork", ROOT)), str(data["id"]))
            self.pane.draw()

    async def _on_send(self, data: dict[str, Any]) -> None:
        """A message from the composer. The page sends its own id for it, and the chat it was
        written in (``newChat``: a chat that does not exist yet, made with that id), since the
        page draws and keeps the message before Python has it (static/app.js: sendFromComposer); a
        message given twice (a reload between the two) is saved once."""
        text = str(data.get("text", "")).strip()
        draft_of = str(data.get("chat", self.selected or ""))  # (the composer of no chat yet keeps its draft under "")
        if self.editing is not None and "id" not in data:
            if text:
                await self._send_edit(self.editing, text)
            return
        message_id = _uuid(data.get("id")) or self.s.new_id()
        if data.get("id") and message_id != data["id"]:  # (not an id: saved under one of Python's, drawn as that)
            self.view.end_sending(str(data["id"]))
        if self._saved_already(message_id):
            return
        attached: tuple[Attachment, ...] = ()
        try:
            attached = await self._files_sent(draft_of, data)
            if self._saved_already(message_id):
                return
            if not text and not attached:
                self.view.end_sending(message_id)
                return
            chat_id = draft_of if self.store.chat(draft_of) else None
            # The chat made, or named after its first message, with the message: one durable write.
            chat_change: list[tuple[EventType, Payload]] = []
            if chat_id is None:
                chat = self._chat_made(_uuid(data.get("chat")) if data.get("newChat") else None, title_from(text))
                chat_id, chat_change = chat.id, [(EventType.CHAT_CREATED, chat)]
            elif (renamed := self.chats.titled(chat_id, text)) is not None:
                chat_change = [(EventType.CHAT_UPDATED, renamed)]
            chosen = str(data.get("assistant", self.choice.shown()))
            assistant, preset_id = self.choice.resolve(chosen)
            # While an answer is being written in the chat (or others wait before it), the message is
            # queued: sent when the answer ends, by the server or by this device (shared/followups.py).
            queue = chat_id in self.store.running() or bool(self.store.queued(chat_id))
            if queue and len(self.store.queued(chat_id)) >= MAX_QUEUED:
                await self._not_taken(message_id, draft_of, text, attached, f"a chat holds at most {MAX_QUEUED} queued messages")
                return
            path = self.store.shown_path(chat_id)
            message = Message(
                id=message_id,
                chat_id=chat_id,
                role="user",
                content=text,
                attachments=attached,
                parent_id=path[-1].id if path else None,
                created_at=self.s.now(),
            )
            if queue:
                message = message.model_copy(update={"status": "queued", "assistant_id": assistant or None, "preset_id": preset_id})
            asked = self.choice.get(assistant) if assistant != NO_ASSISTANT and not queue else None
            run: list[tuple[EventType, Payload]] = []
            if isinstance(asked, RemoteAssistant):  # (its run request goes with the message: never one without the other)
                run = [(EventType.ASSISTANT_RUN_REQUESTED, asked.request(message, self.s.new_id, preset_id))]
            if attached:  # queued before the message is in the outbox (durable with it): it never waits for a file not queued
                await self.store.enqueue_uploads(attached, durable=False)
            await self._submit(
                EventType.MESSAGE_APPENDED, message, draft_of=draft_of, draft_files=[a.sha256 for a in attached],
                before=chat_change, after=run,
            )  # fmt: skip
        except Exception:  # (whatever failed: nothing typed is lost)
            await self._not_taken(message_id, draft_of, text, attached, "it could not be saved on this device")
            raise
        self.view.sending_taken(message_id)  # (drawn, or gone, at the redraw below)
        self._refused.pop(draft_of, None)
        await self._choose(chosen)
        self.redraw(chat_changed=bool(chat_change) and chat_change[0][0] is EventType.CHAT_CREATED)
        if attached and self.uploads is not None:  # (its requests and reads after the frame that shows the message)
            self.pane.after_frame(self.uploads.kick)
        if attached:
            self._draw_composer_files()
        if asked is not None and not run:
            await self._ask(asked, message, preset_id)

    async def _not_taken(self, message_id: str, draft_of: str, text: str, attached: tuple[Attachment, ...], why: str) -> None:
        """A message from the composer not saved: its text and files back in the draft it was
        sent from, the page's drawing of it gone, and the composer saying why."""
        self._refused[draft_of] = [f"Not sent: {why}. It is back in the box."]
        await self._files_back(draft_of, attached)
        self.view.put_back(draft_of, text, self.store.draft(draft_of))
        self.view.end_sending(message_id)

    def _saved_already(self, message_id: str) -> bool:
        """A send given twice (a reload between the two) is saved once: drawn, over the page's drawing."""
        if self.store.message(message_id) is None:
            return False
        self.view.sending_taken(message_id)
        self.pane.draw_soon()
        return True

    async def _files_sent(self, draft_of: str, data: dict[str, Any]) -> tuple[Attachment, ...]:
        """The files a message from the composer takes: the draft's (a file attached just before
        Send goes with it); or, when the page says which (``files``: a Send before Python was
        up, static/early-files.js), exactly those, beside the draft's only with ``draft``."""
        named = data.get("files")
        taken: list[Attachment] = []
        if not isinstance(named, list) or data.get("draft"):
            await self._attached(draft_of)
            taken += self.store.draft_files(draft_of)
        for reference in named if isinstance(named, list) else []:
            try:
                taken.append(Attachment.model_validate(reference))
            except ValidationError:
                log.warning("a file the page sent with a message is not a reference: left out")
        unique: dict[str, Attachment] = {}
        for attachment in taken:  # (once each, where it came first)
            unique.setdefault(attachment.sha256, attachment)
        return tuple(unique.values())[:MAX_FILES]

    async def _files_back(self, draft_of: str, attached: tuple[Attachment, ...]) -> None:
        """A message not taken: its files back in the draft it was sent from, as its text (a
        send from before Python was up had taken them off it, static/early-files.js)."""
        try:
            await self.store.change_draft_files([(draft_of, a) for a in attached], [])
        except Exception:  # (the database failing: the page's IndexedDB still has the files)
            log.exception("the files of a message not taken could not go back to its draft")
        self._draw_composer_files()

    async def adopt_draft_files(self, kept: list[Any]) -> list[tuple[str, str, int]]:
        """The files the page attached to drafts, or took off them, while Python was not up
        (static/early-files.js; ``[{chat, sha256, attachment | removed, at, url?}]``, oldest
        first, their bytes kept on this device before these were): taken into the drafts, in
        one durable write, the page's object URL kept to show each with. Returns the entries the
        page may forget (``[chat, sha256, at]``): all of them. A file over the largest the server
        takes, or past a message's number of files, is refused in words as when attached here."""
        added: list[tuple[str, Attachment]] = []
        removed: list[tuple[str, str]] = []
        have: dict[str, int] = {}
        gone: list[tuple[str, str, int]] = []
        for entry in kept:
            if not isinstance(entry, dict) or not isinstance(entry.get("chat"), str):
                continue
            chat_id, sha256 = entry["chat"], str(entry.get("sha256", ""))
            gone.append((chat_id, sha256, entry.get("at", 0)))
            if entry.get("removed"):
                removed.append((chat_id, sha256))
                continue
            try:
                attachment = Attachment.model_validate(entry.get("attachment"))
            except ValidationError:
                log.warning("a file the page attached is not a reference: left out")
                continue
            if chat_id not in have:
                have[chat_id] = len(self.store.draft_files(chat_id))
            if attachment.size > self.files.max_file_bytes or have[chat_id] >= MAX_FILES:
                why = self.files.refusal(attachment.name, attachment.size) if attachment.size > self.files.max_file_bytes else None
                self._refused.setdefault(chat_id, []).append(
                    why or f"{attachment.name} is not attached: a message takes at most {MAX_FILES} files."
                )
                continue
            have[chat_id] += 1
            added.append((chat_id, attachment))
            if isinstance(entry.get("url"), str) and entry["url"] and attachment.sha256 not in self.files.shown:
                self.files.shown[attachment.sha256] = Shown(url=entry["url"])
        if added or removed:
            await self.store.change_draft_files(added, removed)
        return gone

    async def _on_adopt_files(self, data: dict[str, Any]) -> None:
        """Files the page attached (or took off) before Python was up, kept after Python's start
        had adopted the rest (``adopt_draft_files``)."""
        await self.adopt_draft_files(list(data.get("files", [])))
        self._draw_composer_files()
        self.chats.draw_list()  # (its Draft marks)

    async def adopt_drafts(self, kept: dict[str, Any]) -> dict[str, int]:
        """What the page kept of the composer's text ({chat: {text, at}}; static/pending.js),
        newer than or as new as the database's drafts: taken in, in one durable write, before the
        composer is drawn. Returns the entries the page may forget ({chat: at}): empty ones, and
        those of chats this database does not have (deleted meanwhile, or another account's)."""
        known = {chat.id for chat in self.store.chats()} | {""}
        drafts = {chat: str(entry.get("text", "")) for chat, entry in kept.items() if chat in known and isinstance(entry, dict)}
        if drafts:
            await self.store.save_drafts(drafts)
        return {chat: entry.get("at", 0) for chat, entry in kept.items() if not drafts.get(chat) and isinstance(entry, dict)}

    async def _ask(
        self, assistant: Assistant, question: Message, preset_id: str | None = None, instructions: str | None = None,
        going_on: Message | None = None,
    ) -> None:
        """Whatever the assistant, what it yields is applied the same way: saved and shown at
        once, then sent (offline, it waits in the outbox like any change). It is asked about the
        path from the chat's start to the question: what the chat shows. ``preset_id``: the preset
        it answers under; ``instructions``: the system message to give it as it is (Regenerate:
        the earlier answer's); else one of the server's makes it, and one here is given what
        shared/instructions.py makes of the account's, the preset's and the chat's now.
        ``going_on``: Continue that reply of a model on this device."""
        sampling = DEFAULT_SAMPLING
        if not isinstance(assistant, RemoteAssistant):
            chat = self.store.chat(question.chat_id)
            presets = {p.id: p for p in self.store.presets()}
            if instructions is None:
                instructions = system_message(*layers_for(self.store.settings(), presets, chat, preset_id))
            preset = presets.get(preset_id or (chat.preset_id if chat else None) or "")
            sampling = Sampling(preset.temperature, preset.max_tokens) if preset is not None else DEFAULT_SAMPLING
        run = RunInput(question.chat_id, question, self._history(question), self.s.new_id, self.s.now,
                       on_text=self.pane.stream, preset_id=preset_id, instructions=instructions, sampling=sampling)  # fmt: skip
        task = asyncio.current_task()
        reply: Message | None = going_on
        if going_on is not None and task is not None:
            self.local_runs[going_on.id] = task
        events = assistant.go_on(run, going_on) if going_on is not None and isinstance(assistant, ModelAssistant) else assistant.run(run)
        try:
            async for event in events:
                await self.store.add_local(event)
                self.engine.kick()
                if reply is None and isinstance(event.payload, Message) and event.payload.status == "streaming":
                    reply = event.payload
                    if task is not None:
                        self.local_runs[reply.id] = task
                self.redraw()
        except asyncio.CancelledError:  # Stop: the reply keeps what it had
            if reply is not None:
                stopped = self.store.message(reply.id) or reply
                text = max(self.pane.streaming.get(reply.id, ""), stopped.content, key=len)
                stopped = stopped.model_copy(update={"status": "cancelled", "content": text, "finish_reason": "cancelled"})
                await self._submit(EventType.MESSAGE_EDITED, stopped)
                self.redraw()
        finally:
            if reply is not None:
                self.local_runs.pop(reply.id, None)
        self._send_local_follow_up(question.chat_id)

    def _history(self, question: Message) -> list[Message]:
        """The messages from the chat's start to ``question``, along the tree (as history_along)."""
        chain = path_to(self.store.links(question.chat_id), question.id)
        rows = self.store.messages_by_id(chain)
        return [rows[i] for i in chain if i in rows]

    async def _end_orphaned_local_replies(self) -> None:
        """Replies this device was writing when the page went away: their model call died with it
        (and the reply says so, as it says any other reason it failed)."""
        for reply in self.store.unfinished_local_replies(LOCAL_ASSISTANTS):
            await self._submit(EventType.MESSAGE_EDITED, reply.model_copy(update={"status": "failed_upstream"}))
            why = failure_message(reply, device_model.page_closed(), self.s.new_id, self.s.now)
            await self._submit(EventType.MESSAGE_APPENDED, why)
        self.redraw()

    async def _on_stop_run(self, data: dict[str, Any]) -> None:
        reply = self.store.message(str(data["id"]))
        if reply is None or reply.status not in UNFINISHED:
            return
        local = self.local_runs.get(reply.id)
        if local is not None:
            local.cancel()
        elif reply.run_id is not None:
            await self._submit(EventType.ASSISTANT_RUN_CANCELLED, RunCancel(run_id=reply.run_id, message_id=reply.id))
            self.redraw()

    async def _on_regenerate(self, data: dict[str, Any]) -> None:
        """Ask again: a new request whose reply is a sibling of this one (a new branch, shown),
        never a change to the old reply; under the same preset, with the same instructions."""
        reply = self.store.message(str(data["id"]))
        question = self._question_of(reply) if reply is not None else None
        if reply is not None and reply.assistant_id and question is not None:
            await self._ask(self.choice.get(reply.assistant_id), question, reply.preset_id, reply.instructions)

    async def _on_continue_run(self, data: dict[str, Any]) -> None:
        """Continue an answer cut at the length limit or stopped: the same message is written on
        from where its text ends, by a new run of its assistant (the server's: an
        ``AssistantRunContinued``, which any device may send and the server runs even if this
        page goes; a model on this device: here)."""
        reply = self.store.message(str(data["id"]))
        if reply is None or reply.role != "assistant" or reply.status in UNFINISHED or not reply.assistant_id:
            return
        assistant = self.choice.get(reply.assistant_id)
        if reply.assistant_id in LOCAL_ASSISTANTS and not isinstance(assistant, ModelAssistant):
            return  # (the local helper is never cut; a model of another device's is not here to go on)
        question = self._question_of(reply)
        go_on = RunContinue(run_id=self.s.new_id(), chat_id=reply.chat_id, message_id=reply.id, assistant_id=reply.assistant_id)
        await self._submit(EventType.ASSISTANT_RUN_CONTINUED, go_on)  # (reopened: its own edits carry the new run)
        self.redraw()
        reopened = self.store.message(reply.id)
        if isinstance(assistant, ModelAssistant) and question is not None and reopened is not None:
            await self._ask(assistant, question, reply.preset_id, reply.instructions, going_on=reopened)

    # --- follow-ups queued while an answer is written ----------------------------------------------

    def _send_local_follow_up(self, chat_id: str) -> None:
        """The chat's next queued follow-up, when the queue is ready and it is for an assistant on
        this device (the server sends those for its own, and those with no answer)."""
        if chat_id not in self._sending and self.store.queued(chat_id) and chat_id not in self.store.running():
            asyncio.ensure_future(self._send_queued(chat_id, now=False)).add_done_callback(_log_failure)

    async def _send_queued(self, chat_id: str, now: bool) -> None:
        if chat_id in self._sending:
            return  # (one at a time per chat: a follow-up is sent once)
        self._sending.add(chat_id)
        try:
            await self._send_next(chat_id, now)
        finally:
            self._sending.discard(chat_id)

    async def _send_next(self, chat_id: str, now: bool) -> None:
        local = LOCAL_ASSISTANTS
        sender = Sender(answers=(lambda a: True) if now else (lambda a: a in local), new_id=self.s.new_id)
        send = send_next(self.store.messages(chat_id), sender, now=now, chosen=self.store.branch_choices(chat_id))
        if send is None or (not now and send.assistant_id is None):
            return  # (one with no answer: the server sends it)
        if send.assistant_id in local:  # answered here, as any message asked of it
            send = send.model_copy(update={"run_id": None, "reply_id": None})
        await self._submit(EventType.QUEUED_MESSAGE_SENT, send)
        self.redraw()
        sent = self.store.message(send.message_id)
        if sent is not None and send.assistant_id in local:
            await self._ask(self.choice.get(send.assistant_id), sent, send.preset_id)

    async def _on_send_queued_now(self, data: dict[str, Any]) -> None:
        """The queue waits (a Stop, a failure): its first message goes now."""
        if self.selected is not None:
            await self._send_queued(self.selected, now=True)

    async def _on_clear_queue(self, data: dict[str, Any]) -> None:
        if self.selected is not None:
            for message in self.store.queued(self.selected):
                await self._submit(EventType.MESSAGE_DELETED, MessageRef(id=message.id, chat_id=message.chat_id))
            self.redraw()

    async def _on_show_instructions(self, data: dict[str, Any]) -> None:
        self.pane.toggle_instructions(str(data["id"]))

    # --- the assistant or preset chosen ----------------------------------------------------------

    def _chat_preset(self) -> str | None:
        """The preset the chooser shows: the open chat's (one that is gone counts as none), or,
        with no chat open, the default for new chats."""
        chat = self.store.chat(self.selected) if self.selected else None
        chosen = chat.preset_id if chat is not None else (s.default_preset_id if (s := self.store.settings()) else None)
        return chosen if chosen is not None and self.store.preset(chosen) is not None else None

    async def _on_choose_assistant(self, data: dict[str, Any]) -> None:
        await self._choose(str(data.get("assistant", "")))

    async def _choose(self, value: str) -> None:
        """An assistant or a preset chosen beside Send: an assistant is this device's choice; a
        preset is the open chat's (ChatUpdated: every device, every reload), and an assistant
        chosen in a chat with a preset takes the preset away."""
        _, preset_id = self.choice.resolve(value)
        if not value.startswith(ui.PRESET):
            await self.choice.choose(value)
        chat = self.store.chat(self.selected) if self.selected else None
        if chat is not None and chat.preset_id != preset_id:
            await self._submit(EventType.CHAT_UPDATED, chat.model_copy(update={"preset_id": preset_id}))
        self.choice.draw()

    _on_retry_run = _on_regenerate

    def _question_of(self, message: Message) -> Message | None:
        """The user message a reply (or a tool call of its answer) answers."""
        current: Message | None = message
        while current is not None and current.role != "user":
            current = self.store.message(current.parent_id) if current.parent_id else None
        return current

    # --- editing ---------------------------------------------------------------------------------

    async def _on_edit_message(self, data: dict[str, Any]) -> None:
        message = self.store.message(str(data["id"]))
        if message is not None:
            self.editing = Editing(message.id)
            self._draw_composer(text=message.content)
            self.view.focus("#composer-text")

    async def _on_resend(self, data: dict[str, Any]) -> None:
        """Edit and resend a message the server refused: it goes back into the composer."""
        rejection = self._rejection(str(data["id"]))
        if rejection is not None and isinstance(rejection.event.payload, Message):
            self.editing = Editing(rejection.event.payload.id, rejection)
            self._draw_composer(text=rejection.event.payload.content)
            self.view.focus("#composer-text")

    async def _on_cancel_edit(self, data: dict[str, Any]) -> None:
        self.editing = None
        self._draw_composer()

    async def _send_edit(self, editing: Editing, text: str) -> None:
        self.editing = None
        self._draw_composer(text="")
        self.view.restore_text("#composer-text", self.store.draft(self.selected or ""))
        if editing.rejection is not None:
            await self._resend(editing.rejection, text)
        else:
            await self._save_edit(editing.message_id, text)

    async def _save_edit(self, message_id: str, text: str, resolves: list[str] | None = None) -> None:
        """An answered question edited becomes a new branch beside it, asked again of the same
        assistant (the old branch stays); one not answered yet, or not sent yet, changes in place."""
        message = self.store.message(message_id)
        if message is None or message.content == text:
            if resolves:
                await self.store.discard_rejected(resolves)
            self.redraw()
            return
        if self._edit_branches(message.id):
            answerer = self._answerer(message.id)
            branch = Message(id=self.s.new_id(), chat_id=message.chat_id, role="user", content=text,
                             parent_id=message.parent_id, created_at=self.s.now())  # fmt: skip
            await self._submit(EventType.MESSAGE_APPENDED, branch, resolves=resolves or ())
            self.redraw()
            if answerer:
                await self._ask(self.choice.get(answerer), branch)
            return
        await self._submit(EventType.MESSAGE_EDITED, message.model_copy(update={"content": text}), resolves=resolves or ())
        self.redraw()

    def _edit_branches(self, message_id: str) -> bool:
        """Whether editing this message makes a new branch: it is on the server and answered."""
        message = self.store.message(message_id)
        return message is not None and not is_pending(message) and self._answerer(message_id) is not None

    def _answerer(self, message_id: str) -> str | None:
        """For a message with replies: the assistant of the newest ("" when none has one); None
        when it has no reply."""
        message = self.store.message(message_id)
        if message is None:
            return None
        replies = children(self.store.links(message.chat_id)).get(message_id, [])
        if not replies:
            return None
        rows = self.store.messages_by_id(replies)
        return next((rows[c].assistant_id for c in reversed(replies) if c in rows and rows[c].assistant_id), "")

    # --- changes the server refused -----------------------------------------------------------

    def _rejection(self, event_id: str) -> Rejection | None:
        return next((r for r in self.store.rejected(self.selected or "") if r.event.event_id == event_id), None)

    def _with_requests(self, rejection: Rejection) -> list[Rejection]:
        """A refused question and the refused requests for an answer to it."""
        payload = rejection.event.payload
        return [rejection] + [
            r for r in self.store.rejected(self.selected or "")
            if isinstance(r.event.payload, RunRequest) and isinstance(payload, Message) and r.event.payload.parent_id == payload.id
        ]  # fmt: skip

    async def _on_discard(self, data: dict[str, Any]) -> None:
        rejection = self._rejection(str(data["id"]))
        if rejection is not None:
            await self.store.discard_rejected(r.event.event_id for r in self._with_requests(rejection))
            self.pane.draw()

    async def _resend(self, rejection: Rejection, text: str) -> None:
        """The corrected form of a refused message goes out as a new message (asked of the same
        assistant, if the refused one was), and the refused one is forgotten in the same write."""
        refused = self._with_requests(rejection)
        resolves = [r.event.event_id for r in refused]
        payload = rejection.event.payload
        assert isinstance(payload, Message)
        if rejection.event.type is EventType.MESSAGE_EDITED and self.store.message(payload.id) is not None:
            await self._save_edit(payload.id, text, resolves)
            return
        path = self.pane.path()
        parent = payload.parent_id if payload.parent_id and self.store.message(payload.parent_id) else None
        message = Message(id=self.s.new_id(), chat_id=payload.chat_id, role="user", content=text,
                          parent_id=parent or (path[-1].id if path else None), created_at=self.s.now())  # fmt: skip
        await self._submit(EventType.MESSAGE_APPENDED, message, resolves=resolves)
        self.redraw()
        requests = [r.event.payload for r in refused if isinstance(r.event.payload, RunRequest)]
        if requests:
            await self._ask(self.choice.get(requests[0].assistant_id), message)

    # --- the rest --------------------------------------------------------------------------------

    async def _on_remove_message(self, data: dict[str, Any]) -> None:
        """Delete a message; one that never left the device is simply withdrawn."""
        message = self.store.message(str(data["id"]))
        if message is not None:
            await self._submit(EventType.MESSAGE_DELETED, MessageRef(id=message.id, chat_id=message.chat_id))
            self.redraw()

    async def _on_draft(self, data: dict[str, Any]) -> None:
        """The composer's text, saved as it is typed (the page sends the next one when this one
        is durable), per chat."""
        chat_id = str(data.get("chat") or self.selected or "")
        await self.store.save_draft(chat_id, str(data.get("text", "")))
        self.chats.draw_list()  # (its Draft marks)

    def source(self, message_id: str) -> str:
        """A message's Markdown as it is shown (for Copy)."""
        message = self.store.message(message_id)
        if message is None:
            return ""
        return max(self.pane.streaming.get(message_id, ""), message.content, key=len)

    async def _submit_and_draw(self, kind: EventType, payload: Any) -> None:
        await self._submit(kind, payload)
        self.redraw()

    async def _submit(
        self,
        kind: EventType,
        payload: Payload,
        draft_of: str | None = None,
        resolves: Iterable[str] = (),
        draft_files: Iterable[str] | None = None,
        before: Iterable[tuple[EventType, Payload]] = (),
        after: Iterable[tuple[EventType, Payload]] = (),
    ) -> None:
        """Durable first (outbox + optimistic apply in one transaction, persisted), then the
        network. ``before``, ``after``: changes that go with it, in the same transaction and
        durable write (a Send's new chat, its run)."""
        now = self.s.now()
        changes = (*before, (kind, payload), *after)
        events = [DomainEvent(event_id=self.s.new_id(), type=k, payload=p, created_at=now) for k, p in changes]
        await self.store.add_local(*events, draft_of=draft_of, resolves=resolves, draft_files=draft_files)
        self.engine.kick()
