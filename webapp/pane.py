"""The message pane: what the open chat shows, and patches that touch only what changed.

It draws the chat's shown path (shared/thread.py), the last ``window`` messages of it, then the
changes the server refused. The error message that says why a reply failed is drawn as part of
that reply ("The assistant could not answer: ..."), not as a message of its own. Each message is
one keyed item; the pane remembers the HTML the page has for every key and hands the view only
the items whose HTML changed (a new message adds one node, a delta updates one node, every other
node stays the same DOM object). A streaming reply's text is drawn at most once per animation
frame, however many deltas arrive in between, through a StreamRenderer that renders only its
last block again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from shared.followups import queue_state
from shared.models import ENDED, Message, RunRequest, RunSummary
from shared.thread import Step
from webapp import message_html
from webapp.markdown import StreamRenderer
from webapp.outbox import Delivery, Rejection
from webapp.overlay import is_pending
from webapp.store import LocalStore

WINDOW = 40  # messages drawn when a chat opens; "Show earlier messages" adds as many again
SLOT = "\x00"  # where a streaming reply's content goes in its item's HTML (no message holds a NUL)


class MessagesView(Protocol):
    def patch_messages(
        self,
        order: list[str] | None,
        changed: dict[str, str],
        opened: bool,
        earlier: bool,
        streams: dict[str, tuple[int, str]],
    ) -> None:
        """Make the message list these keyed items, in ``order`` (None: as it is): a key in
        ``changed`` gets that HTML (added, or morphed in place), a key not in it keeps its node,
        a node whose key is not in ``order`` goes. ``opened``: a chat was opened (start at its
        latest message). ``earlier``: there are older messages than the first one drawn.
        ``streams``: key -> (n, html): in that item's content, keep the first n elements (the
        blocks of a streaming reply that no longer change) and put ``html`` after them."""


class MessagePane:
    def __init__(
        self,
        store: LocalStore,
        view: MessagesView,
        schedule_frame: Callable[[Callable[[], None]], None],
        files_of: Callable[[Message], str] = lambda message: "",
    ) -> None:
        self.store = store
        self.view = view
        self._schedule_frame = schedule_frame
        self._files_of = files_of  # a message's attachments as HTML (webapp/files.py)
        self.chat_id: str | None = None
        self.window = WINDOW
        self.streaming: dict[str, str] = {}  # a reply's text so far (deltas, a local model), by id
        self._renderers: dict[str, StreamRenderer] = {}
        self._drawn: dict[str, str] = {}  # key -> the HTML the page has for it (SLOT for a stream's text)
        self._streamed: dict[str, tuple[int, int, str]] = {}  # key -> (generation, blocks kept, rest) drawn
        self._order: list[str] = []
        self._steps: dict[str, Step] = {}
        self.rows: dict[str, Message] = {}  # the messages drawn last, by id
        self._queued: dict[str, Message] = {}  # the queued follow-ups drawn last, by id
        self._runs: dict[str, RunSummary] = {}
        self._reasons: dict[str, Message] = {}  # a failed reply's id -> the error message saying why
        self._delivery: dict[str, Delivery] = {}
        self._dirty: set[str] = set()
        self._whole = False  # a whole draw is asked for the next frame (draw_soon)
        self._frame_asked = False
        self._after_frame: list[Callable[[], None]] = []  # run at the next frame, after its drawing
        self.expanded: set[str] = set()  # answers whose "Instructions used" are shown
        self._paused = False  # the open chat's queue waits for Send now (a Stop or a failure)

    def path(self) -> list[Step]:
        """The open chat's shown path, as the database says now."""
        if self.chat_id is None:
            return []
        return self.store.shown_path(self.chat_id)

    def open(self, chat_id: str | None) -> None:
        self.chat_id = chat_id
        self.window = WINDOW
        self._drawn, self._streamed, self._order = {}, {}, []
        self.draw(opened=True)

    def reach(self, message_id: str) -> bool:
        """Draw the open chat back to this message (and a few before it); False when it is not
        on the shown path."""
        path = [step.id for step in self.path()]
        if message_id not in path:
            return False
        needed = len(path) - path.index(message_id) + 3
        if needed > self.window:
            self.window = needed
            self.draw()
        return True

    def show_earlier(self) -> None:
        self.window += WINDOW
        self.draw()

    def draw_soon(self) -> None:
        """``draw`` at the next animation frame, once however often it is asked for before: in
        the browser a task of its own, apart from the change that asked for it (a Send's, a
        page of the log's), so that neither makes a long task of both."""
        self._whole = True
        self._ask_frame()

    def draw(self, opened: bool = False) -> None:
        self._whole = False
        self._dirty.clear()  # (every drawn reply is drawn as it is now)
        path = self.path()
        shown = path[-self.window :]
        if self._order and not opened:  # a new message is added below; the ones above stay for a while
            drawn_first = self._order[0]
            first = next((i for i, step in enumerate(path) if message_html.item_key(step.id) == drawn_first), None)
            if first is not None and len(path) - self.window - WINDOW <= first < len(path) - len(shown):
                shown = path[first:]
        self.rows = rows = self.store.messages_by_id([step.id for step in shown])
        self._steps = {step.id: step for step in shown}
        self._runs = self.store.run_infos(self.chat_id) if self.chat_id else {}
        self._reasons = message_html.failure_reasons(rows)
        folded = {error.id for error in self._reasons.values()}  # (said by their replies)
        self._delivery = self.store.delivery()
        changed: dict[str, str] = {}
        streams: dict[str, tuple[int, str]] = {}
        order = []
        for step in shown:
            if step.id in rows and step.id not in folded:
                order.append(message_html.item_key(step.id))
                self._patch(rows[step.id], changed, streams)
        if self.chat_id is not None:
            self._draw_queue(order, changed)
            for rejection in self._rejections(self.store.rejected(self.chat_id)):
                key, html = message_html.rejection_key(rejection), self._rejection_html(rejection)
                order.append(key)
                if self._drawn.get(key) != html:
                    changed[key] = self._drawn[key] = html
        if not opened and not changed and not streams and order == self._order:
            return
        self._drawn = {key: self._drawn[key] for key in order}
        self._streamed = {key: self._streamed[key] for key in order if key in self._streamed}
        self._renderers = {i: r for i, r in self._renderers.items() if message_html.item_key(i) in self._streamed}
        self._order = order
        self.view.patch_messages(order, changed, opened, len(path) > len(shown), streams)

    def _draw_queue(self, order: list[str], changed: dict[str, str]) -> None:
        """The follow-ups queued in the open chat, in the order they go, under its last answer;
        and while the queue waits, how many and Send now / Clear."""
        assert self.chat_id is not None
        queued = self.store.queued(self.chat_id)
        self._paused = bool(queued) and queue_state(self.store.queue_rows(self.chat_id)) == "paused"
        self._queued = {message.id: message for message in queued}
        for message in queued:
            key = message_html.item_key(message.id)
            order.append(key)
            html = self._queued_html(message)
            if self._drawn.get(key) != html:
                changed[key] = self._drawn[key] = html
        if self._paused:
            key, html = message_html.QUEUE_KEY, message_html.queue_bar(len(queued))
            order.append(key)
            if self._drawn.get(key) != html:
                changed[key] = self._drawn[key] = html

    def _queued_html(self, message: Message) -> str:
        return message_html.message_item(message_html.Item(
            message=message, delivery=self._delivery.get(message.id), files_html=self._files_of(message), paused=self._paused,
        ))  # fmt: skip

    def draw_file(self, sha256: str) -> None:
        """Where a file's upload stands changed: only the drawn messages that carry it are drawn
        again, as they are now. (A whole ``draw`` asks the database a dozen questions and renders
        every drawn message again; an upload changes this every 250 ms as it goes.)"""
        carry = [i for i, m in {**self.rows, **self._queued}.items() if any(a.sha256 == sha256 for a in m.attachments)]
        if not carry:
            return
        changed: dict[str, str] = {}
        streams: dict[str, tuple[int, str]] = {}
        for message_id, row in self.store.messages_by_id(carry).items():
            key = message_html.item_key(message_id)
            if key not in self._drawn:
                continue  # (folded into the reply it answers, or no longer drawn)
            if message_id in self._queued:
                self._queued[message_id] = row
                html = self._queued_html(row)
                if self._drawn[key] != html:
                    changed[key] = self._drawn[key] = html
            else:
                self.rows[message_id] = row
                self._patch(row, changed, streams)
        if changed or streams:
            self.view.patch_messages(None, changed, False, False, streams)

    def toggle_instructions(self, message_id: str) -> None:
        """Show or hide an answer's "Instructions used"."""
        self.expanded ^= {message_id}
        self.draw()

    # --- streaming -----------------------------------------------------------------------------

    def stream(self, reply_id: str, text: str) -> None:
        """A reply's text so far: drawn at the next animation frame."""
        self.streaming[reply_id] = text
        self._dirty.add(reply_id)
        self._ask_frame()

    def _ask_frame(self) -> None:
        if not self._frame_asked:
            self._frame_asked = True
            self._schedule_frame(self._frame)

    def after_frame(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` at the next frame, once what it draws is drawn: work that can wait,
        kept out of the way of drawing what the person just did."""
        self._after_frame.append(callback)
        self._ask_frame()

    def _frame(self) -> None:
        self._frame_asked = False
        try:
            self._draw_frame()
        finally:
            waiting, self._after_frame = self._after_frame, []
            for callback in waiting:
                callback()

    def _draw_frame(self) -> None:
        if self._whole:
            self.draw()
            return
        dirty, self._dirty = self._dirty, set()
        changed: dict[str, str] = {}
        streams: dict[str, tuple[int, str]] = {}
        for reply_id in dirty:
            row = self.store.message(reply_id) if message_html.item_key(reply_id) in self._drawn else None  # else: not shown
            if row is not None:
                self._patch(row, changed, streams)
        if changed or streams:
            self.view.patch_messages(None, changed, False, False, streams)

    # --- items -----------------------------------------------------------------------------------

    def _patch(self, row: Message, changed: dict[str, str], streams: dict[str, tuple[int, str]]) -> None:
        """What the page must change for this message: its whole item (``changed``), or, for a
        streaming reply whose item is otherwise as drawn, the end of its text (``streams``: keep
        that many blocks, then this HTML)."""
        key = message_html.item_key(row.id)
        html, live = self._render(row)
        drawn, streamed = self._drawn.get(key), self._streamed.pop(key, None)
        self._drawn[key] = html
        if live is None:
            if drawn != html:
                changed[key] = html
            return
        renderer, kept, tail = live
        self._streamed[key] = (renderer.generation, len(kept), tail)
        if drawn == html and streamed is not None and streamed[0] == renderer.generation:
            if (streamed[1], streamed[2]) != (len(kept), tail):
                streams[key] = (streamed[1], "".join(kept[streamed[1] :]) + tail)
        else:
            changed[key] = html.replace(SLOT, "".join(kept) + tail)

    def _render(self, row: Message) -> tuple[str, tuple[StreamRenderer, list[str], str] | None]:
        """The message's item; for a streaming reply, its item with SLOT for its content, and the
        content's kept blocks and the rest."""
        text = self.streaming.get(row.id)
        # A Stop of ours ends it only once the server says so; and the Stop's event ends it in the
        # log before its run writes the text it had (with why it ended): until then, the stream's.
        ended = row.status in ENDED and not is_pending(row) and not (row.status == "cancelled" and row.finish_reason is None)
        if text is not None and (ended or len(row.content) >= len(text)):
            del self.streaming[row.id]  # the log caught up with (or ended) the stream: its text wins
            text = None
        live = text if text is not None else row.content if row.status == "streaming" else None
        parts = None
        if row.role == "assistant" and live is not None:
            renderer = self._renderers.setdefault(row.id, StreamRenderer())
            kept, tail = renderer.parts(live)
            parts = (renderer, kept, tail)
        else:
            self._renderers.pop(row.id, None)
        item = message_html.Item(
            message=row,
            step=self._steps.get(row.id),
            content_html=SLOT if parts is not None else None,
            delivery=self._delivery.get(row.id),
            run=self._runs.get(row.id),
            reason=reason.content if (reason := self._reasons.get(row.id)) is not None else None,
            files_html=self._files_of(row),
            expanded=row.id in self.expanded,
        )
        return message_html.message_item(item), parts

    @staticmethod
    def _rejections(found: list[Rejection]) -> list[Rejection]:
        """What to show of the refused changes: a request for an answer to a refused question is
        part of that question (resent or discarded with it)."""
        refused = {r.event.payload.id for r in found if isinstance(r.event.payload, Message)}
        return [
            r for r in found
            if isinstance(r.event.payload, Message)
            or (isinstance(r.event.payload, RunRequest) and r.event.payload.parent_id not in refused)
        ]  # fmt: skip

    @staticmethod
    def _rejection_html(rejection: Rejection) -> str:
        payload = rejection.event.payload
        if isinstance(payload, RunRequest):
            message = Message(
                id=payload.message_id, chat_id=payload.chat_id, role="assistant", content="",
                parent_id=payload.parent_id, assistant_id=payload.assistant_id, created_at=rejection.event.created_at,
            )  # fmt: skip
        else:
            assert isinstance(payload, Message)
            message = payload
        return message_html.message_item(message_html.Item(message=message, rejection=rejection))
