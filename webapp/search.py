"""Full-text search over what the device shows: every chat title and message, in SQLite's FTS5.

The index is two external-content FTS5 tables over the shown tables (``chats``, ``messages``),
kept by triggers (through a table of changed rows for messages, see ``SCHEMA``): a change
to a row and to its index entry are one transaction, whatever made the change (a local edit, a
remote event, a full resync replacing the tables). The tokenizer is unicode61 without
diacritics (so "cafe" finds "café" and Cyrillic works), with prefix indexes so that a word being
typed matches as a prefix.

Results are newest first. FTS5 walks its matches in rowid order at no cost, and a row's rowid
follows the order rows arrived in (the log's order, a snapshot's, an import's), which is close
to the order they were written in; so the newest ``CANDIDATES`` matches by rowid are taken and
sorted by their time. Exact unless a word matches more than that many messages (then the newest
of the most recently arrived are shown: a word that common needs another one beside it). Only
the rows shown get a snippet, made here around the first match with the words found marked
(``_Marker``: FTS5's own ``snippet`` cost half a millisecond a result).
"""

from __future__ import annotations

import re
import sqlite3
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from html import escape

LIMIT = 30  # results shown
CANDIDATES = 1000  # matches sorted by time (see above)
PREFIX_FROM = 2  # the last word typed matches as a prefix once it has this many letters
SNIPPET_BEFORE, SNIPPET_LENGTH = 50, 180  # characters of a message shown from before its first match
_WORD = re.compile(r"\w+", re.UNICODE)
_TOKEN = re.compile(r"(?:[^\W_]|[\u0300-\u036f])+", re.UNICODE)  # a token of unicode61 (near enough)


INSERT_TRIGGER = """CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts_changed SELECT new.rowid, 0, NULL
    WHERE NOT EXISTS (SELECT 1 FROM messages_fts_changed WHERE id = new.rowid); END"""

# The index as this module reads and writes it. The local migrations 0006_search and
# 0007_search_backlog made it, each with its own copy of these statements (webapp/migrations.py);
# tests/webapp/test_migrations.py checks that a migrated database has exactly this. A change here
# needs a migration there.
SCHEMA = (
    # Titles and messages, external-content tables over the shown ones.
    "CREATE VIRTUAL TABLE messages_fts USING fts5(content, content='messages', tokenize='unicode61 remove_diacritics 2', prefix='2 3')",
    "CREATE VIRTUAL TABLE chats_fts USING fts5(title, content='chats', tokenize='unicode61 remove_diacritics 2', prefix='2 3')",
    # A chat's title: its entry changes with it (chats are few, and change one at a time).
    """CREATE TRIGGER chats_fts_insert AFTER INSERT ON chats BEGIN
        INSERT INTO chats_fts (rowid, title) VALUES (new.rowid, new.title); END""",
    """CREATE TRIGGER chats_fts_delete AFTER DELETE ON chats BEGIN
        INSERT INTO chats_fts (chats_fts, rowid, title) VALUES ('delete', old.rowid, old.title); END""",
    """CREATE TRIGGER chats_fts_update AFTER UPDATE OF title ON chats WHEN old.title IS NOT new.title BEGIN
        INSERT INTO chats_fts (chats_fts, rowid, title) VALUES ('delete', old.rowid, old.title);
        INSERT INTO chats_fts (rowid, title) VALUES (new.rowid, new.title); END""",
    # A message: its row is noted as changed (with the text the index has for it, if any), and
    # the transaction's changes go into the index together before it commits (``flush``). FTS5
    # writes out what it holds at the end of every statement that changes it, so an entry per
    # statement, as a trigger on each row would make, costs 8 times as much as one statement
    # for them all (measured: 50,000 rows, 3.5 s against 0.5 s).
    "CREATE TABLE messages_fts_changed (id INTEGER PRIMARY KEY, indexed INTEGER NOT NULL, content TEXT)",
    INSERT_TRIGGER,
    """CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
        INSERT INTO messages_fts_changed SELECT old.rowid, 1, old.content
        WHERE NOT EXISTS (SELECT 1 FROM messages_fts_changed WHERE id = old.rowid); END""",
    """CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages WHEN old.content IS NOT new.content BEGIN
        INSERT INTO messages_fts_changed SELECT old.rowid, 1, old.content
        WHERE NOT EXISTS (SELECT 1 FROM messages_fts_changed WHERE id = old.rowid); END""",
    # Rows not indexed yet: a snapshot's pages leave their new rows here rather than index them
    # before their commit (``flush(defer=True)``), and ``index_backlog`` indexes them afterwards
    # in small slices; meanwhile ``search`` reads them directly.
    "CREATE TABLE messages_fts_backlog (id INTEGER PRIMARY KEY)",
)


