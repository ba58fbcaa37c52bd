"""What a model is sent: the conversation along its branch (shared/assistants.py's ``turns_of``),
with each user message's attachments made into what the model reads, here and now, from the
bytes of each file (nothing of it is stored: the next turn builds it again). The server's runs
read the blobs the account holds (server/runs.py); "Model on this device" reads the page's
IndexedDB (webapp/assistants.py). Runs under CPython and Pyodide. A PDF's text is read by
shared/pdf.py: on the server in a thread, in the browser by the page's Python worker, which loads
pypdf only then (``PdfReader``: webapp/browser.py).

* An image (PNG, JPEG, GIF, WebP, by its first bytes: shared/sniff.py, never the name or the
  type its sender claimed) goes to an assistant with
  ``vision`` as an OpenAI content part ``{"type": "image_url", "image_url": {"url":
  "data:<type>;base64,..."}}``; to one without, a note in the text says it was left out.
* A text file (any UTF-8 text: plain text, Markdown, CSV, JSON, source code) goes as text with
  its name, and a PDF as the text pypdf reads from it, up to ``MAX_FILE_CHARS`` each and
  ``MAX_TEXT_CHARS`` for the whole request (what is cut says so).
* Anything else, and an attachment that has not reached the server, is left out with a note
  that names it.
"""

from __future__ import annotations

import asyncio
import base64
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from shared.assistants import Turn, turns_of
from shared.models import Attachment, Message
from shared.pdf import pdf_text
from shared.sniff import IMAGE_TYPES, PDF_TYPE, SNIFF_BYTES, TEXT_TYPE, sniff

MAX_FILE_CHARS = 100_000  # of one file's text
MAX_TEXT_CHARS = 400_000  # of all the files' text in one request

# The bytes of a file by its digest (with ``most``: no more than its first ``most``), or None
# when they cannot be had (not on the server; not on this device nor reachable).
BlobReader = Callable[[str, int | None], Awaitable[bytes | None]]
# What is read of a text file: more characters than ``MAX_FILE_CHARS`` whenever the file has more
# bytes than this (UTF-8 takes at most 4 a character), so a cut says so.
TEXT_READ_BYTES = 4 * MAX_FILE_CHARS + 4
# The text of a PDF's bytes (shared/pdf.py's ``pdf_text``, wherever it runs), or None.
PdfReader = Callable[[bytes], Awaitable[str | None]]


async def read_pdf_here(data: bytes) -> str | None:
    """``pdf_text`` in this interpreter: in a thread (it can take a while), where there are threads."""
    return pdf_text(data) if sys.platform == "emscripten" else await asyncio.to_thread(pdf_text, data)


def awaited_attachments(history: list[Message]) -> set[str]:
    """The digests a run must have before it asks the model: those of the user messages after
    the last reply (the question, and whatever was sent with it). An older turn's file that never
    reached the server does not hold up every answer after it: it is left out, with a note."""
    wanted: set[str] = set()
    for message in reversed(history):
        if message.role == "assistant":
            break
        if message.role == "user":
            wanted |= {a.sha256 for a in message.attachments}
    return wanted


async def prompt_turns(
    history: list[Message], vision: bool, read: BlobReader, read_pdf: PdfReader = read_pdf_here
) -> list[Turn]:
    """The turns of ``history`` with their attachments in them (see the module docstring);
    ``read_pdf`` reads a PDF's text (the browser's reads it in its Python worker)."""
    budget = [MAX_TEXT_CHARS]
    turns = []
    for turn in turns_of(history):
        turns.append(await _with_attachments(turn, vision, read, read_pdf, budget) if turn.attachments else turn)
    return turns


async def _with_attachments(turn: Turn, vision: bool, read: BlobReader, read_pdf: PdfReader, budget: list[int]) -> Turn:
    text = turn.content
    images: list[dict[str, Any]] = []
    for attachment in turn.attachments:
        # (What a file is, from its first bytes; the rest read only for what the model is given:
        # a 20 MB file of another kind is not read whole for every turn of its chat.)
        data = await read(attachment.sha256, SNIFF_BYTES)
        kind = None if data is None else sniff(data)
        if data is not None and len(data) == SNIFF_BYTES and _given(kind, vision):
            data = await read(attachment.sha256, TEXT_READ_BYTES if kind == TEXT_TYPE else None)
        if data is None:
            text += _note(attachment, "is not on the server (it was not uploaded from the device that sent it)")
            continue
        if kind in IMAGE_TYPES:
            if vision:
                url = f"data:{kind};base64,{base64.b64encode(data).decode()}"
                images.append({"type": "image_url", "image_url": {"url": url}})
            else:
                text += _note(attachment, f"({kind}) was left out: this assistant does not read images")
            continue
        if kind == TEXT_TYPE:
            content = data.decode("utf-8", errors="replace")
        elif kind == PDF_TYPE:
            read_text = await read_pdf(data)
            if read_text is None:
                text += _note(attachment, "(a PDF) was left out: no text could be read from it")
                continue
            content = read_text
        else:
            text += _note(attachment, f"({attachment.mime or kind}) was left out: not a kind of file this assistant reads")
            continue
        text += _file(attachment, content, budget)
    if not images:
        return Turn(turn.role, text, attachments=turn.attachments)
    parts: tuple[dict[str, Any], ...] = ({"type": "text", "text": text}, *images)
    return Turn(turn.role, text, attachments=turn.attachments, parts=parts)


def _given(kind: str | None, vision: bool) -> bool:
    """Whether a file of this kind goes to the model (else it is left out with a note)."""
    return kind in (TEXT_TYPE, PDF_TYPE) or (vision and kind in IMAGE_TYPES)


def _note(attachment: Attachment, what: str) -> str:
    return f'\n\n[The attached file "{attachment.name}" {what}.]'


def _file(attachment: Attachment, content: str, budget: list[int]) -> str:
    room = min(MAX_FILE_CHARS, budget[0])
    cut = len(content) > room
    content = content[:room]
    budget[0] -= len(content)
    end = f"\n[... the rest of the file, {len(content):,} characters on, is left out]" if cut else ""
    return f'\n\nThe attached file "{attachment.name}":\n```\n{content}\n```{end}'

