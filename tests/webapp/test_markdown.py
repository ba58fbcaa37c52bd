"""Messages as HTML (webapp/markdown.py): what renders, what never gets through, and the streaming
renderer giving exactly the whole renderer's output for every prefix of a growing text."""

from __future__ import annotations

import json
import subprocess
import sys
from html.parser import HTMLParser
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import RegexLexerMeta
from pygments.lexers.python import PythonLexer

from webapp.markdown import WARM_MODULES, WARM_TEXTS, StreamRenderer, prepare_lexer, render, warm_steps

# Tags and attributes the renderer may produce; anything else in its output is a hole.
ALLOWED_TAGS = {
    "p", "br", "strong", "em", "s", "a", "code", "pre", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol",
    "li", "blockquote", "hr", "table", "thead", "tbody", "tr", "th", "td", "div", "span", "button", "input",
}  # fmt: skip
# No style: the page's Content-Security-Policy refuses inline style (a table cell's alignment is a class).
ALLOWED_ATTRIBUTES = {"href", "target", "rel", "class", "type", "disabled", "checked", "start", "data-action"}


class Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, {k: v or "" for k, v in attrs}))

    handle_startendtag = handle_starttag

    def handle_comment(self, data: str) -> None:
        self.found.append(("<!--", {}))


def elements(html: str) -> list[tuple[str, dict[str, str]]]:
    parser = Elements()
    parser.feed(html)
    parser.close()
    return parser.found


def assert_safe(html: str) -> None:
    for tag, attributes in elements(html):
        assert tag in ALLOWED_TAGS, (tag, html)
        for name, value in attributes.items():
            assert name in ALLOWED_ATTRIBUTES, (name, html)
            assert not name.startswith("on")
            if name == "href":
                assert value.lower().startswith(("http:", "https:", "mailto:")), (value, html)
    lowered = html.lower()
    for needle in ("<script", "<iframe", "<img", "<svg", "<object", "<embed", "<style", "<form", "<!--"):
        assert needle not in lowered, (needle, html)


XSS = [
    "<script>alert(1)</script>",
    "<SCRIPT SRC=http://evil/x.js></SCRIPT>",
    "<img src=x onerror=alert(1)>",
    '<img src="javascript:alert(1)">',
    "<iframe src=javascript:alert(1)></iframe>",
    '<iframe srcdoc="<script>alert(1)</script>">',
    "<svg onload=alert(1)>",
    "<svg><script>alert(1)</script></svg>",
    "<math><mtext><script>alert(1)</script>",
    "<body onload=alert(1)>",
    '<a href="javascript:alert(1)">x</a>',
    "<a href=javascript:alert(1)>x</a>",
    "[x](javascript:alert(1))",
    "[x](JaVaScRiPt:alert(1))",
    "[x](javascript&#58;alert(1))",
    "[x](&#106;avascript:alert(1))",
    "[x](java\nscript:alert(1))",
    "[x]( javascript:alert(1))",
    "[x](<javascript:alert(1)>)",
    "[x](vbscript:msgbox(1))",
    "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "[x](data:image/png;base64,iVBORw0KGgo=)",
    "[x](file:///etc/passwd)",
    "![x](javascript:alert(1))",
    "![x](data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoMSk+)",
    '![x](http://x/y.png "onerror=alert(1)")',
    '[x](http://x/ "title" onclick="alert(1)")',
    '[x](http://x/"onmouseover="alert(1))',
    "[ref]: javascript:alert(1)\n\n[ref]",
    "[ref]: data:text/html,<script>alert(1)</script>\n\n[click][ref]",
    "<javascript:alert(1)>",
    "<data:text/html,<script>alert(1)</script>>",
    "javascript:alert(1)",
    "<!-- <script>alert(1)</script> -->",
    "<!--[if IE]><script>alert(1)</script><![endif]-->",
    "<style>body{background:url(javascript:alert(1))}</style>",
    "<object data=javascript:alert(1)></object>",
    "<embed src=javascript:alert(1)>",
    "<form action=javascript:alert(1)><button>x</button></form>",
    '<div style="background:url(javascript:alert(1))">x</div>',
    "<details open ontoggle=alert(1)>",
    "```html\n<script>alert(1)</script>\n```",
    '```"><script>alert(1)</script>\ncode\n```',
    "```python onload=alert(1)\nx = 1\n```",
    "`<img src=x onerror=alert(1)>`",
    "**<img src=x onerror=alert(1)>**",
    "| <script>alert(1)</script> | b |\n|---|---|\n| <img src=x onerror=alert(1)> | 2 |",
    "- [ ] <img src=x onerror=alert(1)>",
    "> <iframe src=http://evil></iframe>",
    "&lt;script&gt;alert(1)&lt;/script&gt;",
    "&#60;script&#62;alert(1)&#60;/script&#62;",
    "<a href='http://x' onclick='alert(1)'>x</a>",
    "www.example.com/<script>alert(1)</script>",
    "http://example.com/\"onmouseover=\"alert(1)",
    "<meta http-equiv=refresh content=0;url=javascript:alert(1)>",
    "<link rel=stylesheet href=javascript:alert(1)>",
    "<base href=javascript:alert(1)//>",
]


