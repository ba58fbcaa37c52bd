"""The chats: the list (by activity, with its marks), the open chat's header (rename, delete),
search, and export and import. ``Client.dispatch`` hands it every action it has an ``on_``
method for; the Client asks it to draw the list and the header.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from pydantic import ValidationError

from shared.models import MAX_INSTRUCTIONS, Chat, ChatRef, DomainEvent, EventType, Message
from shared.transfer import Export, export_of, import_events
from webapp import ui
from webapp.store import LocalStore

DEFAULT_TITLE = "New chat"
_DEFAULT = re.compile(r"New chat|Chat \d+")  # (the second: what earlier versions named a chat)
TITLE_LENGTH = 48
_MARKUP = re.compile(r"^[\s#>*\-+`|]+|[*_`~]+")  # Markdown that says nothing in a title


def day_groups(listed: list[tuple[Chat, str]], now: datetime) -> list[tuple[str, list[Chat]]]:
    """The chat list's groups, as chat apps have them: Today, Yesterday, Previous 7 days,
    Previous 30 days, then each month ("October", or "October 2025" before this year), by the
    day of a chat's latest activity (``listed``, newest first, as ``LocalStore.listed`` gives
    it) on the calendar of ``now`` (this device's time, with its UTC offset)."""
    today = now.date()
    groups: list[tuple[str, list[Chat]]] = []
    for chat, active in listed:
        try:
            day = datetime.fromisoformat(active).astimezone(now.tzinfo).date()
        except ValueError:  # (not a time: it stays with the chats before it)
            day = today
        days = (today - day).days
        if days <= 0:  # (or ahead of this device's clock)
            label = "Today"
        elif days == 1:
            label = "Yesterday"
        elif days < 7:
            label = "Previous 7 days"
        elif days < 30:
            label = "Previous 30 days"
        else:
            label = calendar.month_name[day.month] + ("" if day.year == today.year else f" {day.year}")
        if groups and groups[-1][0] == label:
            groups[-1][1].append(chat)
        else:
            groups.append((label, [chat]))
    return groups


def is_default_title(title: str) -> bool:
    return _DEFAULT.fullmatch(title) is not None


def title_from(text: str) -> str:
    """A chat's title from its first message: the first line with words, about 48 characters,
    cut at a word."""
    line = next((cleaned for raw in text.splitlines() if (cleaned := _MARKUP.sub("", raw).strip())), "")
    line = " ".join(line.split())
    if len(line) <= TITLE_LENGTH:
        return line or DEFAULT_TITLE
    cut = line[: TITLE_LENGTH + 1].rsplit(" ", 1)[0] if " " in line[:TITLE_LENGTH] else line[:TITLE_LENGTH]
    return cut.rstrip(" ,.;:-") + "…"


class ChatsView(Protocol):
    def morph(self, region: str, html: str) -> None: ...

    def focus(self, selector: str) -> None: ...

    def download(self, filename: str, mime: str, text: str) -> None:
        """Offer this text as a file to save."""


@dataclass
class ChatsHost:
    """What the chats need of the client."""

    selected: Callable[[], str | None]
    open_chat: Callable[[str, str | None], Awaitable[None]]  # (chat, a message to show or None)
    submit: Callable[[EventType, Any], Awaitable[None]]
    kick: Callable[[], None]  # something new is in the outbox
    now: Callable[[], str]
    local_now: Callable[[], datetime]  # this device's time, with its UTC offset (the list's days)
    # An export with files offered as a tar (filename, JSON, digests): the digests left out.
    export_files: Callable[[str, str, list[str]], Awaitable[list[str]]]
    # Files an imported tar held (token, sha256, size each) for the imported messages: how many
    # were kept on this device (and queued for upload).
    restore_files: Callable[[list[dict[str, Any]], list[Message]], Awaitable[int]]


class Chats:
    def __init__(self, store: LocalStore, view: ChatsView, host: ChatsHost) -> None:
        self.store = store
        self.view = view
        self.host = host
        self.query = ""  # what the search box holds (the list shows the results while it is not empty)
        self.renaming: str | None = None  # the chat whose title is being edited
        self.deleting: str | None = None  # the chat whose deletion is to be confirmed
        self.instructing: str | None = None  # the chat whose instructions are being edited
        self._list = ""  # the list's HTML as drawn
        self._head = ""

    # --- drawing -----------------------------------------------------------------------------

    def draw_list(self, listed: list[tuple[Chat, str]] | None = None) -> None:
        """The list (``listed``: as ``LocalStore.listed`` gives it, when the caller has it), or
        the search's results while there is a query."""
        if self.query:
            html = ui.search_results(self.query, self.store.search(self.query))
        else:
            marks = ui.Marks(self.store.drafted(), self.store.running(), self.store.unsent())
            groups = day_groups(self.store.listed() if listed is None else listed, self.host.local_now())
            html = ui.chat_list(groups, self.host.selected(), marks)
        if html != self._list:
            self._list = html
            self.view.morph("chat-list", html)

    def draw_head(self, chat: Chat | None) -> None:
        if chat is None or self.renaming != chat.id:
            self.renaming = None
        if chat is None or self.deleting != chat.id:
            self.deleting = None
        if chat is None or self.instructing != chat.id:
            self.instructing = None
        count = self.store.messages_count(chat.id) if chat is not None and self.deleting else None
        html = ui.chat_head(chat, renaming=self.renaming is not None, deleting=count, instructing=self.instructing is not None)
        if html != self._head:
            self._head = html
            self.view.morph("chat-head", html)

    def reset(self) -> None:
        """A new layout (a sign-in): nothing of it is drawn yet."""
        self._list = self._head = self.query = ""
        self.renaming = self.deleting = self.instructing = None

    # --- titles --------------------------------------------------------------------------------

    def titled(self, chat_id: str, sent: str) -> Chat | None:
        """A chat that still has its default title is named after its first user message
        (``sent``, the text of one being sent, when it has none yet): the chat renamed, or None."""
        chat = self.store.chat(chat_id)
        if chat is None or not is_default_title(chat.title):
            return None
        first = next((m.content for m in self.store.messages(chat_id) if m.role == "user"), sent)
        title = title_from(first)
        return chat.model_copy(update={"title": title}) if title != chat.title else None

    async def on_rename_chat(self, data: dict[str, Any]) -> None:
        self.renaming, self.deleting, self.instructing = str(data["id"]), None, None
        self.draw_head(self.store.chat(self.renaming))
        self.view.focus("#rename-title")

    async def on_save_title(self, data: dict[str, Any]) -> None:
        chat = self.store.chat(str(data.get("id", "")))
        title = " ".join(str(data.get("title", "")).split())[:200]
        self.renaming = None
        if chat is not None and title and title != chat.title:
            await self.host.submit(EventType.CHAT_UPDATED, chat.model_copy(update={"title": title}))
        self.draw_head(chat and self.store.chat(chat.id))
        self.draw_list()

    async def on_cancel_rename(self, data: dict[str, Any]) -> None:
        self.renaming = None
        self.draw_head(self._open())

    # --- the chat's instructions ----------------------------------------------------------------

    async def on_chat_instructions(self, data: dict[str, Any]) -> None:
        self.instructing, self.renaming, self.deleting = str(data["id"]), None, None
        self.draw_head(self.store.chat(self.instructing))
        self.view.focus("#chat-instructions-text")

    async def on_save_chat_instructions(self, data: dict[str, Any]) -> None:
        """The chat's own layer of the system message ("" or blank: none), for its next answers."""
        chat = self.store.chat(str(data.get("id", "")))
        text = str(data.get("instructions", ""))[:MAX_INSTRUCTIONS]
        self.instructing = None
        if chat is not None and text != (chat.instructions or ""):
            await self.host.submit(EventType.CHAT_UPDATED, chat.model_copy(update={"instructions": text if text.strip() else None}))
        self.draw_head(chat and self.store.chat(chat.id))
        self.view.focus("#composer-text")

    async def on_cancel_chat_instructions(self, data: dict[str, Any]) -> None:
        self.instructing = None
        self.draw_head(self._open())

    # --- deleting --------------------------------------------------------------------------------

    async def on_delete_chat(self, data: dict[str, Any]) -> None:
        self.deleting, self.renaming, self.instructing = str(data["id"]), None, None
        self.draw_head(self.store.chat(self.deleting))
        self.view.focus("[data-action=cancel-delete-chat]")

    async def on_cancel_delete_chat(self, data: dict[str, Any]) -> None:
        self.deleting = None
        self.draw_head(self._open())

    async def on_confirm_delete_chat(self, data: dict[str, Any]) -> None:
        chat_id, self.deleting = str(data["id"]), None
        if self.store.chat(chat_id) is not None:
            await self.host.submit(EventType.CHAT_DELETED, ChatRef(id=chat_id))

    def _open(self) -> Chat | None:
        selected = self.host.selected()
        return self.store.chat(selected) if selected else None

    # --- search ------------------------------------------------------------------------------------

    async def on_search(self, data: dict[str, Any]) -> None:
        self.query = str(data.get("text", "")).strip()
        self.draw_list()

    async def on_open_hit(self, data: dict[str, Any]) -> None:
        await self.host.open_chat(str(data["chat"]), str(data["message"]) if data.get("message") else None)

    # --- export and import -------------------------------------------------------------------------

    async def on_export_chat(self, data: dict[str, Any]) -> None:
        chat = self.store.chat(str(data["id"]))
        if chat is not None:
            self.view.download(_filename(chat.title, "md"), "text/markdown", self.markdown(chat))

    def markdown(self, chat: Chat) -> str:
        """The chat as it is shown (the branch chosen at each fork), as Markdown."""
        path = self.store.shown_path(chat.id)
        rows = self.store.messages_by_id([step.id for step in path])
        parts = [f"# {chat.title}\n"]
        for step in path:
            message = rows.get(step.id)
            if message is None:
                continue
            who = {"user": "You", "assistant": f"Assistant ({message.assistant_id})" if message.assistant_id else "Assistant"}
            heading = who.get(message.role, message.role.replace("_", " ").capitalize())
            parts.append(f"## {heading} · {message.created_at}\n\n{message.content.rstrip()}\n")
        return "\n".join(parts)

    async def on_export_all(self, data: dict[str, Any]) -> None:
        """Everything as a file: the export's JSON, or with the messages' attached files a tar
        of it and them (the format of ``python -m server export --with-files``)."""
        settings = self.store.settings()
        everything = export_of(
            self.store.chats(), self.store.all_messages(), self.host.now(), [settings] if settings else [], self.store.presets()
        )
        text = everything.model_dump_json(by_alias=True, indent=1)
        digests = sorted({a.sha256 for m in everything.messages for a in m.attachments})
        if not digests:
            self.view.download(f"chats-{self.host.now()[:10]}.json", "application/json", text)
            return
        left = await self.host.export_files(f"chats-{self.host.now()[:10]}.tar", text, digests)
        kept = len(digests) - len(left)
        note = f"Exported with {kept} file{'s' if kept != 1 else ''}."
        if left:
            note += f" {len(left)} not on this device and not reachable now: left out."
        self.view.morph("data-note", note)

    async def on_import(self, data: dict[str, Any]) -> None:
        """Import a file made by Export: its chats and messages (and presets, and its settings
        when the account has none yet), as the events that create them (with ids made from what
        they create, so importing a file twice changes nothing)."""
        try:
            document = Export.model_validate_json(str(data.get("text", "")))
        except ValidationError:
            self.view.morph("data-note", f"{data.get('name') or 'This file'} is not an export of this app: nothing was imported.")
            return
        events: list[DomainEvent] = import_events(document, self.host.now(), self.store.settings() is not None)
        files = await self.host.restore_files(list(data.get("files") or []), document.messages)
        added = await self.store.add_imported(events)
        self.host.kick()
        chats = sum(1 for e in events if e.type is EventType.CHAT_CREATED)
        messages = sum(1 for e in events if e.type is EventType.MESSAGE_APPENDED)
        with_files = f", {files} file{'s' if files != 1 else ''}" if data.get("files") else ""
        self.view.morph(
            "data-note",
            f"Imported {chats} chat{'s' if chats != 1 else ''} and {messages} messages{with_files}"
            f" ({len(events) - added} already on this device).",
        )
        self.draw_list()


def _filename(title: str, extension: str) -> str:
    stem = re.sub(r"[^\w\- ]+", "", title).strip().replace(" ", "-")[:60] or "chat"
    return f"{stem}.{extension}"
