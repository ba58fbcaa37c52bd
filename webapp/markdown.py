"""Messages as HTML: Markdown (CommonMark + GFM tables, strikethrough, task lists, autolinks) by
markdown-it-py, fenced code highlighted by Pygments. Pure: text in, HTML out.

Safe by construction rather than by cleaning afterwards: raw HTML is off (any ``<tag>`` in a
message is shown as text), a link survives only with an http, https or mailto URL (any other
``[text](url)`` stays text), links open in a new tab with ``rel="noopener noreferrer"``, and an
image is shown as a link to it, never loaded (a remote image in a model's answer is a classic way
to leak the conversation to a third party).

``render`` is for a whole message (cached by its text). ``StreamRenderer`` is for a reply that
grows while it streams: the top-level blocks that can no longer change are rendered once and
kept, and only the last one is rendered again (tests/webapp/test_markdown.py checks that every
prefix renders exactly as ``render`` would).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Sequence
from functools import lru_cache
from html import escape
from typing import Any

from linkify_it import LinkifyIt
from linkify_it.main import Match
from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict
from mdit_py_plugins.tasklists import tasklists_plugin

SAFE_SCHEMES = ("http:", "https:", "mailto:")
# A reference definition anywhere changes how earlier text renders: such a text is rendered whole.
# (Anywhere in a line: in a block quote or a list item, "> [x]: url" defines one too.)
_REFERENCE = re.compile(r"\[[^\]]+\]:")
_LANGUAGE = re.compile(r"[\w+#.-]{1,40}")


class _GfmLinkify(LinkifyIt):
    """Bare links as GFM makes them: with a scheme, starting with ``www.``, or an email address;
    not every word with a dot (``store.py`` is a file, not a site in Paraguay)."""

    def match(self, text: str) -> list[Match] | None:
        found = super().match(text) or []
        kept = [m for m in found if m.schema or m.raw.lower().startswith("www.")]
        return kept or None


class _SafeMarkdownIt(MarkdownIt):
    """markdown-it whose links keep only SAFE_SCHEMES (its own check refuses just a few, ``javascript:`` and the like)."""

    def validateLink(self, url: str) -> bool:
        return url.strip().lower().startswith(SAFE_SCHEMES)


@lru_cache(maxsize=64)
def _lexer(language: str) -> Any:
    """Pygments' lexer for a language (imported on first use), or None when it knows none."""
    from pygments.lexers import get_lexer_by_name
    from pygments.util import ClassNotFound

    try:
        return get_lexer_by_name(language)
    except ClassNotFound:
        return None


@lru_cache(maxsize=1)
def _formatter() -> Any:
    from pygments.formatters import HtmlFormatter

    return HtmlFormatter(nowrap=True)


def _highlight(code: str, language: str) -> str | None:
    """The code as Pygments' HTML spans (CSS classes), or None for a language it does not know."""
    from pygments import highlight

    lexer = _lexer(language)
    return None if lexer is None else str(highlight(code, lexer, _formatter()))


def warm() -> None:
    """Import what rendering code in the most common language needs (a first chat opens faster)."""
    _highlight("x = 1", "python")


def _fence(self: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType) -> str:
    token = tokens[idx]
    words = token.info.strip().split()
    found = _LANGUAGE.fullmatch(words[0]) if words else None
    language = found.group(0).lower() if found else ""
    highlighted = _highlight(token.content, language) if language else None
    body = highlighted if highlighted is not None else escape(token.content)
    classes = " ".join(([f"language-{language}"] if language else []) + (["highlight"] if highlighted is not None else []))
    code_class = f' class="{classes}"' if classes else ""
    label = f'<span class="lang">{escape(language)}</span>' if language else '<span class="lang">code</span>'
    return (
        f'<div class="code">'
        f'<div class="code-bar">{label}'
        f'<button type="button" class="copy-code" data-action="copy-code">Copy</button></div>'
        f"<pre><code{code_class}>{body}</code></pre></div>\n"
    )


def _link_open(self: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType) -> str:
    token = tokens[idx]
    token.attrSet("target", "_blank")
    token.attrSet("rel", "noopener noreferrer")
    return self.renderToken(tokens, idx, options, env)


