"""Closed sign-up, `python -m server add-user` and `set-password`, and passwords hashed again at
a new cost, on both backends."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys

import pytest

from server.__main__ import _set_password
from server.app import create_app
from server.config import ROOT, Settings
from tests.conftest import QUICK_PASSWORDS


def add_user(database_url: str, username: str, password: str, command: str = "add-user") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "server", command, username, "--database-url", database_url],
        cwd=ROOT,
        input=password + "\n",
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_closed_signup_and_add_user(database_url: str) -> None:
    app = create_app(Settings(**QUICK_PASSWORDS, database_url=database_url, signup="closed"))
    async with app.test_app():
        client = app.test_client()
        refused = await client.post("/auth/signup", json={"username": "eve", "password": "long enough"})
        body = await refused.get_json()
        assert refused.status_code == 403 and body["error"] == "forbidden"

        done = await asyncio.to_thread(add_user, database_url, "frank", "long enough")
        assert done.returncode == 0 and "added frank" in done.stdout, done.stderr
        again = await asyncio.to_thread(add_user, database_url, "frank", "long enough")
        assert again.returncode == 1 and "taken" in again.stderr
        short = await asyncio.to_thread(add_user, database_url, "grace", "short")
        assert short.returncode == 2 and "password" in short.stderr

        login = await client.post("/auth/login", json={"username": "frank", "password": "long enough"})
        assert login.status_code == 200


async def test_set_password(database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    app = create_app(Settings(**QUICK_PASSWORDS, database_url=database_url))
    async with app.test_app():
        client = app.test_client()
        assert (await client.post("/auth/signup", json={"username": "heidi", "password": "forgotten one"})).status_code == 201

        done = await asyncio.to_thread(add_user, database_url, "heidi", "remembered one", "set-password")
        assert done.returncode == 0 and "set the password of heidi" in done.stdout, done.stderr
        # (The refusals in this process: a CLI's start is seconds on a busy machine.)
        settings = Settings(**QUICK_PASSWORDS, database_url=database_url)
        for username, password, status, said in (("ivan", "long enough", 1, "no such account"), ("heidi", "short", 2, "password")):
            monkeypatch.setattr(sys, "stdin", io.StringIO(password + "\n"))
            assert await _set_password(settings, username) == status
            assert said in capsys.readouterr().err

        old = await client.post("/auth/login", json={"username": "heidi", "password": "forgotten one"})
        assert old.status_code == 401
        new = await client.post("/auth/login", json={"username": "heidi", "password": "remembered one"})
        assert new.status_code == 200


async def test_a_login_hashes_the_password_again_at_the_settings_cost(database_url: str) -> None:
    """The cost raised (``--password-memory-kib``, ``--password-time-cost``): a password hashed
    before is hashed again at the new cost when it next signs in, and still signs in after."""
    before = create_app(Settings(**QUICK_PASSWORDS, database_url=database_url))
    async with before.test_app():
        signup = await before.test_client().post("/auth/signup", json={"username": "judy", "password": "long enough"})
        assert signup.status_code == 201
    raised = create_app(Settings(database_url=database_url, password_memory_kib=64, password_time_cost=2))
    async with raised.test_app():
        client, store = raised.test_client(), raised.extensions["store"]
        hashes = []
        for _ in range(2):
            login = await client.post("/auth/login", json={"username": "judy", "password": "long enough"})
            assert login.status_code == 200
            hashes.append((await store.find_account("judy")).password_hash)
        assert hashes[0].startswith("$argon2id$v=19$m=64,t=2,p=4$")
        assert hashes[1] == hashes[0]  # (hashed again once: at the settings' cost it stays)