def flush(conn: sqlite3.Connection, defer: bool = False) -> None:
    """Bring the index of messages up to date with the rows changed in this transaction (the
    first note of a row holds what the index has for it, unless the row is in the backlog: then
    the index has nothing for it). Called before every commit; with ``defer``, the changed rows
    go to the backlog instead of the index (their old entries still leave it now)."""
    if conn.execute("SELECT 1 FROM messages_fts_changed LIMIT 1").fetchone() is None:
        return
    conn.execute(
        """INSERT INTO messages_fts (messages_fts, rowid, content)
           SELECT 'delete', id, content FROM messages_fts_changed c
           WHERE indexed AND NOT EXISTS (SELECT 1 FROM messages_fts_backlog b WHERE b.id = c.id)"""
    )
    if defer:
        conn.execute(
            """INSERT OR IGNORE INTO messages_fts_backlog (id)
               SELECT c.id FROM messages_fts_changed c JOIN messages m ON m.rowid = c.id"""
        )
        conn.execute(
            """DELETE FROM messages_fts_backlog WHERE id IN (SELECT id FROM messages_fts_changed)
               AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.rowid = messages_fts_backlog.id)"""
        )
    else:
        conn.execute(
            """INSERT INTO messages_fts (rowid, content)
               SELECT m.rowid, m.content FROM messages_fts_changed c JOIN messages m ON m.rowid = c.id"""
        )
        conn.execute("DELETE FROM messages_fts_backlog WHERE id IN (SELECT id FROM messages_fts_changed)")
    conn.execute("DELETE FROM messages_fts_changed")


@contextmanager
def bulk_insert(conn: sqlite3.Connection, low: int, high: int) -> Iterator[None]:
    """Messages inserted in the block, with rowids from ``low`` to ``high``, go to the backlog
    together, after it, rather than one by one through the insert trigger: a trigger, even an
    empty one, costs more than the insert itself (measured: 20,000 rows, 0.35 s without one,
    1.4 s with it). Inside a transaction, which the trigger's absence never outlives."""
    conn.execute("DROP TRIGGER messages_fts_insert")
    try:
        yield
    finally:
        conn.execute(INSERT_TRIGGER)
    conn.execute("INSERT OR IGNORE INTO messages_fts_backlog SELECT rowid FROM messages WHERE rowid BETWEEN ? AND ?", (low, high))


def index_backlog(conn: sqlite3.Connection, limit: int) -> int:
    """Index up to ``limit`` rows of the backlog (newest first, the ones searched for most);
    returns how many are left. Call inside a write transaction."""
    conn.execute(
        """CREATE TEMP TABLE IF NOT EXISTS messages_fts_slice (id INTEGER PRIMARY KEY)"""
    )
    conn.execute("DELETE FROM messages_fts_slice")
    conn.execute("INSERT INTO messages_fts_slice SELECT id FROM messages_fts_backlog ORDER BY id DESC LIMIT ?", (limit,))
    conn.execute(
        """INSERT INTO messages_fts (rowid, content)
           SELECT m.rowid, m.content FROM messages_fts_slice s JOIN messages m ON m.rowid = s.id"""
    )
    conn.execute("DELETE FROM messages_fts_backlog WHERE id IN (SELECT id FROM messages_fts_slice)")
    conn.execute("DELETE FROM messages_fts_slice")
    return backlog(conn)


def backlog(conn: sqlite3.Connection) -> int:
    """How many messages are not indexed yet."""
    return int(conn.execute("SELECT count(*) FROM messages_fts_backlog").fetchone()[0])


def fts_query(text: str) -> str | None:
    """The FTS5 query for what the user typed: every word must match, the last one as a prefix
    (it may still be being typed) unless it is a single letter (that prefix would match nearly
    every message). None when there is no word to look for."""
    words = _WORD.findall(text)
    if not words:
        return None
    quoted = " ".join(f'"{w}"' for w in words)  # a word has no quote in it: \\w only
    return quoted + "*" if len(words[-1]) >= PREFIX_FROM else quoted


@dataclass(frozen=True)
class Hit:
    chat_id: str
    chat_title: str
    message_id: str | None  # None: the chat's title matched
    snippet_html: str  # the matched words in <mark>
    at: str  # when the message (or the chat) was made


