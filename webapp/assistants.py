"""The assistants as the client sees them: each yields the events of an answer (shared/assistants.py),
and the client applies them all the same way (through the outbox, so other devices get them).

- ``RemoteAssistant``: one of the server's; it yields an ``AssistantRunRequested`` and the
  server's run writes the answer, which arrives by sync.
- ``ToolAssistant``: runs here, with no network at all. It answers with tools, each call and its
  result a message of its own (``ToolCallRequested``, then ``ToolCallSucceeded`` or
  ``ToolCallFailed``): a calculator, and Python (run here, in Pyodide in the browser).

``AssistantChoice`` is which of them the composer offers, and the one chosen.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from shared.assistants import Assistant, Model, ModelAssistant, RunInput
from shared.models import DomainEvent, EventType, Message, Role, RunRequest
from shared.prompt import BlobReader, PdfReader, prompt_turns, read_pdf_here
from webapp import ui
from webapp.calculator import CalculationError, calculate, parse
from webapp.python_tool import MAX_ERROR, cut, run_python
from webapp.store import LocalStore
from webapp.transport import ASK_SECONDS, AssistantInfo, NetworkError, ServerError, Transport, Unauthorized, answered_within

LOCAL_TOOLS_ID = "local-tools"
DEVICE_MODEL_ID = "on-device"
# Until the server has told us its assistants (a first start offline): the one every server has.
DEFAULT_ASSISTANTS = [AssistantInfo(id="demo", name="Demo model (on the server)", kind="remote", model="demo")]


class RemoteAssistant:
    def __init__(self, assistant_id: str, name: str) -> None:
        self.id = assistant_id
        self.name = name

    async def run(self, run: RunInput) -> AsyncIterator[DomainEvent]:
        request = self.request(run.question, run.new_id, run.preset_id, run.instructions)
        yield DomainEvent(event_id=run.new_id(), type=EventType.ASSISTANT_RUN_REQUESTED, payload=request, created_at=run.now())

    def request(
        self, question: Message, new_id: Callable[[], str], preset_id: str | None = None, instructions: str | None = None
    ) -> RunRequest:
        """The server's run answering ``question`` (a Send submits it with the message)."""
        return RunRequest(
            run_id=new_id(), chat_id=question.chat_id, parent_id=question.id, message_id=new_id(), assistant_id=self.id,
            preset_id=preset_id, instructions=instructions,
        )  # fmt: skip


class ToolAssistant:
    """Which tool, from the question: a ```python block (or a question starting "python:" / "run:")
    runs as Python; arithmetic ("2 * (3 + 4)", "calc: sqrt(2)") goes to the calculator; anything
    else gets a short answer saying what it can do.

    Every tool is bounded: the calculator refuses, before it starts, what would take it long
    (webapp/calculator.py: it runs on the page's thread); Python runs in a worker stopped after
    20 s (webapp/browser.py); and what any tool answers, or fails with, is cut to
    ``MAX_OUTPUT`` / ``MAX_ERROR`` characters before it is a message."""

    id = LOCAL_TOOLS_ID
    name = "Local helper (offline, tools)"

    def __init__(self, python: Callable[[str], Awaitable[str]] | None = None) -> None:
        """``python`` runs a snippet (the browser's runs it in a worker that can be stopped);
        without it, here, in this interpreter."""
        self.tools: dict[str, Callable[[str], Awaitable[str]]] = {
            "calculator": _now(calculate),
            "python": python or _now(run_python),
        }

    async def run(self, run: RunInput) -> AsyncIterator[DomainEvent]:
        question = run.question
        tool, source = choose_tool(question.content)
        parent = question.id
        if tool is not None:
            call = self._message(run, "tool_call", json.dumps({"tool": tool, "input": source}), parent)
            yield self._event(run, EventType.TOOL_CALL_REQUESTED, call)
            try:
                result = cut(await self.tools[tool](source))
            except Exception as error:  # the tool's failure is the answer's subject, not a crash
                reason = cut(str(error), MAX_ERROR)
                failed = self._message(run, "error", f"{type(error).__name__}: {reason}", call.id)
                yield self._event(run, EventType.TOOL_CALL_FAILED, failed)
                answer = f"The {tool} could not do that: {reason}"
                parent = failed.id
            else:
                done = self._message(run, "tool_result", result, call.id)
                yield self._event(run, EventType.TOOL_CALL_SUCCEEDED, done)
                answer = f"`{source}` = {result}" if tool == "calculator" else f"I ran it. Output:\n\n{_verbatim(result)}"
                parent = done.id
        else:
            answer = (
                "I run on this device, with no network. Ask me to calculate (\u201c2 * (3 + 4)\u201d, "
                "\u201ccalc: sqrt(2)\u201d) or to run Python (start with \u201cpython:\u201d or send a "
                "```python block)."
            )
        reply = self._message(run, "assistant", answer, parent).model_copy(
            update={"preset_id": run.preset_id, "instructions": run.instructions, "finish_reason": "stop"}
        )  # (what it was given, as every answer records it: its tools do not read it)
        yield self._event(run, EventType.MESSAGE_APPENDED, reply)

    def _message(self, run: RunInput, role: Role, content: str, parent_id: str) -> Message:
        return Message(
            id=run.new_id(),
            chat_id=run.chat_id,
            role=role,
            content=content,
            parent_id=parent_id,
            assistant_id=self.id,
            created_at=run.now(),
        )

    @staticmethod
    def _event(run: RunInput, kind: EventType, message: Message) -> DomainEvent:
        return DomainEvent(event_id=run.new_id(), type=kind, payload=message, created_at=run.now())


