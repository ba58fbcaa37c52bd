"""One adjustment to Hypercorn, made before serving.

Hypercorn accepts permessage-deflate whenever a client offers it (browsers always do), and each
socket then keeps two zlib states: about 90 KiB of the ~125 KiB an idle socket costs (measured
with 2,000 sockets). Our frames are small JSON, so compression saves little on the wire and costs
most of the memory: the server declines it. Hypercorn has no setting for this, so its module's
name for the extension is pointed at a subclass that declines every offer.
"""

from __future__ import annotations

import hypercorn.protocol.ws_stream
from wsproto.extensions import PerMessageDeflate


class _DeclinedDeflate(PerMessageDeflate):
    def accept(self, offer: str) -> None:
        return None


def decline_websocket_compression() -> None:
    setattr(hypercorn.protocol.ws_stream, "PerMessageDeflate", _DeclinedDeflate)
