"""Served over HTTPS (``--certfile``/``--keyfile``) under a name that is not loopback, the page is a
secure context: the service worker registers, signing up and the live socket (wss) work, and the
session cookie is Secure. Over plain http under the same name it is not a secure context, which
is why README.md's "Serving on your home network (HTTPS)" exists."""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserType, expect

from server.routes import SESSION_COOKIE
from shared.assistants import demo_answer
from tests.e2e.pages import send, sign_up, wait_for_service_worker
from tests.processes import Server

# A home-network name (RFC 8375) that this test's browser resolves to 127.0.0.1: a browser counts
# loopback as a secure context even over http, so the name shows what HTTPS itself gives.
HOST = "chat.home.arpa"


@dataclass(frozen=True)
class Certificate:
    cert: Path
    key: Path
    spki: str  # the base64 SHA-256 of its public key, as Chromium's flag names a certificate


def openssl(*args: str, stdin: bytes = b"") -> bytes:
    return subprocess.run(["openssl", *args], input=stdin, check=True, capture_output=True).stdout


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Certificate:
    """A self-signed certificate for HOST and 127.0.0.1, made as README.md makes one."""
    if shutil.which("openssl") is None:  # (and the cryptography package is not a dependency)
        pytest.fail("the openssl command is needed to make the test's certificate (scripts/setup --test)", pytrace=False)
    folder = tmp_path_factory.mktemp("certificate")
    cert, key = folder / "chat.pem", folder / "chat-key.pem"
    openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-sha256", "-days", "2", "-nodes", "-keyout", str(key),
        "-out", str(cert), "-subj", f"/CN={HOST}", "-addext", f"subjectAltName=DNS:{HOST},IP:127.0.0.1",
    )  # fmt: skip
    public = openssl("pkey", "-in", str(key), "-pubout", "-outform", "DER")
    return Certificate(cert, key, base64.b64encode(hashlib.sha256(public).digest()).decode())


@pytest.fixture(scope="module")
def https_server(tmp_path_factory: pytest.TempPathFactory, certificate: Certificate) -> Iterator[Server]:
    data = tmp_path_factory.mktemp("https")
    server = Server(
        f"sqlite:///{data / 'chat.db'}", data / "server.log", certfile=str(certificate.cert), keyfile=str(certificate.key)
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def named_browser(
    browser_type: BrowserType, browser_type_launch_args: dict[str, Any], certificate: Certificate
) -> Iterator[Browser]:
    """A Chromium that resolves HOST to 127.0.0.1 and trusts the test's certificate, as a device
    does once the certificate is installed: a context's ignore_https_errors alone lets pages load,
    but Chromium still refuses to register a service worker over a certificate error."""
    args = [
        *browser_type_launch_args.get("args", []),
        f"--host-resolver-rules=MAP {HOST} 127.0.0.1",
        f"--ignore-certificate-errors-spki-list={certificate.spki}",
    ]
    browser = browser_type.launch(**{**browser_type_launch_args, "args": args})
    yield browser
    browser.close()


def test_over_https_the_app_is_a_secure_context_with_a_secure_cookie(
    named_browser: Browser, https_server: Server, server: Server
) -> None:
    context = named_browser.new_context(base_url=f"https://{HOST}:{https_server.port}", ignore_https_errors=True)
    page = context.new_page()
    sockets: list[str] = []
    page.on("websocket", lambda socket: sockets.append(socket.url))
    sign_up(page)
    assert page.evaluate("window.isSecureContext") is True
    wait_for_service_worker(page)
    worker = page.evaluate("navigator.serviceWorker.ready.then((r) => r.active.scriptURL)")
    assert worker == f"https://{HOST}:{https_server.port}/sw.js"
    send(page, "Over TLS", assistant="demo")  # the live socket is wss://
    expect(page.locator(".message.assistant.completed .content")).to_have_text(demo_answer("Over TLS", 1), timeout=30_000)
    assert sockets and all(url.startswith(f"wss://{HOST}:{https_server.port}/sync/live") for url in sockets)
    cookie = next(c for c in context.cookies() if c["name"] == SESSION_COOKIE)
    assert cookie["secure"] is True and cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert cookie["domain"] == HOST
    page.goto("/help/home-network")  # a page of its own, not the app's shell from the service worker
    expect(page.locator("h2")).to_have_text("Serving on your home network (HTTPS)")
    context.close()

    plain = named_browser.new_context(base_url=f"http://{HOST}:{server.port}")
    page = plain.new_page()
    page.goto("/help/home-network")
    assert page.evaluate("[window.isSecureContext, 'serviceWorker' in navigator]") == [False, False]
    plain.close()
