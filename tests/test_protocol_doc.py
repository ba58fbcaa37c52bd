"""docs/protocol.md is true: its tables and shapes say what the code has, no more and no less.

Each comparison reads the document's text and takes what the code has as plain data, so the
tests below can also run it on a doctored copy of the document, or on code that gained a field,
and see it fail."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import shared.models as models
from server import errors, openapi
from server.assistants import load_assistants
from server.config import ROOT

DOC = ROOT / "docs/protocol.md"
TEXT = DOC.read_text()
SERVER = ROOT / "server"

# --- reading the document -------------------------------------------------------------------


def table(text: str, header: list[str]) -> list[list[str]]:
    """The body rows (cells, stripped) of the Markdown table whose header is ``header``."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if _cells(line) == header:
            rows = []
            for row in lines[i + 2 :]:
                if not row.startswith("|"):
                    break
                rows.append(_cells(row))
            return rows
    raise AssertionError(f"no table headed {header}")


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")] if line.startswith("|") else []


def code_blocks(text: str) -> list[str]:
    return re.findall(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M)


def shapes(text: str) -> dict[str, list[str]]:
    """``Name {a, b?, c: "x"}`` lines of the code blocks: each shape's field names."""
    found: dict[str, list[str]] = {}
    for block in code_blocks(text):
        for name, fields in re.findall(r"^\s*([A-Z]\w*)\s+\{([^}]*)\}", block, re.M):
            if name in found:
                raise AssertionError(f"{name} is shown twice")
            found[name] = [f.split(":")[0].strip().rstrip("?") for f in fields.split(",") if f.strip()]
    return found


def values(text: str) -> dict[tuple[str, str], list[str]]:
    """The indented ``field : a | b | c`` lines of the code blocks, by the shape shown above them."""
    found: dict[tuple[str, str], list[str]] = {}
    for block in code_blocks(text):
        shape = ""
        for line in block.splitlines():
            if named := re.match(r"([A-Z]\w*)\s+\{", line):
                shape = named.group(1)
            elif listed := re.match(r"\s+(\w+)\s*:\s*(\w+(?:\s*\|\s*\w+)+)\s*$", line):
                found[(shape, listed.group(1))] = [v.strip() for v in listed.group(2).split("|")]
    return found


def headings(text: str) -> set[str]:
    return {h.strip() for h in re.findall(r"^#{2,4} (.+)$", text, re.M)}


# --- what the code has ----------------------------------------------------------------------


def model_shapes() -> dict[str, list[str]]:
    """Every wire model of shared/models.py by its camelCase aliases, and GET /assistants' item."""
    found = {
        name: [field.alias or key for key, field in model.model_fields.items()]
        for name, model in vars(models).items()
        if isinstance(model, type) and issubclass(model, models.Wire) and model is not models.Wire
        and model.__module__ == models.__name__
    }
    found["Assistant"] = list(load_assistants("", "", 1.0, 0.0)["demo"].public())
    return found


def payloads() -> dict[str, str]:
    return {str(kind): model.__name__ for kind, model in models.PAYLOAD_MODELS.items()}


def required_roles() -> dict[str, str]:
    return {str(kind): role for kind, role in models.REQUIRED_ROLE.items()}


def error_codes() -> set[tuple[int, str]]:
    """(status, code) of every error the server answers: Quart's, the table's, the fallback, and
    every ``ApiError(status, "code", ...)`` a module of server/ raises itself."""
    codes = set(errors.HTTP_CODES.items()) | {(t.status, t.code) for t in errors.ERRORS.values()}
    codes.add((500, errors.OTHER_CODE))
    for path in SERVER.rglob("*.py"):
        codes |= {(int(s), c) for s, c in re.findall(r'ApiError\(\s*(\d{3}),\s*"(\w+)"', path.read_text())}
    return codes


def close_codes() -> set[tuple[int, str]]:
    """(code, reason) of every close of the live socket (its route, server/live.py and the socket's
    state machine, server/live_machine.py, whose closes are ``Close(code, reason)``)."""
    found: set[tuple[int, str]] = set()
    for path in (SERVER / "routes/sync.py", SERVER / "live.py", SERVER / "live_machine.py"):
        found |= {(int(c), r) for c, r in re.findall(r'[cC]lose\((\d{4}),\s*"(\w+)"\)', path.read_text())}
    return found


# --- the comparisons ------------------------------------------------------------------------


