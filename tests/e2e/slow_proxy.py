"""A TCP proxy in front of a test server, in a thread of its own, that can slow down what the
browser sends: a slow uplink, so that a test can kill the browser in the middle of one request's
body (an upload), with the bytes that went before it on the server. When the browser's side of a
connection goes, the proxy closes the server's side, as a cut connection does; ``hold()`` then
``cut()`` end every connection at once, what the browser had sent and the proxy not yet passed
on dropped (a browser killed has its last writes in the machine's socket buffers, megabytes on
loopback, which would otherwise reach the server after it)."""

from __future__ import annotations

import asyncio
import threading

from tests.processes import free_port


class SlowProxy:
    """``rate``: bytes a second from the browser to the server (None: as fast as they come).
    ``connections``: how many are open now."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.rate: float | None = None
        self.connections = 0
        self._held = False
        self._transports: set[asyncio.BaseTransport] = set()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> SlowProxy:
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("the proxy did not start")
        return self

    def hold(self) -> None:
        """Nothing more the browser sends goes on to the server."""
        self._held = True

    def cut(self) -> None:
        """Every connection ended at once (reset), what was held dropped; the next ones go as before."""

        async def cut() -> None:
            for transport in list(self._transports):
                transport.abort()
            self._held = False

        asyncio.run_coroutine_threadsafe(cut(), self._loop).result(10)

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def start() -> None:
            self._server = await asyncio.start_server(self._connection, "127.0.0.1", self.port)
            self._started.set()

        self._loop.run_until_complete(start())
        self._loop.run_forever()

    async def _connection(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            self.connections -= 1
            client_writer.close()
            return
        ends = {client_writer.transport, server_writer.transport}
        self._transports |= ends

        async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, slowed: bool) -> None:
            try:
                while data := await reader.read(16384 if slowed and self.rate else 65536):
                    if slowed and self.rate:
                        await asyncio.sleep(len(data) / self.rate)
                    while slowed and self._held and not writer.is_closing():
                        await asyncio.sleep(0.01)
                    writer.write(data)
                    await writer.drain()
            except ConnectionError:
                pass
            finally:
                writer.close()  # (the other side's end: its connection is cut too)

        try:
            await asyncio.gather(pump(client_reader, server_writer, True), pump(server_reader, client_writer, False))
        finally:
            self._transports -= ends
            self.connections -= 1
