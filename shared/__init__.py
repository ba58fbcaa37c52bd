"""Pure code shared by the server and the browser: wire models, the reducer, the state schema.

No I/O here: no database driver, no clock, no network, no `server`/`webapp`/`js` imports.
It runs under CPython 3.11+ and under Pyodide.
"""