def event_problems(text: str, payload_of: dict[str, str], roles: dict[str, str], shown: dict[str, list[str]]) -> list[str]:
    problems = []
    documented: dict[str, str] = {}
    for types, payload, effect in table(text, ["type", "payload", "effect on state"]):
        model = payload.split()[0] if payload else ""
        role = re.search(r"role `(\w+)`", payload)
        for kind in re.findall(r"`(\w+)`", types):
            if kind in documented:
                problems.append(f"{kind} is documented twice")
            documented[kind] = model
            if kind not in payload_of:
                problems.append(f"{kind} is documented but is no EventType")
            elif model != payload_of[kind]:
                problems.append(f"{kind}'s payload is {payload_of[kind]}, documented as {model!r}")
            if (role.group(1) if role else None) != roles.get(kind):
                problems.append(f"{kind}'s message role is {roles.get(kind)}, documented as {role and role.group(1)}")
            if not effect:
                problems.append(f"{kind} has no effect documented")
        braces = re.search(r"\{([^}]*)\}", payload)
        if braces and sorted(f.strip().rstrip("?") for f in braces.group(1).split(",")) != sorted(shown.get(model, [])):
            problems.append(f"the payload {payload} is not {model}'s fields {shown.get(model)}")
    problems += [f"{kind} (payload {model}) is not in the events table" for kind, model in payload_of.items()
                 if kind not in documented]
    return problems


def shape_problems(text: str, expected: dict[str, list[str]]) -> list[str]:
    problems = []
    shown = shapes(text)
    for name, fields in expected.items():
        if name not in shown:
            problems.append(f"{name} {{{', '.join(fields)}}} is not shown")
            continue
        if missing := [f for f in fields if f not in shown[name]]:
            problems.append(f"{name}'s fields {missing} are not shown")
        if extra := [f for f in shown[name] if f not in fields]:
            problems.append(f"{name} is shown with {extra}, which it does not have")
    problems += [f"{name} is shown but is no wire shape" for name in shown if name not in expected]
    return problems


def literal_problems(text: str, expected: dict[tuple[str, str], tuple[str, ...]]) -> list[str]:
    shown = values(text)
    problems = [f"{shape}.{name} is {list(allowed)}, documented as {shown.get((shape, name))}"
                for (shape, name), allowed in expected.items() if shown.get((shape, name)) != list(allowed)]
    return problems + [f"{shape}.{name}'s values are documented but not checked" for shape, name in shown
                       if (shape, name) not in expected]


def error_problems(text: str, expected: set[tuple[int, str]], described: set[int]) -> list[str]:
    documented = []
    for status, code, when in table(text, ["HTTP", "`error`", "when"]):
        documented.append((int(status), code.strip("`")))
        if not when:
            documented.append((0, f"{code} has no 'when'"))
    problems = [f"{code} ({status}) is documented twice" for status, code in set(documented) if documented.count((status, code)) > 1]
    problems += [f"{code} ({status}) is not documented" for status, code in sorted(expected - set(documented))]
    problems += [f"{code} ({status}) is documented but the server has no such error" for status, code in sorted(set(documented) - expected)]
    problems += [f"/openapi.json describes a {status} the table lacks" for status in sorted(described - {s for s, _ in documented})]
    return problems


def close_problems(text: str, expected: set[tuple[int, str]]) -> list[str]:
    documented = {(int(code), reason.strip("`")) for code, reason, _ in table(text, ["close code", "reason", "when"])}
    return [f"the socket closes with {c} {r}, not documented" for c, r in sorted(expected - documented)] + [
        f"{c} {r} is documented but the socket never closes so" for c, r in sorted(documented - expected)
    ]


LITERALS = {
    ("Message", "role"): get_args(models.Role),
    ("Message", "status"): get_args(models.Status),
    ("Message", "finishReason"): get_args(models.FinishReason),
    ("EventResult", "status"): get_args(models.EventResult.model_fields["status"].annotation),
}


def section(text: str, heading: str) -> str:
    """The text under ``### heading`` up to the next heading."""
    match = re.search(rf"^#+ {re.escape(heading)}\n(.*?)(?=^#)", text, re.S | re.M)
    assert match is not None, heading
    return match.group(1)


def limit_problems(text: str) -> list[str]:
    """The page sizes the document names are the routes' (server/openapi.py's constants)."""
    problems = []
    for heading, most in (("GET /sync/state", openapi.MAX_STATE_LIMIT), ("GET /sync/updates", openapi.MAX_LIMIT)):
        words = " ".join(section(text, heading).split())
        if f"default {openapi.DEFAULT_LIMIT}, at most {most:,}" not in words:
            problems.append(f"{heading}: limit is {openapi.DEFAULT_LIMIT} by default, at most {most:,}")
    return problems


def blob_headers() -> set[str]:
    """The tus (and our tus-style) headers /blobs reads or answers with (server/routes/blobs.py)."""
    return set(re.findall(r'"((?:Tus|Upload)-[A-Za-z-]+)"', (SERVER / "routes/blobs.py").read_text()))