def search(conn: sqlite3.Connection, text: str, limit: int = LIMIT) -> list[Hit]:
    """Titles and messages matching ``text``, newest first."""
    query = fts_query(text)
    if query is None:
        return []
    marker = _Marker(text)
    rows = conn.execute(
        """SELECT m.id, m.chat_id, c.title, m.created_at, m.content
           FROM (SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rowid DESC LIMIT ?) f
           JOIN messages m ON m.rowid = f.rowid JOIN chats c ON c.id = m.chat_id
           ORDER BY m.created_at DESC, m.id DESC LIMIT ?""",
        (query, CANDIDATES, limit),
    ).fetchall()
    found = [Hit(r[1], r[2], r[0], marker.snippet(r[4]), r[3]) for r in rows]
    # Rows a snapshot brought that are not indexed yet (for a few seconds after it): read here.
    unindexed = conn.execute(
        """SELECT m.id, m.chat_id, c.title, m.created_at, m.content FROM messages_fts_backlog b
           JOIN messages m ON m.rowid = b.id JOIN chats c ON c.id = m.chat_id"""
    ).fetchall()
    found += [Hit(r[1], r[2], r[0], marker.snippet(r[4]), r[3]) for r in unindexed if marker.matches_all(r[4])]
    found.sort(key=lambda hit: (hit.at, hit.message_id or ""), reverse=True)
    found = found[:limit]
    with_messages = {hit.chat_id for hit in found}  # (a title made from a message found says the same)
    titles = conn.execute(
        """SELECT c.id, c.title, c.created_at FROM chats_fts JOIN chats c ON c.rowid = chats_fts.rowid
           WHERE chats_fts MATCH ? ORDER BY c.created_at DESC, c.id DESC LIMIT ?""",
        (query, limit),
    ).fetchall()
    found += [Hit(r[0], r[1], None, marker.snippet(r[1]), r[2]) for r in titles if r[0] not in with_messages]
    found.sort(key=lambda hit: (hit.at, hit.message_id or "", hit.chat_id), reverse=True)  # (a fixed order)
    return found[:limit]


def _fold(word: str) -> str:
    """A word as the tokenizer compares it: case and diacritics left out."""
    if word.isascii():
        return word.lower()
    return "".join(c for c in unicodedata.normalize("NFKD", word) if not unicodedata.combining(c)).casefold()


class _Marker:
    """The words of a query marked in a text, and the part of a long text around the first one
    (FTS5's ``snippet`` does the same at about half a millisecond a message: the results' cost)."""

    def __init__(self, text: str) -> None:
        words = [_fold(w) for w in _WORD.findall(text)]
        self.words = set(words)
        self.prefix = words[-1] if words and len(words[-1]) >= PREFIX_FROM else None
        self.exact = set(words[:-1] if self.prefix is not None else words)  # (matches_all)
        alternatives = [re.escape(w) for w in sorted(self.words, key=len, reverse=True)]
        if self.prefix is not None:
            alternatives.insert(0, re.escape(self.prefix) + r"\w*")
        # For a text and a query in ASCII (the common case), the regular expression finds them all.
        ascii_words = all(w.isascii() for w in self.words)
        self._ascii = re.compile(r"\b(?:" + "|".join(alternatives) + r")\b", re.IGNORECASE) if ascii_words and words else None

    def _spans(self, text: str) -> list[tuple[int, int]]:
        if self._ascii is not None and text.isascii():
            return [m.span() for m in self._ascii.finditer(text)]
        return [m.span() for m in _WORD.finditer(text) if self._matches(m.group())]

    def matches_all(self, text: str) -> bool:
        """Whether ``text`` has every word of the query (the last one as a prefix when it is
        one), as the index would say (words split as unicode61 splits them: not at marks, at
        underscores)."""
        tokens = {_fold(t) for t in _TOKEN.findall(text)}
        if not self.exact <= tokens:
            return False
        return self.prefix is None or any(t.startswith(self.prefix) for t in tokens)

    def _matches(self, word: str) -> bool:
        folded = _fold(word)
        return folded in self.words or (self.prefix is not None and folded.startswith(self.prefix))

    def snippet(self, text: str) -> str:
        spans = self._spans(text)
        begin = max(0, (spans[0][0] if spans else 0) - SNIPPET_BEFORE)
        if begin > 0:  # from the start of a word
            space = text.find(" ", begin)
            begin = space + 1 if 0 <= space < spans[0][0] else begin
        end = begin + SNIPPET_LENGTH
        if end < len(text):  # to the end of a word
            space = text.rfind(" ", begin, end)
            end = space if space > (spans[0][1] if spans else begin) else end
        else:
            end = len(text)
        parts, at = ["…" if begin > 0 else ""], begin
        for start, stop in spans:
            if start >= at and stop <= end:
                parts += [escape(text[at:start]), f"<mark>{escape(text[start:stop])}</mark>"]
                at = stop
        parts += [escape(text[at:end]), "…" if end < len(text) else ""]
        return "".join(parts)
