"""The local assistant's Python tool: run a snippet and return what it printed (and the value of
its last line). Standard library only: the browser runs it in a Web Worker of its own
(static/python-worker.js), so that a snippet that never ends can be stopped without the page.

What it returns is bounded (``MAX_OUTPUT`` characters, then a line saying it was cut): a snippet
that prints 100 MB must not flood the chat, the local database and the server's log. The
output is cut as it is printed, so the worker never holds more of it either.
"""

from __future__ import annotations

import ast
import contextlib
import io
import traceback
from typing import Any

MAX_OUTPUT = 10_000  # characters of a tool's output (the server takes messages of 100,000)
MAX_ERROR = 1_000  # characters of a tool's error


class _CappedOutput(io.TextIOBase):
    """stdout that keeps the first ``limit`` characters and counts the rest."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.kept: list[str] = []
        self.size = 0  # characters written, kept or not

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        room = self.limit - min(self.size, self.limit)
        if room > 0:
            self.kept.append(text[:room])
        self.size += len(text)
        return len(text)

    def getvalue(self) -> str:
        return "".join(self.kept)


def cut(text: str, limit: int = MAX_OUTPUT, size: int | None = None) -> str:
    """``text`` if it is within ``limit`` characters, else its start and a line saying it was cut,
    ``limit`` characters in all (so a text cut once is not cut again). ``size``: the characters
    there were, when ``text`` holds only the start of them."""
    size = len(text) if size is None else size
    if size <= limit:
        return text
    note = f"\n… (cut here: it was {size:,} characters long)"
    return text[: max(0, limit - len(note))] + note


def run_python(code: str) -> str:
    """Run ``code`` here (in the browser: in the Pyodide of static/python-worker.js, not the page's)
    and return what it printed, and the value of its last line if that is an expression; at most
    ``MAX_OUTPUT`` characters of it, and a line saying it was cut. A failure is a RuntimeError
    with the snippet's error (its last line, at most ``MAX_ERROR`` characters)."""
    tree = ast.parse(code, mode="exec")
    last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    if last is not None:
        tree.body.pop()
    namespace: dict[str, Any] = {"__name__": "__tool__"}
    output = _CappedOutput(MAX_OUTPUT)
    with contextlib.redirect_stdout(output):
        try:
            exec(compile(tree, "<tool>", "exec"), namespace)
            if last is not None:
                result = eval(compile(ast.Expression(last.value), "<tool>", "eval"), namespace)
                if result is not None:
                    output.write(repr(result))
        except Exception:
            lines = traceback.format_exc().strip().splitlines()
            raise RuntimeError(cut(lines[-1], MAX_ERROR)) from None
    printed = cut(output.getvalue(), MAX_OUTPUT, output.size)
    return printed.strip() or "(no output)"
