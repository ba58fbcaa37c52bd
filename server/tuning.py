"""Adjustments to the serving process, made once before it serves.

WebSocket compression: Hypercorn accepts permessage-deflate whenever a client offers it (browsers
always do), and each socket then keeps two zlib states: about 90 KiB of the ~125 KiB an idle
socket costs (measured with 2,000 sockets). Our frames are small JSON, so compression saves little
on the wire and costs most of the memory: the server declines it. Hypercorn has no setting for
this, so its module's name for the extension is pointed at a subclass that declines every offer.

Errors of HTTP itself: a request Hypercorn cannot parse (a malformed Content-Length, say) is
refused by Hypercorn before the app sees it, with an empty 400. It gets the API's JSON error and
``nosniff`` instead, like every other bad request (server/errors.py). Hypercorn has no setting for
this either, so its HTTP/1.1 protocol's method that writes that answer is replaced.

Garbage collection: a live socket is ~220 Python objects (Quart's, Hypercorn's, wsproto's, its
task), and a full collection walks every one of them: about 130 ms with 1,000 sockets on the
development VM, during which no frame goes out. With the default thresholds a fan-out burst made
one every few commits (the objects alive during a burst are promoted, and count towards the next
full collection even after they are freed). So the objects of start-up (modules, the app) are
frozen out of collections, and young collections and full ones are made rarer: unreachable cycles
are still collected, later.
"""

from __future__ import annotations

import gc
import json
from typing import Any

import h11
import hypercorn.protocol.ws_stream
from hypercorn.protocol.h11 import H11Protocol
from wsproto.extensions import PerMessageDeflate

from server.errors import HTTP_CODES, OTHER_CODE

GC_THRESHOLDS = (10_000, 10, 100)  # CPython's defaults: (700, 10, 10)


class _DeclinedDeflate(PerMessageDeflate):
    def accept(self, offer: str) -> None:
        return None


def decline_websocket_compression() -> None:
    setattr(hypercorn.protocol.ws_stream, "PerMessageDeflate", _DeclinedDeflate)  # noqa: B010 (not an exported name: mypy)


async def _json_error_response(self: Any, status_code: int) -> None:
    """Hypercorn's answer to a request it could not parse (``H11Protocol._send_error_response``),
    as the API's JSON error."""
    body = json.dumps(
        {"error": HTTP_CODES.get(status_code, OTHER_CODE), "message": "the request is not valid HTTP/1.1"}
    ).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"x-content-type-options", b"nosniff"),
        (b"connection", b"close"),
        *self.config.response_headers("h11"),
    ]
    await self._send_h11_event(h11.Response(status_code=status_code, headers=headers))
    await self._send_h11_event(h11.Data(data=body))
    await self._send_h11_event(h11.EndOfMessage())


def answer_protocol_errors_in_json() -> None:
    setattr(H11Protocol, "_send_error_response", _json_error_response)  # noqa: B010 (not a public method: mypy)


def tune_garbage_collection() -> None:
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
