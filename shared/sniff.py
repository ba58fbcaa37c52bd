"""What a file is, from its first bytes, whatever its name or its sender said: the server serves a
blob as this (server/routes/blobs.py) and both sides build a model's request by it
(shared/prompt.py). Pure: it runs under CPython and Pyodide."""

from __future__ import annotations

SNIFF_BYTES = 4096
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
TEXT_TYPE = "text/plain; charset=utf-8"
PDF_TYPE = "application/pdf"
OTHER_TYPE = "application/octet-stream"


def sniff(first: bytes) -> str:
    """The Content-Type the server gives a blob whose first bytes (up to ``SNIFF_BYTES``) are
    ``first``, whatever its name or its sender said: one of the images a browser shows safely
    (PNG, JPEG, GIF, WebP, by their magic numbers), a PDF, plain text for anything that is UTF-8
    text without control characters (HTML and SVG too: never served as what would run script),
    and bytes (``application/octet-stream``) otherwise."""
    if first.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if first.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if first.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if first[:4] == b"RIFF" and first[8:12] == b"WEBP":
        return "image/webp"
    if first.startswith(b"%PDF-"):
        return PDF_TYPE
    return TEXT_TYPE if _is_text(first) else OTHER_TYPE


def _is_text(first: bytes) -> bool:
    sample = first[:SNIFF_BYTES]
    try:
        decoded = sample.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(sample) - 3:  # (not merely a character cut off at the sample's end)
            return False
        decoded = sample[: e.start].decode("utf-8")
    return not any(ord(c) < 32 and c not in "\t\n\r\f" for c in decoded)
