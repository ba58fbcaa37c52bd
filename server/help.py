"""Help pages: sections of README.md served as HTML, so that the app can link to them."""

from __future__ import annotations

import functools
from html import escape
from pathlib import Path

from markdown_it import MarkdownIt

from server.config import ROOT

HOME_NETWORK = "Serving on your home network (HTTPS)"

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/static/page.css"></head>
<body><p><a href="/">Back to the chat</a></p>
{body}</body></html>
"""


def readme_section(readme: str, heading: str) -> str | None:
    """The Markdown of ``## heading`` up to the next ``## `` heading, or None when there is none."""
    lines = readme.splitlines(keepends=True)
    try:
        start = [line.rstrip("\n") for line in lines].index(f"## {heading}")
    except ValueError:
        return None
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return "".join(lines[start:end])


def help_page(heading: str, readme: Path = ROOT / "README.md") -> str:
    """The README's section as a page (raw HTML in it stays text), or a sentence saying where it is."""
    try:
        section = readme_section(readme.read_text(encoding="utf-8"), heading)
    except OSError:
        section = None
    if section is None:
        body = (
            f"<p>This server was installed without its README.md: the guide is its section"
            f" \u201c{escape(heading)}\u201d.</p>\n"
        )
    else:
        body = _html(section)
    return PAGE.format(title=escape(heading), body=body)


@functools.lru_cache(maxsize=4)  # (every app of a process renders the same section: once)
def _html(markdown: str) -> str:
    html: str = MarkdownIt("commonmark", {"html": False}).enable("table").render(markdown)
    return html
