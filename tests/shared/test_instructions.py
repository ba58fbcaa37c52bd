"""The system message (shared/instructions.py): the account's layer, then the preset's, then the
chat's, each as written, for every combination of blank, whitespace, one-line and multiline layers;
and which preset applies."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.instructions import SEPARATOR, layers_for, preset_for, system_message
from shared.models import SETTINGS_ID, Chat, Preset, Settings
from tests.shared.strategies import characters

T = "2026-11-30T12:00:00.000Z"
CHAT, P1, P2 = (f"01937a4e-0000-7000-8000-00000000000{n}" for n in (1, 2, 3))

# The kinds of layer the property draws from, each kind drawn freely.
EMPTY = st.just("")
WHITESPACE = st.text(st.sampled_from(" \t\n\r\u00a0\u2003"), min_size=1, max_size=6)
ONE_LINE = st.text(characters.filter(lambda c: c not in "\n\r"), min_size=1, max_size=40).filter(str.strip)
MULTILINE = st.lists(st.text(characters, max_size=20), min_size=2, max_size=4).map("\n".join).filter(str.strip)
# Text with whitespace around it, blank lines inside, and the separator itself: kept as written.
PADDED = st.tuples(WHITESPACE, ONE_LINE | MULTILINE, WHITESPACE).map("".join)
KINDS = {"empty": EMPTY, "whitespace": WHITESPACE, "one line": ONE_LINE, "multiline": MULTILINE, "padded": PADDED}


def blank(layer: str) -> bool:
    return layer.strip() == ""


@pytest.mark.parametrize("kinds", list(itertools.product(sorted(KINDS), repeat=3)), ids="/".join)
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_the_system_message_is_the_non_blank_layers_in_order_each_as_written(kinds: tuple[str, str, str], data: st.DataObject) -> None:
    """Every combination of kinds of layer (5**3), each with layers Hypothesis draws."""
    three = tuple(data.draw(KINDS[kind], label=kind) for kind in kinds)
    message = system_message(*three)
    kept = [layer for layer in three if not blank(layer)]
    if not kept:
        assert message is None  # nothing to send: no system turn at all
        return
    assert message == SEPARATOR.join(kept)
    # Each layer whole, in its place: the message is the kept layers and the separators, nothing else.
    position = 0
    for n, layer in enumerate(kept):
        assert message[position : position + len(layer)] == layer
        position += len(layer)
        if n < len(kept) - 1:
            assert message[position : position + len(SEPARATOR)] == SEPARATOR
            position += len(SEPARATOR)
    assert position == len(message)


def test_every_combination_of_blank_and_written_layers() -> None:
    """The eight combinations of blank and written, each with the blanks empty and whitespace."""
    written = ("Account: metric units.", "Preset:\nbe terse.", "  Chat: plan for two.  ")
    for shape in itertools.product((False, True), repeat=3):
        for blank_text in ("", " \n\t "):
            three = tuple(text if keep else blank_text for text, keep in zip(written, shape))
            kept = [text for text, keep in zip(written, shape) if keep]
            assert system_message(*three) == ("\n\n".join(kept) if kept else None), (shape, blank_text)


def test_no_layer_replaces_another() -> None:
    assert system_message("A", "B", "C") == "A\n\nB\n\nC"
    assert system_message("same", "same", "same") == "same\n\nsame\n\nsame"


def preset(id: str, instructions: str) -> Preset:
    return Preset(id=id, name="p", instructions=instructions, created_at=T)


def test_the_run_s_preset_else_the_chat_s_and_a_missing_one_is_none() -> None:
    account = Settings(id=SETTINGS_ID, instructions="account", created_at=T)
    presets = {P1: preset(P1, "first"), P2: preset(P2, "second")}
    chat = Chat(id=CHAT, title="t", created_at=T, instructions="chat", preset_id=P1)
    assert layers_for(account, presets, chat, None) == ("account", "first", "chat")
    assert layers_for(account, presets, chat, P2) == ("account", "second", "chat")  # the run's wins
    gone = "01937a4e-0000-7000-8000-000000000009"
    assert layers_for(account, presets, chat, gone) == ("account", "", "chat")  # deleted: none
    assert layers_for(account, presets, chat.model_copy(update={"preset_id": gone}), None) == ("account", "", "chat")
    assert layers_for(None, {}, None, None) == ("", "", "")
    assert layers_for(None, presets, Chat(id=CHAT, title="t", created_at=T), None) == ("", "", "")
    assert preset_for(presets, chat, None) == presets[P1] and preset_for(presets, chat, gone) is None
    assert system_message(*layers_for(account, presets, chat, P2)) == "account\n\nsecond\n\nchat"
