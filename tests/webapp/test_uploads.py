"""The upload engine (webapp/uploads.py) under CPython, against the real server app in-process:
a file goes in chunks and the server has it whole; a file the server has already is sent no more
(another message, another device); a cut-off upload resumes from the server's offset; bytes that
are not the file, and a file over the server's limit, fail with a sentence; offline files wait,
never fail; and, whatever the cuts and reloads, each file reaches the server once."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from quart import Quart

from server.app import create_app
from server.config import Settings
from shared.models import Attachment, EventType, Message
from tests.conftest import QUICK_PASSWORDS
from tests.waiting import loop_turn, until
from tests.webapp.devices import Device, T
from tests.webapp.inprocess import InProcessTransport
from webapp import uploads
from webapp.transport import NetworkError, ServerError
from webapp.uploads import GONE, MAX_ATTEMPTS, NOT_THE_FILE, Chunk, UploadEngine

MiB = 1024 * 1024


@pytest.fixture(autouse=True)
def chunks_of_one_mib(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests' files are a few chunks of 1 MiB (the engine sends a file in one request up to
    64 MiB, the most the server takes in one: test_a_file_goes_in_one_request_up_to_the_most_the_server_takes)."""
    monkeypatch.setattr(uploads, "MAX_CHUNK_BYTES", MiB)
USERS = itertools.count(1)


def settings_for(database_url: str, **overrides: Any) -> Settings:
    return Settings(
        **QUICK_PASSWORDS,
        database_url=database_url, rate_limit_per_minute=0, auth_rate_limit_per_minute=0, compact_interval_seconds=0, **overrides
    )


@pytest.fixture
async def app(database_url: str) -> AsyncIterator[Quart]:
    app = create_app(settings_for(database_url))
    async with app.test_app():
        yield app


async def new_account(app: Quart) -> tuple[str, str]:
    """A new account: its username and a session's token."""
    username = f"uploader{next(USERS)}"
    response = await app.test_client().post("/auth/signup", json={"username": username, "password": "long enough"})
    return username, (await response.get_json())["token"]


async def login(app: Quart, username: str) -> str:
    response = await app.test_client().post("/auth/login", json={"username": username, "password": "long enough"})
    token: str = (await response.get_json())["token"]
    return token


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def attachment(data: bytes, name: str = "photo.jpg") -> Attachment:
    return Attachment(sha256=sha(data), name=name, mime="image/jpeg", size=len(data))


