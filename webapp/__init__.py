"""The browser client, in Python: local store, outbox, sync engine, UI.

Everything here imports and runs under CPython too (for tests), except ``webapp/browser.py``,
the one module that touches ``js`` and ``pyodide``.
"""