_CODE_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)
_ARITHMETIC = re.compile(r"^[\d\s.+\-*/%()^,a-z_]*$")


@dataclass(frozen=True)
class DeviceModel:
    """The model on this device the person set up: its base URL, its name, and whether it reads
    images (as a server assistant's ``vision``: off unless said)."""

    url: str
    model: str
    vision: bool = False


class ChoiceView(Protocol):
    def morph(self, region: str, html: str) -> None: ...


class AssistantChoice:
    """The assistants the composer offers and the one chosen, kept on this device (the server's
    list too, for offline starts). ``Client.dispatch`` hands it every action it has an ``on_``
    method for."""

    def __init__(
        self,
        store: LocalStore,
        view: ChoiceView,
        transport: Transport,
        python_tool: Callable[[str], Awaitable[str]] | None,
        device_model: Callable[[str, str], Model] | None,
        on_change: Callable[[], None] = lambda: None,
        read_file: BlobReader | None = None,
        read_pdf: PdfReader | None = None,
    ) -> None:
        """``on_change``: called once the choice, or what is offered, is drawn anew; ``read_file``:
        the bytes of an attached file on this device (what "Model on this device" is sent of
        the files: shared/prompt.py, as the server's runs are); ``read_pdf``: a PDF's text (the
        browser's reads it in its Python worker; here by default)."""
        self.read_file = read_file
        self.read_pdf = read_pdf or read_pdf_here
        self.store = store
        self._on_change = on_change
        self.view = view
        self.transport = transport
        self.python_tool = python_tool
        self.make_device_model = device_model  # (None where there is no way to call one)
        # The preset the chooser shows (the open chat's), set by the client; None: an assistant.
        self.chat_preset: Callable[[], str | None] = lambda: None
        self._drawn = ""

    def _remote(self) -> list[AssistantInfo]:
        known = self.store.setting("assistants")
        return [AssistantInfo(**a) for a in json.loads(known)] if known else DEFAULT_ASSISTANTS

    def offered(self) -> list[Assistant]:
        """The server's assistants (as it last listed them), then those that run here."""
        remote = self._remote()
        local: list[Assistant] = [ToolAssistant(self.python_tool)]
        device = self.device_model()
        if device and self.make_device_model is not None:
            model = self.make_device_model(device.url, device.model)
            read, read_pdf, vision = self.read_file, self.read_pdf, device.vision
            prompt = None if read is None else (lambda history: prompt_turns(history, vision, read, read_pdf))
            local.append(ModelAssistant(DEVICE_MODEL_ID, f"On this device: {device.model}", model, prompt=prompt))
        return [RemoteAssistant(a.id, a.name) for a in remote] + local

    def device_model(self) -> DeviceModel | None:
        """The model on this device the user set up, if any."""
        found = json.loads(self.store.setting("device_model") or "null")
        if not found:
            return None
        return DeviceModel(str(found["url"]), str(found["model"]), bool(found.get("vision", False)))

    def get(self, assistant_id: str) -> Assistant:
        found = next((a for a in self.offered() if a.id == assistant_id), None)
        return found or RemoteAssistant(assistant_id, assistant_id)  # one the server stopped listing

    def image_note(self) -> str | None:
        """Why the images in the draft will not be seen, if the assistant the chooser shows (a
        preset's, for a preset) does not read them (the server's assistants that say ``vision``
        do, and the model on this device when it is marked as reading images; the local helper
        does not). None for No answer."""
        return self.image_notes([self.shown()])[self.shown()]

    def image_notes(self, values: list[str] | None = None) -> dict[str, str | None]:
        """``image_note`` for each of ``values`` of the chooser (by default every one it offers:
        the page shows the note itself before Python is up, static/early-files.js)."""
        remote, offered, device = self._remote(), self.offered(), self.device_model()
        if values is None:
            values = ["", *(a.id for a in offered), *(ui.PRESET + p.id for p in self.store.presets()), self.shown()]
        notes: dict[str, str | None] = {}
        for value in values:
            chosen, _ = self.resolve(value)
            if chosen == "" or any(a.id == chosen and a.vision for a in remote):
                notes[value] = None
            elif chosen == DEVICE_MODEL_ID and device is not None and device.vision and self.make_device_model is not None:
                notes[value] = None
            else:
                name = next((a.name for a in offered if a.id == chosen), chosen)
                notes[value] = f"{name} does not read images: they are left out of what it is sent."
        return notes

    def chosen(self) -> str:
        """The assistant this device chose last ("": No answer)."""
        chosen = self.store.setting("assistant")
        return chosen if chosen is not None else self.offered()[0].id

    def shown(self) -> str:
        """What the chooser shows: the open chat's preset ("preset:<id>"), else the assistant chosen."""
        preset = self.chat_preset()
        return ui.PRESET + preset if preset is not None else self.chosen()

    def resolve(self, value: str) -> tuple[str, str | None]:
        """What a value of the chooser asks for: (the assistant, "" for none; the preset or None).
        A preset answers with its own assistant, else with the assistant chosen beside Send (or,
        when that is No answer, the first offered); a preset that is gone is the assistant chosen."""
        if not value.startswith(ui.PRESET):
            return value, None
        preset = self.store.preset(value[len(ui.PRESET) :])
        if preset is None:
            return self.chosen(), None
        return preset.assistant_id or self.chosen() or self.offered()[0].id, preset.id

    async def choose(self, assistant_id: str) -> None:
        if assistant_id != self.store.setting("assistant"):
            await self.store.set_setting("assistant", assistant_id)

    async def refresh(self, seconds: float = ASK_SECONDS) -> None:
        """Online again: ask the server which assistants it has (kept for offline starts); no
        answer within ``seconds`` is none (asked again when next online)."""
        try:
            found = await answered_within(self.transport.assistants, seconds)
        except (NetworkError, ServerError, Unauthorized):
            return
        listed = json.dumps([a.__dict__ for a in found])
        if listed != self.store.setting("assistants"):
            await self.store.set_setting("assistants", listed)
            self.draw()

    def reset(self) -> None:
        """A new layout (a sign-in): the chooser is not drawn yet."""
        self._drawn = ""

    def draw(self) -> None:
        """The chooser (only when it changed): No answer, the assistants, then the presets."""
        choices = [(a.id, a.name) for a in self.offered()]
        presets = [(p.id, p.name) for p in self.store.presets()]
        html = ui.assistant_options(choices, self.shown(), presets)
        if html == self._drawn:
            return
        self._drawn = html
        self.view.morph("assistant-choice", html)
        self._on_change()

    async def on_device_model(self, data: dict[str, Any]) -> None:
        """The on-device model's settings (empty: none); ``vision`` is its "Reads images" box
        (a form sends "on" when it is ticked, nothing when not)."""
        url, model = str(data.get("url", "")).strip(), str(data.get("model", "")).strip()
        vision = data.get("vision") in ("on", True, "true")
        await self.store.set_setting(
            "device_model", json.dumps({"url": url, "model": model, "vision": vision} if url and model else None)
        )
        self.reset()  # (drawn again, and the composer's note with it: whether it reads images may be all that changed)
        self.draw()


def choose_tool(text: str) -> tuple[str | None, str]:
    """(tool, its input), or (None, "") when the question is for no tool."""
    block = _CODE_BLOCK.search(text)
    if block:
        return "python", block.group(1).strip()
    stripped = text.strip()
    for prefix in ("python:", "run:"):
        if stripped.lower().startswith(prefix):
            return "python", stripped[len(prefix) :].strip()
    if stripped.lower().startswith("calc:"):
        return "calculator", stripped[5:].strip()
    expression = stripped.rstrip("=?").strip()
    if expression and any(c.isdigit() for c in expression) and _ARITHMETIC.match(expression.lower()):
        try:
            parse(expression)  # (only looked at: what it does is the tool's answer, or its failure)
        except CalculationError:
            return None, ""
        return "calculator", expression
    return None, ""


def _verbatim(text: str) -> str:
    """Text shown as it is (a Markdown code block, fenced longer than any run of backticks in it)."""
    fence = "`" * max(3, max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence}\n{text}\n{fence}"


def _now(tool: Callable[[str], str]) -> Callable[[str], Awaitable[str]]:
    """A tool that answers at once, as the assistant awaits them all."""

    async def run(source: str) -> str:
        return tool(source)

    return run
