"""The history of a chaos run: every operation with its outcome and its time, one JSON object a
line (``--history FILE``), kept in memory too for the checker. ``t`` is seconds since the run
began. The records (``op``):

- ``begin``: the run's settings (seed, servers, devices, browsers, seconds, database).
- ``save``: a device saved a change durably (the outbox and its tables, one transaction):
  ``device``, ``event``, ``type``, ``entity`` (the row it changes), ``chat``, and by type
  ``text`` (a message's content), ``queued`` (a follow-up), ``parent``, ``run`` (a run asked
  for, or continued), ``before`` (a continued reply's text), ``files`` (attachments' SHA-256).
  A browser's ``save`` is ``unobserved`` (its answers are the page's); ``unseen`` when the page
  neither took the message nor refused it within 60 s (it is then looked for by its tag).
- ``upload``: a device's file upload ended: ``state`` done or failed (``error``).
- ``result``: what the server answered a device for one event: ``status`` accepted, duplicate or
  rejected, ``seq``, ``error``; or (``by`` ``page``) a message a browser's app refused itself (a
  chat's queue full), with ``composer``: what the composer held then.
- ``live``: a live socket ended: ``caughtUp`` (the seq it said) and ``seqs`` (the event frames
  it delivered after it, in order).
- ``fault``: the nemesis did something: ``kind``, ``target``, ``seconds``.
- ``upstream``: the fake model service was called: ``model``, ``tag`` (the question's), ``mode``.
- ``wipe``: a device's local database was deleted (only with nothing unsent in it).
- ``typed`` / ``reopened``: a browser's composer was typed into (``text``, at ``t``) / the browser
  came back after a kill or reload (``composer``: what its composer holds, ``killed``: when).
- ``final``: what one reader holds after the heal: ``who`` (``server`` or a device), ``chats``,
  ``messages`` (id -> its fields), ``outbox`` (events unsent), ``uploads`` (files unsent),
  ``shownTwice`` (messages a page shows more than once).
- ``blob``: an attachment of the final state downloaded from the server: ``sha256``, ``ok``.
- ``did``: a device or browser did one operation of the workload (``what``), for the report.
- ``heal`` / ``healed``: the nemesis stopped / its faults are undone; ``settled``: the wait after it ended
  (``after`` seconds, the server's ``seq``); ``unsettled``: it ended with something still unsent
  or running, the log ``still`` for that long (the checker counts what is left as stuck).
- ``unresponsive``: a page did not answer the run's question (``what``) within ``seconds`` after
  the heal (the checker counts it as stuck).
- ``signin-again`` / ``crashed``: a browser reopened signed out and was signed in again / a page
  crashed as it started and was opened again (observations, not anomalies).
- ``error``: an operation or a fault of the run itself that failed (``error``), not a finding.
- ``end``: the run is over (its counts are recomputed from the rest by the checker).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import IO, Any


class History:
    def __init__(self, path: Path | None = None) -> None:
        self.records: list[dict[str, Any]] = []
        self._start = time.monotonic()
        self._file: IO[str] | None = path.open("w") if path is not None else None

    def now(self) -> float:
        return round(time.monotonic() - self._start, 3)

    def record(self, record: dict[str, Any]) -> None:
        record = {"t": self.now(), **record}
        self.records.append(record)
        if self._file is not None:
            self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def load(path: Path) -> list[dict[str, Any]]:
    """A saved history's records (a last line cut short by a crash is left out)."""
    records = []
    for line in path.read_text().splitlines():
        if line.strip():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records
