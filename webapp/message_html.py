"""The HTML of one message of the open chat (webapp/pane.py keys and patches them): its content
(Markdown, webapp/markdown.py), its state in words (sent, pending, refused, a reply waiting,
writing, stopped or failed, with Stop, Retry, Edit and resend, Discard), its tools, its branches
and what its answer cost. Pure: values in, strings out."""

from __future__ import annotations

import json
from dataclasses import dataclass
from html import escape

from shared.models import UNFINISHED, Message, RunSummary
from shared.thread import Step
from webapp import markdown
from webapp.outbox import Delivery, Rejection
from webapp.overlay import is_pending
from webapp.ui import icon_button

# What a reply says about itself, by status (a screen reader reads the same text).
REPLY_STATE = {
    "queued": "Waiting for the assistant…",
    "streaming": "Writing…",
    "completed": "",
    "failed_upstream": "The assistant could not answer.",
    "cancelled": "Stopped.",
}
CUT = "Cut at the length limit."  # an answer that ended by ``length``
QUEUED = "Queued: sent when the answer ends"  # a follow-up written while an answer is written
QUEUE_PAUSED = "Queued: waiting"  # (the answer before it was stopped or failed: Send now, below, sends it)
# What a change not yet on the server says, by its outbox status.
DELIVERY_STATE = {
    "saving": "Saving on this device…",  # (committed, not durable yet: for a moment, if ever shown)
    "pending": "Saved on this device, not sent yet",
    "sending": "Sending…",
    "failed": "Not sent yet",
}
DONE = {"user": "Sent.", "assistant": "Answer complete."}


@dataclass(frozen=True)
class Item:
    """Everything one message's HTML depends on."""

    message: Message
    step: Step | None = None  # None: not on the tree (a rejected change)
    content_html: str | None = None  # its content's HTML, when the caller has it (a stream's)
    delivery: Delivery | None = None
    run: RunSummary | None = None
    rejection: Rejection | None = None  # the server refused it (then it is not in the tables)
    # Why a failed reply failed, as the error message answering it says (a reply written on a
    # device: shared/assistants.py, ModelAssistant); a server's run says it in ``run``.
    reason: str | None = None
    files_html: str = ""  # its attachments (webapp/files.py: message_files)
    paused: bool = False  # a queued follow-up whose queue waits (a Stop or a failure before it)
    expanded: bool = False  # its "Instructions used" are shown


def failure_reasons(rows: dict[str, Message]) -> dict[str, Message]:
    """Of these messages (by id), the errors that say why a reply failed, by the reply's id: an
    ``error`` answering a ``failed_upstream`` reply (shared/assistants.py, failure_message). The
    reply says it; the error is not drawn on its own."""
    found: dict[str, Message] = {}
    for row in rows.values():
        reply = rows.get(row.parent_id) if row.role == "error" and row.parent_id else None
        if reply is not None and reply.role == "assistant" and reply.status == "failed_upstream":
            found[reply.id] = row
    return found


def item_key(message_id: str) -> str:
    return f"m-{message_id}"


def rejection_key(rejection: Rejection) -> str:
    return f"r-{rejection.event.event_id}"


def message_item(item: Item) -> str:
    message = item.message
    state, state_text, actions = _state(item)
    classes = ["message", message.role]
    if is_pending(message) or item.rejection is not None:
        classes.append("pending")
    if message.role == "assistant":
        classes.append(message.status)
    key = rejection_key(item.rejection) if item.rejection is not None else item_key(message.id)
    if state_text or actions:
        state_html = f'<p class="state">{escape(state_text)} {actions}</p>'
    else:  # done: said to a screen reader only
        state_html = f'<p class="state sr-only">{DONE.get(message.role, "")}</p>'
    return (
        f'<li class="{" ".join(classes)}" id="{key}" data-state="{state}">'
        f'<div class="bubble">{item.files_html}<div class="content">{_content(item)}</div></div>'
        f"{state_html}"
        f'<div class="meta">{_branches(item.step)}{_tools(item, state)}{_usage(message, item.run)}</div>'
        f"{_instructions(item)}</li>"
    )


def _instructions(item: Item) -> str:
    """Under an answer: **Instructions used** (the system message it was given), shown when asked."""
    message = item.message
    if message.role != "assistant" or not message.instructions or item.rejection is not None:
        return ""
    expanded = "true" if item.expanded else "false"
    button = (
        f'<button type="button" class="link used" data-action="show-instructions" data-id="{message.id}" '
        f'aria-expanded="{expanded}" aria-controls="i-{message.id}">Instructions used</button>'
    )
    shown = f'<pre class="instructions" id="i-{message.id}">{escape(message.instructions)}</pre>' if item.expanded else ""
    return f'<div class="used-box">{button}{shown}</div>'


def _content(item: Item) -> str:
    message = item.message
    if item.content_html is not None:
        return item.content_html
    if message.role in ("user", "assistant"):
        return markdown.render(message.content)
    text = _tool_call(message.content) if message.role == "tool_call" else message.content
    return f'<div class="plain">{escape(text)}</div>'


