"""What a model is sent of a message's files (shared/prompt.py), read no further than it needs:
a file the model is not given is read no further than its first bytes (what it is), a text file
no further than the characters it may give, and only an image a model sees, or a PDF, whole."""

from __future__ import annotations

import asyncio
import base64
import hashlib

from shared.models import Attachment, Message
from shared.prompt import MAX_FILE_CHARS, TEXT_READ_BYTES, prompt_turns
from shared.sniff import SNIFF_BYTES

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * (3 * SNIFF_BYTES)
BINARY = b"\x00\xff" * (2 * SNIFF_BYTES)
TEXT = "é" * (TEXT_READ_BYTES // 2 + 100)  # (two bytes a character: more than is read)
WIDE = "😀" * (MAX_FILE_CHARS + 100)  # (four bytes a character: as many as a read could cut)
SMALL = b"a few words\n"


def attachment(name: str, data: bytes, mime: str = "application/octet-stream") -> Attachment:
    return Attachment(sha256=hashlib.sha256(data).hexdigest(), name=name, mime=mime, size=len(data))


def question(*files: Attachment) -> Message:
    return Message(
        id="0190e6a2-0000-7000-8000-000000000001", chat_id="0190e6a2-0000-7000-8000-000000000002", role="user",
        content="look", attachments=files, created_at="2026-12-07T12:00:00.000Z",
    )  # fmt: skip


class Files:
    """A reader of these files that counts how much of each was read."""

    def __init__(self, *files: bytes) -> None:
        self.files = {hashlib.sha256(data).hexdigest(): data for data in files}
        self.reads: list[tuple[str, int | None]] = []

    async def read(self, sha256: str, most: int | None) -> bytes | None:
        self.reads.append((sha256, most))
        data = self.files.get(sha256)
        return None if data is None else data[:most]

    def of(self, data: bytes) -> list[int | None]:
        sha256 = hashlib.sha256(data).hexdigest()
        return [most for digest, most in self.reads if digest == sha256]


def test_a_file_the_model_is_not_given_is_read_no_further_than_what_it_is() -> None:
    files = Files(PNG, BINARY, SMALL)
    [turn] = asyncio.run(prompt_turns([question(attachment("cat.png", PNG), attachment("x.bin", BINARY), attachment("a.txt", SMALL))], False, files.read))
    assert files.of(PNG) == [SNIFF_BYTES] and files.of(BINARY) == [SNIFF_BYTES]
    assert files.of(SMALL) == [SNIFF_BYTES]  # (shorter than that: its first read was all of it)
    assert '"cat.png" (image/png) was left out: this assistant does not read images' in turn.content
    assert '"x.bin" (application/octet-stream) was left out' in turn.content
    assert 'The attached file "a.txt":\n```\na few words\n\n```' in turn.content


def test_an_image_a_model_sees_is_read_whole_and_a_text_file_as_far_as_it_may_give() -> None:
    text, wide = TEXT.encode(), WIDE.encode()
    files = Files(PNG, text, wide)
    files_of = [attachment("cat.png", PNG), attachment("t.txt", text, "text/plain"), attachment("w.txt", wide, "text/plain")]
    [turn] = asyncio.run(prompt_turns([question(*files_of)], True, files.read))
    assert files.of(PNG) == [SNIFF_BYTES, None]
    assert files.of(text) == [SNIFF_BYTES, TEXT_READ_BYTES] and files.of(wide) == [SNIFF_BYTES, TEXT_READ_BYTES]
    assert turn.parts[1] == {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(PNG).decode()}}
    for content in (TEXT, WIDE):  # (cut, and said to be: even where a read of the most bytes holds no more characters)
        assert f"```\n{content[:MAX_FILE_CHARS]}\n```\n[... the rest of the file, {MAX_FILE_CHARS:,} characters on, is left out]" in turn.content
