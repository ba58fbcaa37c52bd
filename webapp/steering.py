"""Settings: the account's **Custom instructions** and its presets (named bundles of an
assistant, instructions, a temperature and a maximum answer length; one may be the default for
new chats), edited in a dialog opened by **Settings** in the side panel. Each change is an event
of the log (``SettingsUpdated``, ``PresetCreated``, ``PresetUpdated``, ``PresetDeleted``),
saved here first: it works offline and syncs later. ``Client.dispatch`` hands it every action
it has an ``on_`` method for.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from html import escape
from typing import Any, Protocol

from shared.models import MAX_INSTRUCTIONS, SETTINGS_ID, EventType, Preset, PresetRef, Settings
from webapp.store import LocalStore
from webapp.ui import instructions_field

NEW_PRESET = "New preset"


class SteeringView(Protocol):
    def morph(self, region: str, html: str) -> None: ...

    def focus(self, selector: str) -> None: ...

    def show_dialog(self, dialog_id: str) -> None:
        """Open this <dialog> (modal; Escape or Close closes it)."""

    def toggle_chats(self, open: bool | None = None) -> None: ...


@dataclass
class SteeringHost:
    """What the settings need of the client."""

    submit: Callable[[EventType, Any], Awaitable[None]]
    now: Callable[[], str]
    new_id: Callable[[], str]
    assistants: Callable[[], list[tuple[str, str]]]  # (id, name) of those offered beside Send
    changed: Callable[[], None]  # the presets or the default changed: the chooser is drawn anew


def account_settings(store: LocalStore, now: str) -> Settings:
    """The account's settings as they are, or the first ones (nothing set)."""
    return store.settings() or Settings(id=SETTINGS_ID, created_at=now)


class Steering:
    def __init__(self, store: LocalStore, view: SteeringView, host: SteeringHost) -> None:
        self.store = store
        self.view = view
        self.host = host
        self.note = ""  # what the dialog last said (saved, refused)

    def draw(self) -> None:
        settings = self.store.settings()
        self.view.morph("settings-body", settings_body(settings, self.store.presets(), self.host.assistants(), self.note))

    async def on_open_settings(self, data: dict[str, Any]) -> None:
        self.note = ""
        self.draw()
        self.view.toggle_chats(False)  # (on a narrow screen it was opened from the drawer: the chat is under it)
        self.view.show_dialog("settings")

    async def on_save_instructions(self, data: dict[str, Any]) -> None:
        text = str(data.get("instructions", ""))
        if len(text) > MAX_INSTRUCTIONS:
            self.note = f"Not saved: custom instructions take at most {MAX_INSTRUCTIONS:,} characters."
        else:
            settings = account_settings(self.store, self.host.now())
            if settings.instructions != text or self.store.settings() is None:
                await self.host.submit(EventType.SETTINGS_UPDATED, settings.model_copy(update={"instructions": text}))
            self.note = "Custom instructions saved."
        self.draw()

    async def on_new_preset(self, data: dict[str, Any]) -> None:
        preset = Preset(id=self.host.new_id(), name=NEW_PRESET, created_at=self.host.now())
        await self.host.submit(EventType.PRESET_CREATED, preset)
        self.note = "A new preset: name it and save it."
        self.draw()
        self.host.changed()
        self.view.focus(f"#preset-{preset.id} input[name=name]")

    async def on_save_preset(self, data: dict[str, Any]) -> None:
        preset = self.store.preset(str(data.get("id", "")))
        if preset is None:
            self.note = "This preset was deleted meanwhile."
            self.draw()
            return
        try:
            changed = Preset.model_validate({
                **preset.model_dump(), "name": " ".join(str(data.get("name", "")).split()),
                "assistant_id": str(data.get("presetAssistant", "")) or None, "instructions": str(data.get("instructions", "")),
                "temperature": _number(data.get("temperature"), float), "max_tokens": _number(data.get("maxTokens"), int),
            })  # fmt: skip
        except ValueError as e:
            self.note = f"Not saved: {_why(e)}"
            self.draw()
            return
        if changed != preset:
            await self.host.submit(EventType.PRESET_UPDATED, changed)
        settings = account_settings(self.store, self.host.now())
        default = preset.id if data.get("default") else None if settings.default_preset_id == preset.id else settings.default_preset_id
        if default != settings.default_preset_id:
            await self.host.submit(EventType.SETTINGS_UPDATED, settings.model_copy(update={"default_preset_id": default}))
        self.note = f"“{changed.name}” saved."
        self.draw()
        self.host.changed()

    async def on_delete_preset(self, data: dict[str, Any]) -> None:
        preset = self.store.preset(str(data.get("id", "")))
        if preset is not None:
            await self.host.submit(EventType.PRESET_DELETED, PresetRef(id=preset.id))
            settings = self.store.settings()
            if settings is not None and settings.default_preset_id == preset.id:
                await self.host.submit(EventType.SETTINGS_UPDATED, settings.model_copy(update={"default_preset_id": None}))
            self.note = f"“{preset.name}” deleted."
        self.draw()
        self.host.changed()


