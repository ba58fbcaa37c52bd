"""Adjustments to the serving process, made once before it serves.

WebSocket compression: Hypercorn accepts permessage-deflate whenever a client offers it (browsers
always do), and each socket then keeps two zlib states: about 90 KiB of the ~125 KiB an idle
socket costs (measured with 2,000 sockets). Our frames are small JSON, so compression saves little
on the wire and costs most of the memory: the server declines it. Hypercorn has no setting for
this, so its module's name for the extension is pointed at a subclass that declines every offer.

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

import hypercorn.protocol.ws_stream
from wsproto.extensions import PerMessageDeflate

GC_THRESHOLDS = (10_000, 10, 100)  # CPython's defaults: (700, 10, 10)


class _DeclinedDeflate(PerMessageDeflate):
    def accept(self, offer: str) -> None:
        return None


def decline_websocket_compression() -> None:
    setattr(hypercorn.protocol.ws_stream, "PerMessageDeflate", _DeclinedDeflate)  # noqa: B010 (not an exported name: mypy)


def tune_garbage_collection() -> None:
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
