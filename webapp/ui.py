"""HTML for each part of the page, from rows of the local database. Pure: values in, strings out.

Interactive elements carry ``data-action``; the page's one delegated listener (static/app.js)
hands the action and its data to ``webapp.app.Client.dispatch`` (Copy and Jump to latest are the
page's own). The layout is drawn once per sign-in; after that only its regions change, so the
composer, and what is typed in it, is never replaced.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, field
from html import escape

from shared.models import UNFINISHED, Chat, Message, RunSummary
from shared.thread import Step
from webapp import markdown
from webapp.outbox import Delivery, Rejection
from webapp.overlay import is_pending
from webapp.search import Hit
from webapp.sync import Status

STATUS_TEXT = {
    Status.CONNECTING: "Connecting…",
    Status.ONLINE: "Online",
    Status.OFFLINE: "Offline: changes are saved here and sent when the server is back",
    Status.SIGNED_OUT: "Signed out: sign in again to sync",
}


NOT_SIGNED_IN = "Not signed in"


def status_text(status: Status, progress: tuple[int, int | None] | None = None) -> str:
    """The connection state in words; while a snapshot downloads, how far it is."""
    if progress is None:
        return STATUS_TEXT[status]
    done, total = progress
    return f"Syncing… {done:,} of {max(total, done):,}" if total is not None else f"Syncing… {done:,}"


def auth_form(error: str | None = None, note: str | None = None) -> str:
    message = f'<p class="error" role="alert">{escape(error)}</p>' if error else ""
    if note:
        message += f'<p class="note" role="status">{escape(note)}</p>'
    return f"""
<form class="auth" data-action="signin">
  <h1>Sign in</h1>
  {message}
  <label>Username <input name="username" autocomplete="username" required></label>
  <label>Password <input name="password" type="password" autocomplete="current-password" required minlength="8"></label>
  <div class="row">
    <button type="submit" name="mode" value="signin">Sign in</button>
    <button type="submit" name="mode" value="signup" class="secondary">Create account</button>
  </div>
</form>"""


def session_ended(username: str, error: str | None = None) -> str:
    """Beside the chats, which stay on screen and writable, when the server ended the session."""
    problem = f'<p class="error" role="alert">{escape(error)}</p>' if error else ""
    return f"""
<form class="session-form" data-action="signin" aria-labelledby="session-text">
  <p id="session-text" role="status">Your session has ended. Your chats stay here, and what you write is
  sent once you sign in again.</p>{problem}
  <input name="username" aria-label="Username" placeholder="Username" autocomplete="username" value="{escape(username)}" required>
  <input name="password" type="password" aria-label="Password" placeholder="Password" autocomplete="current-password"
    required minlength="8">
  <button type="submit" name="mode" value="signin">Sign in</button>
</form>"""


def replace_account(previous: str, username: str, unsent: int) -> str:
    changes = f"{unsent} change{'s' if unsent != 1 else ''}"
    return f"""
<div class="confirm-box" role="alertdialog" aria-labelledby="replace-text">
  <p id="replace-text">{escape(previous)} has {changes} on this device that did not reach the server yet.
  Signing in as {escape(username)} removes them and {escape(previous)}'s chats from this device.</p>
  <div class="row">
    <button type="button" class="danger" data-action="confirm-replace-account">Remove them and sign in as {escape(username)}</button>
    <button type="button" class="secondary" data-action="cancel-replace-account">Cancel</button>
  </div>
</div>"""


def sign_out(username: str, unsent: int) -> str:
    warning = (
        f'<p class="error">{unsent} change{"s" if unsent != 1 else ""} did not reach the server yet: kept on this '
        "device they are sent when you sign in again; removed, they are lost.</p>"
        if unsent
        else ""
    )
    return f"""
<form class="confirm-box" role="dialog" aria-labelledby="signout-text" data-action="confirm-signout">
  <p id="signout-text">Sign out {escape(username)}? The session ends on the server.</p>{warning}
  <label class="check"><input type="checkbox" name="remove"> Also remove this device's copy of the chats</label>
  <div class="row">
    <button type="submit">Sign out</button>
    <button type="button" class="secondary" data-action="cancel-signout">Cancel</button>
  </div>
</form>"""


def layout(username: str, device_url: str = "", device_model: str = "") -> str:
    return f"""
<aside class="sidebar" id="sidebar">
  <button type="button" class="new-chat" data-action="new-chat">New chat</button>
  <input type="search" id="search" class="search" aria-label="Search" placeholder="Search (Ctrl+K)" autocomplete="off" data-search>
  <nav id="chat-list" aria-label="Chats"></nav>
  <details class="settings">
    <summary>Your data</summary>
    <p>Everything is kept on this device. Export works offline; an import is sent to the server
    like any change (importing a file twice changes nothing).</p>
    <button type="button" data-action="export-all">Export everything (JSON)</button>
    <label class="file">Import (JSON) <input type="file" accept="application/json,.json" data-import></label>
    <p id="data-note" class="note" role="status"></p>
  </details>
  <details class="settings">
    <summary>Model on this device</summary>
    <form data-action="device-model">
      <p>An OpenAI-compatible server on this computer (Ollama, LM Studio, llama.cpp), called from
      this page. It must allow this page's origin (CORS).</p>
      <label>Base URL <input name="url" placeholder="http://127.0.0.1:11434/v1" value="{escape(device_url)}"></label>
      <label>Model <input name="model" placeholder="llama3.2" value="{escape(device_model)}"></label>
      <button type="submit">Save</button>
    </form>
  </details>
  <div class="who">{escape(username)} · <button type="button" class="link" data-action="signout">Sign out</button></div>
