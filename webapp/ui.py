"""HTML for each region of the page, from rows of the local database. Pure: strings in, strings out.

Interactive elements carry ``data-action``; the page's one delegated listener (static/app.js)
hands the action and its data to ``webapp.app.Client.dispatch``.
"""

from __future__ import annotations

import json
from html import escape

from shared.models import Chat, Message
from webapp.store import is_pending
from webapp.sync import Status
from webapp.transport import RunInfo

STATUS_TEXT = {
    Status.CONNECTING: "Connecting…",
    Status.ONLINE: "Online",
    Status.OFFLINE: "Offline: changes are saved here and sent when the server is back",
    Status.SIGNED_OUT: "Signed out: sign in again to sync",
}


def auth_form(error: str | None = None) -> str:
    message = f'<p class="error" role="alert">{escape(error)}</p>' if error else ""
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


def layout(username: str, device_url: str = "", device_model: str = "") -> str:
    return f"""
<aside class="sidebar">
  <button type="button" class="new-chat" data-action="new-chat">New chat</button>
  <nav id="chat-list" aria-label="Chats"></nav>
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
<section class="chat" id="chat"></section>"""


def chat_list(chats: list[Chat], selected: str | None) -> str:
    if not chats:
        return '<p class="empty">No chats yet.</p>'
    items = []
    for chat in chats:
        classes = ["chat-item"]
        if chat.id == selected:
            classes.append("selected")
        if is_pending(chat):
            classes.append("pending")
        items.append(
            f'<button type="button" class="{" ".join(classes)}" data-action="select-chat" '
            f'data-id="{chat.id}">{escape(chat.title)}</button>'
        )
    return "\n".join(items)


def chat_pane(
    chat: Chat | None,
    draft: str = "",
    editing: bool = False,
    assistants: list[tuple[str, str]] | None = None,
    chosen: str = "",
) -> str:
    if chat is None:
        return '<p class="empty">Create a chat to start.</p>'
    notice = (
        '<p class="editing">Editing a message: Send saves the change. '
        '<button type="button" class="link" data-action="cancel-edit">Cancel</button></p>'
        if editing
        else ""
    )
    return f"""
<h2 class="chat-title">{escape(chat.title)}</h2>
<ol id="messages" class="messages" aria-live="polite"></ol>
{notice}
<form class="composer" data-action="send" data-reset>
  <textarea name="text" rows="2" placeholder="Write a message" aria-label="Message" required
    {"" if editing else "data-draft "}data-chat="{chat.id}">{escape(draft)}</textarea>
  {"" if editing else _assistant_choice(assistants or [], chosen)}
  <button type="submit">Send</button>
</form>"""


def _assistant_choice(assistants: list[tuple[str, str]], chosen: str) -> str:
    options = [("", "No answer"), *assistants]
    if all(value != chosen for value, _ in options):
        options.append((chosen, chosen))  # chosen earlier, not listed by the server now
    rendered = "".join(
        f'<option value="{escape(value)}"{" selected" if value == chosen else ""}>{escape(name)}</option>'
        for value, name in options
    )
    return f'<select name="assistant" aria-label="Answered by">{rendered}</select>'


# What an assistant's reply says about itself, by status.
REPLY_NOTE = {
    "queued": "Waiting for the assistant…",
    "streaming": "",
    "completed": "",
    "failed_upstream": "The assistant could not answer.",
    "cancelled": "Stopped.",
}


def _usage(info: RunInfo | None) -> str:
    if info is None or info.completion_tokens is None:
        return ""
    if info.usage_reported:
        return f"{info.prompt_tokens} + {info.completion_tokens} tokens"
    return f"about {info.completion_tokens} tokens (counted here: the service did not say)"


def messages(rows: list[Message], streaming: dict[str, str] | None = None, runs: dict[str, RunInfo] | None = None) -> str:
    items = []
    for message in rows:
        pending = is_pending(message)
        classes = f"message {message.role}{' pending' if pending else ''}"
        badge = '<span class="badge" title="Saved on this device, not yet on the server">pending</span>' if pending else ""
        tools = ""
        content = message.content
        if message.role == "assistant":
            classes += f" {message.status}"
            content = (streaming or {}).get(message.id, content)
            note = REPLY_NOTE.get(message.status, "")
            info = (runs or {}).get(message.id)
            if info is not None and info.error and message.status == "failed_upstream":
                note = f"The assistant could not answer: {info.error}."
            note = " · ".join(part for part in (note, _usage(info)) if part)
            if message.status in ("queued", "streaming"):
                action = ("stop-run", "Stop")
            elif message.status in ("failed_upstream", "cancelled"):
                action = ("retry-run", "Retry")
            else:
                action = None
            button = (
                f'<button type="button" class="link" data-action="{action[0]}" data-id="{message.id}">{action[1]}</button>'
                if action
                else ""
            )
            note_html = f'<span class="note">{escape(note)}</span>' if note else ""
            tools = f'<span class="tools">{note_html} {button}</span>' if note or button else ""
        elif message.role == "tool_call":
            content = _tool_call(message.content)
        if message.role == "user":
            remove = "Withdraw" if pending else "Delete"
            tools = (
                f'<span class="tools"><button type="button" class="link" data-action="edit-message" '
                f'data-id="{message.id}">Edit</button> <button type="button" class="link" '
                f'data-action="remove-message" data-id="{message.id}">{remove}</button></span>'
            )
        items.append(
            f'<li class="{classes}" data-id="{message.id}">'
            f'<div class="content">{escape(content)}</div>{badge}{tools}</li>'
        )
    return "\n".join(items)


def _tool_call(content: str) -> str:
    try:
        call = json.loads(content)
        return f"Calls the {call['tool']}: {call['input']}"
    except (ValueError, KeyError, TypeError):
        return content
