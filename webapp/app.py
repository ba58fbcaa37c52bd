"""The client: reacts to the user's actions and to sync, and redraws from the local database."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from shared.assistants import Assistant, Model, ModelAssistant, RunInput, history_along
from shared.models import (
    Chat,
    DeltaFrame,
    DomainEvent,
    EventType,
    Message,
    MessageRef,
    RunCancel,
    RunRequest,
    Session,
)
from webapp import ui
from webapp.assistants import DEVICE_MODEL_ID, RemoteAssistant, ToolAssistant
from webapp.store import Account, LocalStore
from webapp.sync import Status, SyncEngine
from webapp.transport import (
    AssistantInfo,
    NetworkError,
    RunInfo,
    ServerError,
    Transport,
    Unauthorized,
)

ENDED = ("completed", "failed_upstream", "cancelled")

# Until the server has told us its assistants (a first start offline): the one every server has.
DEFAULT_ASSISTANTS = [AssistantInfo(id="demo", name="Demo assistant (offline)", kind="remote", model="demo")]
NO_ASSISTANT = ""  # chosen in the composer: a message with no answer

log = logging.getLogger(__name__)


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("background task failed: %s", task.get_coro(), exc_info=task.exception())


class View(Protocol):
    def set_html(self, region: str, html: str) -> None:
        """Replace the content of the element with this id."""

    def set_status(self, status: str, text: str) -> None: ...

    def focus(self, selector: str) -> None: ...

    def restore_text(self, selector: str, text: str) -> None:
        """Put text back into an input the user has not typed into again since."""


class AuthApi(Protocol):
    async def signin(self, username: str, password: str, signup: bool) -> Session:
        """Raises AuthFailed with a sentence for the user."""


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


class Client:
    def __init__(self, services: Services) -> None:
        self.s = services
        self.store = services.store
        self.view = services.view
        self.engine = SyncEngine(
            self.store,
            services.transport,
            self.redraw,
            self._status,
            on_delta=self._on_delta,
            on_online=self._on_online,
        )
        self.selected: str | None = None
        self.editing: str | None = None  # the message the composer is editing, if any
        self.streaming: dict[str, str] = {}  # a streaming reply's text so far, from delta frames
        self.local_runs: dict[str, asyncio.Task[Any]] = {}  # replies being written here, by id
        self._runs_asked: dict[str, int] = {}  # chat -> the cursor when its runs were last asked for
        self._sync_task: asyncio.Task[None] | None = None

    # --- assistants ----------------------------------------------------------------------------

    def assistants(self) -> list[Assistant]:
        """The server's assistants (as it last listed them), then those that run here."""
        known = self.store.setting("assistants")
        remote = [AssistantInfo(**a) for a in json.loads(known)] if known else DEFAULT_ASSISTANTS
        local: list[Assistant] = [ToolAssistant(self.s.python_tool)]
        device = self.device_model()
        if device and self.s.device_model is not None:
            model = self.s.device_model(device["url"], device["model"])
            local.append(ModelAssistant(DEVICE_MODEL_ID, f"On this device: {device['model']}", model))
        return [RemoteAssistant(a.id, a.name) for a in remote] + local

    def device_model(self) -> dict[str, str] | None:
        """The model on this device the user set up ({"url", "model"}), if any."""
        found: dict[str, str] | None = json.loads(self.store.setting("device_model") or "null")
        return found

    def assistant(self, assistant_id: str) -> Assistant:
        found = next((a for a in self.assistants() if a.id == assistant_id), None)
        return found or RemoteAssistant(assistant_id, assistant_id)  # one the server stopped listing

    def chosen_assistant(self) -> str:
        chosen = self.store.setting("assistant")
        return chosen if chosen is not None else self.assistants()[0].id

    def _on_online(self) -> None:
        asyncio.ensure_future(self._refresh_assistants()).add_done_callback(_log_failure)

    async def _refresh_assistants(self) -> None:
        """Online again: ask the server which assistants it has (kept for offline starts)."""
        try:
            found = await self.s.transport.assistants()
        except (NetworkError, ServerError, Unauthorized):
            return
        listed = json.dumps([a.__dict__ for a in found])
        if listed != self.store.setting("assistants"):
            await self.store.set_setting("assistants", listed)
            self.redraw(chat_changed=True)

    def _on_delta(self, frame: DeltaFrame) -> None:
        """Streamed tokens of a reply: shown at once, never stored (the log brings checkpoints
        and the final text). A piece that does not follow what we have is left for the next
        checkpoint to fill in."""
        reply = self.store.message(frame.message_id)
        if reply is None or reply.status not in ("queued", "streaming"):
            return
        have = max(self.streaming.get(reply.id, ""), reply.content, key=len)
        if frame.offset > len(have) or frame.offset + len(frame.text) <= len(have):
            return  # a gap, or nothing new
        self.streaming[reply.id] = have[: frame.offset] + frame.text
        self._draw_messages(reply.chat_id)

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        account = self.store.account()
        if account is None:
            self.view.set_html("root", ui.auth_form())
            self.view.focus("input[name=username]")
            return
        device = self.device_model() or {}
        self.view.set_html("root", ui.layout(account.username, device.get("url", ""), device.get("model", "")))
        chats = self.store.chats()
        self.selected = chats[0].id if chats else None
        self.redraw(chat_changed=True)
        self._status(self.engine.status)
        self._sync_task = asyncio.ensure_future(self.engine.run())
        self._sync_task.add_done_callback(_log_failure)
        asyncio.ensure_future(self._end_orphaned_local_replies()).add_done_callback(_log_failure)

    def stop(self) -> None:
        """Stop syncing (this tab no longer owns the database)."""
        if self._sync_task is not None:
            self._sync_task.cancel()
            self._sync_task = None

    def _status(self, status: Status) -> None:
        self.view.set_status(str(status), ui.STATUS_TEXT[status])
        if status is Status.SIGNED_OUT:
            account = self.store.account()
            self.view.set_html("root", ui.auth_form("Your session has ended: sign in again."))
            if account is not None:
                self.view.focus("input[name=password]")

    def redraw(self, chat_changed: bool = False) -> None:
        chats = self.store.chats()
        if all(c.id != self.selected for c in chats):  # none chosen yet, or it was deleted
            first = chats[0].id if chats else None
            chat_changed = chat_changed or first != self.selected
            self.selected = first
        self.view.set_html("chat-list", ui.chat_list(chats, self.selected))
        if chat_changed:
            chat = self.store.chat(self.selected) if self.selected else None
            editing = self.store.message(self.editing) if self.editing else None
            if editing is None or chat is None or editing.chat_id != chat.id:
                self.editing, editing = None, None
            text = editing.content if editing else (self.store.draft(chat.id) if chat else "")
            self.view.set_html(
                "chat",
                ui.chat_pane(
                    chat,
                    text,
                    editing=editing is not None,
                    assistants=[(a.id, a.name) for a in self.assistants()],
                    chosen=self.chosen_assistant(),
                ),
            )
        if self.selected is not None:
            rows = self.store.messages(self.selected)
            for row in rows:  # the log caught up with (or ended) a stream: its own text wins
                live = self.streaming.get(row.id)
                if live is not None and (row.status != "streaming" or len(row.content) >= len(live)):
                    del self.streaming[row.id]
            self._draw_messages(self.selected, rows)
            self._ask_for_runs(self.selected, rows)

    def _draw_messages(self, chat_id: str, rows: list[Message] | None = None) -> None:
        """The chat's messages, if it is the one shown, with the text of replies still streaming."""
        if chat_id == self.selected:
            rows = self.store.messages(chat_id) if rows is None else rows
            self.view.set_html("messages", ui.messages(rows, self.streaming, self.run_infos(chat_id)))

    # --- how the server's runs ended, and what they cost ------------------------------------------

    def run_infos(self, chat_id: str) -> dict[str, RunInfo]:
        """By reply id, as the server last said (kept for offline)."""
        known = json.loads(self.store.setting("runs:" + chat_id) or "[]")
        return {r["message_id"]: RunInfo(**r) for r in known}

    def _ask_for_runs(self, chat_id: str, rows: list[Message]) -> None:
        """A server-side reply of this chat ended and we do not know how: ask (once per cursor)."""
        infos = self.run_infos(chat_id)
        unknown = any(
            r.run_id and r.status in ENDED and (r.id not in infos or infos[r.id].status != r.status) for r in rows
        )
        if unknown and self.engine.status is Status.ONLINE and self._runs_asked.get(chat_id) != self.store.last_seq():
            self._runs_asked[chat_id] = self.store.last_seq()
            asyncio.ensure_future(self._fetch_runs(chat_id)).add_done_callback(_log_failure)

    async def _fetch_runs(self, chat_id: str, tries: int = 5) -> None:
        for _ in range(tries):
            try:
                found = await self.s.transport.runs(chat_id)
            except (NetworkError, ServerError, Unauthorized):
                return
            await self.store.set_setting("runs:" + chat_id, json.dumps([r.__dict__ for r in found]))
            self._draw_messages(chat_id)
            if all(r.status in ENDED for r in found):
                return
            await asyncio.sleep(1)  # a run's usage is written just after its reply ends

    # --- actions -------------------------------------------------------------------------------

    async def dispatch(self, action: str, data: dict[str, Any]) -> None:
        handler: Callable[[dict[str, Any]], Awaitable[None]] | None = getattr(
            self, "_on_" + action.replace("-", "_"), None
        )
        if handler is None:
            raise ValueError(f"unknown action {action!r}")
        await handler(data)

    async def _on_signin(self, data: dict[str, Any]) -> None:
        username = str(data.get("username", "")).strip()
        try:
            session = await self.s.auth.signin(
                username, str(data.get("password", "")), signup=data.get("mode") == "signup"
            )
        except AuthFailed as e:
            self.view.set_html("root", ui.auth_form(str(e)))
            return
        await self.store.set_account(Account(session.user_id, session.device_id, username))
        self.stop()
        self.start()

    async def _on_signout(self, data: dict[str, Any]) -> None:
        self.stop()
        self.view.set_html("root", ui.auth_form())

    async def _on_select_chat(self, data: dict[str, Any]) -> None:
        self.selected = str(data["id"])
        self.redraw(chat_changed=True)
        self.view.focus("textarea[name=text]")

    async def _on_new_chat(self, data: dict[str, Any]) -> None:
        now = self.s.now()
        chat = Chat(id=self.s.new_id(), title=f"Chat {len(self.store.chats()) + 1}", created_at=now)
        await self._submit(EventType.CHAT_CREATED, chat)
        self.selected = chat.id
        self.redraw(chat_changed=True)
        self.view.focus("textarea[name=text]")

    async def _on_send(self, data: dict[str, Any]) -> None:
        text = str(data.get("text", "")).strip()
        if not text or self.selected is None:
            return
        if self.editing is not None:
            await self._save_edit(self.editing, text)
            return
        earlier = self.store.messages(self.selected)
        message = Message(
            id=self.s.new_id(),
            chat_id=self.selected,
            role="user",
            content=text,
            parent_id=earlier[-1].id if earlier else None,
            created_at=self.s.now(),
        )
        try:
            await self._submit(EventType.MESSAGE_APPENDED, message)
        except Exception:
            self.view.restore_text("textarea[name=text]", text)  # not saved: the text goes back
            raise
        await self.store.save_draft(message.chat_id, "")
        assistant = str(data.get("assistant", self.chosen_assistant()))
        if assistant != self.store.setting("assistant"):
            await self.store.set_setting("assistant", assistant)
        self.redraw()
        if assistant != NO_ASSISTANT:
            await self._ask(self.assistant(assistant), message)

    async def _ask(self, assistant: Assistant, question: Message) -> None:
        """Whatever the assistant, what it yields is applied the same way: saved and shown at
        once, then sent (offline, it waits in the outbox like any change)."""
        history = history_along(self.store.messages(question.chat_id), question.id)
        run = RunInput(question.chat_id, question, history, self.s.new_id, self.s.now, on_text=self._on_local_text)
        task = asyncio.current_task()
        reply: Message | None = None
        try:
            async for event in assistant.run(run):
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
                text = max(self.streaming.get(reply.id, ""), stopped.content, key=len)
                await self._submit(EventType.MESSAGE_EDITED, stopped.model_copy(update={"status": "cancelled", "content": text}))
                self.redraw()
        finally:
            if reply is not None:
                self.local_runs.pop(reply.id, None)

    def _on_local_text(self, message_id: str, text: str) -> None:
        self.streaming[message_id] = text
        reply = self.store.message(message_id)
        if reply is not None:
            self._draw_messages(reply.chat_id)

    async def _end_orphaned_local_replies(self) -> None:
        """Replies this device was writing when the page went away: their model call died with it."""
        for reply in self.store.unfinished_local_replies():
            await self._submit(EventType.MESSAGE_EDITED, reply.model_copy(update={"status": "failed_upstream"}))
        self.redraw()

    async def _on_choose_assistant(self, data: dict[str, Any]) -> None:
        await self.store.set_setting("assistant", str(data.get("assistant", "")))

    async def _on_device_model(self, data: dict[str, Any]) -> None:
        """The on-device model's settings (empty: none)."""
        url, model = str(data.get("url", "")).strip(), str(data.get("model", "")).strip()
        await self.store.set_setting("device_model", json.dumps({"url": url, "model": model} if url and model else None))
        self.redraw(chat_changed=True)

    async def _on_stop_run(self, data: dict[str, Any]) -> None:
        reply = self.store.message(str(data["id"]))
        if reply is None or reply.status not in ("queued", "streaming"):
            return
        local = self.local_runs.get(reply.id)
        if local is not None:
            local.cancel()
        elif reply.run_id is not None:
            await self._submit(EventType.ASSISTANT_RUN_CANCELLED, RunCancel(run_id=reply.run_id, message_id=reply.id))
            self.redraw()

    async def _on_retry_run(self, data: dict[str, Any]) -> None:
        """Ask again (a new request, a new reply beside the failed one): never a resend of the old."""
        reply = self.store.message(str(data["id"]))
        question = self.store.message(reply.parent_id) if reply is not None and reply.parent_id else None
        if reply is not None and reply.assistant_id and question is not None:
            await self._ask(self.assistant(reply.assistant_id), question)

    async def _on_edit_message(self, data: dict[str, Any]) -> None:
        self.editing = str(data["id"])
        self.redraw(chat_changed=True)
        self.view.focus("textarea[name=text]")

    async def _on_cancel_edit(self, data: dict[str, Any]) -> None:
        self.editing = None
        self.redraw(chat_changed=True)

    async def _save_edit(self, message_id: str, text: str) -> None:
        message = self.store.message(message_id)
        self.editing = None
        if message is not None and message.content != text:
            edited = message.model_copy(update={"content": text})
            await self._submit(EventType.MESSAGE_EDITED, edited)
        self.redraw(chat_changed=True)

    async def _on_remove_message(self, data: dict[str, Any]) -> None:
        """Delete a message; one that never left the device is simply withdrawn."""
        message = self.store.message(str(data["id"]))
        if message is not None:
            await self._submit(EventType.MESSAGE_DELETED, MessageRef(id=message.id, chat_id=message.chat_id))
            self.redraw()

    async def _on_draft(self, data: dict[str, Any]) -> None:
        """The composer's text, saved as it is typed (debounced by the page), per chat."""
        chat_id = str(data.get("chat") or self.selected or "")
        if chat_id:
            await self.store.save_draft(chat_id, str(data.get("text", "")))

    async def _submit(self, kind: EventType, payload: Chat | Message | MessageRef | RunRequest | RunCancel) -> None:
        """Durable first (outbox + optimistic apply in one transaction, persisted), then the network."""
        event = DomainEvent(event_id=self.s.new_id(), type=kind, payload=payload, created_at=self.s.now())
        await self.store.add_local(event)
        self.engine.kick()