def _number(value: object, kind: type[float] | type[int]) -> float | int | None:
    text = str(value or "").strip()
    if not text:
        return None
    try:
        return kind(float(text)) if kind is int else float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None


def _why(error: ValueError) -> str:
    """A refused field in words for a person."""
    errors = getattr(error, "errors", None)
    if callable(errors):
        first = errors()[0]
        field = {"name": "the name", "temperature": "the temperature", "max_tokens": "the maximum answer length",
                 "instructions": "the instructions"}.get(str(first["loc"][0]) if first["loc"] else "", "a field")  # fmt: skip
        return f"{field}: {first['msg'].lower()}."
    return f"{error}."


# --- HTML ---------------------------------------------------------------------------------------


def _assistant_select(assistants: list[tuple[str, str]], chosen: str | None) -> str:
    options = [("", "The one chosen beside Send"), *assistants]
    if chosen and all(value != chosen for value, _ in options):
        options.append((chosen, chosen))
    return "".join(
        f'<option value="{escape(value)}"{" selected" if value == (chosen or "") else ""}>{escape(name)}</option>'
        for value, name in options
    )


def _preset_form(preset: Preset, assistants: list[tuple[str, str]], default: bool) -> str:
    pid = preset.id
    temperature = "" if preset.temperature is None else f"{preset.temperature:g}"
    limit = "" if preset.max_tokens is None else str(preset.max_tokens)
    checked = " checked" if default else ""
    return f"""<li><form class="preset" id="preset-{pid}" data-action="save-preset" aria-label="Preset {escape(preset.name)}">
  <input type="hidden" name="id" value="{pid}">
  <label>Name <input name="name" value="{escape(preset.name)}" maxlength="100" required></label>
  <label>Assistant <select name="presetAssistant">{_assistant_select(assistants, preset.assistant_id)}</select></label>
  {instructions_field("instructions", f"preset-{pid}-instructions", "Instructions", preset.instructions)}
  <div class="row">
    <label>Temperature <input name="temperature" type="number" min="0" max="2" step="0.1" value="{temperature}"
      placeholder="model's own" inputmode="decimal"></label>
    <label>Maximum answer length (tokens) <input name="maxTokens" type="number" min="1" max="1000000" step="1" value="{limit}"
      placeholder="model's own" inputmode="numeric"></label>
  </div>
  <label class="check"><input type="checkbox" name="default"{checked}> Default for new chats</label>
  <div class="row">
    <button type="submit">Save preset</button>
    <button type="button" class="secondary" data-action="delete-preset" data-id="{pid}">Delete preset</button>
  </div>
</form></li>"""


def settings_body(settings: Settings | None, presets: list[Preset], assistants: list[tuple[str, str]], note: str = "") -> str:
    """The Settings dialog: the account's custom instructions, then its presets."""
    text = settings.instructions if settings is not None else ""
    default = settings.default_preset_id if settings is not None else None
    forms = "".join(_preset_form(p, assistants, p.id == default) for p in presets)
    listed = f'<ul class="presets">{forms}</ul>' if presets else '<p class="hint">No presets yet.</p>'
    hint = "Given to every answer, in every chat, on every device (before a preset's and a chat's own)."
    return f"""<h2 id="settings-title">Settings</h2>
<p class="note" id="settings-note" role="status">{escape(note)}</p>
<form class="instructions-form" data-action="save-instructions">
  {instructions_field("instructions", "custom-instructions", "Custom instructions", text, hint)}
  <div class="row"><button type="submit">Save instructions</button></div>
</form>
<section class="presets-section" aria-labelledby="presets-title">
  <h3 id="presets-title">Presets</h3>
  <p class="hint">An assistant with instructions and parameters, chosen beside Send; a chat keeps the one chosen.</p>
  {listed}
  <button type="button" class="secondary" data-action="new-preset">New preset</button>
</section>"""
