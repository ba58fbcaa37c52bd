"""Content-Encoding chosen by the request's Accept-Encoding, for files and for the sync API.

- ``negotiate``: which of the encodings we have the client prefers (RFC 9110 §12.5.3: q-values,
  ``*``, ``identity``; no header, or nothing acceptable, is the plain body).
- ``StaticFiles``: a file with the variants it can be sent in. A big file is sent compressed only
  from the ``.br``/``.gz`` beside it that set-up made (``scripts/slim_assets.py compress``; a variant older than
  its file is stale and ignored), never compressed per request. A small file without them (the
  shell, tracked in git and edited, so never precompressed: a copy on disk would go stale) is
  compressed once per content and kept in memory. Each variant has its own ETag (the plain file's
  with ``-br``/``-gz``), and every answer says ``Vary: Accept-Encoding``.
- ``compressed_json``: an API response gzipped when accepted (``GZIP_LEVEL``: these are hot
  paths, and level 1 costs a fraction of the default's CPU for most of its gain; see
  tests/bench/bench_compression.py).
"""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import brotli
from pydantic import BaseModel
from quart import Response
from werkzeug.security import safe_join

# Ours, best first: br is smaller than gzip for the same file.
PREFERENCE = ("br", "gzip")
SUFFIXES = {"br": ".br", "gzip": ".gz"}
ETAG_SUFFIXES = {"br": "-br", "gzip": "-gz"}
GZIP_LEVEL = 1
# Bodies below this go out as they are: a few hundred bytes gain little and cost a compressor.
MIN_COMPRESS_BYTES = 1024
# An API body above this is gzipped in a thread (zlib lets go of the GIL): the event loop goes on
# serving other requests and sockets meanwhile (a 250 kB page takes ~5 ms at level 1).
THREAD_BYTES = 64 * 1024
# Files up to this size, with no precompressed variant beside them, are compressed in memory once.
MEMORY_LIMIT = 512 * 1024
BROTLI_QUALITY = 11


def accepted(header: str | None) -> dict[str, float]:
    """The codings an Accept-Encoding header names, with their q-values (a malformed q is 0)."""
    result: dict[str, float] = {}
    for item in (header or "").split(","):
        name, *params = (part.strip() for part in item.split(";"))
        if not name:
            continue
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = min(max(float(value.strip()), 0.0), 1.0)
                except ValueError:
                    q = 0.0
        result[name.lower()] = q
    return result


def negotiate(header: str | None, available: Iterable[str]) -> str | None:
    """The coding of ``available`` to answer with, or None for the plain body (identity)."""
    if header is None:
        return None  # (any coding is acceptable then, but a client that names none gets the plain body)
    codings = accepted(header)
    star = codings.get("*")
    identity = codings.get("identity", star if star is not None else None)
    best: str | None = None
    best_q = 0.0
    for name in available:
        q = codings.get(name, star if star is not None else 0.0)
        if q > best_q:  # (ties keep the earlier, which we prefer)
            best, best_q = name, q
    if best is None:
        return None
    # identity named with a higher q than every coding we have: the plain body.
    if identity is not None and identity > best_q:
        return None
    return best


def _gzip(data: bytes, level: int = 9) -> bytes:
    return gzip.compress(data, compresslevel=level, mtime=0)


def _brotli(data: bytes) -> bytes:
    return bytes(brotli.compress(data, quality=BROTLI_QUALITY))


def encode(data: bytes, encoding: str) -> bytes:
    """``data`` in ``encoding`` ("br" or "gzip"), at the smallest setting (made once, sent often)."""
    return _brotli(data) if encoding == "br" else _gzip(data)


@dataclass(frozen=True)
class Variant:
    encoding: str | None
    etag: str
    size: int
    path: Path | None = None  # sent from this file, or
    data: bytes | None = None  # from memory


@dataclass(frozen=True)
class Encoded:
    """One content in every variant it can go out in."""

    variants: Mapping[str | None, Variant]

    @classmethod
    def of_bytes(cls, data: bytes, etag: str) -> Encoded:
        """``data`` plain and, where it saves something, in br and gzip."""
        variants: dict[str | None, Variant] = {None: Variant(None, etag, len(data), data=data)}
        if len(data) >= MIN_COMPRESS_BYTES:
            for encoding in PREFERENCE:
                body = encode(data, encoding)
                if len(body) < len(data):
                    variants[encoding] = Variant(encoding, etag + ETAG_SUFFIXES[encoding], len(body), data=body)
        return cls(variants)

    def response(self, request_headers: Any, content_type: str, cache_control: str) -> Response:
        """The answer to a GET of this content: the variant the client prefers, 304 when its
        If-None-Match names that variant's ETag."""
        encoding = negotiate(request_headers.get("Accept-Encoding"), [e for e in PREFERENCE if e in self.variants])
        variant = self.variants[encoding]
        headers = {"Cache-Control": cache_control, "Vary": "Accept-Encoding", "ETag": f'"{variant.etag}"'}
        if _matches(request_headers.get("If-None-Match"), variant.etag):
            return Response(b"", status=304, headers=headers)
        if variant.data is not None:
            response = Response(variant.data, content_type=content_type, headers=headers)
        else:
            assert variant.path is not None
            response = Response(Response.file_body_class(variant.path), content_type=content_type, headers=headers)
        response.content_length = variant.size
        if encoding is not None:
            response.headers["Content-Encoding"] = encoding
        return response


