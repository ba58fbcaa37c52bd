"""The system message an assistant is given: one rule, one function, for the server's runs and the
browser's local assistants alike.

Three layers, each kept exactly as written (none replaces another): the account's (``Settings``),
then the preset's, then the chat's. The non-blank ones are joined by a blank line; when all are
blank there is no system message. Which preset applies: the run's own if it names one, else the
chat's; a preset that is gone (deleted) counts as none. Pure: rows in, text out.
"""

from __future__ import annotations

from collections.abc import Mapping

from shared.models import Chat, Preset, Settings

SEPARATOR = "\n\n"


def system_message(account: str, preset: str, chat: str) -> str | None:
    """The non-blank layers, in this order, each as written, joined by a blank line; None when
    every one is blank (empty, or only whitespace)."""
    layers = [layer for layer in (account, preset, chat) if layer.strip()]
    return SEPARATOR.join(layers) if layers else None


def layers_for(
    settings: Settings | None, presets_by_id: Mapping[str, Preset], chat: Chat | None, preset_id: str | None
) -> tuple[str, str, str]:
    """The three layers for an answer in ``chat``: the account's instructions, the preset's (the
    run's ``preset_id`` if given, else the chat's; a missing one is none), the chat's."""
    preset = preset_for(presets_by_id, chat, preset_id)
    return (
        settings.instructions if settings is not None else "",
        preset.instructions if preset is not None else "",
        (chat.instructions or "") if chat is not None else "",
    )


def preset_for(presets_by_id: Mapping[str, Preset], chat: Chat | None, preset_id: str | None) -> Preset | None:
    """The preset that applies to an answer (as ``layers_for`` chooses it), for its parameters."""
    chosen = preset_id if preset_id is not None else chat.preset_id if chat is not None else None
    return presets_by_id.get(chosen) if chosen is not None else None
