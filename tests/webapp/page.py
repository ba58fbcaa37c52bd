"""A page for the client's tests under CPython that records what the client asks of it (the View
protocol of webapp/app.py), and does nothing more: what the page then makes of it (nodes kept or
morphed, a stream's end replaced, what is typed kept in the composer, the scroll) is static/view.js's
part, tested in Chromium by tests/e2e/test_view.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Composer:
    """What the client last asked the composer to be."""

    chat: str = ""
    text: str = ""  # the last text it was given (a call with None leaves it)
    note: str | None = None


@dataclass
class FakePage:
    regions: dict[str, str] = field(default_factory=dict)
    drawn: list[str] = field(default_factory=list)  # the region of every set_html and morph, in order
    items: dict[str, str] = field(default_factory=dict)  # key -> the HTML last sent for it, in the list's order
    streamed: dict[str, tuple[int, str]] = field(default_factory=dict)  # key -> the last stream patch since
    earlier: bool = False
    patches: list[dict[str, str]] = field(default_factory=list)  # what each patch of the list changed
    streams: list[dict[str, tuple[int, str]]] = field(default_factory=list)  # and the streams it carried
    composer: Composer = field(default_factory=Composer)
    composed: list[tuple[str, str | None, str | None]] = field(default_factory=list)  # every set_composer
    restored: list[tuple[str, str]] = field(default_factory=list)  # (selector, text) given back to an input
    put_backs: list[tuple[str, str]] = field(default_factory=list)  # (chat, text) of a message not taken, back as its draft
    ended_sending: list[str] = field(default_factory=list)  # messages the page drew as sent, not taken: its drawing goes
    taken_sending: list[str] = field(default_factory=list)  # messages the page drew as sent, taken: drawn (or gone) at the next draw
    status: str = ""
    status_text: str = ""
    focused: str = ""
    frames: list[Callable[[], None]] = field(default_factory=list)
    revealed: str = ""  # the item a search result went to
    drawer: bool = False  # the chat list's drawer (narrow screens) is open
    downloads: list[tuple[str, str, str]] = field(default_factory=list)  # (filename, type, text)
    remembered: tuple[str, str] | None = None  # whose screen the render cache keeps: (account, layout)
    painted: str | None = None  # the chat the painted render cache shows, as the page answers cached()
    asked_cached: list[tuple[str, str]] = field(default_factory=list)  # (account, layout) of each cached()
    dialog: str = ""  # the dialog last opened

    # --- the View protocol -----------------------------------------------------------------------

    def set_html(self, region: str, html: str) -> None:
        self.regions[region] = html
        self.drawn.append(region)

    def morph(self, region: str, html: str) -> None:
        self.regions[region] = html
        self.drawn.append(region)

    def patch_messages(
        self,
        order: list[str] | None,
        changed: dict[str, str],
        opened: bool,
        earlier: bool,
        streams: dict[str, tuple[int, str]],
    ) -> None:
        """Keeps what the protocol says the list holds: the keys of ``order``, each with the HTML
        last sent for it, and the stream patches sent since."""
        if opened:
            self.items, self.streamed = {}, {}
        for key, html in changed.items():
            assert key in self.items or (order is not None and key in order), "a new item comes with the order"
            self.items[key] = html
            self.streamed.pop(key, None)
        if order is not None:
            self.items = {key: self.items[key] for key in order}
            self.streamed = {key: s for key, s in self.streamed.items() if key in self.items}
            self.earlier = earlier
        for key, stream in streams.items():
            assert key in self.items, "a stream patch is for an item drawn"
            self.streamed[key] = stream
        self.patches.append({**changed, **{key: "(stream)" for key in streams}})
        self.streams.append(dict(streams))

    def set_composer(self, chat_id: str, text: str | None, note: str | None) -> None:
        self.composed.append((chat_id, text, note))
        self.composer.chat, self.composer.note = chat_id, note
        if text is not None:
            self.composer.text = text

    def set_status(self, status: str, text: str) -> None:
        self.status, self.status_text = status, text

    def focus(self, selector: str) -> None:
        self.focused = selector

    def restore_text(self, selector: str, text: str) -> None:
        self.restored.append((selector, text))

    def put_back(self, chat_id: str, text: str, draft: str) -> None:
        self.put_backs.append((chat_id, text))

    def end_sending(self, message_id: str) -> None:
        self.ended_sending.append(message_id)

    def sending_taken(self, message_id: str) -> None:
        self.taken_sending.append(message_id)

    def reveal(self, key: str) -> None:
        assert key in self.items, "a message is revealed once it is drawn"
        self.revealed = key

    def toggle_chats(self, open: bool | None = None) -> None:
        self.drawer = not self.drawer if open is None else open

    def download(self, filename: str, mime: str, text: str) -> None:
        self.downloads.append((filename, mime, text))

    def show_dialog(self, dialog_id: str) -> None:
        self.dialog = dialog_id

    def remember(self, account_id: str | None, layout: str) -> None:
        self.remembered = None if account_id is None else (account_id, layout)

    def cached(self, account_id: str, layout: str) -> str | None:
        """What the test says the page shows (once: the client takes it over at start)."""
        self.asked_cached.append((account_id, layout))
        painted, self.painted = self.painted, None
        return painted

    # --- for the tests ---------------------------------------------------------------------------

    def schedule_frame(self, draw: Callable[[], None]) -> None:
        self.frames.append(draw)

    def paint(self) -> None:
        """The browser's next frame."""
        frames, self.frames = self.frames, []
        for draw in frames:
            draw()

    @property
    def messages(self) -> str:
        """Every item's HTML as last sent, each followed by the end of its text last streamed."""
        return "\n".join(html + (f"\n(stream){self.streamed[key][1]}" if key in self.streamed else "") for key, html in self.items.items())

    def item(self, message_id: str) -> str:
        return self.items[f"m-{message_id}"]

    def touched(self, key: str, since: int) -> bool:
        """A patch since the ``since``-th one changed this item or streamed into it."""
        return any(key in patch for patch in self.patches[since:])
