"""An in-memory page for the client's tests: the View protocol (webapp/app.py) applied the way
static/view.js applies it, so a test can hold a message's node and see whether a redraw kept it."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser

# An item: its content, then the end of its bubble, then what it says of itself and its tools.
_ITEM = re.compile(r'(.*?<div class="content">)(.*)(</div></div>(?:<p class="state[^"]*">.*?</p>)?<div class="meta">.*)', re.DOTALL)
VOID = {"br", "hr", "input", "img", "wbr"}


class _TopLevel(HTMLParser):
    """Where each top-level element of an HTML fragment ends."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=False)
        self.lines = [0]
        for line in html.splitlines(keepends=True):
            self.lines.append(self.lines[-1] + len(line))
        self.depth, self.ends = 0, []
        self.feed(html)
        self.close()

    def _here(self) -> int:
        line, column = self.getpos()
        return self.lines[line - 1] + column

    def handle_starttag(self, tag: str, attrs: object) -> None:
        if tag in VOID:
            if self.depth == 0:
                self.ends.append(self._here() + len(self.get_starttag_text() or ""))
            return
        self.depth += 1

    def handle_endtag(self, tag: str) -> None:
        self.depth -= 1
        if self.depth == 0:
            self.ends.append(self._here() + len(f"</{tag}>"))


@dataclass(eq=False)
class Node:
    """One message item of the list (compared by identity, like a DOM node)."""

    html: str
    morphs: int = 0
    streamed: int = 0  # stream patches: the end of its text replaced


@dataclass
class Composer:
    chat: str = ""
    text: str = ""
    note: str | None = None
    typed: bool = False  # typed into since it was last set

@dataclass
class FakePage:
    regions: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)  # key -> node, in the list's order
    earlier: bool = False
    patches: list[dict[str, str]] = field(default_factory=list)  # what each patch of the list changed
    streams: list[dict[str, tuple[int, str]]] = field(default_factory=list)  # and the streams it carried
    composer: Composer = field(default_factory=Composer)
    status: str = ""
    focused: str = ""
    frames: list[Callable[[], None]] = field(default_factory=list)
    revealed: str = ""  # the item a search result went to
    drawer: bool = False  # the chat list's drawer (narrow screens) is open
    downloads: list[tuple[str, str, str]] = field(default_factory=list)  # (filename, type, text)
    remembered: tuple[str, str] | None = None  # whose screen the render cache keeps: (account, layout)
    painted: tuple[str, str, str] | None = None  # the render cache painted at start: (account, layout, chat)

    # --- the View protocol -----------------------------------------------------------------------

    def set_html(self, region: str, html: str) -> None:
        self.regions[region] = html

    def morph(self, region: str, html: str) -> None:
        self.regions[region] = html

    def patch_messages(
        self,
        order: list[str] | None,
        changed: dict[str, str],
        opened: bool,
        earlier: bool,
        streams: dict[str, tuple[int, str]],
    ) -> None:
        if opened:
            self.nodes = {}
        for key, html in changed.items():
            node = self.nodes.get(key)
            if node is None:
                assert order is not None and key in order, "a new item comes with the order"
                self.nodes[key] = Node(html)
            else:
                node.html, node.morphs = html, node.morphs + 1
        if order is not None:
            self.nodes = {key: self.nodes[key] for key in order}
            self.earlier = earlier
        for key, (kept, html) in streams.items():  # as static/view.js: streamInto
            node = self.nodes[key]
            head, content, end = _ITEM.fullmatch(node.html).groups()  # type: ignore[union-attr]
            cut = _TopLevel(content).ends[kept - 1] if kept else 0
            content = content[: cut + 1 if content[cut : cut + 1] == "\n" else cut]  # (with the line break after it)
            node.html, node.streamed = head + content + html + end, node.streamed + 1
        self.patches.append({**changed, **{key: "(stream)" for key in streams}})
        self.streams.append(dict(streams))

    def set_composer(self, chat_id: str, text: str | None, note: str | None) -> None:
        """As static/view.js does: what was typed into this chat's draft since is never replaced."""
        composer = self.composer
        typed = composer.typed and composer.chat == chat_id and composer.note is None and note is None
        composer.chat, composer.note = chat_id, note
        if text is not None and not typed:
            composer.text, composer.typed = text, False

    def type(self, text: str) -> None:
        self.composer.text, self.composer.typed = text, True

    def set_status(self, status: str, text: str) -> None:
        self.status, self.status_text = status, text

    def focus(self, selector: str) -> None:
        self.focused = selector

    def restore_text(self, selector: str, text: str) -> None:
        if not self.composer.text:
            self.composer.text = text

    def reveal(self, key: str) -> None:
        assert key in self.nodes, "a message is revealed once it is drawn"
        self.revealed = key

    def toggle_chats(self, open: bool | None = None) -> None:
        self.drawer = not self.drawer if open is None else open

    def download(self, filename: str, mime: str, text: str) -> None:
        self.downloads.append((filename, mime, text))

    def remember(self, account_id: str | None, layout: str) -> None:
        self.remembered = None if account_id is None else (account_id, layout)

    def cached(self, account_id: str, layout: str) -> str | None:
        """As static/view.js: the painted screen is taken over once, if it is this account's and
        this layout's."""
        painted, self.painted = self.painted, None
        if painted is None or painted[:2] != (account_id, layout):
            return None
        return painted[2]

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
        return "\n".join(node.html for node in self.nodes.values())

    def node(self, message_id: str) -> Node:
        return self.nodes[f"m-{message_id}"]