def test_the_xss_corpus_never_gets_through() -> None:
    assert len(XSS) >= 40
    for payload in XSS:
        assert_safe(render(payload))
        assert_safe(render(f"Some text before.\n\n{payload}\n\nAnd after."))


def test_markdown_renders_as_people_expect() -> None:
    html = render(
        "# Title\n\nSome **bold**, *em*, ~~gone~~ and `code`.\n\n"
        "| a | b |\n|:--|--:|\n| 1 | 2 |\n\n- [x] done\n- [ ] todo\n\n1. one\n2. two\n\n"
        "> quoted\n\nsee https://example.com/a?b=1, www.example.org, me@example.com and store.py\n"
        "first line\nsecond line\n\n```python\ndef f():\n    return 1\n```\n"
    )
    tags = [tag for tag, _ in elements(html)]
    for tag in ("h1", "strong", "em", "s", "code", "table", "th", "td", "ul", "ol", "blockquote", "pre", "br"):
        assert tag in tags, tag
    assert '<th class="align-left">a</th>' in html and '<td class="align-right">2</td>' in html
    assert html.count('type="checkbox"') == 2 and 'checked="checked"' in html
    links = [attrs for tag, attrs in elements(html) if tag == "a"]
    assert [a["href"] for a in links] == ["https://example.com/a?b=1", "http://www.example.org", "mailto:me@example.com"]
    assert all(a["rel"] == "noopener noreferrer" and a["target"] == "_blank" for a in links)
    assert "store.py" in html and "http://store.py" not in html  # a file name is not a link
    # Fenced code: highlighted with CSS classes, its language shown, a Copy button.
    assert '<span class="lang">python</span>' in html and ">Copy</button>" in html
    assert '<code class="language-python highlight"><span class="k">def</span>' in html
    assert_safe(html)


def test_code_in_an_unknown_language_or_none_is_shown_as_it_is() -> None:
    html = render("```nosuchlanguage\n<b>x</b>\n```\n\n    indented <i>\n")
    assert '<pre><code class="language-nosuchlanguage">&lt;b&gt;x&lt;/b&gt;\n</code></pre>' in html
    assert "<pre><code>indented &lt;i&gt;\n</code></pre>" in html
    assert html.count(">Copy</button>") == 2


def test_an_image_is_a_link_to_it_never_loaded() -> None:
    html = render("![a cat](https://example.com/cat.png)")
    assert '<a href="https://example.com/cat.png" target="_blank" rel="noopener noreferrer" class="image-link">Image: a cat</a>' in html
    assert "<img" not in html


# Pieces of the lines a model's answer is made of, including the ones whose meaning depends on
# the next line (setext underlines, table delimiters, lazy continuations) or on what follows on
# the same line ("***" is a rule, "***x" is text).
PIECES = st.sampled_from(
    [
        "", "", "Some text with **bold** and `code`.", "more text", "# A heading", "## Sub", "===", "---",
        "***", "- item", "- [ ] task", "  - nested", "1. one", "2. two", "   continued", "> quote", ">",
        "```", "```python", "~~~", "    indented code", "def f(x):", "    return x", "| a | b |",
        "|---|---|", "| 1 | 2 |", "<b>raw</b>", "see https://example.com", "*open emphasis", "text*",
        "\t", "  ", "+ plus", "10) paren", "x", " ", "|", "-", "=", "*", "`", ">", "1.", "[x]: http://x",
    ]
)  # fmt: skip
LINES = st.lists(PIECES, max_size=3).map("".join)


@settings(max_examples=1000, deadline=None)
@given(lines=st.lists(LINES, max_size=25), cuts=st.lists(st.integers(min_value=1, max_value=12), max_size=60))
@example(lines=["para", "***x"], cuts=[8, 1])  # a rule, until the x makes it text
@example(lines=["para", "| a | b |", "|---|--x"], cuts=[22, 1])  # a table, until the x undoes its delimiter row
def test_streaming_renders_every_prefix_as_the_whole_renderer_does(lines: list[str], cuts: list[int]) -> None:
    text = "\n".join(lines)
    renderer = StreamRenderer()
    end = 0
    for cut in [*cuts, len(text)]:
        end = min(len(text), end + cut)
        assert renderer.render(text[:end]) == render(text[:end]), repr(text[:end])
        if end == len(text):
            break


