"""The runs' queries, behind a contract of their own (``RunStore``), and its one implementation
over either backend of ``server/db.py`` (``SqlRunStore``).

A run's row is written by the append that accepts its ``AssistantRunRequested``, in the same
transaction (server/appender.py), so a run exists at most once per request. Everything after is
here: the worker (server/runs.py) claims a run under a lease, renews the lease while it streams,
ends the run with its usage or error, and reads the reply's chat; GET /runs reads a chat's runs.

Guarantees every backend keeps (tests/server/test_run_store_contract.py runs them on both):

* ``claim`` starts the oldest queued run (by the time it was requested) of a chat that has none
  streaming and no older one queued: one answer at a time per chat, in the order asked. A run
  that ``wait``s (for its attachments) is not claimed, nor a later one of its chat, until
  ``stop_waiting``, or until its reply is no longer queued (stopped, deleted: then it is claimed
  to be ended). Two
  claimers never get the same run: SQLite's writes are serialized; on PostgreSQL the candidate
  row is locked ``FOR UPDATE SKIP LOCKED``, so a claimer passes over a run another is taking.
* A lease is held by an owner (one per server process) until a time. ``renew`` and ``finish``
  change a run only while its owner holds it. ``take_over`` leases every streaming run whose
  lease ran out (its process died) to one caller, which ends it (its reply, then ``finish``): a
  caller that dies before it has ended it lets that lease run out in turn, and another process
  takes the run over, so no run is left streaming for good.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from server.db import Database, integer, optional_integer, optional_text, text
from shared.assistants import Usage
from shared.models import UNFINISHED, Chat, Message, Preset, RunSummary, Settings, format_time
from shared.schema import CHATS, MESSAGES, PRESETS, SETTINGS


@dataclass(frozen=True)
class Run:
    """A run taken up (claimed, or taken over from a process that died): what answering or
    ending it needs."""

    account_id: str
    id: str
    chat_id: str
    message_id: str
    assistant_id: str


@dataclass(frozen=True)
class RunRecord:
    """A run as its chat's list shows it: how it ended, why, and what it cost."""

    id: str
    message_id: str
    assistant_id: str
    status: str
    error: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    usage_reported: bool
    upstream_calls: int  # how often the model was asked (once per run; not shown by GET /runs)
    usage_estimated: bool = False  # (the reported usage is the model's estimate)

    def summary(self) -> RunSummary:
        """The run as GET /runs shows it (docs/protocol.md, "GET /runs")."""
        return RunSummary.model_validate(  # (validated: the status is one of Status)
            {
                "run_id": self.id,
                "message_id": self.message_id,
                "assistant_id": self.assistant_id,
                "status": self.status,
                "error": self.error,
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "usage_reported": self.usage_reported,
                "usage_estimated": self.usage_estimated,
            }
        )


class RunStore(Protocol):
    async def claim(self, owner: str, lease_until: datetime) -> Run | None:
        """Start the next run that may start (``streaming``, leased to ``owner`` until
        ``lease_until``, its model asked once more), or None when none may."""

    async def take_over(self, owner: str, now: datetime, lease_until: datetime) -> list[Run]:
        """Lease to ``owner``, until ``lease_until``, every streaming run whose lease ran out
        before ``now``, for ``owner`` to end; each is returned to one caller only."""

    async def renew(self, run: Run, owner: str, lease_until: datetime) -> bool:
        """Extend ``owner``'s lease of the run; False when it is not ``owner``'s (any more)."""

    async def finish(
        self, run: Run, owner: str, status: str, *, usage: Usage | None, reported: bool, error: str | None, now: datetime
    ) -> None:
        """End the run, if ``owner`` still holds it: its status, usage (``reported``: as the
        upstream said, rather than counted here; ``usage.estimated``: the upstream's own
        estimate), error, and when."""

    async def chat_runs(self, account_id: str, chat_id: str) -> list[RunRecord]:
        """A chat's runs, oldest request first."""

    async def chat_messages(self, account_id: str, chat_id: str, content: bool = True) -> list[Message]:
        """The messages of a run's chat (its history, and its reply); without their texts and
        files when not ``content`` (for what needs only the chat's shape: its follow-ups)."""

    async def still_running(self, account_id: str, message_id: str) -> bool:
        """Whether a reply may still be written: neither stopped, finished, nor deleted."""

    async def wait(self, run: Run, owner: str) -> bool:
        """Put a run ``owner`` claimed back in the queue, waiting (not claimed again until
        ``stop_waiting``): its question's attachments are not all on the server. Its model was
        not asked. False when it is not ``owner``'s."""

    async def stop_waiting(self, account_id: str) -> None:
        """The account's waiting runs may be claimed again (an upload of it completed)."""

    async def steering(self, account_id: str, chat_id: str) -> Steering:
        """What steers an answer in the chat: the account's settings, its presets, the chat."""

    async def follow_ups_due(self) -> list[tuple[str, str, int]]:
        """The chats with queued follow-ups whose account's log moved on since they were last
        looked at: (account, chat, the log's head now)."""

    async def follow_ups_checked(self, account_id: str, chat_id: str, head: int, queued: bool) -> None:
        """The chat was looked at with the log at ``head``: look again only once it moves on; with
        nothing ``queued`` in it, forget the chat (unless a follow-up was queued after ``head``)."""


