"""Full-text search over what the device shows: every chat title and message, in SQLite's FTS5.

The index is two external-content FTS5 tables over the shown tables (``chats``, ``messages``),
kept by triggers: a change to a row and to its index entry are one transaction, whatever made
the change (a local edit, a remote event, a full resync replacing the tables). The tokenizer is
unicode61 without diacritics (so "cafe" finds "café" and Cyrillic works), with prefix indexes so
that a word being typed matches as a prefix.

Results are newest first. FTS5 walks its matches in rowid order at no cost, and a row's rowid
follows the order rows arrived in (the log's order, a snapshot's, an import's), which is close
to the order they were written in; so the newest ``CANDIDATES`` matches by rowid are taken and
sorted by their time. Exact unless a word matches more than that many messages (then the newest
of the most recently arrived are shown: a word that common needs another one beside it). Only
the rows shown get a snippet (FTS5's ``snippet`` is the costly part), with the matched words marked.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from html import escape

LIMIT = 30  # results shown
CANDIDATES = 1000  # matches sorted by time (see above)
PREFIX_FROM = 2  # the last word typed matches as a prefix once it has this many letters
_OPEN, _CLOSE = "\x01", "\x02"  # where a match starts and ends in a snippet (no message holds them)
_WORD = re.compile(r"\w+", re.UNICODE)


def create_index(conn: sqlite3.Connection) -> None:
    """The index, its triggers, and the entries of the rows already there (a named migration)."""
    for table, column in (("messages", "content"), ("chats", "title")):
        conn.execute(
            f"CREATE VIRTUAL TABLE {table}_fts USING fts5({column}, content='{table}', "
            "tokenize='unicode61 remove_diacritics 2', prefix='2 3')"
        )
        conn.execute(
            f"""CREATE TRIGGER {table}_fts_insert AFTER INSERT ON {table} BEGIN
                INSERT INTO {table}_fts (rowid, {column}) VALUES (new.rowid, new.{column}); END"""
        )
        conn.execute(
            f"""CREATE TRIGGER {table}_fts_delete AFTER DELETE ON {table} BEGIN
                INSERT INTO {table}_fts ({table}_fts, rowid, {column}) VALUES ('delete', old.rowid, old.{column}); END"""
        )
        conn.execute(
            f"""CREATE TRIGGER {table}_fts_update AFTER UPDATE OF {column} ON {table}
                WHEN old.{column} IS NOT new.{column} BEGIN
                INSERT INTO {table}_fts ({table}_fts, rowid, {column}) VALUES ('delete', old.rowid, old.{column});
                INSERT INTO {table}_fts (rowid, {column}) VALUES (new.rowid, new.{column}); END"""
        )
        conn.execute(f"INSERT INTO {table}_fts ({table}_fts) VALUES ('rebuild')")


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
    titles = conn.execute(
        f"""SELECT c.id, highlight(chats_fts, 0, '{_OPEN}', '{_CLOSE}'), c.created_at
            FROM chats_fts JOIN chats c ON c.rowid = chats_fts.rowid
            WHERE chats_fts MATCH ? ORDER BY c.created_at DESC LIMIT ?""",
        (query, limit),
    ).fetchall()
    newest = conn.execute(
        """SELECT m.rowid FROM (SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rowid DESC LIMIT ?) f
           JOIN messages m ON m.rowid = f.rowid ORDER BY m.created_at DESC, m.id DESC LIMIT ?""",
        (query, CANDIDATES, limit),
    ).fetchall()
    rowids = [r[0] for r in newest]
    found: list[Hit] = []
    if rowids:
        marks = ", ".join("?" for _ in rowids)
        rows = conn.execute(
            f"""SELECT m.id, m.chat_id, c.title, m.created_at,
                       snippet(messages_fts, 0, '{_OPEN}', '{_CLOSE}', '…', 16)
                FROM messages_fts JOIN messages m ON m.rowid = messages_fts.rowid JOIN chats c ON c.id = m.chat_id
                WHERE messages_fts MATCH ? AND messages_fts.rowid IN ({marks})""",
            (query, *rowids),
        ).fetchall()
        found += [Hit(r[1], r[2], r[0], _marked(r[4]), r[3]) for r in rows]
    with_messages = {hit.chat_id for hit in found}  # (a title made from a message found says the same)
    found += [Hit(r[0], _plain(r[1]), None, _marked(r[1]), r[2]) for r in titles if r[0] not in with_messages]
    found.sort(key=lambda hit: hit.at, reverse=True)
    return found[:limit]


def _marked(snippet: str) -> str:
    return escape(snippet).replace(_OPEN, "<mark>").replace(_CLOSE, "</mark>")


def _plain(snippet: str) -> str:
    return snippet.replace(_OPEN, "").replace(_CLOSE, "")