def _state(item: Item) -> tuple[str, str, str]:
    """(data-state, the sentence shown, the buttons that act on it)."""
    message = item.message
    if item.rejection is not None:
        event_id = item.rejection.event.event_id
        resend = _text_button("resend", event_id, "Edit and resend") if message.role == "user" else ""
        return "rejected", f"Not accepted: {item.rejection.error}", resend + _text_button("discard", event_id, "Discard")
    if message.is_queued_follow_up:
        actions = _text_button("edit-message", message.id, "Edit") + _text_button("remove-message", message.id, "Remove")
        text = QUEUE_PAUSED if item.paused else QUEUED
        if item.delivery is not None:  # (not on the server yet: said, as for any message)
            text += f" · {DELIVERY_STATE[item.delivery.status]}"
        return "queued", text, actions
    if message.role == "assistant" and message.status == "completed" and message.finish_reason == "length":
        return "cut", CUT, _text_button("continue-run", message.id, "Continue")
    if message.role == "assistant" and message.status != "completed":
        text = REPLY_STATE[message.status]
        reason = item.run.error if item.run is not None and item.run.error else item.reason
        if message.status == "failed_upstream" and reason:
            text = f"The assistant could not answer: {reason.rstrip('.')}."
        if message.status == "queued" and item.delivery is not None:  # (its request is not on the server yet)
            saving = item.delivery.status == "saving"
            text = DELIVERY_STATE["saving"] if saving else "Saved on this device: the assistant is asked once the server can be reached."
        if message.status in UNFINISHED:
            return message.status, text, _text_button("stop-run", message.id, "Stop")
        go_on = _text_button("continue-run", message.id, "Continue") if message.status == "cancelled" and message.assistant_id else ""
        return message.status, text, go_on + _text_button("retry-run", message.id, "Retry")
    if item.delivery is not None:
        text = DELIVERY_STATE[item.delivery.status]
        if item.delivery.status == "failed":
            reason = f": {item.delivery.error}" if item.delivery.error else ""
            text = f"{text}{reason}. It will be sent again."
        return item.delivery.status, text, ""
    return "completed", "", ""


def _text_button(action: str, message_id: str, label: str) -> str:
    return f'<button type="button" class="act" data-action="{action}" data-id="{message_id}">{label}</button>'


def _tools(item: Item, state: str) -> str:
    if item.rejection is not None:
        return ""
    message = item.message
    buttons = [icon_button("copy", message.id, "Copy", "copy")]
    if message.is_queued_follow_up:
        return ""  # (its Edit and Remove are in words, beside "Queued")
    if message.role == "user":
        buttons.append(icon_button("edit-message", message.id, "Edit", "edit"))
        remove = "Withdraw" if state in ("saving", "pending") else "Delete"
        buttons.append(icon_button("remove-message", message.id, remove, "delete"))
    elif message.role == "assistant" and message.status == "completed" and message.assistant_id:
        buttons.append(icon_button("regenerate", message.id, "Regenerate", "regenerate"))
    return f'<span class="tools">{"".join(buttons)}</span>'


def _branches(step: Step | None) -> str:
    if step is None or len(step.siblings) < 2:
        return ""
    index, count = step.index, len(step.siblings)
    previous = step.siblings[index - 1] if index > 0 else ""
    following = step.siblings[index + 1] if index + 1 < count else ""

    def arrow(target: str, label: str, icon: str) -> str:
        disabled = "" if target else " disabled"
        return (
            f'<button type="button" class="tool" data-action="show-branch" data-fork="{step.fork}" data-id="{target}" '
            f'aria-label="{label}" title="{label}"{disabled}><svg aria-hidden="true"><use href="#i-{icon}"></use></svg></button>'
        )

    return (
        f'<span class="branches">{arrow(previous, "Previous branch", "left")}'
        f'<span class="count">{index + 1} / {count}</span>{arrow(following, "Next branch", "right")}</span>'
    )


def _usage(message: Message, info: RunSummary | None) -> str:
    """What the answer cost: from its final event (every device has it with no request), else, for
    an answer older than that field, as GET /runs said."""
    if message.usage is not None:
        used = message.usage
        if used.prompt_tokens == 0 and message.finish_reason in ("cancelled", "failed"):  # (ended before the service said)
            return f'<span class="usage">about {used.completion_tokens} tokens (counted: the service did not say)</span>'
        about = "about " if used.estimated else ""
        estimated = " (estimated)" if used.estimated else ""
        return f'<span class="usage">{about}{used.prompt_tokens} + {used.completion_tokens} tokens{estimated}</span>'
    if info is None or info.completion_tokens is None:
        return ""
    if info.usage_reported and info.usage_estimated:  # (the demo model's: words, counted)
        text = f"about {info.prompt_tokens} + {info.completion_tokens} tokens (estimated)"
    elif info.usage_reported:
        text = f"{info.prompt_tokens} + {info.completion_tokens} tokens"
    else:
        text = f"about {info.completion_tokens} tokens (counted here: the service did not say)"
    return f'<span class="usage">{escape(text)}</span>'


def _tool_call(content: str) -> str:
    try:
        call = json.loads(content)
        return f"Calls the {call['tool']}: {call['input']}"
    except (ValueError, KeyError, TypeError):
        return content


QUEUE_KEY = "queue"


def queue_bar(count: int) -> str:
    """Under a chat's queued follow-ups, while the queue waits (the answer before them was stopped
    or failed): how many, **Send now** (the first) and **Clear** (all)."""
    return (
        f'<li class="queue-bar" id="{QUEUE_KEY}" role="status"><span>{count} queued — </span>'
        '<button type="button" class="act" data-action="send-queued-now">Send now</button>'
        '<button type="button" class="act" data-action="clear-queue">Clear</button></li>'
    )
