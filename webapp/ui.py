"""HTML for each part of the page, from rows of the local database. Pure: values in, strings out.

Interactive elements carry ``data-action``; the page's one delegated listener (static/app.js)
hands the action and its data to ``webapp.app.Client.dispatch`` (Copy and Jump to latest are the
page's own). The layout is drawn once per sign-in; after that only its regions change, so the
composer, and what is typed in it, is never replaced.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from html import escape

from shared.models import MAX_INSTRUCTIONS, Chat
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


def auth_form(error: str | None = None, note: str | None = None, username: str = "") -> str:
    """The sign-in form; after a sign-in that failed, with its error and the username typed (the
    password is typed again)."""
    message = f'<p class="error" role="alert">{escape(error)}</p>' if error else ""
    if note:
        message += f'<p class="note" role="status">{escape(note)}</p>'
    return f"""
<form class="auth" data-action="signin">
  <h1>Sign in</h1>
  {message}
  <label>Username <input name="username" autocomplete="username" value="{escape(username)}" required></label>
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


def layout(username: str, device_url: str = "", device_model: str = "", device_vision: bool = False) -> str:
    return f"""
<aside class="sidebar" id="sidebar">
  <button type="button" class="new-chat" data-action="new-chat">New chat</button>
  <input type="search" id="search" class="search" aria-label="Search" placeholder="Search (Ctrl+K)" autocomplete="off" data-search>
  <nav id="chat-list" aria-label="Chats"></nav>
  <button type="button" class="secondary open-settings" data-action="open-settings">Settings</button>
  <details class="settings">
    <summary>Your data</summary>
    <p>Everything is kept on this device. Export works offline (JSON; a tar with the attached
    files when there are some); an import is sent to the server like any change (importing a
    file twice changes nothing).</p>
    <button type="button" data-action="export-all">Export everything</button>
    <label class="file">Import an export <input type="file" accept="application/json,.json,application/x-tar,.tar" data-import></label>
    <p id="data-note" class="note" role="status"></p>
  </details>
  <details class="settings">
    <summary>Model on this device</summary>
    <form data-action="device-model">
      <p>An OpenAI-compatible server on this computer (Ollama, LM Studio, llama.cpp), called from
      this page. It must allow this page's origin (CORS).</p>
      <label>Base URL <input name="url" placeholder="http://127.0.0.1:11434/v1" value="{escape(device_url)}"></label>
      <label>Model <input name="model" placeholder="llama3.2" value="{escape(device_model)}"></label>
      <label class="check"><input type="checkbox" name="vision"{" checked" if device_vision else ""}> Reads images</label>
      <p>Tick it for a model that takes images (llava, gemma3, qwen2.5vl): an attached
      image is then sent to it; otherwise it is told the image was left out.</p>
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
    <ul class="composer-files" id="composer-files" aria-label="Attached files"></ul>
    <form class="composer" data-action="send" data-reset>
      <button type="button" class="tool attach" data-action="attach-files" aria-label="Attach files" title="Attach files">
        <svg aria-hidden="true"><use href="#i-attach"></use></svg></button>
      <input type="file" multiple hidden id="attach-input" data-attach tabindex="-1" aria-hidden="true">
      <textarea name="text" id="composer-text" rows="1" placeholder="Write a message" aria-label="Message"
        data-draft data-chat=""></textarea>
      <select name="assistant" id="assistant-choice" aria-label="Answered by"></select>
      <button type="submit" class="send">Send</button>
    </form>
  </div>
</section>
<dialog class="settings-dialog" id="settings" aria-labelledby="settings-title">
  <form method="dialog" class="dialog-close"><button class="close" aria-label="Close">×</button></form>
  <div id="settings-body"></div>
</dialog>
<dialog class="image-view" id="image-view" aria-label="Image">
  <form method="dialog"><button class="close" aria-label="Close">×</button></form>
  <img id="image-view-img" alt="">
</dialog>"""


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