def pattern(size: int, seed: int = 0) -> bytes:
    """``size`` bytes unlike any other seed's (and no two chunks alike)."""
    block = hashlib.sha256(str(seed).encode()).digest()
    return (block * (size // len(block) + 1))[:size]


class Source:
    """The device's files, by SHA-256 (the page's IndexedDB), with every read recorded."""

    def __init__(self, files: dict[str, bytes] | None = None) -> None:
        self.files = dict(files or {})
        self.reads: list[tuple[str, int, int]] = []

    def add(self, data: bytes) -> None:
        self.files[sha(data)] = data

    async def size(self, sha256: str) -> int | None:
        data = self.files.get(sha256)
        return None if data is None else len(data)

    async def read(self, sha256: str, offset: int, length: int) -> Chunk:
        self.reads.append((sha256, offset, length))
        data = self.files[sha256][offset : offset + length]
        return Chunk(len(data), data)


class Network:
    """A device's transport with its blob requests counted: the PATCH bodies the server got, per
    file, and their offsets. ``cut`` lists what goes wrong with the next blob requests, one each:
    "request" (it never reaches the server), "answer" (the server gets it, the answer is lost),
    "refused" (an error answer that may pass, as a 429 does), "quiet" (no answer ever: a HEAD on
    a connection left half-open), or "ok"."""

    def __init__(self, inner: InProcessTransport) -> None:
        self.inner = inner
        self.received: Counter[str] = Counter()
        self.offsets: list[int] = []
        self.heads = 0
        self.cut: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def blob_offset(self, sha256: str) -> tuple[int, int] | None:
        self.heads += 1
        cut = self.cut.pop(0) if self.cut else None
        if cut == "refused":
            raise ServerError("Too many requests: try again in a minute.")
        if cut == "request":
            raise NetworkError("the request was lost")
        if cut == "quiet":
            await asyncio.Event().wait()
        progress = await self.inner.blob_offset(sha256)
        if cut == "answer":
            raise NetworkError("the answer was lost")
        return progress

    async def blob_append(
        self, sha256: str, offset: int, length: int, chunk: bytes, progress: Callable[[int], None] | None = None
    ) -> int:
        cut = self.cut.pop(0) if self.cut else None
        if cut == "request":
            raise NetworkError("the request was lost")
        self.offsets.append(offset)
        if not self.inner.offline:
            self.received[sha256] += len(chunk)
        new_offset = await self.inner.blob_append(sha256, offset, length, chunk, progress)
        if cut == "answer":
            raise NetworkError("the answer was lost")
        return new_offset

    @property
    def patches(self) -> int:
        return len(self.offsets)


async def no_wait(delay: float) -> None:
    await asyncio.sleep(0)


class Uploader:
    """A device (its database file, tests/webapp/devices.py) with an upload engine over a counted
    network, and its files."""

    def __init__(self, app: Quart, token: str, path: Path, source: Source | None = None) -> None:
        self.device = Device(app, token, path)
        self.source = source or Source()
        self.start()

    def start(self) -> None:
        self.network = network = Network(self.device.transport)
        self.engine = UploadEngine(self.device.store, network, self.source, sleep=no_wait)  # type: ignore[arg-type]

    def reload(self) -> None:
        """The tab is closed and opened again: a new store on the same file, a new engine."""
        self.device.reload()
        self.start()

    @property
    def store(self) -> Any:
        return self.device.store

    async def attach(self, *files: bytes) -> None:
        for data in files:
            self.source.add(data)
        await self.store.enqueue_uploads([attachment(data) for data in files])

    async def download(self, digest: str) -> bytes | None:
        response = await self.device.transport.client.get(f"/blobs/{digest}", headers=self.device.transport.headers)
        return await response.get_data() if response.status_code == 200 else None


async def test_a_file_goes_in_chunks_and_the_server_then_has_it_whole(app: Quart, tmp_path: Path) -> None:
    _, token = await new_account(app)
    a = Uploader(app, token, tmp_path / "a.db")
    data = pattern(3 * MiB + MiB // 2)
    await a.attach(data)
    assert a.store.upload_state(sha(data)).sentence == "Waiting for the connection"
    assert await a.engine.upload_all()
    assert a.network.offsets == [0, MiB, 2 * MiB, 3 * MiB]
    assert a.network.received[sha(data)] == len(data)
    assert max(length for _, _, length in a.source.reads) == MiB  # never the whole file at once
    state = a.store.upload_state(sha(data))
    assert (state.state, state.percent, state.sentence, state.error) == ("done", 100, "Uploaded", None)
    assert a.store.queued_uploads() == []
    assert await a.download(sha(data)) == data


async def test_a_file_goes_in_one_request_up_to_the_most_the_server_takes(
    app: Quart, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One PATCH (a request costs a round trip and the server's fsync), as tus-js-client sends a
    file; its progress is the transport's, drawn as it moves (below)."""
    monkeypatch.setattr(uploads, "MAX_CHUNK_BYTES", 64 * MiB)
    _, token = await new_account(app)
    a = Uploader(app, token, tmp_path / "a.db")
    data = pattern(6 * MiB + MiB // 2)
    await a.attach(data)
    assert await a.engine.upload_all()
    assert a.network.offsets == [0] and a.source.reads == [(sha(data), 0, len(data))]
    assert await a.download(sha(data)) == data


async def test_an_uploads_progress_is_the_transports_drawn_at_most_every_quarter_second(
    app: Quart, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the request has sent (the browser's upload events) is what the file says, written
    down and drawn PROGRESS_DRAW_SECONDS after it moves, its moves meanwhile drawn once; done is
    drawn at once."""
    monkeypatch.setattr(uploads, "MAX_CHUNK_BYTES", 64 * MiB)
    monkeypatch.setattr(uploads, "PROGRESS_DRAW_SECONDS", 0.05)
    _, token = await new_account(app)
    a = Uploader(app, token, tmp_path / "a.db")
    data = pattern(4 * MiB)
    await a.attach(data)
    drawn: list[str] = []
    a.engine = UploadEngine(a.store, a.network, a.source, on_change=lambda digest: drawn.append(a.store.upload_state(digest).sentence), sleep=no_wait)  # type: ignore[arg-type]
    real = a.network.inner.blob_append

    async def in_steps(digest: str, offset: int, length: int, chunk: bytes, progress: Callable[[int], None] | None = None) -> int:
        assert progress is not None
        for part in (1, 2, 3):  # (three moves at once: drawn once)
            progress(part * MiB // 4)
        await asyncio.sleep(0.15)
        assert drawn == ["Uploading 18%"]  # (3/16 of the file)
        progress(3 * MiB)
        await asyncio.sleep(0.15)
        answered = await real(digest, offset, length, chunk)
        progress(4 * MiB)  # (answered at once after the last: done drawn over it)
        return answered

    a.network.inner.blob_append = in_steps  # type: ignore[method-assign]
    assert await a.engine.upload_all()
    assert drawn == ["Uploading 18%", "Uploading 75%", "Uploaded"]  # (the last move, then done at once)
    await asyncio.sleep(0.15)
    assert drawn[-1] == "Uploaded" and len(drawn) == 3  # (no late progress drawn over it)


async def test_a_file_the_server_has_is_sent_no_more_from_another_message_or_device(app: Quart, tmp_path: Path) -> None:
    username, token = await new_account(app)
    a = Uploader(app, token, tmp_path / "a.db")
    data = pattern(MiB + 10)
    await a.attach(data)
    await a.attach(data)  # the same file in a second message, before the first went: one upload
    assert len(a.store.queued_uploads()) == 1
    assert await a.engine.upload_all()
    assert a.network.received[sha(data)] == len(data) and a.network.patches == 2

    await a.attach(data)  # a third message, once it is on the server: asked (HEAD), not sent
    assert a.store.upload_state(sha(data)).state == "waiting"
    heads = a.network.heads
    assert await a.engine.upload_all()
    assert a.network.patches == 2 and a.network.heads == heads + 1
    assert a.store.upload_state(sha(data)).state == "done"

    b = Uploader(app, await login(app, username), tmp_path / "b.db")  # another device of the account
    await b.attach(data)
    assert await b.engine.upload_all()
    assert b.network.patches == 0 and b.source.reads == []
    assert b.store.upload_state(sha(data)).state == "done"

    _, other = await new_account(app)  # another account sends the bytes itself (a digest is not the file)
    c = Uploader(app, other, tmp_path / "c.db")
    await c.attach(data)
    assert await c.engine.upload_all()
    assert c.network.received[sha(data)] == len(data)


@pytest.mark.parametrize("lost", ["request", "answer"])
async def test_a_cut_off_upload_resumes_from_the_servers_offset(app: Quart, tmp_path: Path, lost: str) -> None:
    _, token = await new_account(app)
    a = Uploader(app, token, tmp_path / "a.db")
    data = pattern(3 * MiB + MiB // 2)
    await a.attach(data)
    a.network.cut = ["ok", "ok", lost]  # the HEAD and the first chunk go; the second is cut off
    with pytest.raises(NetworkError):
        await a.engine.upload_all()
    state = a.store.upload_state(sha(data))
    assert (state.state, state.percent, state.sentence) == ("uploading", 28, "Uploading 28%")  # 1 MiB of 3.5

    a.reload()  # the browser is killed: a new engine on the same database file
    assert await a.engine.upload_all()
    on_server = 2 * MiB if lost == "answer" else MiB  # (what the server has, not what the device had heard)
    assert a.network.offsets[0] == on_server
    assert a.network.received[sha(data)] == len(data) - on_server
    assert a.store.upload_state(sha(data)).state == "done"
    assert await a.download(sha(data)) == data


async def test_a_chunk_the_server_has_from_elsewhere_is_not_sent_again(app: Quart, tmp_path: Path) -> None:
    """Between the HEAD and the PATCH another tab of the device sent the first chunk: the 409
    says so, and the upload goes on from the server's offset."""
    _, token = await new_account(app)
    a = Uploader(app, token, tmp_path / "a.db")
    data = pattern(2 * MiB + 1)
    await a.attach(data)
    real = a.network.inner.blob_append

    async def other_tab_first(digest: str, offset: int, length: int, chunk: bytes, progress: object = None) -> int:
        if a.network.patches == 1:
            await real(digest, 0, length, data[:MiB])
        return await real(digest, offset, length, chunk)

    a.network.inner.blob_append = other_tab_first  # type: ignore[method-assign]
    assert await a.engine.upload_all()
    assert a.network.offsets == [0, MiB, 2 * MiB] and a.network.heads == 2
    assert a.store.upload_state(sha(data)).state == "done"
    assert await a.download(sha(data)) == data


async def test_a_refusal_that_may_pass_is_tried_again_and_fails_only_at_the_last_attempt(app: Quart, tmp_path: Path) -> None:
    _, token = await new_account(app)
    a = Uploader(app, token, tmp_path / "a.db")
    passing, lasting = pattern(100), pattern(100, seed=1)
    await a.attach(passing)
    a.network.cut = ["refused"] * (MAX_ATTEMPTS - 1)
    for _ in range(MAX_ATTEMPTS - 1):
        assert not await a.engine.upload_all()  # (not settled: run() backs off and tries again)
        assert a.store.upload_state(sha(passing)).state == "waiting"
    assert await a.engine.upload_all()
    assert a.store.upload_state(sha(passing)).state == "done"

    await a.attach(lasting)
    a.network.cut = ["refused"] * MAX_ATTEMPTS
    for _ in range(MAX_ATTEMPTS - 1):
        assert not await a.engine.upload_all()
    assert await a.engine.upload_all()
    state = a.store.upload_state(sha(lasting))
    assert (state.state, state.error) == ("failed", "Too many requests: try again in a minute.")
    assert await a.store.retry_upload(sha(lasting))
    assert await a.engine.upload_all()
    assert a.store.upload_state(sha(lasting)).state == "done"


async def test_bytes_that_are_not_the_file_fail_and_a_retry_uploads_the_right_ones(app: Quart, tmp_path: Path) -> None:
    _, token = await new_account(app)
    a = Uploader(app, token, tmp_path / "a.db")
    data = pattern(MiB + 100)
    await a.store.enqueue_uploads([attachment(data)])
    a.source.files[sha(data)] = pattern(len(data), seed=1)  # the device's bytes under that name are another file's
    assert await a.engine.upload_all()
    state = a.store.upload_state(sha(data))
    assert (state.state, state.sentence, state.error) == ("failed", "Upload failed", NOT_THE_FILE)
    assert a.network.received[sha(data)] == len(data)  # (the server checks the whole, at its last byte)
    assert await a.download(sha(data)) is None
    assert await a.engine.upload_all() and a.network.patches == 2  # a failed file is not tried again by itself

    a.source.files[sha(data)] = pattern(len(data), seed=2)[:-1]  # not even its size: refused before a byte goes
    assert await a.store.retry_upload(sha(data))
    assert await a.engine.upload_all()
    assert a.store.upload_state(sha(data)).error == NOT_THE_FILE and a.network.patches == 2

    del a.source.files[sha(data)]
    assert await a.store.retry_upload(sha(data))
    assert await a.engine.upload_all()
    assert a.store.upload_state(sha(data)).error == GONE

    a.source.add(data)  # the right file, and retried: it goes from the start (the server discarded the other)
    assert await a.store.retry_upload(sha(data))
    assert not await a.store.retry_upload(sha(data))  # (waiting already)
    assert a.store.upload_state(sha(data)).state == "waiting"
    assert await a.engine.upload_all()
    assert a.network.offsets[2:] == [0, MiB]
    assert a.store.upload_state(sha(data)).state == "done"
    assert await a.download(sha(data)) == data


async def test_a_file_over_the_servers_limit_fails_with_the_servers_words(database_url: str, tmp_path: Path) -> None:
    app = create_app(settings_for(database_url, max_file_bytes=1000))
    async with app.test_app():
        _, token = await new_account(app)
        a = Uploader(app, token, tmp_path / "a.db")
        large, small = pattern(2000), pattern(1000, seed=1)
        await a.attach(large, small)
        assert await a.engine.upload_all()
        state = a.store.upload_state(sha(large))
        assert (state.state, state.sentence) == ("failed", "Upload failed")
        assert state.error is not None and "too large" in state.error and "1,000 bytes" in state.error
        assert a.network.patches == 2  # one refused, then the next file, whole
        assert a.store.upload_state(sha(small)).state == "done"


async def test_offline_files_wait_never_fail_and_go_once_online(app: Quart, tmp_path: Path) -> None:
    _, token = await new_account(app)
    a = Uploader(app, token, tmp_path / "a.db")
    data = pattern(MiB // 2)
    await a.attach(data)
    await a.device.transport.go_offline()
    seen: list[str] = []
    delays: list[float] = []

    async def backoff(delay: float) -> None:
        delays.append(delay)
        seen.append(a.store.upload_state(sha(data)).state)
        if len(delays) == 4:
            a.device.transport.offline = False
        await asyncio.sleep(0)

    engine = UploadEngine(
        a.store, a.network, a.source, on_change=lambda digest: seen.append(a.store.upload_state(digest).state),  # type: ignore[arg-type]
        min_backoff=1.0, max_backoff=4.0, sleep=backoff,
    )  # fmt: skip
    task = asyncio.ensure_future(engine.run())
    try:
        await until(lambda: a.store.upload_state(sha(data)).state == "done", lambda: seen)
    finally:
        task.cancel()
    assert seen[:4] == ["waiting"] * 4 and "failed" not in seen
    assert 0.5 <= delays[0] <= 1.0 and 1.0 <= delays[1] <= 2.0 and 2.0 <= delays[3] <= 4.0  # exponential, with jitter
    assert await a.download(sha(data)) == data


async def test_a_messages_files_go_once_the_message_has_reached_the_server_or_a_while_after(
    app: Quart, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass of uploads waits for the sync engine's push of what was saved before it (the
    message first: its upload does not take the network, the server and the page's thread from
    it), at most ``within`` seconds (offline, a server slow to take it); with nothing to push it
    goes at once."""
    _, token = await new_account(app)
    a = Uploader(app, token, tmp_path / "a.db")
    pushes: list[int] = []  # the HEADs sent before each push
    submit = a.device.transport.submit

    async def counted(events: Any) -> Any:
        pushes.append(a.network.heads)
        return await submit(events)

    monkeypatch.setattr(a.device.transport, "submit", counted)
    waiting = asyncio.Event()

    def engine(within: float) -> UploadEngine:
        async def events_first() -> None:
            waiting.set()
            await a.device.engine.pushed(within)

        return UploadEngine(a.store, a.network, a.source, sleep=no_wait, events_first=events_first)  # type: ignore[arg-type]

    async def send(data: bytes) -> None:
        chat = await a.device.new_chat()
        message = Message(id=str(uuid.uuid4()), chat_id=chat, role="user", content="", attachments=(attachment(data),), created_at=T)
        await a.attach(data)
        await a.device.add(EventType.MESSAGE_APPENDED, message)

    first, second, third = pattern(1000, seed=1), pattern(1000, seed=2), pattern(1000, seed=3)
    await send(first)
    task = asyncio.ensure_future(engine(60.0).run())
    try:
        await until(lambda: waiting.is_set() or a.network.heads, "a pass of uploads")
        await loop_turn()
        assert a.network.heads == 0  # (waiting for the push)
        await a.device.engine.push()
        await until(lambda: a.store.upload_state(sha(first)).state == "done", lambda: a.store.upload_state(sha(first)))
        assert pushes == [0] and a.network.heads == 1
    finally:
        task.cancel()
    await a.attach(second)  # (nothing left to push: it goes at once, not in 60 s)
    task = asyncio.ensure_future(engine(60.0).run())
    try:
        await until(lambda: a.store.upload_state(sha(second)).state == "done", lambda: a.store.upload_state(sha(second)))
    finally:
        task.cancel()
    await send(third)  # (never pushed: it goes after ``within``)
    task = asyncio.ensure_future(engine(0.2).run())
    try:
        await until(lambda: a.store.upload_state(sha(third)).state == "done", lambda: a.store.upload_state(sha(third)))
    finally:
        task.cancel()
    assert a.store.pending_count() == 2 and pushes == [0]  # (the chat and its message, still here)
    for data in (first, second, third):
        assert await a.download(sha(data)) == data


async def test_a_head_never_answered_is_given_up_and_the_file_still_goes(app: Quart, tmp_path: Path) -> None:
    """A HEAD on a connection left half-open (a phone that changed networks) never answers: the
    engine gives it up after ``head_seconds`` as the network's failure and goes on, where every
    upload waited for it for good."""
    _, token = await new_account(app)
    a = Uploader(app, token, tmp_path / "a.db")
    data = pattern(MiB // 2)
    await a.attach(data)
    a.network.cut = ["quiet"]
    a.engine.head_seconds = 0.2
    task = asyncio.ensure_future(a.engine.run())
    try:
        await until(lambda: a.store.upload_state(sha(data)).state == "done", lambda: a.store.upload_state(sha(data)))
    finally:
        task.cancel()
    assert a.network.heads == 2 and await a.download(sha(data)) == data


async def test_a_session_gone_stops_the_engine_and_keeps_the_files_waiting(app: Quart, tmp_path: Path) -> None:
    _, token = await new_account(app)
    a = Uploader(app, token, tmp_path / "a.db")
    data = pattern(100)
    await a.attach(data)
    await app.test_client().post("/auth/logout", headers={"Authorization": f"Bearer {token}"})
    await asyncio.wait_for(a.engine.run(), 10)  # (returns: the sync engine asks for the sign-in)
    assert a.engine.signed_out
    assert a.store.upload_state(sha(data)).state == "waiting"


async def test_another_account_signing_in_forgets_the_uploads(app: Quart, tmp_path: Path) -> None:
    from webapp.store import Account

    _, token = await new_account(app)
    a = Uploader(app, token, tmp_path / "a.db")
    await a.store.set_account(Account("one", "d1", "one"))
    await a.attach(pattern(100))
    await a.store.set_account(Account("two", "d2", "two"))
    assert a.store.queued_uploads() == []


STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("attach"), st.integers(0, 2)),
        st.tuples(st.just("cut"), st.lists(st.sampled_from(["ok", "request", "answer"]), min_size=1, max_size=4)),
        st.tuples(st.just("pass"), st.just(0)),
        st.tuples(st.just("reload"), st.just(0)),
    ),
    max_size=12,
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(1, 300), min_size=3, max_size=3), steps=STEPS)
async def test_whatever_the_cuts_and_reloads_each_file_reaches_the_server_once(
    app: Quart, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, sizes: list[int], steps: list[Any]
) -> None:
    monkeypatch.setattr(uploads, "MAX_CHUNK_BYTES", 64)  # (small files, many chunks)
    _, token = await new_account(app)
    files = [pattern(size, seed=n) for n, size in enumerate(sizes)]
    a = Uploader(app, token, tmp_path_factory.mktemp("device") / "a.db")
    attached: set[int] = set()
    received: Counter[str] = Counter()
    for step, value in steps:
        if step == "attach":
            await a.attach(files[value])
            attached.add(value)
        elif step == "cut":
            a.network.cut = list(value)
        elif step == "pass":
            try:
                await a.engine.upload_all()
            except NetworkError:
                pass
        else:
            received += a.network.received
            a.reload()
    a.network.cut = []
    assert await a.engine.upload_all()
    received += a.network.received
    for n in attached:
        digest = sha(files[n])
        assert a.store.upload_state(digest).state == "done"
        assert await a.download(digest) == files[n]
        assert received[digest] == len(files[n])  # every byte once: a resumed upload goes on from the server's offset
    assert set(received) == {sha(files[n]) for n in attached}
    a.device.store.close()


async def test_two_devices_uploading_the_same_file_at_once_both_end_with_it_held(app: Quart, tmp_path: Path) -> None:
    """Whichever request completes the upload, the other (a HEAD or a PATCH of the other device
    in the same moment) is answered with the file held, never a server error: between the
    store's completion and the account's holding of the blob, the other finds no upload."""
    username, token = await new_account(app)
    a = Uploader(app, token, tmp_path / "a.db")
    b = Uploader(app, await login(app, username), tmp_path / "b.db")
    for seed in range(12):
        data = pattern(MiB + MiB // 2 + seed, seed=100 + seed)
        await a.attach(data)
        await b.attach(data)
        settled = await asyncio.gather(a.engine.upload_all(), b.engine.upload_all())
        assert settled == [True, True]
        assert a.store.upload_state(sha(data)).state == "done" and b.store.upload_state(sha(data)).state == "done"
        assert await a.download(sha(data)) == data