def _image(self: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType) -> str:
    token = tokens[idx]
    alt = self.renderInlineAsText(token.children or [], options, env)
    src = escape(str(token.attrGet("src") or ""))
    return f'<a href="{src}" target="_blank" rel="noopener noreferrer" class="image-link">Image: {escape(alt)}</a>'


def _table_open(self: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType) -> str:
    return '<div class="table-wrap">' + self.renderToken(tokens, idx, options, env)


def _table_close(self: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType) -> str:
    return self.renderToken(tokens, idx, options, env) + "</div>\n"


def _cell_open(self: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType) -> str:
    """A table cell's alignment as a class (``align-center``), not a style attribute: the page's
    Content-Security-Policy refuses inline style."""
    token = tokens[idx]
    style = str(token.attrGet("style") or "")
    if style.startswith("text-align:"):
        token.attrs.pop("style")
        token.attrSet("class", "align-" + style.removeprefix("text-align:"))
    return self.renderToken(tokens, idx, options, env)


def _parser() -> MarkdownIt:
    md = _SafeMarkdownIt("commonmark", {"html": False, "linkify": True, "breaks": True, "typographer": False})
    md.enable(["table", "strikethrough", "linkify"])
    md.use(tasklists_plugin)
    md.linkify = _GfmLinkify(options={"fuzzy_link": True, "fuzzy_email": True})
    for name, rule in (
        ("fence", _fence),
        ("code_block", _fence),
        ("link_open", _link_open),
        ("image", _image),
        ("table_open", _table_open),
        ("table_close", _table_close),
        ("th_open", _cell_open),
        ("td_open", _cell_open),
    ):
        md.add_render_rule(name, rule)
    return md


_MD = _parser()
_CACHE: OrderedDict[str, str] = OrderedDict()
CACHE_SIZE = 2000


def render(text: str) -> str:
    """A whole message as HTML (the last CACHE_SIZE texts are remembered)."""
    html = _CACHE.get(text)
    if html is not None:
        _CACHE.move_to_end(text)
        return html
    html = str(_MD.render(text))
    _CACHE[text] = html
    if len(_CACHE) > CACHE_SIZE:
        _CACHE.popitem(last=False)
    return html


class StreamRenderer:
    """Renders a text that only grows. The blocks before the last top-level block are kept once
    nothing appended can change them: their successor's first line and the line after it must be
    complete (a table's header, for one, is decided by the line below it). Each top-level block
    is one element of the HTML, so a page can keep the kept blocks' nodes and replace the rest."""

    def __init__(self) -> None:
        self._kept_source = ""  # the text of the kept blocks: a prefix of the text, whole lines
        self.kept: list[str] = []  # their HTML, a block each
        self.generation = 0  # counts the times it started again (the text was not a continuation)

    def render(self, text: str) -> str:
        kept, tail = self.parts(text)
        return "".join(kept) + tail

    def parts(self, text: str) -> tuple[list[str], str]:
        """(the kept blocks' HTML, the HTML of the rest)."""
        text = text.replace("\r\n", "\n").replace("\r", "\n")  # as markdown-it counts lines
        whole = _REFERENCE.search(text) is not None
        if whole or not text.startswith(self._kept_source):
            if self._kept_source or self.kept:
                self.generation += 1
            self._kept_source, self.kept = "", []
            if whole:
                return [], render(text)
        tail = text[len(self._kept_source) :]
        env: dict[str, Any] = {}
        tokens = _MD.parse(tail, env)
        kept = list(self.kept)
        html = str(_MD.renderer.render(tokens, _MD.options, env))
        self._keep(tail, tokens, env)
        return kept, html

    def _keep(self, tail: str, tokens: list[Token], env: dict[str, Any]) -> None:
        complete = tail.count("\n")
        lines = {i: t.map[0] for i, t in enumerate(tokens) if t.level == 0 and t.nesting >= 0 and t.map}  # top-level blocks' first lines
        starts = list(lines)
        for position in reversed(starts[1:]):
            line = lines[position]
            if line + 2 <= complete:
                break
        else:
            return
        offset = 0
        for _ in range(line):
            offset = tail.index("\n", offset) + 1
        self._kept_source += tail[:offset]
        blocks = [i for i in starts if i < position] + [position]
        for begin, end in zip(blocks, blocks[1:]):
            self.kept.append(str(_MD.renderer.render(tokens[begin:end], _MD.options, env)))
