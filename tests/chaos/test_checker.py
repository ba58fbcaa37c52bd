"""The chaos run's checker (server/chaos/checker.py) finds what it is meant to find: a history
with one anomaly of a kind gives exactly that count, and a clean history none (so a run cannot
pass by checking nothing). Also ``--check FILE`` on a saved history, and every regression
history under tests/chaos/histories/ checks clean."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from server.chaos.checker import COUNTS, check
from server.config import ROOT

CHAT = "0193a000-0000-7000-8000-000000000001"
M1 = "0193a000-0000-7000-8000-000000000002"
M2 = "0193a000-0000-7000-8000-000000000003"
R1 = "0193a000-0000-7000-8000-000000000004"
RUN = "0193a000-0000-7000-8000-000000000005"
T = "2026-12-05T12:00:00.000Z"
SHA = "a" * 64


def message(id: str, content: str, role: str = "user", status: str = "completed", parent: str | None = None, run: str | None = None,
            files: list[str] | None = None) -> dict[str, Any]:  # fmt: skip
    return {"id": id, "chat": CHAT, "role": role, "content": content, "status": status, "parent": parent, "run": run,
            "assistant": "paced" if role == "assistant" else None, "created": T, "files": files or [], "seq": 6}  # fmt: skip


def clean() -> list[dict[str, Any]]:
    """Two devices; a chat, a question with a file, an answer asked for and given, an edit."""
    messages = {
        M1: message(M1, "[qd1-1] hello edited", files=[SHA]),
        R1: message(R1, "word0 word1", role="assistant", parent=M1, run=RUN),
    }
    final = {"chats": {CHAT: {"title": "d1's chat"}}, "messages": messages, "outbox": 0, "uploads": 0}
    return [
        {"t": 0, "op": "begin", "seed": 1, "seconds": 1, "servers": 2, "devices": 2, "browsers": 0, "database": "PostgreSQL"},
        {"t": 1, "op": "save", "device": "d1", "event": "e1", "type": "ChatCreated", "entity": CHAT, "chat": CHAT},
        {"t": 1, "op": "result", "device": "d1", "event": "e1", "type": "ChatCreated", "status": "accepted", "seq": 1},
        {"t": 2, "op": "save", "device": "d1", "event": "e2", "type": "MessageAppended", "entity": M1, "chat": CHAT,
         "text": "[qd1-1] hello", "created": T, "queued": False, "files": [SHA]},
        {"t": 2, "op": "save", "device": "d1", "event": "e3", "type": "AssistantRunRequested", "entity": R1, "chat": CHAT,
         "parent": M1, "run": RUN},
        {"t": 2, "op": "result", "device": "d1", "event": "e2", "type": "MessageAppended", "status": "accepted", "seq": 2},
        {"t": 2, "op": "result", "device": "d1", "event": "e3", "type": "AssistantRunRequested", "status": "accepted", "seq": 3},
        {"t": 3, "op": "upstream", "model": "paced", "tag": "qd1-1", "mode": "ok"},
        {"t": 4, "op": "save", "device": "d2", "event": "e4", "type": "MessageEdited", "entity": M1, "chat": CHAT,
         "text": "[qd1-1] hello edited"},
        {"t": 4, "op": "result", "device": "d2", "event": "e4", "type": "MessageEdited", "status": "accepted", "seq": 6},
        {"t": 5, "op": "live", "device": "d2", "socket": 1, "caughtUp": 0, "seqs": [1, 2, 3, 4, 5, 6]},
        {"t": 6, "op": "final", "who": "d1", **copy.deepcopy(final)},
        {"t": 6, "op": "final", "who": "d2", **copy.deepcopy(final)},
        {"t": 6, "op": "final", "who": "server", **copy.deepcopy(final)},
        {"t": 7, "op": "blob", "sha256": SHA, "ok": True, "digest": SHA},
    ]  # fmt: skip


def finals(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in history if r["op"] == "final"]


def only(counts: dict[str, int], name: str, n: int = 1) -> None:
    assert counts == {k: (n if k == name else 0) for k in COUNTS}


def test_a_clean_history_has_no_anomaly() -> None:
    report = check(clean())
    assert report.counts == dict.fromkeys(COUNTS, 0), report.details


def test_a_lost_message_is_counted_lost() -> None:
    history = clean()
    for final in finals(history):  # (gone everywhere alike: not a divergence)
        del final["messages"][M1]
    only(check(history).counts, "lost")


def test_a_message_deleted_by_a_recorded_operation_is_not_lost() -> None:
    history = clean()
    for final in finals(history):
        del final["messages"][M1]
    history.insert(5, {"t": 5, "op": "save", "device": "d2", "event": "e9", "type": "MessageDeleted", "entity": M1, "chat": CHAT})
    assert check(history).anomalies == 0


def test_a_lost_edit_is_counted_lost() -> None:
    history = clean()
    for final in finals(history):
        final["messages"][M1]["content"] = "[qd1-1] hello"
    only(check(history).counts, "lost")


def test_an_edit_coalesced_into_the_unsent_append_counts_as_it() -> None:
    history = clean()
    del history[9]  # (no result of its own: it went out as e2, which it was folded into before e2 was sent)
    history[8]["into"] = "e2"
    history.insert(4, history.pop(8))
    assert check(history).anomalies == 0, check(history).details


def test_an_edit_with_an_answer_of_its_own_went_out_as_itself() -> None:
    """(The 10-minute run of seed 10: an edit recorded as folded into the append, which was being
    sent then, got its own seq: its text, the latest by seq, is the right one.)"""
    history = clean()
    history[8]["into"] = "e2"
    assert check(history).anomalies == 0, check(history).details


def test_a_continue_counts_for_the_question_its_device_saw() -> None:
    """A Continue of a reply deleted since (with its chat) still accounts for its model call."""
    history = clean()
    gone = "0193a000-0000-7000-8000-000000000021"
    history[9:9] = [
        {"t": 4, "op": "save", "device": "d2", "event": "e7", "type": "AssistantRunContinued", "entity": gone, "chat": CHAT,
         "run": "0193a000-0000-7000-8000-000000000022", "before": "word0", "parent": M1},
        {"t": 4, "op": "result", "device": "d2", "event": "e7", "type": "AssistantRunContinued", "status": "accepted", "seq": 7},
        {"t": 5, "op": "upstream", "model": "paced", "tag": "qd1-1", "mode": "ok"},
    ]  # fmt: skip
    assert check(history).anomalies == 0, check(history).details
    del history[9]["parent"]
    only(check(history).counts, "duplicated")


def test_text_sent_within_the_window_before_a_kill_is_not_owed_to_the_composer() -> None:
    history = clean()
    history += [
        {"t": 10, "op": "typed", "browser": "b1", "chat": CHAT, "text": "a whole sentence"},
        {"t": 14.95, "op": "typed", "browser": "b1", "chat": CHAT, "text": ""},  # sent, 50 ms before the kill
        {"t": 20, "op": "reopened", "browser": "b1", "killed": 15, "chat": CHAT, "composer": ""},
    ]
    assert check(history).anomalies == 0, check(history).details


def test_a_browser_message_never_shown_is_looked_for_by_its_tag() -> None:
    history = clean()
    history.insert(9, {"t": 4, "op": "save", "device": "b1", "event": "b1-1", "type": "MessageAppended", "entity": "", "chat": CHAT,
                       "text": "[qb1-1]", "unobserved": True, "asked": None, "unseen": True})  # fmt: skip
    only(check(history).counts, "lost")
    for final in finals(history):
        final["messages"][M2] = message(M2, "[qb1-1] typed in a page", parent=R1)
    assert check(history).anomalies == 0, check(history).details


def test_an_accepted_delete_whose_message_is_still_there_is_counted_lost() -> None:
    history = clean()
    history += [
        {"t": 8, "op": "save", "device": "d2", "event": "e9", "type": "MessageDeleted", "entity": M1, "chat": CHAT},
        {"t": 8, "op": "result", "device": "d2", "event": "e9", "type": "MessageDeleted", "status": "accepted", "seq": 9},
    ]
    only(check(history).counts, "lost")
    history[-1]["status"] = "rejected"  # (refused: the message stays, rightly)
    assert check(history).anomalies == 0


def test_a_reply_completed_after_its_stop_was_accepted_is_counted_lost() -> None:
    history = clean()
    history += [
        {"t": 8, "op": "save", "device": "d2", "event": "e9", "type": "AssistantRunCancelled", "entity": R1, "chat": CHAT, "run": RUN},
        {"t": 8, "op": "result", "device": "d2", "event": "e9", "type": "AssistantRunCancelled", "status": "accepted", "seq": 5},
    ]
    only(check(history).counts, "lost")
    history[-1]["seq"] = 7  # the Stop came after the answer had ended: nothing to stop
    assert check(history).anomalies == 0


def test_an_event_given_two_seqs_is_counted_duplicated() -> None:
    history = clean()
    history.insert(7, {"t": 2, "op": "result", "device": "d1", "event": "e2", "type": "MessageAppended", "status": "duplicate", "seq": 4})
    only(check(history).counts, "duplicated")


def test_one_text_in_two_messages_is_counted_duplicated() -> None:
    history = clean()
    for final in finals(history):
        final["messages"][M2] = message(M2, "[qd1-1] hello edited", parent=R1)
    only(check(history).counts, "duplicated")


def test_a_second_model_call_for_one_run_is_counted_duplicated() -> None:
    history = clean()
    history.insert(8, {"t": 3, "op": "upstream", "model": "paced", "tag": "qd1-1", "mode": "ok"})
    only(check(history).counts, "duplicated")


def test_a_gap_after_caught_up_is_counted_order() -> None:
    history = clean()
    history[10]["seqs"] = [1, 2, 4, 5, 6]
    only(check(history).counts, "order")


def test_a_follow_up_sent_before_one_queued_earlier_is_counted_order() -> None:
    history = clean()
    q1, q2 = "0193a000-0000-7000-8000-000000000011", "0193a000-0000-7000-8000-000000000012"
    for i, q in enumerate((q1, q2)):
        history.insert(9, {"t": 4, "op": "save", "device": "d1", "event": f"q{i}", "type": "MessageAppended", "entity": q, "chat": CHAT,
                           "text": f"[qd1-{i + 5}] later", "created": f"2026-12-05T12:00:0{i + 1}.000Z", "queued": True, "files": []})  # fmt: skip
    for final in finals(history):  # q2 was sent (and followed) first
        final["messages"][q2] = message(q2, "[qd1-6] later", parent=R1)
        final["messages"][q1] = message(q1, "[qd1-5] later", parent=q2)
    only(check(history).counts, "order")


def test_a_device_that_differs_from_the_server_is_counted_divergent() -> None:
    history = clean()
    finals(history)[1]["messages"][R1]["content"] = "word0"
    only(check(history).counts, "divergent")


def test_a_reply_still_streaming_is_counted_stuck() -> None:
    history = clean()
    for final in finals(history):
        final["messages"][R1]["status"] = "streaming"
    only(check(history).counts, "stuck")


def test_an_outbox_not_empty_is_counted_stuck() -> None:
    history = clean()
    finals(history)[0]["outbox"] = 2
    only(check(history).counts, "stuck")


def test_a_page_that_did_not_answer_after_the_heal_is_counted_stuck() -> None:
    history = clean()
    history.insert(-2, {"t": 6, "op": "unresponsive", "browser": "b1", "what": "final read", "seconds": 60.0})
    only(check(history).counts, "stuck")


def test_a_follow_up_left_queued_when_nothing_waits_is_counted_stuck() -> None:
    history = clean()
    q = "0193a000-0000-7000-8000-000000000011"
    for final in finals(history):
        final["messages"][q] = {**message(q, "[qd1-5] later", status="queued"), "assistant": "paced"}
    only(check(history).counts, "stuck")


def test_text_typed_before_a_kill_and_not_back_is_counted_typed_lost() -> None:
    history = clean()
    history += [
        {"t": 10, "op": "typed", "browser": "b1", "chat": CHAT, "text": "half a sentence"},
        {"t": 20, "op": "reopened", "browser": "b1", "killed": 15, "chat": CHAT, "composer": ""},
    ]
    only(check(history).counts, "typed-lost")
    history[-1]["composer"] = "half a sentence"
    assert check(history).anomalies == 0
    history[-1].update(composer="", killed=10.1)  # typed within the window before the kill: may be lost
    assert check(history).anomalies == 0
    history[-1].update(killed=15, composer=None)  # its chat deleted meanwhile: nothing to look at
    assert check(history).anomalies == 0


def _refused_by_the_page(composer: str) -> list[dict[str, Any]]:
    """A browser's message its app refused (the chat's queue full), its text then in the composer."""
    history = clean()
    history[-4:-4] = [
        {"t": 5, "op": "save", "device": "b1", "event": "b1-1", "type": "MessageAppended", "entity": "", "chat": CHAT,
         "text": "[qb1-1]", "unobserved": True, "asked": None},
        {"t": 5, "op": "result", "device": "b1", "event": "b1-1", "type": "MessageAppended", "status": "rejected", "seq": None,
         "error": "Not sent: a chat holds at most 10 queued messages.", "by": "page", "composer": composer},
    ]  # fmt: skip
    return history


def test_a_message_the_page_refused_is_not_lost_when_its_text_is_back_in_the_composer() -> None:
    report = check(_refused_by_the_page("[qb1-1] words\ntyped since"))
    assert report.counts == dict.fromkeys(COUNTS, 0), report.details


def test_a_message_the_page_refused_and_did_not_give_back_is_counted_typed_lost() -> None:
    only(check(_refused_by_the_page("typed since")).counts, "typed-lost")


def test_a_file_not_given_back_whole_is_counted_attachments() -> None:
    history = clean()
    history[-1].update(ok=False, digest="b" * 64)
    only(check(history).counts, "attachments")


def test_a_continued_reply_that_lost_its_start_is_counted_continuations() -> None:
    history = clean()
    history.insert(10, {"t": 4, "op": "save", "device": "d2", "event": "e5", "type": "AssistantRunContinued", "entity": R1, "chat": CHAT,
                        "run": "0193a000-0000-7000-8000-000000000009", "before": "word0 word1 word2"})  # fmt: skip
    history.insert(11, {"t": 4, "op": "result", "device": "d2", "event": "e5", "type": "AssistantRunContinued", "status": "accepted", "seq": 7})
    only(check(history).counts, "continuations")


def test_check_reads_a_saved_history_and_exits_1_on_an_anomaly(tmp_path: Path) -> None:
    history = clean()
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in history))
    done = subprocess.run([sys.executable, "-m", "server", "chaos", "--check", str(path)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "anomalies: 0" in done.stdout
    history[10]["seqs"] = [1, 3]
    path.write_text("".join(json.dumps(r) + "\n" for r in history))
    done = subprocess.run([sys.executable, "-m", "server", "chaos", "--check", str(path)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 1 and "anomalies: 1" in done.stdout and "order 1" in done.stdout, done.stdout


def test_every_regression_history_checks_clean() -> None:
    """The histories of real runs (tests/chaos/histories/README.md says what each one found)."""
    paths = sorted((ROOT / "tests/chaos/histories").glob("*.jsonl"))
    assert paths
    for path in paths:
        done = subprocess.run([sys.executable, "-m", "server", "chaos", "--check", str(path)], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, path.name + "\n" + done.stdout + done.stderr


def test_an_edit_whose_answer_was_lost_counts_once_it_is_found_in_the_log() -> None:
    """(The suite's chaos minute, seed 22: the server went while answering the edit's push; the
    device found the edit in the log and did not push it again: recorded as ``logged``.)"""
    history = clean()
    assert history[9]["event"] == "e4"
    history[9]["status"] = "logged"
    assert check(history).anomalies == 0, check(history).details
    del history[9]  # (with no record of it at all, its text is not owed: the append's is)
    only(check(history).counts, "lost")
