"""End-to-end fixtures: the real server (Hypercorn) on a free port, Debian's Chromium."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from server.config import ROOT

_spec = importlib.util.spec_from_file_location("playwright_config", ROOT / "playwright.config.py")
assert _spec is not None and _spec.loader is not None
playwright_config = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(playwright_config)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Server:
    def __init__(self, data_dir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.database_url = f"sqlite:///{data_dir / 'chat.db'}"
        self.log = data_dir / "server.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "CHAT_PORT": str(self.port), "CHAT_DATABASE_URL": self.database_url}
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "server", "serve"], cwd=ROOT, env=env, stdout=log, stderr=log
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited: {self.log.read_text()[-2000:]}")
            try:
                urllib.request.urlopen(self.url + "/healthz", timeout=1)
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"the server did not start: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = Server(tmp_path_factory.mktemp("server"))
    running.start()
    yield running
    running.stop()


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    return {**browser_type_launch_args, **playwright_config.LAUNCH_ARGS}


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args: dict[str, Any], server: Server) -> dict[str, Any]:
    return {**browser_context_args, "base_url": server.url}
