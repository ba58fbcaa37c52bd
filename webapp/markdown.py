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

What is slow the first time (compiling regular expressions, importing and preparing the
highlighter: 0.1-1 s on the page at once) is done ahead by ``warm_steps``, a small step at a time.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
from collections import OrderedDict
from collections.abc import Iterator, Sequence
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


# Texts whose first rendering compiles what later ones reuse: markdown-it's rules' and
# linkify-it's regular expressions (a link's is compiled when a link is first seen: 50 ms in
# CPython, more on the page).
WARM_TEXTS = ("a *b* `c`", "https://example.com/a?b#c", "www.example.com", "name@example.com")
# What highlighting code in the most common language imports, each after what it imports, so
# that importing one imports nothing else with it.
WARM_MODULES = (
    "pygments", "pygments.util", "pygments.token", "pygments.regexopt", "pygments.filter",
    "pygments.plugin", "pygments.filters", "pygments.lexer", "pygments.modeline", "pygments.lexers",
    "pygments.unistring", "pygments.lexers.python", "pygments.styles", "pygments.style",
    "pygments.styles.default", "pygments.formatter", "pygments.formatters", "pygments.formatters.html",
)  # fmt: skip
WARM_LANGUAGE = "python"


def warm_sources() -> list[str]:
    """The source files of WARM_MODULES (with the ``_mapping`` each package's ``__init__``
    imports), found without importing them: the bytecode kept for the page's next start holds
    them whether or not the warm-up has run by the time it is made (static/python-start.js), so
    that no later warm-up compiles them (the lexers' ``_mapping``: 30 ms in CPython)."""
    spec = importlib.util.find_spec("pygments")  # (a top-level name: found, not imported)
    if spec is None or spec.origin is None:
        return []
    base = os.path.dirname(spec.origin)
    found = []
    for name in WARM_MODULES:
        path = os.path.join(base, *name.split(".")[1:])
        if os.path.isfile(path + ".py"):
            found.append(path + ".py")
        else:  # a package
            found += [p for p in (os.path.join(path, "__init__.py"), os.path.join(path, "_mapping.py")) if os.path.isfile(p)]
    return sorted(set(found))


def warm_steps() -> Iterator[None]:
    """Do ahead, a small step per ``next()``, what rendering does slowly the first time, so that
    a first message or code block does not: render texts that compile the parser's regular
    expressions, import the highlighter a module at a time, prepare the lexer of WARM_LANGUAGE
    a state at a time (``prepare_lexer``), highlight a line. The page runs one step per task
    (webapp/app.py): none of them is long, where all of it at once took 0.1-1 s. Any step may
    run at any time; rendering meanwhile renders as it would have."""
    for text in WARM_TEXTS:
        _MD.render(text)  # (not render(): these are not messages to keep)
        yield
    for name in WARM_MODULES:
        importlib.import_module(name)
        yield
    from pygments.lexers import find_lexer_class_by_name

    yield from prepare_lexer(find_lexer_class_by_name(WARM_LANGUAGE))
    _highlight("x = 1", WARM_LANGUAGE)


def prepare_lexer(lexer: Any) -> Iterator[None]:
    """Prepare a Pygments ``RegexLexer`` class as its first instance would (``RegexLexerMeta.__call__``:
    its states' regular expressions compiled, 70-160 ms for Python's on the page, at once), one
    state per ``next()``, the states a state includes before it (then each compiles only its
    own). A lexer prepared meanwhile (a code block drawn) stays as it was prepared; one that is
    not a plain RegexLexer is left to its first instance."""
    from pygments.lexer import combined, default, include

    if "_tokens" in lexer.__dict__ or getattr(lexer, "token_variants", False) or not hasattr(lexer, "_process_state"):
        return
    definitions = lexer.get_tokendefs()
    processed: dict[str, list[Any]] = {}
    lexer._tmpname = 0
    order: list[str] = []
    seen: set[str] = set()

    def visit(state: str) -> None:
        if state in seen or state not in definitions:
            return
        seen.add(state)
        for item in definitions[state]:
            after = item.state if isinstance(item, default) else item[2] if isinstance(item, tuple) and len(item) > 2 else None
            for needed in [str(item)] if isinstance(item, include) else list(after) if isinstance(after, combined) else []:
                visit(needed)
        order.append(state)

    for state in list(definitions):
        visit(state)
    for state in order:
        if "_tokens" in lexer.__dict__:
            return
        lexer._process_state(definitions, processed, state)
        yield
    if "_tokens" not in lexer.__dict__:
        lexer._all_tokens = {"": processed}
        lexer._tokens = processed


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
