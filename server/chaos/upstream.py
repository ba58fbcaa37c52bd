"""A fake OpenAI-compatible chat-completions service, for the tests and for ``python -m server
chaos``: server-sent events over plain HTTP/1.1 on a real loopback port, so the server under test
(in-process or a process of its own) calls it exactly as it would call a real one.

``mode``: ``ok`` (the answer, its finish reason, then the usage, then ``[DONE]``; a request's
``max_tokens`` cuts the answer at that many pieces, finishing ``length``), ``502``, ``stall`` (a few words,
then nothing), ``broken`` (half the answer, then the connection closes). ``delay`` paces the words.
The answer is ``words`` words ("word0 word1 ..."), or ``text`` (``{n}`` in it: the call's number)
streamed a word at a time with the spaces and line breaks before each.
``hold``, while it is not set, stops every answer after its first word (a run held mid-answer for
as long as a test needs: mind the server's upstream timeout). ``calls`` counts the requests;
``requests`` keeps their bodies (unless ``keep_requests`` is False); ``disconnects`` counts the
streams the client closed before the end. For the chaos run: ``modes`` gives a model (the
request's ``model``) a mode of its own, ``override`` (a nemesis) puts every model in one mode for
a while, and ``on_call`` is told of each call (the request's body, the mode it got).
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

CORS = (
    b"Access-Control-Allow-Origin: *\r\nAccess-Control-Allow-Methods: POST\r\n"
    b"Access-Control-Allow-Headers: content-type, authorization\r\n"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def answer_words(count: int = 30) -> list[str]:
    return [f"word{i}" for i in range(count)]


def full_answer(count: int = 30) -> str:
    return " ".join(answer_words(count))


@dataclass
class FakeUpstream:
    mode: str = "ok"
    delay: float = 0.01
    words: int = 30
    text: str | None = None
    hold: asyncio.Event | None = None
    calls: int = 0
    sent: int = 0  # pieces of answers written so far, all calls together
    disconnects: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)
    port: int = field(default_factory=free_port)
    modes: dict[str, str] = field(default_factory=dict)
    override: str | None = None
    keep_requests: bool = True
    on_call: Callable[[dict[str, Any], str], None] | None = None
    thread_loop: asyncio.AbstractEventLoop | None = None  # (its own, when started in a thread)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def config(self, assistant_id: str = "fake") -> str:
        """The CHAT_ASSISTANTS text naming this upstream."""
        return json.dumps(
            [{"id": assistant_id, "name": "Fake", "provider": "openai", "baseUrl": self.base_url, "model": "fake-1"}]
        )

    async def start(self) -> asyncio.Server:
        return await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    def start_in_thread(self) -> None:
        """For tests whose own loop does not run while they wait (a server in a subprocess)."""
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(self.start())
            ready.set()
            loop.run_forever()

        threading.Thread(target=run, daemon=True).start()
        ready.wait(10)
        self.thread_loop = loop

    @contextmanager
    def held_from_thread(self) -> Iterator[None]:
        """From the test's thread, with the service in its own (``start_in_thread``): the answers
        begun inside wait after their first word until the block ends, then go on."""
        self._in_its_thread(lambda: setattr(self, "hold", asyncio.Event()))

        def release() -> None:
            if self.hold is not None:
                self.hold.set()
            self.hold = None

        try:
            yield
        finally:
            self._in_its_thread(release)

    def _in_its_thread(self, change: Callable[[], None]) -> None:
        """``change`` made on the service's own loop, and done when this returns."""
        assert self.thread_loop is not None
        done = threading.Event()

        def run() -> None:
            change()
            done.set()

        self.thread_loop.call_soon_threadsafe(run)
        done.wait(10)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")),
                0,
            )
            body = json.loads(await reader.readexactly(length)) if length else {}
            if head.startswith(b"OPTIONS"):  # a browser's CORS preflight (a model on "this device")
                writer.write(b"HTTP/1.1 204 No Content\r\n" + CORS + b"Content-Length: 0\r\nConnection: close\r\n\r\n")
                await writer.drain()
                return
            self.calls += 1
            mode = self.override or self.modes.get(str(body.get("model")), self.mode)
            if self.keep_requests:
                self.requests.append(body)
            if self.on_call is not None:
                self.on_call(body, mode)
            if mode == "502":
                writer.write(b"HTTP/1.1 502 Bad Gateway\r\n" + CORS + b"Content-Length: 0\r\nConnection: close\r\n\r\n")
                await writer.drain()
                return
            writer.write(b"HTTP/1.1 200 OK\r\n" + CORS + b"Content-Type: text/event-stream\r\nConnection: close\r\n\r\n")
            words = self._pieces()
            limit = body.get("max_tokens")
            cut = isinstance(limit, int) and limit < len(words)
            if cut:
                words = words[:limit]
            for i, text in enumerate(words):
                if mode == "stall" and i == 3:
                    await asyncio.sleep(3600)
                if mode == "broken" and i == len(words) // 2:
                    return
                await self._event(writer, {"choices": [{"index": 0, "delta": {"content": text}}]})
                self.sent += 1
                if i == 0 and self.hold is not None:
                    await self.hold.wait()
                await asyncio.sleep(self.delay)
            finish = "length" if cut else "stop"
            await self._event(writer, {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
            await self._event(writer, {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": len(words)}})
            writer.write(b"data: [DONE]\n\n")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            self.disconnects += 1
        except asyncio.CancelledError:  # (the loop is closing: a stalled answer ends here, quietly)
            pass
        finally:
            writer.close()

    def _pieces(self) -> list[str]:
        if self.text is None:
            return [word if i == 0 else " " + word for i, word in enumerate(answer_words(self.words))]
        return re.findall(r"\s*\S+", self.text.replace("{n}", str(self.calls)))

    @staticmethod
    async def _event(writer: asyncio.StreamWriter, data: dict[str, Any]) -> None:
        writer.write(b"data: " + json.dumps(data).encode() + b"\n\n")
        await writer.drain()