def test_streaming_starts_again_when_the_text_is_not_a_continuation() -> None:
    renderer = StreamRenderer()
    first = "para one\n\npara two\n\npara three\n\nand four\n"
    assert renderer.render(first) == render(first)
    other = "something else entirely\n\n- a list\n"
    assert renderer.render(other) == render(other)
    with_reference = "see [the docs][d]\n\nmore\n\nand more\n\n[d]: https://example.com/docs\n"
    assert renderer.render(with_reference) == render(with_reference)


# --- the warm-up, a small step at a time (the page runs one step per task) --------------------------

PYTHON_SAMPLE = '''@cache
def f(x: int = 0x1F, *args, **kw) -> str:
    """Doc."""
    name = f"{x!r:>10} {kw['a']}" + r'\\d+' + b"bytes".decode()
    return name if x else None  # a comment
'''


def _fresh_python_lexer() -> Any:
    """A subclass of Pygments' Python lexer not prepared yet (Pygments prepares each class once)."""
    return type("FreshPythonLexer", (PythonLexer,), {})


def test_a_lexer_prepared_a_state_at_a_time_highlights_as_pygments_prepares_it() -> None:
    stepwise, whole = _fresh_python_lexer(), _fresh_python_lexer()
    compiled: list[int] = []  # regular expressions compiled by each step

    def counted(regex: Any, flags: int, state: str) -> Any:
        compiled[-1] += 1
        return RegexLexerMeta._process_regex(stepwise, regex, flags, state)

    stepwise._process_regex = staticmethod(counted)
    steps = prepare_lexer(stepwise)
    while True:
        compiled.append(0)
        try:
            next(steps)
        except StopIteration:
            break
        assert "_tokens" not in stepwise.__dict__  # (prepared at the end only)
    definitions = stepwise.get_tokendefs()
    assert len(compiled) - 1 == len(definitions) and "_tokens" in stepwise.__dict__
    # Each step compiled one state's own rules at most, never what it includes (done before it).
    assert max(compiled) <= max(sum(isinstance(item, tuple) for item in rules) for rules in definitions.values())
    assert max(compiled) < sum(compiled) / 3
    formatter = HtmlFormatter(nowrap=True)
    assert highlight(PYTHON_SAMPLE, stepwise(), formatter) == highlight(PYTHON_SAMPLE, whole(), formatter)


def test_a_lexer_prepared_meanwhile_stays_as_it_was_prepared() -> None:
    lexer = _fresh_python_lexer()
    steps = prepare_lexer(lexer)
    next(steps)
    next(steps)
    lexer()  # (a code block drawn while the warm-up goes on: Pygments prepares it all)
    prepared = lexer._tokens
    assert list(steps) == [] and lexer._tokens is prepared


def test_the_warm_up_imports_the_highlighter_a_module_per_step_and_the_bytecode_kept_holds_them() -> None:
    """Each module of WARM_MODULES, imported in that order in a fresh interpreter, imports no
    other module of Pygments (but a package's own ``_mapping``, which its ``__init__`` imports);
    ``warm_sources``, asked before, imported none of them and named every file they came from
    (static/python-start.js compiles those for the page's next start)."""
    script = (
        "import importlib, json, sys\n"
        "from webapp.markdown import WARM_MODULES, warm_sources\n"
        "sources = warm_sources()\n"
        "early = sorted(m for m in sys.modules if m.startswith('pygments'))\n"
        "steps = []\n"
        "for name in WARM_MODULES:\n"
        "    before = set(sys.modules)\n"
        "    importlib.import_module(name)\n"
        "    steps.append([name, sorted(m for m in set(sys.modules) - before if m.startswith('pygments'))])\n"
        "files = sorted(m.__file__ for n, m in sys.modules.items() if n.startswith('pygments'))\n"
        "print(json.dumps({'sources': sources, 'early': early, 'steps': steps, 'files': files}))\n"
    )
    found = json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout)
    assert [name for name, _ in found["steps"]] == list(WARM_MODULES)
    for name, imported in found["steps"]:
        assert set(imported) <= {name, name + "._mapping"}, (name, imported)
    assert found["early"] == [] and found["sources"] == found["files"]


def test_the_warm_up_ends_with_code_highlighted_as_before() -> None:
    steps = list(warm_steps())  # (the lexer's states too, unless this process drew Python code already)
    assert len(steps) >= len(WARM_MODULES) + len(WARM_TEXTS)
    html = render("```python\nx = 1\n```")
    assert '<code class="language-python highlight">' in html and '<span class="n">x</span>' in html
