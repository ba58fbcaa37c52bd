"""Real server processes for the tests that need them (end-to-end, several processes)."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from server.config import ROOT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Server:
    """`python -m server serve` in a process of its own, on a free port (HTTPS when the settings
    name a certfile and keyfile)."""

    def __init__(self, database_url: str, log: Path, **settings: str) -> None:
        self.port = free_port()
        self.scheme = "https" if "certfile" in settings else "http"
        self.url = f"{self.scheme}://127.0.0.1:{self.port}"
        self.database_url = database_url
        self.log = log
        self.settings = {f"CHAT_{k.upper()}": v for k, v in settings.items()}
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        for _ in range(3):
            if self._start():
                return
            # The port was free when chosen, and taken since (by another process's outgoing
            # connection, say, which draws from the same range): another one.
            self.port = free_port()
            self.url = f"{self.scheme}://127.0.0.1:{self.port}"
        raise RuntimeError(f"no free port: {self.log.read_text()[-2000:]}")

    def _start(self) -> bool:
        """Start the server; False when its port turned out to be taken."""
        env = {**os.environ, **self.settings, "CHAT_PORT": str(self.port), "CHAT_DATABASE_URL": self.database_url}
        logged = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "server", "serve"], cwd=ROOT, env=env, stdout=log, stderr=log
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                output = self.log.read_bytes()[logged:].decode(errors="replace")
                if "Address already in use" in output:
                    return False
                raise RuntimeError(f"the server exited: {output[-2000:]}")
            try:
                # (A test's certificate is its own: not checked here.)
                urllib.request.urlopen(self.url + "/healthz", timeout=1, context=ssl._create_unverified_context())
                return True
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"the server did not start: {self.log.read_text()[-2000:]}")

    def log_tail(self, lines: int = 40) -> str:
        """The end of what the server logged, but for its request lines (for a failure's message)."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join([line for line in text.splitlines() if not line.startswith('{"at"')][-lines:])

    def stop(self) -> None:
        """SIGTERM, as a service manager stops it: the server closes its sockets, waits for the
        requests it is serving (up to Hypercorn's graceful timeout, 10 s), then closes its stores.
        Still running after 30 s, it is killed and the stop fails with its log, which names what
        it was still serving."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                raise AssertionError(f"the server did not stop in 30 s:\n{self.log_tail()}") from None


