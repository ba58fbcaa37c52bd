"""Write ``highlight.css``: Pygments' token colours for highlighted code in messages, a light style
and a dark one, each under the colour scheme it is for (webapp/markdown.py puts the spans, with
these classes, inside ``code.highlight``).

Usage: python scripts/make_highlight_css.py static/vendor
"""

from __future__ import annotations

import sys
from pathlib import Path

from pygments.formatters import HtmlFormatter

STYLES = {"not (prefers-color-scheme: dark)": "default", "(prefers-color-scheme: dark)": "github-dark"}


def stylesheet() -> str:
    blocks = []
    for query, style in STYLES.items():
        rules = HtmlFormatter(style=style).get_token_style_defs(".highlight")
        blocks.append(f"/* Pygments {style} */\n@media {query} {{\n" + "\n".join(rules) + "\n}\n")
    return "".join(blocks)


if __name__ == "__main__":
    target = Path(sys.argv[1]) / "highlight.css"
    target.write_text(stylesheet())
    print(f"wrote {target}")
