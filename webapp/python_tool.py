"""The local assistant's Python tool: run a snippet and return what it printed (and the value of
its last line). Standard library only: the browser runs it in a Web Worker of its own
(static/python-worker.js), so that a snippet that never ends can be stopped without the page."""

from __future__ import annotations

import ast
import contextlib
import io
import traceback
from typing import Any


def run_python(code: str) -> str:
    """Run ``code`` here (in the browser: in the Pyodide of static/python-worker.js, not the page's)
    and return what it printed, and the value of its last line if that is an expression."""
    tree = ast.parse(code, mode="exec")
    last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    if last is not None:
        tree.body.pop()
    namespace: dict[str, Any] = {"__name__": "__tool__"}
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        try:
            exec(compile(tree, "<tool>", "exec"), namespace)
            result = eval(compile(ast.Expression(last.value), "<tool>", "eval"), namespace) if last else None
        except Exception:
            lines = traceback.format_exc().strip().splitlines()
            raise RuntimeError(lines[-1]) from None
    printed = output.getvalue()
    if result is not None:
        printed += repr(result)
    return printed.strip() or "(no output)"