def header_problems(text: str, expected: set[str]) -> list[str]:
    """Each of them is named in "Attachments"."""
    named = set(re.findall(r"`((?:Tus|Upload)-[A-Za-z-]+)", section(text, "Attachments")))
    return [f"the header {name} is not named in Attachments" for name in sorted(expected - named)]


def all_problems(text: str) -> list[str]:
    expected = model_shapes()
    return [
        *event_problems(text, payloads(), required_roles(), expected),
        *shape_problems(text, expected),
        *literal_problems(text, LITERALS),
        *error_problems(text, error_codes(), set(openapi.ERRORS)),
        *close_problems(text, close_codes()),
        *limit_problems(text),
        *header_problems(text, blob_headers()),
    ]


# --- the tests ------------------------------------------------------------------------------


def test_the_document_says_what_the_code_has() -> None:
    assert all_problems(TEXT) == []


def test_the_code_side_is_read_whole() -> None:
    """What the comparisons read of the code is what it has (a reader that found nothing would
    compare nothing with nothing)."""
    assert len(payloads()) == len(models.EventType) == 17
    assert {"SettingsUpdated", "PresetDeleted", "AssistantRunContinued", "QueuedMessageSent"} <= set(payloads())
    shown = model_shapes()
    assert shown["Message"][:3] == ["id", "chatId", "role"] and "lastSeq" in shown["Chat"]
    assert {"finishReason", "usage", "presetId", "instructions"} <= set(shown["Message"])
    assert {"LoggedEvent", "RunSummary", "DeltaFrame", "StateResponse", "Assistant"} <= set(shown)
    assert {"Preset", "Settings", "TokenUsage", "RunContinue", "PresetRef", "QueuedSend"} <= set(shown)
    assert {"settings", "presets"} <= set(shown["Snapshot"])
    codes = error_codes()
    assert {(409, "username_taken"), (503, "unavailable"), (400, "bad_request"), (500, "error")} <= codes
    assert {(4410, "cursor_expired"), (4401, "unauthorized"), (4403, "forbidden"), (1001, "going_away")} <= close_codes()
    assert {"Tus-Max-Size", "Upload-Offset", "Upload-Account-Free"} <= blob_headers()


def test_a_model_that_gains_a_field_fails() -> None:
    expected = model_shapes()
    grown = {**expected, "Chat": [*expected["Chat"], "pinned"]}
    assert shape_problems(TEXT, grown) == ["Chat's fields ['pinned'] are not shown"]
    assert shape_problems(TEXT, {**expected, "Reaction": ["id", "emoji"]}) == ["Reaction {id, emoji} is not shown"]


def test_a_field_or_shape_not_in_the_code_fails() -> None:
    doctored = TEXT.replace("RunCancel   {runId, messageId}", "RunCancel   {runId, messageId, reason}")
    assert shape_problems(doctored, model_shapes()) == ["RunCancel is shown with ['reason'], which it does not have"]
    assert "Draft is shown but is no wire shape" in shape_problems(TEXT + "\n```\nDraft {id}\n```\n", model_shapes())


def test_an_event_type_not_documented_fails() -> None:
    assert event_problems(TEXT, {**payloads(), "ChatPinned": "ChatRef"}, required_roles(), model_shapes()) == [
        "ChatPinned (payload ChatRef) is not in the events table"
    ]
    row = "| `ToolCallFailed` | Message (role `error`) | upsert message |\n"
    assert row in TEXT
    problems = event_problems(TEXT.replace(row, ""), payloads(), required_roles(), model_shapes())
    assert problems == ["ToolCallFailed (payload Message) is not in the events table"]


def test_a_new_event_or_field_left_out_of_the_document_fails() -> None:
    """The events of settings, presets, Continue and queued follow-ups, and the newer fields."""
    row = next(line for line in TEXT.splitlines() if line.startswith("| `QueuedMessageSent` |"))
    assert event_problems(TEXT.replace(row + "\n", ""), payloads(), required_roles(), model_shapes()) == [
        "QueuedMessageSent (payload QueuedSend) is not in the events table"
    ]
    doctored = TEXT.replace("RunContinue {runId, chatId, messageId, assistantId}", "RunContinue {runId, chatId, messageId}")
    assert shape_problems(doctored, model_shapes()) == ["RunContinue's fields ['assistantId'] are not shown"]
    doctored = TEXT.replace("presetId?, instructions?, finishReason?, usage?}", "presetId?, instructions?, usage?}")
    assert shape_problems(doctored, model_shapes()) == ["Message's fields ['finishReason'] are not shown"]
    doctored = TEXT.replace("finishReason : stop | length | cancelled | failed", "finishReason : stop | length")
    assert literal_problems(doctored, LITERALS) == [
        "Message.finishReason is ['stop', 'length', 'cancelled', 'failed'], documented as ['stop', 'length']"
    ]


