"""Closed sign-up and `python -m server add-user`, on both backends."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from server.app import create_app
from server.config import ROOT, Settings
from tests.conftest import QUICK_PASSWORDS


def add_user(database_url: str, username: str, password: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "server", "add-user", username, "--database-url", database_url],
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