def chat_head(chat: Chat | None, renaming: bool = False, deleting: int | None = None, instructing: bool = False) -> str:
    """The open chat's title and what can be done with the chat: rename it (inline), give it
    instructions (``instructing``: the form is open; set, they show as a line under the title),
    export it, delete it (``deleting``: its message count while the user is asked to confirm)."""
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
    if instructing:
        return (
            f'{bar}<form class="chat-instructions-form" data-action="save-chat-instructions" aria-label="Chat instructions">'
            f'<input type="hidden" name="id" value="{chat.id}">'
            + instructions_field("instructions", "chat-instructions-text", "Chat instructions", chat.instructions or "",
                                 "This chat's own, after the custom instructions and the preset's.")
            + '<div class="row"><button type="submit">Save</button>'
            '<button type="button" class="secondary" data-action="cancel-chat-instructions">Cancel</button></div></form>'
        )  # fmt: skip
    tools = "".join(
        icon_button(action, chat.id, label, icon)
        for action, label, icon in (
            ("chat-instructions", "Chat instructions", "instructions"), ("rename-chat", "Rename", "edit"),
            ("export-chat", "Export as Markdown", "download"), ("delete-chat", "Delete chat", "delete"),
        )
    )  # fmt: skip
    line = ""
    if chat.instructions and chat.instructions.strip():
        one_line = " ".join(chat.instructions.split())  # (cut to the header's width by CSS; whole in its title)
        line = f'<p class="chat-instructions" title="{escape(chat.instructions)}">Instructions: {escape(one_line)}</p>'
    title = f'<div class="chat-titles"><h2 class="chat-title" id="chat-title">{escape(chat.title)}</h2>{line}</div>'
    return f'{bar}{title}<span class="chat-tools">{tools}</span>'


PRESET = "preset:"  # the chooser's value of a preset: "preset:<id>"


def assistant_options(assistants: list[tuple[str, str]], chosen: str, presets: Sequence[tuple[str, str]] = ()) -> str:
    """The chooser beside Send: No answer, the assistants, then the presets (``presets``: (id,
    name)) under a heading of their own."""
    options = [("", "No answer"), *assistants]
    values = {value for value, _ in options} | {PRESET + pid for pid, _ in presets}
    if chosen not in values:
        options.append((chosen, chosen))  # chosen earlier, not listed by the server now

    def option(value: str, name: str) -> str:
        return f'<option value="{escape(value)}"{" selected" if value == chosen else ""}>{escape(name)}</option>'

    html = "".join(option(value, name) for value, name in options)
    if presets:
        html += '<optgroup label="Presets">' + "".join(option(PRESET + pid, name) for pid, name in presets) + "</optgroup>"
    return html


def editing_note(branching: bool, correcting: bool = False) -> str:
    if correcting:
        what = "Correcting a message the server did not accept: Send sends it again"
    elif branching:
        what = "Editing a message: Send makes a new branch beside it and asks again"
    else:
        what = "Editing a message: Send saves the change"
    return f'{what}. <button type="button" class="link" data-action="cancel-edit">Cancel</button>'


def icon_button(action: str, target_id: str, label: str, icon: str) -> str:
    """A button of one icon for what ``action`` does to a message or a chat (``target_id``)."""
    return (
        f'<button type="button" class="tool" data-action="{action}" data-id="{target_id}" '
        f'aria-label="{label}" title="{label}"><svg aria-hidden="true"><use href="#i-{icon}"></use></svg></button>'
    )


def counter(length: int, counter_id: str) -> str:
    return f'<span class="counter" id="{counter_id}">{length:,} / {MAX_INSTRUCTIONS:,}</span>'


def instructions_field(name: str, field_id: str, label: str, text: str, hint: str = "") -> str:
    """A textarea of instructions with its label and a live count (static/app.js keeps it)."""
    count_id = f"{field_id}-count"
    described = f' aria-describedby="{count_id}"'
    hint_html = f'<span class="hint">{escape(hint)}</span>' if hint else ""
    return (
        f'<label for="{field_id}">{escape(label)}</label>{hint_html}'
        f'<textarea name="{name}" id="{field_id}" rows="4" maxlength="{MAX_INSTRUCTIONS}" data-count="{count_id}"{described}>'
        f"{escape(text)}</textarea>{counter(len(text), count_id)}"
    )
