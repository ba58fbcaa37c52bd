"""Attachments' bytes: uploads by tus 1.0 core, and downloads (docs/protocol.md, "Attachments").

The blob's URL is its content address, ``/blobs/{sha256}``, so no request creates an upload:
``HEAD`` says how far the account's upload is, ``PATCH`` appends at ``Upload-Offset`` (the
first chunk also says ``Upload-Length``), and the last byte completes it once its SHA-256 is
the one the URL names. ``GET`` downloads a blob the account holds. Every request but OPTIONS is
authenticated as the other routes are; every answer carries ``Tus-Resumable``."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncGenerator, AsyncIterator
from urllib.parse import quote

from quart import Blueprint, Response, request
from werkzeug.exceptions import RequestEntityTooLarge, RequestTimeout

from server.attachments import MAX_CHUNK_BYTES, LengthMismatch, LengthRequired, PastTheEnd, Progress, TooLarge
from server.blobs import IMAGE_TYPES, SNIFF_BYTES, HashMismatch, OffsetMismatch, first_bytes, sniff
from server.errors import ApiError
from server.routes import Parts, limit
from shared.models import SHA256_PATTERN

TUS_VERSION = "1.0.0"
CHUNK_TYPE = "application/offset+octet-stream"
# OPTIONS's answer to a session: the bytes its account may still upload (ours, in tus's style).
ACCOUNT_FREE = "Upload-Account-Free"
# What a downloaded blob may do in the browser: nothing (no script, no plugin, no form, no
# same-origin access), whatever it is. The page's own policy is server/headers.py's; a response
# with one of its own keeps it.
SANDBOX = "sandbox; default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'"
_SHA256 = re.compile(SHA256_PATTERN)
_UNSAFE_NAME = re.compile(r'[^A-Za-z0-9._ ()\[\]+-]')


def create_blueprint(parts: Parts) -> Blueprint:
    routes = Blueprint("blobs", __name__)
    attachments = parts.attachments

    @routes.after_request
    async def _tus(response: Response) -> Response:
        response.headers["Tus-Resumable"] = TUS_VERSION  # (on errors too: tus 1.0 asks it of every answer)
        return response

    def progress_headers(progress: Progress) -> dict[str, str]:
        return {"Upload-Offset": str(progress.offset), "Upload-Length": str(progress.length), "Cache-Control": "no-store"}

    def digest_of(sha256: str) -> str:
        if not _SHA256.fullmatch(sha256):
            raise ApiError(400, "bad_request", "A blob is named by the SHA-256 of its bytes: 64 lowercase hex digits.")
        return sha256

    def tus_request() -> None:
        if request.headers.get("Tus-Resumable") != TUS_VERSION:
            raise ApiError(
                412, "precondition_failed", f"Uploads speak tus {TUS_VERSION}: send the header Tus-Resumable: {TUS_VERSION}.",
                headers={"Tus-Version": TUS_VERSION},
            )  # fmt: skip

    def header_int(name: str, required: bool) -> int | None:
        raw = request.headers.get(name)
        if raw is None:
            if required:
                raise ApiError(400, "bad_request", f"A chunk needs the header {name}.")
            return None
        if not raw.isdigit() or len(raw) > 15:
            raise ApiError(400, "bad_request", f"{name} must be a number of bytes.")
        return int(raw)

    async def account_free() -> int | None:
        """With a session: how many more bytes the account may upload, counted as an upload's
        413 counts (what it holds and every upload it has under way); else None (OPTIONS needs
        no session, and a session refused here only leaves the figure out)."""
        try:
            session = await parts.session_of(request.headers, request.cookies)
            if session is None:
                return None
            limit(parts.sync_limiter, session.account_id)
        except ApiError:
            return None
        return await attachments.free_bytes(session.account_id)

    def not_found() -> ApiError:
        # (The same answer for a blob that does not exist and one the account does not hold:
        # no account can tell whether another has a file.)
        return ApiError(404, "not_found", "There is no such file here (or it has not been uploaded yet).")

    @routes.route("/blobs", methods=["OPTIONS"], provide_automatic_options=False)
    @routes.route("/blobs/<sha256>", methods=["GET", "HEAD", "PATCH", "OPTIONS"], provide_automatic_options=False)
    async def blob(sha256: str | None = None) -> Response:
        if request.method == "OPTIONS":  # (tus: what this server speaks; no session needed)
            headers = {"Tus-Version": TUS_VERSION, "Tus-Max-Size": str(attachments.max_file_bytes)}
            if (free := await account_free()) is not None:
                headers[ACCOUNT_FREE] = str(free)
            return Response(status=204, headers=headers)
        session = await parts.require_session()
        assert sha256 is not None
        digest = digest_of(sha256)
        if request.method == "GET":
            return await download(session.account_id, digest)
        tus_request()
        if request.method == "HEAD":
            progress = await attachments.progress(session.account_id, digest)
            if progress is None:
                raise not_found()
            return Response(status=200, headers=progress_headers(progress))
        return await append(session.account_id, digest)

    async def append(account_id: str, digest: str) -> Response:
        if request.mimetype != CHUNK_TYPE:
            raise ApiError(415, "unsupported_media_type", f"A chunk is sent as Content-Type: {CHUNK_TYPE}.")
        offset = header_int("Upload-Offset", required=True)
        length = header_int("Upload-Length", required=False)
        assert offset is not None
        too_large = ApiError(413, "payload_too_large", f"A chunk is at most {MAX_CHUNK_BYTES:,} bytes: send smaller ones.")
        if (request.content_length or 0) > MAX_CHUNK_BYTES:
            raise too_large
        # The body is stored as it comes (server/blobs.py: append_from), within the time Quart
        # gives a body (BODY_TIMEOUT), and counted as the store takes it.
        deadline = asyncio.get_running_loop().time() + (request.body_timeout or float("inf"))
        body = aiter(request.body)
        read = False  # (the body came to its end, or failed: nothing is left to drain)

        async def pieces() -> AsyncIterator[bytes]:
            nonlocal read
            while True:
                try:
                    async with asyncio.timeout_at(deadline):
                        piece = await anext(body)
                except StopAsyncIteration:
                    read = True
                    return
                except TimeoutError:
                    read = True
                    raise RequestTimeout() from None
                except RequestEntityTooLarge:
                    read = True
                    raise too_large from None
                parts.metrics.blob_bytes_received.inc(len(piece))
                yield piece

        storing = asyncio.ensure_future(
            attachments.append_from(account_id, digest, offset, length, pieces(), request.content_length)
        )
        try:
            try:
                progress = await asyncio.shield(storing)
            except asyncio.CancelledError:
                # The client went away (Quart cancels the request's handler): what came of the
                # chunk is all there will be, and it is stored (kept, durable) before this ends.
                request.body.set_complete()
                while not storing.done():
                    with contextlib.suppress(asyncio.CancelledError):
                        await asyncio.wait([storing])
                if not storing.cancelled():
                    storing.exception()  # (retrieved: the answer goes to no one)
                raise
            except Exception:
                if not read:
                    await drain(deadline)
                raise
            if not read:
                await drain(deadline)
        except OffsetMismatch as e:
            raise ApiError(
                409, "upload_offset_mismatch",
                f"The server has {e.offset:,} bytes of this upload, not {offset:,}: go on from there.",
                headers={"Upload-Offset": str(e.offset)}, offset=e.offset,
            ) from None  # fmt: skip
        except HashMismatch as e:
            raise ApiError(
                422, "blob_hash_mismatch",
                "The bytes uploaded are not the file this upload is named by (their SHA-256 is "
                f"{e.actual}), so they were discarded: upload the file again from the start.",
                sha256=e.actual,
            ) from None  # fmt: skip
        except TooLarge as e:
            raise ApiError(413, "payload_too_large", f"The file is too large: {e}.", limit=e.limit) from None
        except (LengthRequired, LengthMismatch, PastTheEnd) as e:
            raise ApiError(400, "bad_request", f"This chunk does not fit the upload: {e}.") from None
        return Response(status=204, headers=progress_headers(progress))

    async def drain(deadline: float) -> None:
        """The rest of a chunk answered before its end (refused, or a blob held already): read
        and dropped, so the client, still sending it, gets the answer rather than a reset."""
        try:
            async with asyncio.timeout_at(deadline):
                async for _ in request.body:
                    pass
        except (TimeoutError, RequestEntityTooLarge):
            pass  # (the connection goes: Quart answers no more of it)

    async def download(account_id: str, digest: str) -> Response:
        size = await attachments.held_size(account_id, digest)
        if size is None:
            raise not_found()
        etag = f'"{digest}"'
        cache = {"ETag": etag, "Cache-Control": "private, max-age=31536000, immutable"}
        if etag in request.headers.get("If-None-Match", ""):
            return Response(status=304, headers=cache)
        kind = sniff(await first_bytes(attachments.blobs, digest, SNIFF_BYTES))
        name = request.args.get("name") or await attachments.name_of(account_id, digest) or digest
        disposition = "inline" if kind in IMAGE_TYPES else "attachment"

        async def body() -> AsyncGenerator[bytes, None]:
            async for piece in attachments.read(digest):
                yield piece

        return Response(
            body(),
            content_type=kind,
            headers={
                **cache,
                "Content-Length": str(size),
                "Content-Disposition": f"{disposition}; {filename(name)}",
                "Content-Security-Policy": SANDBOX,
            },
        )

    return routes


def filename(name: str) -> str:
    """The filename parameters of a Content-Disposition (RFC 6266): a plain ASCII one, and the
    name itself in UTF-8 (RFC 8187) for the browsers that read it."""
    plain = _UNSAFE_NAME.sub("_", name)[:200] or "file"
    return f"filename=\"{plain}\"; filename*=UTF-8''{quote(name[:200], safe='')}"
