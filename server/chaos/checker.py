"""The checker: a pure function of a history (server/chaos/history.py) to counts of anomalies,
each a promise the app makes (README.md, "Checking consistency"). No I/O, no clock: a history
saved once gives the same counts for ever (``python -m server chaos --check FILE``).

- **lost**: a message a device saved, not refused (by the server, or by a browser's app: a
  chat's queue full) nor deleted later by a recorded operation, that is missing from the
  server's final state; or whose final text is not the one of its latest accepted change (by
  seq); or an accepted delete whose message (or chat) is still there, or an accepted Stop whose
  reply completed after it (by seq).
- **duplicated**: one eventId given two seqs; one message text (its tag) in two messages; one run
  answering in two messages; more model calls for a question than runs asked for it.
- **divergent**: a device whose final state (chats, and messages with their text, status,
  parent, run and files) differs from the server's: one per device.
- **order**: a live socket that delivered, after ``caughtUp``, a seq that is not the one after
  the last (one per such frame); a queued follow-up sent before one queued earlier in its chat.
- **stuck**: a reply still ``queued`` or ``streaming`` after the heal; a follow-up still queued
  in a chat whose queue is not paused; a device with unsent events or files; a page that did
  not answer for a minute after the heal (its main thread frozen).
- **typed-lost**: a browser's composer that, reopened after a kill or reload, does not hold what
  was typed into it more than ``TYPED_WINDOW`` seconds before; a message a browser's app refused
  whose text is not back in its composer.
- **attachments**: a file of the final state the server does not give back, or whose SHA-256
  differs.
- **continuations**: a continued reply whose final text does not start with its text before.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from shared.followups import queue_state
from shared.models import Message

COUNTS = ("lost", "duplicated", "divergent", "order", "stuck", "typed-lost", "attachments", "continuations")
# What a page may lose of what was typed just before it was killed: the README promises every
# character typed 150 ms before a SIGKILL (static/pending.js keeps each keystroke at once).
TYPED_WINDOW = 0.15
TAG = re.compile(r"\[(q[0-9a-z-]+)\]")
# The fields of a message two readers must agree on.
FIELDS = ("chat", "role", "content", "status", "parent", "run", "files")


@dataclass
class Report:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))
    details: list[str] = field(default_factory=list)

    def add(self, count: str, detail: str) -> None:
        self.counts[count] += 1
        if len(self.details) < 200:
            self.details.append(f"{count}: {detail}")

    @property
    def anomalies(self) -> int:
        return sum(self.counts.values())


def tag_of(text: str) -> str | None:
    found = TAG.search(text)
    return found.group(1) if found else None


def check(records: Iterable[dict[str, Any]]) -> Report:
    records = list(records)
    report = Report()
    saves = [r for r in records if r["op"] == "save"]
    finals = {r["who"]: r for r in records if r["op"] == "final"}
    server = finals.get("server")
    seqs: dict[str, set[int]] = defaultdict(set)
    status: dict[str, set[str]] = defaultdict(set)
    for r in records:
        if r["op"] == "result":
            status[r["event"]].add(r["status"])
            if r.get("seq") is not None:
                seqs[r["event"]].add(int(r["seq"]))
    for event, got in seqs.items():
        if len(got) > 1:
            report.add("duplicated", f"event {event} was given seqs {sorted(got)}")
    accepted = {e for e, s in status.items() if s & {"accepted", "duplicate", "logged"}}  # (logged: found in the log, its answer lost)
    refused = {e for e, s in status.items() if s == {"rejected"}}
    if server is None:
        report.details.append("no final read of the server: nothing more checked")
        return report
    messages: dict[str, dict[str, Any]] = server["messages"]
    _lost(report, saves, accepted, refused, seqs, messages)
    _duplicated(report, records, saves, accepted, messages)
    for who, final in sorted(finals.items()):
        if who == "server":
            continue
        _divergent(report, who, final, server)
        if final.get("outbox"):
            report.add("stuck", f"{who} still has {final['outbox']} unsent events")
        if final.get("uploads"):
            report.add("stuck", f"{who} still has {final['uploads']} unsent files")
        for message_id in final.get("shownTwice", []):
            report.add("duplicated", f"{who} shows message {message_id} more than once")
    _order(report, records, saves, messages)
    _stuck(report, messages)
    for r in records:
        if r["op"] == "unresponsive":
            report.add("stuck", f"{r['browser']}'s page did not answer ({r['what']}) for {r['seconds']:.0f} s after the heal")
    _typed(report, records)
    blobs = {r["sha256"]: r for r in records if r["op"] == "blob"}
    for m in messages.values():
        for sha in m.get("files", []):
            if sha not in blobs:
                report.add("attachments", f"file {sha[:12]} of message {m['id']} was not read back")
    for sha, r in sorted(blobs.items()):
        if not r["ok"]:
            report.add("attachments", f"file {sha[:12]}: {r.get('error', 'its bytes differ')}")
    for s in saves:
        if s["type"] == "AssistantRunContinued" and s["event"] in accepted:
            reply = messages.get(s["entity"])
            if reply is not None and not reply["content"].startswith(s.get("before", "")):
                report.add("continuations", f"reply {s['entity']} no longer starts with its text before the Continue")
    return report


def _lost(
    report: Report,
    saves: list[dict[str, Any]],
    accepted: set[str],
    refused: set[str],
    seqs: dict[str, set[int]],
    messages: dict[str, dict[str, Any]],
) -> None:
    deleted = {s["entity"] for s in saves if s["type"] in ("MessageDeleted", "ChatDeleted") and s["event"] not in refused}
    # message -> (seq, order, text) of its accepted changes; a change folded into an earlier one
    # not sent yet (``into``: webapp/outbox.py coalesces them) went out as that one, and is its latest text
    texts: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    for order, s in enumerate(saves):
        # (an event with an answer of its own went out as itself, whatever was recorded of it)
        sent = s["event"] if s["event"] in seqs or s["event"] in accepted or s["event"] in refused else s.get("into", s["event"])
        if s["type"] in ("MessageAppended", "MessageEdited") and sent in accepted and seqs.get(sent):
            texts[s["entity"]].append((min(seqs[sent]), order, s["text"]))
    tags = {tag_of(m["content"]) for m in messages.values() if m["role"] == "user"}
    for s in saves:
        if s["type"] != "MessageAppended" or s["event"] in refused:
            continue
        if s.get("unseen"):  # (a browser's message its page did not show: looked for by its tag)
            if s["chat"] not in deleted and tag_of(s["text"]) not in tags and not deleted & _sent_in(saves, s):
                report.add("lost", f"the message tagged {tag_of(s['text'])} sent by {s['device']} at {s['t']} s is not on the server")
            continue
        if s["entity"] in deleted or s["chat"] in deleted:
            continue
        if s["entity"] not in messages:
            report.add("lost", f"message {s['entity']} saved by {s['device']} at {s['t']} s is not on the server")
    # A Stop, or a delete, the server accepted and the final state does not show.
    chats_left = {m["chat"] for m in messages.values()}
    for s in saves:
        if s["event"] not in accepted or not seqs.get(s["event"]):
            continue
        seq = min(seqs[s["event"]])
        row = messages.get(s["entity"])
        if s["type"] == "MessageDeleted" and row is not None:
            report.add("lost", f"message {s['entity']} is still there after its delete was accepted (seq {seq})")
        elif s["type"] == "ChatDeleted" and s["entity"] in chats_left:
            report.add("lost", f"chat {s['entity']} still has messages after its delete was accepted (seq {seq})")
        elif s["type"] == "AssistantRunCancelled" and row is not None and row["run"] == s["run"]:
            if row["status"] == "completed" and (row.get("seq") or 0) > seq:
                report.add("lost", f"reply {s['entity']} completed at seq {row['seq']} after its Stop was accepted at seq {seq}")
    for message_id, changes in texts.items():
        row = messages.get(message_id)
        if row is None or row["role"] != "user":
            continue
        latest = max(changes)[2]
        if row["content"] != latest:
            report.add("lost", f"message {message_id} reads {row['content']!r}, not its latest accepted text {latest!r}")


def _sent_in(saves: list[dict[str, Any]], unseen: dict[str, Any]) -> set[str]:
    """The ids of the messages of ``unseen``'s chat that other devices deleted (one of them may
    have been it)."""
    return {s["entity"] for s in saves if s["type"] == "MessageDeleted" and s["chat"] == unseen["chat"]}


def _duplicated(
    report: Report, records: list[dict[str, Any]], saves: list[dict[str, Any]], accepted: set[str], messages: dict[str, dict[str, Any]]
) -> None:
    tags: dict[str, list[str]] = defaultdict(list)
    runs: dict[str, list[str]] = defaultdict(list)
    for m in messages.values():
        if m["role"] == "user" and (tag := tag_of(m["content"])) is not None:
            tags[tag].append(m["id"])
        if m["role"] == "assistant" and m.get("run"):
            runs[m["run"]].append(m["id"])
    for tag, ids in sorted(tags.items()):
        if len(ids) > 1:
            report.add("duplicated", f"the message tagged {tag} is there {len(ids)} times: {sorted(ids)}")
    for run, ids in sorted(runs.items()):
        if len(ids) > 1:
            report.add("duplicated", f"run {run} answered in {len(ids)} messages")
    # Model calls per question, against the runs that may have asked it.
    question_tag = {s["entity"]: tag_of(s["text"]) for s in saves if s["type"] == "MessageAppended" and s.get("text")}
    queued = {s["entity"] for s in saves if s["type"] == "MessageAppended" and s.get("queued")}
    for m in messages.values():
        if m["role"] == "user":
            question_tag.setdefault(m["id"], tag_of(m["content"]))
    asked: dict[str | None, set[str]] = defaultdict(set)  # tag -> run ids
    replies = {m["id"]: m for m in messages.values() if m["role"] == "assistant"}
    reply_parent = {s["entity"]: s.get("parent") for s in saves if s["type"] == "AssistantRunRequested"}
    for s in saves:
        if s.get("asked"):  # (a browser's question sent with an assistant: one run)
            asked[tag_of(s["text"])].add(s["event"])
        if s["event"] not in accepted:
            continue
        if s["type"] == "AssistantRunRequested":
            asked[question_tag.get(s.get("parent") or "")].add(s["run"])
        elif s["type"] == "AssistantRunContinued":  # (the reply's question, as the device saw it)
            parent = s.get("parent") or (replies[s["entity"]]["parent"] if s["entity"] in replies else reply_parent.get(s["entity"]))
            asked[question_tag.get(parent or "")].add(s["run"])
    for m in replies.values():
        if m.get("run"):
            asked[question_tag.get(m["parent"] or "")].add(m["run"])
    sent_by_server = {question_tag.get(q) for q in queued}
    calls = Counter(r["tag"] for r in records if r["op"] == "upstream" and r.get("tag"))
    for tag, n in sorted(calls.items()):
        allowed = len(asked.get(tag, set())) + (1 if tag in sent_by_server else 0)
        if n > allowed:
            report.add("duplicated", f"the model was called {n} times for question {tag}, which asked for {allowed} runs")


def _row(m: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(tuple(m.get(f) or ()) if f == "files" else m.get(f) for f in FIELDS)


def _divergent(report: Report, who: str, final: dict[str, Any], server: dict[str, Any]) -> None:
    differ: list[str] = []
    if final["chats"] != server["chats"]:
        chats = set(final["chats"]) ^ set(server["chats"]) or {c for c in final["chats"] if final["chats"][c] != server["chats"].get(c)}
        differ.append(f"chats {sorted(chats)[:3]}")
    mine, theirs = final["messages"], server["messages"]
    ids = sorted(set(mine) ^ set(theirs)) + sorted(i for i in set(mine) & set(theirs) if _row(mine[i]) != _row(theirs[i]))
    if ids:
        differ.append(f"{len(ids)} messages, such as {ids[:3]}")
    if differ:
        report.add("divergent", f"{who} differs from the server: {'; '.join(differ)}")


def _order(report: Report, records: list[dict[str, Any]], saves: list[dict[str, Any]], messages: dict[str, dict[str, Any]]) -> None:
    for r in records:
        if r["op"] != "live":
            continue
        last = r["caughtUp"]
        for seq in r["seqs"]:
            if seq != last + 1:
                report.add("order", f"{r['device']}'s socket {r['socket']} delivered seq {seq} after {last}")
            last = max(last, seq)
    # Follow-ups: one queued later is never an ancestor of one queued earlier in its chat.
    queued = sorted(
        (s for s in saves if s["type"] == "MessageAppended" and s.get("queued")), key=lambda s: (s.get("created", ""), s["entity"])
    )
    by_chat: dict[str, list[str]] = defaultdict(list)
    for s in queued:
        by_chat[s["chat"]].append(s["entity"])
    for ids in by_chat.values():
        for i, earlier in enumerate(ids):
            ancestors = _ancestors(earlier, messages)
            for later in ids[i + 1 :]:
                if later in ancestors:
                    report.add("order", f"follow-up {later} was sent before {earlier}, queued before it")


def _ancestors(message_id: str, messages: dict[str, dict[str, Any]]) -> set[str]:
    found: set[str] = set()
    current = messages.get(message_id)
    while current is not None and current.get("parent") and current["parent"] not in found:
        found.add(current["parent"])
        current = messages.get(current["parent"])
    return found


def _stuck(report: Report, messages: dict[str, dict[str, Any]]) -> None:
    chats: dict[str, list[Message]] = defaultdict(list)
    for m in messages.values():
        if m["role"] == "assistant" and m["status"] in ("queued", "streaming"):
            report.add("stuck", f"reply {m['id']} is still {m['status']}")
        chats[m["chat"]].append(
            Message(id=m["id"], chat_id=m["chat"], role=m["role"], content="", parent_id=m["parent"], status=m["status"],
                    assistant_id=m.get("assistant"), created_at=m["created"])  # fmt: skip
        )
    for chat, rows in sorted(chats.items()):
        if queue_state(rows) == "ready":
            waiting = [m.id for m in rows if m.is_queued_follow_up]
            report.add("stuck", f"chat {chat} has {len(waiting)} follow-ups queued that nothing sends")


def _typed(report: Report, records: list[dict[str, Any]]) -> None:
    typed: dict[str, list[dict[str, Any]]] = defaultdict(list)
    texts = {(s["device"], s["event"]): s["text"] for s in records if s["op"] == "save" and s["type"] == "MessageAppended"}
    for r in records:
        if r["op"] == "result" and r.get("by") == "page":  # a message the page refused: its text is back in the composer
            tag = tag_of(texts.get((r["device"], r["event"]), ""))
            if tag is None or f"[{tag}]" not in r["composer"]:
                report.add("typed-lost", f"{r['device']}'s message {r['event']}, not taken, is not back in the composer")
        if r["op"] == "typed":
            typed[r["browser"]].append(r)
        elif r["op"] == "reopened":
            if r["composer"] is None:  # (its chat was deleted meanwhile: no composer to look at)
                continue
            here = [t for t in typed[r["browser"]] if t["chat"] == r["chat"] and t["t"] <= r["killed"]]
            before = [t for t in here if t["t"] <= r["killed"] - TYPED_WINDOW]
            # What is owed: the text typed before the window, unless it was sent since (a send
            # empties the composer: its record's text is "", and the text is then a message).
            owed = before[-1] if before and not any(t["text"] == "" and t["t"] > before[-1]["t"] for t in here) else None
            if owed is not None and owed["text"].strip() not in r["composer"]:
                report.add("typed-lost", f"{r['browser']}'s composer lost {owed['text']!r} typed at {owed['t']} s")
            typed[r["browser"]] = []