_RUN = "account_id, id, chat_id, message_id, assistant_id"
# The columns of a message that ``chat_messages`` leaves out when asked for the chat's shape only.
_BULKY = ("content", "attachments_json", "instructions")


@dataclass(frozen=True)
class Steering:
    """What steers an answer (shared/instructions.py): the account's settings, presets, the chat."""

    settings: Settings | None
    presets: dict[str, Preset]
    chat: Chat | None


class SqlRunStore:
    """``RunStore`` over SQLite or PostgreSQL: the same SQL, but for PostgreSQL's row lock."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def claim(self, owner: str, lease_until: datetime) -> Run | None:
        lock = " FOR UPDATE SKIP LOCKED" if self._db.dialect == "postgres" else ""
        async with self._db.transaction(write=True) as tx:
            row = await tx.fetchone(
                f"""UPDATE runs SET status = 'streaming', lease_owner = ?, lease_until = ?,
                    upstream_calls = upstream_calls + 1
                WHERE (account_id, id) IN (
                    SELECT account_id, id FROM runs AS r WHERE r.status = 'queued' AND (r.waiting = 0 OR NOT EXISTS (
                        SELECT 1 FROM messages AS m WHERE m.account_id = r.account_id AND m.id = r.message_id
                        AND m.status = 'queued')) AND NOT EXISTS (
                        SELECT 1 FROM runs AS s WHERE s.account_id = r.account_id AND s.chat_id = r.chat_id
                        AND (s.status = 'streaming' OR (s.status = 'queued' AND s.requested_seq < r.requested_seq)))
                    ORDER BY r.requested_at LIMIT 1{lock})
                RETURNING {_RUN}""",
                owner,
                format_time(lease_until),
            )
        return None if row is None else Run(*(text(v) for v in row))

    async def take_over(self, owner: str, now: datetime, lease_until: datetime) -> list[Run]:
        # (On PostgreSQL a concurrent caller waits for the row, then sees the new lease: not its.)
        async with self._db.transaction(write=True) as tx:
            rows = await tx.fetchall(
                f"""UPDATE runs SET lease_owner = ?, lease_until = ?
                WHERE status = 'streaming' AND lease_until < ?
                RETURNING {_RUN}""",
                owner,
                format_time(lease_until),
                format_time(now),
            )
        return [Run(*(text(v) for v in row)) for row in rows]

    async def renew(self, run: Run, owner: str, lease_until: datetime) -> bool:
        async with self._db.transaction(write=True) as tx:
            row = await tx.fetchone(
                "UPDATE runs SET lease_until = ? WHERE account_id = ? AND id = ? AND lease_owner = ? RETURNING id",
                format_time(lease_until),
                run.account_id,
                run.id,
                owner,
            )
        return row is not None

    async def finish(
        self, run: Run, owner: str, status: str, *, usage: Usage | None, reported: bool, error: str | None, now: datetime
    ) -> None:
        async with self._db.transaction(write=True) as tx:
            await tx.execute(
                """UPDATE runs SET status = ?, error = ?, prompt_tokens = ?, completion_tokens = ?,
                    usage_reported = ?, usage_estimated = ?, finished_at = ?, lease_owner = NULL
                WHERE account_id = ? AND id = ? AND lease_owner = ?""",
                status,
                error,
                None if usage is None else usage.prompt_tokens,
                None if usage is None else usage.completion_tokens,
                int(reported),
                int(usage is not None and usage.estimated),
                format_time(now),
                run.account_id,
                run.id,
                owner,
            )

    async def chat_runs(self, account_id: str, chat_id: str) -> list[RunRecord]:
        async with self._db.transaction() as tx:
            rows = await tx.fetchall(
                """SELECT id, message_id, assistant_id, status, error, prompt_tokens, completion_tokens,
                    usage_reported, upstream_calls, usage_estimated
                FROM runs WHERE account_id = ? AND chat_id = ? ORDER BY requested_seq""",
                account_id,
                chat_id,
            )
        # (the columns in the order of RunRecord's fields)
        return [
            RunRecord(
                text(r[0]), text(r[1]), text(r[2]), text(r[3]), optional_text(r[4]), optional_integer(r[5]),
                optional_integer(r[6]), usage_reported=bool(r[7]), upstream_calls=integer(r[8]),
                usage_estimated=bool(r[9]),
            )
            for r in rows
        ]  # fmt: skip

    async def chat_messages(self, account_id: str, chat_id: str, content: bool = True) -> list[Message]:
        names = MESSAGES.column_names
        columns = ", ".join(n if content or n not in _BULKY else f"NULL AS {n}" for n in names)
        async with self._db.transaction() as tx:
            rows = await tx.fetchall(f"SELECT {columns} FROM messages WHERE account_id = ? AND chat_id = ?", account_id, chat_id)
        found = [dict(zip(names, row)) for row in rows]
        if not content:
            for row in found:
                row["content"] = ""
        return [Message.model_validate(row) for row in found]

    async def wait(self, run: Run, owner: str) -> bool:
        async with self._db.transaction(write=True) as tx:
            row = await tx.fetchone(
                """UPDATE runs SET status = 'queued', waiting = 1, lease_owner = NULL, lease_until = NULL,
                    upstream_calls = upstream_calls - 1
                WHERE account_id = ? AND id = ? AND lease_owner = ? AND status = 'streaming' RETURNING id""",
                run.account_id,
                run.id,
                owner,
            )
        return row is not None

    async def stop_waiting(self, account_id: str) -> None:
        async with self._db.transaction(write=True) as tx:
            await tx.execute("UPDATE runs SET waiting = 0 WHERE account_id = ? AND waiting = 1", account_id)

    async def steering(self, account_id: str, chat_id: str) -> Steering:
        async with self._db.transaction() as tx:
            found = {}
            for table, where in ((SETTINGS, "account_id = ?"), (PRESETS, "account_id = ?"), (CHATS, "account_id = ? AND id = ?")):
                params = (account_id,) if table is not CHATS else (account_id, chat_id)
                found[table.name] = [
                    dict(zip(table.column_names, row))
                    for row in await tx.fetchall(f"SELECT {', '.join(table.column_names)} FROM {table.name} WHERE {where}", *params)
                ]
        return Steering(
            settings=next((Settings.model_validate(row) for row in found["settings"]), None),
            presets={str(row["id"]): Preset.model_validate(row) for row in found["presets"]},
            chat=next((Chat.model_validate(row) for row in found["chats"]), None),
        )

    async def follow_ups_due(self) -> list[tuple[str, str, int]]:
        async with self._db.transaction() as tx:
            rows = await tx.fetchall(
                """SELECT f.account_id, f.chat_id, l.head_seq FROM follow_ups AS f
                JOIN logs AS l ON l.account_id = f.account_id WHERE l.head_seq > f.checked_seq"""
            )
        return [(text(r[0]), text(r[1]), integer(r[2])) for r in rows]

    async def follow_ups_checked(self, account_id: str, chat_id: str, head: int, queued: bool) -> None:
        async with self._db.transaction(write=True) as tx:
            if queued:
                await tx.execute(
                    "UPDATE follow_ups SET checked_seq = ? WHERE account_id = ? AND chat_id = ? AND checked_seq < ?",
                    head, account_id, chat_id, head,
                )  # fmt: skip
            else:  # (one queued after ``head`` keeps the row: its noted_seq is past it)
                await tx.execute(
                    "DELETE FROM follow_ups WHERE account_id = ? AND chat_id = ? AND noted_seq <= ?", account_id, chat_id, head
                )

    async def still_running(self, account_id: str, message_id: str) -> bool:
        row = await self._db.read_one("SELECT status FROM messages WHERE account_id = ? AND id = ?", account_id, message_id)
        return row is not None and row[0] in UNFINISHED