def test_a_wrong_payload_or_role_fails() -> None:
    doctored = TEXT.replace("| `MessageDeleted` | MessageRef `{id, chatId}`", "| `MessageDeleted` | MessageRef `{id}`")
    assert event_problems(doctored, payloads(), required_roles(), model_shapes()) == [
        "the payload MessageRef `{id}` is not MessageRef's fields ['id', 'chatId']"
    ]
    doctored = TEXT.replace("| `ChatDeleted` | ChatRef", "| `ChatDeleted` | Chat")
    assert "ChatDeleted's payload is ChatRef, documented as 'Chat'" in event_problems(
        doctored, payloads(), required_roles(), model_shapes()
    )
    doctored = TEXT.replace("Message (role `tool_result`)", "Message (role `tool_call`)")
    assert event_problems(doctored, payloads(), required_roles(), model_shapes()) == [
        "ToolCallSucceeded's message role is tool_result, documented as tool_call"
    ]


def test_a_role_or_status_not_documented_fails() -> None:
    role = ("Message", "role")
    assert literal_problems(TEXT, {**LITERALS, role: (*LITERALS[role], "system")}) == [
        "Message.role is ['user', 'assistant', 'tool_call', 'tool_result', 'error', 'system'], "
        "documented as ['user', 'assistant', 'tool_call', 'tool_result', 'error']"
    ]
    doctored = TEXT.replace("| failed_upstream | cancelled", "| failed_upstream")
    assert literal_problems(doctored, LITERALS) == [
        "Message.status is ['completed', 'queued', 'streaming', 'failed_upstream', 'cancelled'], "
        "documented as ['completed', 'queued', 'streaming', 'failed_upstream']"
    ]
    doctored = TEXT.replace("  status : accepted | duplicate | rejected", "  status : accepted | rejected")
    assert literal_problems(doctored, LITERALS) == [
        "EventResult.status is ['accepted', 'duplicate', 'rejected'], documented as ['accepted', 'rejected']"
    ]


def test_an_error_code_missing_or_invented_fails() -> None:
    row = next(line for line in TEXT.splitlines() if line.startswith("| 503 | `unavailable`"))
    assert error_problems(TEXT.replace(row + "\n", ""), error_codes(), set(openapi.ERRORS)) == [
        "unavailable (503) is not documented"
    ]
    invented = TEXT.replace(row, row + "\n| 418 | `teapot` | never |")
    assert error_problems(invented, error_codes(), set(openapi.ERRORS)) == [
        "teapot (418) is documented but the server has no such error"
    ]
    assert error_problems(TEXT, error_codes() | {(402, "payment_required")}, set()) == [
        "payment_required (402) is not documented"
    ]


def test_a_close_code_missing_or_invented_fails() -> None:
    row = next(line for line in TEXT.splitlines() if line.startswith("| 4403 |"))
    assert close_problems(TEXT.replace(row + "\n", ""), close_codes()) == [
        "the socket closes with 4403 forbidden, not documented"
    ]
    assert close_problems(TEXT.replace(row, row + "\n| 4429 | `rate_limited` | never |"), close_codes()) == [
        "4429 rate_limited is documented but the socket never closes so"
    ]


def test_a_page_size_not_the_code_s_fails() -> None:
    doctored = TEXT.replace("(default 500, at most\n  1,000)", "(default 500, at most\n  2,000)")
    assert limit_problems(doctored) == ["GET /sync/updates: limit is 500 by default, at most 1,000"]


def test_a_blob_header_not_named_fails() -> None:
    doctored = TEXT.replace("also `Upload-Account-Free`:", "also a figure:")
    assert doctored != TEXT
    assert header_problems(doctored, blob_headers()) == ["the header Upload-Account-Free is not named in Attachments"]
    assert header_problems(TEXT, blob_headers() | {"Upload-Expires"}) == ["the header Upload-Expires is not named in Attachments"]


# --- citations ------------------------------------------------------------------------------

OLD_DOCS = re.compile("PROTOCOL" + r"\.md|" + "ARCHITECTURE" + r"\.md")
CITATION = re.compile(r'docs/protocol\.md, "([^"]+)"')


def our_sources() -> list[Path]:
    roots = ["server", "shared", "webapp", "tests", "scripts"]
    files = [p for root in roots for p in (ROOT / root).rglob("*.py")]
    return files + [p for p in (ROOT / "static").glob("*.js")]


def test_code_cites_the_document_in_the_repository() -> None:
    """No citation of the design documents outside the repository, and every section cited is a
    heading of docs/protocol.md."""
    sections = headings(TEXT)
    cited = 0
    for path in our_sources():
        text = path.read_text()
        assert not OLD_DOCS.search(text), path
        for section in CITATION.findall(text):
            assert section in sections, f"{path} cites {section!r}, not a section of docs/protocol.md"
            cited += 1
    assert cited >= 5  # (the modules of the API cite their sections)