</aside>
<div class="backdrop" data-action="toggle-chats" aria-hidden="true"></div>
<section class="chat" id="chat" aria-labelledby="chat-title">
  <div class="session" id="session"></div>
  <header class="chat-head" id="chat-head"></header>
  <div class="scroller" id="scroller">
    <div class="thread">
      <button type="button" class="earlier" id="earlier" data-action="show-earlier" hidden>Show earlier messages</button>
      <ol class="messages" id="messages" aria-label="Messages"></ol>
      <div class="start">
        <p class="start-title">What’s on your mind?</p>
        <p>What you write is kept on this device first: it works offline, and is sent as soon as the
        server can be reached. Choose who answers beside Send.</p>
      </div>
    </div>
  </div>
  <div class="below">
    <button type="button" class="jump" id="jump" hidden>Jump to latest</button>
    <p class="editing" id="composer-note" hidden></p>
    <form class="composer" data-action="send" data-reset>
      <textarea name="text" id="composer-text" rows="1" placeholder="Write a message" aria-label="Message"
        required data-draft data-chat=""></textarea>
      <select name="assistant" id="assistant-choice" aria-label="Answered by"></select>
      <button type="submit" class="send">Send</button>
    </form>
  </div>
</section>"""


@dataclass(frozen=True)
class Marks:
    """What the chat list says about chats besides their titles."""

    drafted: Collection[str] = ()
    running: Collection[str] = ()  # a reply is being written
    unsent: dict[str, int] = field(default_factory=dict)  # changes waiting to be sent, by chat


NO_MARKS = Marks()


def chat_list(groups: list[tuple[str, list[Chat]]], selected: str | None, marks: Marks = NO_MARKS) -> str:
    """The chats under the headings of their groups (webapp/chats.py: by the day of their latest
    activity), each group in the order given."""
    if not groups:
        return '<p class="empty">No chats yet.</p>'
    items = []
    for heading, chats in groups:
        items.append(f'<h3 class="group">{escape(heading)}</h3>')
        for chat in chats:
            classes = ["chat-item"]
            if chat.id == selected:
                classes.append("selected")
            if is_pending(chat):
                classes.append("pending")
            current = ' aria-current="true"' if chat.id == selected else ""
            items.append(
                f'<button type="button" class="{" ".join(classes)}" id="c-{chat.id}" data-action="select-chat" '
                f'data-id="{chat.id}"{current}><span class="title">{escape(chat.title)}</span>{_marks(chat.id, marks)}</button>'
            )
    return "\n".join(items)


def _marks(chat_id: str, marks: Marks) -> str:
    found = []
    if chat_id in marks.running:
        found.append('<span class="marker running" title="Answering…"><span class="sr-only">Answering…</span></span>')
    if marks.unsent.get(chat_id):
        found.append(f'<span class="marker unsent">{marks.unsent[chat_id]} unsent</span>')
    if chat_id in marks.drafted:
        found.append('<span class="marker">Draft</span>')
    return f'<span class="markers">{"".join(found)}</span>' if found else ""


def search_results(query: str, hits: list[Hit]) -> str:
    if not hits:
        return f'<p class="empty" role="status">Nothing found for “{escape(query)}”.</p>'
    items = []
    for hit in hits:
        target = f' data-message="{hit.message_id}"' if hit.message_id else ""
        what = "Title" if hit.message_id is None else escape(hit.chat_title)
        items.append(
            f'<li><button type="button" class="hit" data-action="open-hit" data-chat="{hit.chat_id}"{target}>'
            f'<span class="hit-chat"><span class="hit-title">{what}</span><time datetime="{hit.at}">{escape(hit.at[:10])}</time></span>'
            f'<span class="snippet">{hit.snippet_html}</span></button></li>'
        )
    count = f"{len(hits)} result{'s' if len(hits) != 1 else ''}"
    return f'<p class="found" role="status">{count}</p><ol class="hits" aria-label="Search results">{"".join(items)}</ol>'


def chat_head(chat: Chat | None, renaming: bool = False, deleting: int | None = None) -> str:
    """The open chat's title and what can be done with the chat: rename it (inline), export it,
    delete it (``deleting``: its message count while the user is asked to confirm)."""
    bar = (
        '<button type="button" class="tool chats-toggle" data-action="toggle-chats" aria-label="Chats" aria-controls="sidebar">'
        '<svg aria-hidden="true"><use href="#i-menu"></use></svg></button>'
    )
    if chat is None:
        return f'{bar}<h2 class="chat-title" id="chat-title">New chat</h2>'
    if renaming:
        return (
            f'{bar}<form class="rename" data-action="save-title"><input type="hidden" name="id" value="{chat.id}">'
            f'<input name="title" id="rename-title" aria-label="Chat title" value="{escape(chat.title)}" maxlength="200" required>'
            '<button type="submit">Save</button>'
            '<button type="button" class="secondary" data-action="cancel-rename">Cancel</button></form>'
        )
    if deleting is not None:
        what = f"{deleting} message{'s' if deleting != 1 else ''}"
        return (
            f'{bar}<div class="confirm" role="alertdialog" aria-labelledby="confirm-text">'
            f'<p id="confirm-text">Delete “{escape(chat.title)}” and its {what} on every device?</p>'
            f'<button type="button" class="danger" data-action="confirm-delete-chat" data-id="{chat.id}">Delete chat</button>'
            '<button type="button" class="secondary" data-action="cancel-delete-chat">Cancel</button></div>'
        )
    tools = "".join(
        _icon_button(action, chat.id, label, icon)
        for action, label, icon in (
            ("rename-chat", "Rename", "edit"), ("export-chat", "Export as Markdown", "download"),
            ("delete-chat", "Delete chat", "delete"),
        )
    )  # fmt: skip
    return f'{bar}<h2 class="chat-title" id="chat-title">{escape(chat.title)}</h2><span class="chat-tools">{tools}</span>'


def assistant_options(assistants: list[tuple[str, str]], chosen: str) -> str:
    options = [("", "No answer"), *assistants]
    if all(value != chosen for value, _ in options):
        options.append((chosen, chosen))  # chosen earlier, not listed by the server now
    return "".join(
        f'<option value="{escape(value)}"{" selected" if value == chosen else ""}>{escape(name)}</option>'
        for value, name in options
    )


def editing_note(branching: bool, correcting: bool = False) -> str:
    if correcting:
        what = "Correcting a message the server did not accept: Send sends it again"
    elif branching:
        what = "Editing a message: Send makes a new branch beside it and asks again"
    else:
        what = "Editing a message: Send saves the change"
    return f'{what}. <button type="button" class="link" data-action="cancel-edit">Cancel</button>'



# --- messages --------------------------------------------------------------------------------

# What a reply says about itself, by status (a screen reader reads the same text).
REPLY_STATE = {
    "queued": "Waiting for the assistant…",
    "streaming": "Writing…",
    "completed": "",
    "failed_upstream": "The assistant could not answer.",
    "cancelled": "Stopped.",
}
# What a change not yet on the server says, by its outbox status.
DELIVERY_STATE = {
    "pending": "Saved on this device, not sent yet",
    "sending": "Sending…",
    "failed": "Not sent yet",
}
ENDED = ("completed", "failed_upstream", "cancelled")  # a reply's statuses once its run is over
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
        f'<div class="bubble"><div class="content">{_content(item)}</div></div>'
        f"{state_html}"
        f'<div class="meta">{_branches(item.step)}{_tools(item, state)}{_usage(item.run)}</div></li>'
    )


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
    if message.role == "assistant" and message.status != "completed":
        text = REPLY_STATE[message.status]
        if message.status == "failed_upstream" and item.run is not None and item.run.error:
            text = f"The assistant could not answer: {item.run.error}."
        if message.status == "queued" and item.delivery is not None:
            text = "Saved on this device: the assistant is asked once the server can be reached."
        if message.status in UNFINISHED:
            return message.status, text, _text_button("stop-run", message.id, "Stop")
        return message.status, text, _text_button("retry-run", message.id, "Retry")
    if item.delivery is not None:
        text = DELIVERY_STATE[item.delivery.status]
        if item.delivery.status == "failed":
            reason = f": {item.delivery.error}" if item.delivery.error else ""
            text = f"{text}{reason}. It will be sent again."
        return item.delivery.status, text, ""
    return "completed", "", ""


def _text_button(action: str, message_id: str, label: str) -> str:
    return f'<button type="button" class="act" data-action="{action}" data-id="{message_id}">{label}</button>'


def _icon_button(action: str, message_id: str, label: str, icon: str) -> str:
    return (
        f'<button type="button" class="tool" data-action="{action}" data-id="{message_id}" '
        f'aria-label="{label}" title="{label}"><svg aria-hidden="true"><use href="#i-{icon}"></use></svg></button>'
    )


def _tools(item: Item, state: str) -> str:
    if item.rejection is not None:
        return ""
    message = item.message
    buttons = [_icon_button("copy", message.id, "Copy", "copy")]
    if message.role == "user":
        buttons.append(_icon_button("edit-message", message.id, "Edit", "edit"))
        remove = "Withdraw" if state == "pending" else "Delete"
        buttons.append(_icon_button("remove-message", message.id, remove, "delete"))
    elif message.role == "assistant" and message.status == "completed" and message.assistant_id:
        buttons.append(_icon_button("regenerate", message.id, "Regenerate", "regenerate"))
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


def _usage(info: RunSummary | None) -> str:
    if info is None or info.completion_tokens is None:
        return ""
    if info.usage_reported:
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
