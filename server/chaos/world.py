"""The chaos run's world, on loopback only: N ``python -m server serve`` processes (Hypercorn) on
one PostgreSQL database, each in a schema of its own making (so a deployment's database can be
named: its tables are never touched), or one on SQLite in a temporary folder; and a fake
OpenAI-compatible model service (upstream.py) with a paced model, a failing one (its stream
breaks off) and a stalling one (it stops sending), which the servers' assistants call.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import asyncpg

from server.chaos.checker import tag_of
from server.chaos.history import History
from server.chaos.upstream import FakeUpstream, free_port
from server.config import ROOT

# The servers' assistants: one model each of the fake service, in the mode its name says.
ASSISTANTS = {"paced": "ok", "failing": "broken", "stalling": "stall"}
# Short enough that a stall, a paused process's lease and a retention end within a short run.
SERVER_SETTINGS = {
    "CHAT_UPSTREAM_TIMEOUT_SECONDS": "4",
    "CHAT_RUN_LEASE_SECONDS": "3",
    "CHAT_RUN_POLL_SECONDS": "0.5",
    "CHAT_RUN_CHECKPOINT_SECONDS": "0.5",
    "CHAT_PING_SECONDS": "5",
    "CHAT_SESSION_CACHE_SECONDS": "1",
    "CHAT_RATE_LIMIT_PER_MINUTE": "1000000",
    "CHAT_AUTH_RATE_LIMIT_PER_MINUTE": "1000000",
    "CHAT_COMPACT_INTERVAL_SECONDS": "100000",  # (the nemesis compacts)
}
# What the nemesis's compaction keeps of the log: the rest is truncated (cursors below it expire).
RETENTION_SECONDS = 5
# How old a superseded event must be for that compaction to remove it: longer than a server is
# paused (nemesis.py: 7 s at most) and than the live delivery lags on a loaded machine. (With 2 s,
# a socket of a process paused past it, or one slow to deliver, skipped the superseded events
# removed meanwhile: a gap after caughtUp, which the engine fills by pulling, but a broken promise
# of docs/protocol.md all the same; the default grace is 60 s.)
GRACE_SECONDS = 20


class ServerProcess:
    """One ``python -m server serve``; killed, paused and restarted on the same port."""

    def __init__(self, name: str, database_url: str, log: Path, env: dict[str, str]) -> None:
        self.name = name
        self.port = free_port()
        self.database_url = database_url
        self.log = log
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None
        self.paused = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        for _ in range(5):
            if self._start():
                return
            self.port = free_port()
        raise RuntimeError(f"{self.name} did not start: {self.log.read_text(errors='replace')[-2000:]}")

    def _start(self) -> bool:
        env = {**os.environ, **self.env, "CHAT_PORT": str(self.port), "CHAT_DATABASE_URL": self.database_url}
        logged = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "server", "serve"], cwd=ROOT, env=env, stdout=log, stderr=log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                if "Address already in use" in self.log.read_bytes()[logged:].decode(errors="replace"):
                    return False
                raise RuntimeError(f"{self.name} exited: {self.log.read_text(errors='replace')[-2000:]}")
            try:
                urllib.request.urlopen(self.url + "/healthz", timeout=1)
                return True
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not start: {self.log.read_text(errors='replace')[-2000:]}")

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        if self.alive:
            assert self.process is not None
            self.process.kill()
            self.process.wait()
        self.paused = False

    def pause(self) -> None:
        if self.alive and not self.paused:
            assert self.process is not None
            self.process.send_signal(signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.alive and self.paused:
            assert self.process is not None
            self.process.send_signal(signal.SIGCONT)
        self.paused = False

    def stop(self) -> None:
        self.resume()
        if self.alive:
            assert self.process is not None
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class World:
    def __init__(self, directory: Path, history: History, servers: int, database_url: str | None) -> None:
        self.directory = directory
        self.history = history
        self.upstream = FakeUpstream(delay=0.05, words=24, keep_requests=False, modes=dict(ASSISTANTS), on_call=self._called)
        self.base_url = database_url
        self.schema: str | None = None
        if database_url is None:
            self.database_url = f"sqlite:///{directory / 'chat.db'}"
            servers = 1  # (one process on SQLite)
        elif database_url.startswith("postgres"):
            self.schema = f"chaos_{uuid.uuid4().hex[:12]}"
            separator = "&" if "?" in database_url else "?"
            self.database_url = f"{database_url}{separator}search_path={self.schema}"
        else:
            self.database_url = database_url
            servers = 1
        assistants = [
            {"id": name, "name": name.capitalize(), "provider": "openai", "baseUrl": self.upstream.base_url, "model": name}
            for name in ASSISTANTS
        ]
        env = {**SERVER_SETTINGS, "CHAT_ASSISTANTS": json.dumps(assistants), "CHAT_BLOB_DIR": str(directory / "blobs")}
        self.servers = [ServerProcess(f"server{i + 1}", self.database_url, directory / f"server{i + 1}.log", env) for i in range(servers)]

    def _called(self, body: dict[str, Any], mode: str) -> None:
        """The question a call answers: the tag of its latest user turn that has one."""
        tag = None
        for turn in reversed(body.get("messages", [])):
            content = turn.get("content")
            text = content if isinstance(content, str) else json.dumps(content)
            if turn.get("role") == "user" and (tag := tag_of(text)) is not None:
                break
        self.history.record({"op": "upstream", "model": body.get("model"), "tag": tag, "mode": mode})

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    async def start(self) -> None:
        await self.upstream.start()
        if self.schema is not None:
            assert self.base_url is not None
            conn = await asyncpg.connect(self.base_url)
            try:
                await conn.execute(f"CREATE SCHEMA {self.schema}")
            finally:
                await conn.close()
        for server in self.servers:  # (one at a time: the first one creates the tables)
            await asyncio.to_thread(server.start)

    async def restart(self, server: ServerProcess) -> None:
        server.kill()
        await asyncio.to_thread(server.start)

    async def compact(self, retention: float = RETENTION_SECONDS) -> str:
        """``python -m server compact`` with a short retention: the log is truncated. What it said
        of each account (superseded events removed, events truncated, the min available seq)."""
        command = [sys.executable, "-m", "server", "compact", "--database-url", self.database_url,
                   "--retention-seconds", str(retention), "--compaction-grace-seconds", str(GRACE_SECONDS),
                   "--blob-dir", str(self.directory / "blobs")]  # fmt: skip
        process = await asyncio.create_subprocess_exec(
            *command, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        output, _ = await process.communicate()
        lines = output.decode(errors="replace").strip().splitlines()
        return "; ".join(line for line in lines if "truncated" in line) or (lines[-1] if lines else "")

    async def stop(self) -> None:
        for server in self.servers:
            await asyncio.to_thread(server.stop)
        if self.schema is not None:
            assert self.base_url is not None
            with contextlib.suppress(Exception):
                conn = await asyncpg.connect(self.base_url)
                try:
                    await conn.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")
                finally:
                    await conn.close()