class LazilyEncoded:
    """``data`` in its variants, made (in a thread) when first asked for: compressing at the best
    setting takes a while (~1 s for the 220 kB Python bundle), which starting the app should not wait
    for (every test of the server starts one)."""

    def __init__(self, data: bytes, etag: str) -> None:
        self.data = data
        self.etag = etag
        self._encoded: Encoded | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> Encoded:
        async with self._lock:
            if self._encoded is None:
                self._encoded = await asyncio.to_thread(Encoded.of_bytes, self.data, self.etag)
            return self._encoded


def _matches(if_none_match: str | None, etag: str) -> bool:
    """Whether If-None-Match names ``etag`` (weak comparison, as RFC 9110 §13.1.2 says)."""
    if not if_none_match:
        return False
    if if_none_match.strip() == "*":
        return True
    for candidate in if_none_match.split(","):
        candidate = candidate.strip()
        if candidate.startswith("W/"):
            candidate = candidate[2:]
        if candidate.strip('"') == etag:
            return True
    return False


class StaticFiles:
    """The files under ``root``, each in the variants it can be sent in (see the module)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._memory: dict[Path, tuple[tuple[int, int], Encoded]] = {}

    def locate(self, relative: str) -> Path | None:
        """The file ``relative`` names under the root, or None (outside it, missing, a directory,
        or set-up's by-products asked for by their own names: a variant, a marker, a partial write)."""
        joined = safe_join(str(self.root), relative)
        if joined is None:
            return None
        path = Path(joined)
        if path.suffix in (*SUFFIXES.values(), ".skip", ".tmp") or not path.is_file():
            return None
        return path

    async def encoded(self, path: Path) -> Encoded:
        stat = path.stat()
        key = (stat.st_mtime_ns, stat.st_size)
        etag = f"{stat.st_mtime_ns:x}-{stat.st_size:x}"
        variants: dict[str | None, Variant] = {None: Variant(None, etag, stat.st_size, path=path)}
        for encoding in PREFERENCE:
            beside = path.with_name(path.name + SUFFIXES[encoding])
            try:
                other = beside.stat()
            except OSError:
                continue
            if other.st_mtime_ns >= stat.st_mtime_ns:  # (older than its file: stale)
                variants[encoding] = Variant(encoding, etag + ETAG_SUFFIXES[encoding], other.st_size, path=beside)
        if len(variants) > 1 or stat.st_size > MEMORY_LIMIT:
            return Encoded(variants)
        cached = self._memory.get(path)
        if cached is None or cached[0] != key:
            data = await asyncio.to_thread(path.read_bytes)
            cached = (key, await asyncio.to_thread(Encoded.of_bytes, data, etag))
            self._memory[path] = cached
        return cached[1]


async def compressed_json(request_headers: Any, body: BaseModel, status: int = 200) -> Response:
    """``body`` as JSON (camelCase, serialized by pydantic-core: a sixth of the time of a dict
    through json.dumps, for the largest answers there are), gzipped (level GZIP_LEVEL) when the
    client accepts gzip and it is worth it."""
    return await compressed_json_bytes(request_headers, body.model_dump_json(by_alias=True).encode(), status)


async def compressed_json_bytes(request_headers: Any, data: bytes, status: int = 200) -> Response:
    """JSON already serialized, gzipped as ``compressed_json``."""
    headers = {"Vary": "Accept-Encoding"}
    if len(data) >= MIN_COMPRESS_BYTES and negotiate(request_headers.get("Accept-Encoding"), ["gzip"]) == "gzip":
        if len(data) >= THREAD_BYTES:
            data = await asyncio.to_thread(_gzip, data, GZIP_LEVEL)
        else:
            data = _gzip(data, GZIP_LEVEL)
        headers["Content-Encoding"] = "gzip"
    return Response(data, status=status, content_type="application/json", headers=headers)
