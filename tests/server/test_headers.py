"""Every response carries the security headers (server/headers.py), the policy allows what the app
needs and no inline script, and the session cookie is Secure exactly when the request was HTTPS."""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import pytest
from quart import Quart
from quart.testing.connections import WebsocketResponseError
from quart.typing import TestClientProtocol as Client

from server.app import create_app
from server.config import ROOT, Settings
from server.headers import content_security_policy
from server.help import HOME_NETWORK, help_page
from server.openapi import DOCS_PAGE
from tests.conftest import QUICK_PASSWORDS
from tests.processes import Server
from tests.server.conftest import bearer, signup

CREDENTIALS = {"username": "alice", "password": "correct horse"}


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """SQLite only: headers and cookies are the app's, whatever the store."""
    return f"sqlite:///{tmp_path / 'chat.db'}"


def assert_secured(headers: object, where: str) -> None:
    get = headers.get  # type: ignore[attr-defined]
    assert get("Content-Security-Policy") == content_security_policy(), where
    assert get("X-Content-Type-Options") == "nosniff", where
    assert get("Referrer-Policy") == "no-referrer", where


async def test_every_kind_of_response_carries_the_headers(client: Client) -> None:
    responses = {
        "JSON": await client.get("/healthz"),
        "the HTML shell": await client.get("/"),
        "a static file": await client.get("/static/app.js"),
        "the service worker": await client.get("/sw.js"),
        "the docs page": await client.get("/docs"),
        "the help page": await client.get("/help/home-network"),
        "the Python bundle": await client.get("/py/app.zip"),
        "an error": await client.get("/sync/updates"),
        "a 404": await client.get("/no/such/page"),
        "a missing static file": await client.get("/static/nothing.js"),
        "a 405": await client.delete("/healthz"),
        "a body that is not JSON": await client.post("/auth/signup", data="{"),
        "metrics": await client.get("/metrics"),
    }
    expected = {"an error": 401, "a 404": 404, "a missing static file": 404, "a 405": 405, "a body that is not JSON": 400}
    for where, response in responses.items():
        assert response.status_code == expected.get(where, 200), where
        assert_secured(response.headers, where)
    first = responses["a static file"]
    again = await client.get("/static/app.js", headers={"If-None-Match": first.headers["ETag"]})
    assert again.status_code == 304
    assert_secured(again.headers, "a 304")


# --- each header once -----------------------------------------------------------------------

# The one header HTTP lets a response repeat (a cookie each); every other one is sent once.
REPEATABLE = {"set-cookie"}


def repeated(headers: Iterable[tuple[str, str]]) -> list[str]:
    """What a response's raw header list repeats: a name sent twice, or a value that is a list
    holding one item twice (``nosniff, nosniff``: two copies folded into one)."""
    problems, seen = [], set()
    for name, value in headers:
        if name.lower() in REPEATABLE:
            continue
        if name.lower() in seen:
            problems.append(f"{name} is sent twice")
        seen.add(name.lower())
        items = [item.strip().lower() for item in value.split(",")]
        if len(items) != len(set(items)):
            problems.append(f"{name}: {value!r} repeats itself")
    return problems


def test_a_repeated_header_is_found() -> None:
    """(The check below can fail.)"""
    assert repeated([("X-Content-Type-Options", "nosniff"), ("x-content-type-options", "nosniff")]) == [
        "x-content-type-options is sent twice"
    ]
    assert repeated([("X-Content-Type-Options", "nosniff, nosniff")]) == [
        "X-Content-Type-Options: 'nosniff, nosniff' repeats itself"
    ]
    assert repeated([("Vary", "Accept-Encoding"), ("Cache-Control", "public, max-age=1, immutable")]) == []


# (method, path, body, signed in, the status expected)
REPRESENTATIVE: list[tuple[str, str, str | None, bool, int]] = [
    ("GET", "/", None, False, 200),
    ("GET", "/static/app.js", None, False, 200),
    ("GET", "/healthz", None, False, 200),
    ("GET", "/no/such/page", None, False, 404),
    ("GET", "/static/nothing.js", None, False, 404),
    ("GET", "/sync/updates", None, True, 200),
    ("GET", "/openapi.json", None, False, 200),
    ("GET", "/sync/updates", None, False, 401),
    ("POST", "/auth/signup", "{", False, 400),
    ("DELETE", "/healthz", None, False, 405),
    # Attachments (server/routes/blobs.py): tus's OPTIONS, a HEAD and PATCH refused without
    # Tus-Resumable, a blob that is not there.
    ("OPTIONS", "/blobs", None, False, 204),
    ("HEAD", "/blobs/" + "ab" * 32, None, True, 412),
    ("PATCH", "/blobs/" + "ab" * 32, None, True, 412),  # (a body unread would end the connection)
    ("GET", "/blobs/" + "ab" * 32, None, True, 404),
    ("GET", "/blobs/" + "ab" * 32, None, False, 401),
]


async def test_each_security_header_is_sent_once(client: Client) -> None:
    auth = bearer(await signup(client))
    for method, path, body, signed_in, status in REPRESENTATIVE:
        response = await client.open(path, method=method, data=body, headers=auth if signed_in else {})
        assert response.status_code == status, (method, path)
        assert repeated(response.headers.items()) == [], (method, path)
        for name in ("Content-Security-Policy", "X-Content-Type-Options", "Referrer-Policy"):
            assert len(response.headers.getlist(name)) == 1, (method, path, name)
    accept = {"Accept-Encoding": "br, gzip"}
    compressed = await client.get("/static/app.js", headers=accept)
    again = await client.get("/static/app.js", headers={**accept, "If-None-Match": compressed.headers["ETag"]})
    assert again.status_code == 304
    for response in (compressed, again):
        assert repeated(response.headers.items()) == []
    with pytest.raises(WebsocketResponseError) as refused:
        async with client.websocket("/no/such/socket") as socket:
            await socket.receive()
    assert repeated(refused.value.response.headers.items()) == []


def test_each_security_header_is_sent_once_by_hypercorn(tmp_path: Path) -> None:
    """The same over a real server process: the headers as they go over the wire."""
    server = Server(f"sqlite:///{tmp_path / 'chat.db'}", tmp_path / "server.log")
    server.start()
    try:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        connection.request("POST", "/auth/signup", body='{"username": "alice", "password": "correct horse"}')
        session = connection.getresponse()
        assert session.status == 201
        token = json.loads(session.read())["token"]
        for method, path, body, signed_in, status in REPRESENTATIVE:
            headers = {"Authorization": f"Bearer {token}"} if signed_in else {}
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            response.read()
            assert response.status == status, (method, path)
            raw = response.getheaders()  # every header line, in order, as sent
            assert repeated(raw) == [], (method, path)
            names = [name.lower() for name, _ in raw]
            for name in ("content-security-policy", "x-content-type-options", "referrer-policy"):
                assert names.count(name) == 1, (method, path, name)
    finally:
        server.stop()


async def test_a_websocket_refused_before_its_handshake_carries_them(client: Client) -> None:
    with pytest.raises(WebsocketResponseError) as refused:
        async with client.websocket("/no/such/socket") as socket:
            await socket.receive()
    assert refused.value.response.status_code == 404
    assert_secured(refused.value.response.headers, "a refused WebSocket")


async def test_html_has_one_charset(client: Client) -> None:
    for path in ("/", "/docs", "/help/home-network"):
        assert (await client.get(path)).headers["Content-Type"] == "text/html; charset=utf-8", path
    assert (await client.get("/static/app.js")).headers["Content-Type"] == "text/javascript; charset=utf-8"
    assert (await client.get("/sw.js")).headers["Content-Type"] == "text/javascript; charset=utf-8"


def test_the_policy_allows_wasm_and_the_device_model_but_no_inline_script() -> None:
    policy = dict(d.strip().split(" ", 1) for d in content_security_policy().split(";"))
    assert policy["script-src"] == "'self' 'wasm-unsafe-eval'"  # no 'unsafe-inline', no 'unsafe-eval'
    assert policy["style-src"] == "'self'"
    assert policy["default-src"] == "'self'" and policy["worker-src"] == "'self'"
    assert policy["frame-ancestors"] == "'none'" and policy["object-src"] == "'none'"
    assert "http://localhost:*" in policy["connect-src"].split()  # Ollama at http://localhost:11434
    assert "http://127.0.0.1:*" in policy["connect-src"].split()
    assert "https:" not in policy["connect-src"].split() and "http:" not in policy["connect-src"].split()
    wider = content_security_policy("https://models.home.arpa:8443 http://10.0.0.5:*")
    assert "connect-src 'self' http://localhost:* http://127.0.0.1:* https://localhost:* https://127.0.0.1:* " \
        "https://models.home.arpa:8443 http://10.0.0.5:*;" in wider
    for bad in ("'unsafe-inline'", "https://x; script-src *", "javascript:", "https://x/path", "*"):
        with pytest.raises(SystemExit):
            content_security_policy(bad)


async def test_more_device_model_origins_are_served_in_the_policy(tmp_path: Path) -> None:
    settings = Settings(**QUICK_PASSWORDS, database_url=f"sqlite:///{tmp_path / 'chat.db'}", device_model_origins="https://gpu.home.arpa")
    app = create_app(settings)
    async with app.test_app():
        policy = (await app.test_client().get("/")).headers["Content-Security-Policy"]
    assert policy == content_security_policy("https://gpu.home.arpa")


def test_our_pages_have_no_inline_script_style_or_handler() -> None:
    pages = {
        "index.html": (ROOT / "static/index.html").read_text(),
        "/docs": DOCS_PAGE,
        "/help/home-network": help_page(HOME_NETWORK),
    }
    for name, html in pages.items():
        scripts = re.findall(r"<script\b[^>]*>", html, re.I)
        assert all(" src=" in tag for tag in scripts), name  # every script a file
        assert not re.search(r"<script\b[^>]*>\s*[^<\s]", html, re.I), name  # and nothing inside
        assert not re.search(r"<style\b|\sstyle\s*=", html, re.I), name
        assert not re.search(r"\son[a-z]+\s*=", html, re.I), name


# --- the session cookie --------------------------------------------------------------------------


def cookie_attributes(header: str) -> set[str]:
    return {part.strip().split("=")[0].lower() for part in header.split(";")[1:]}


async def test_the_session_cookie_is_not_secure_over_plain_http(client: Client) -> None:
    response = await client.post("/auth/signup", json=CREDENTIALS)
    assert response.status_code == 201
    attributes = cookie_attributes(response.headers["Set-Cookie"])
    assert {"httponly", "samesite"} <= attributes and "secure" not in attributes  # http://localhost works
    login = await client.post("/auth/login", json=CREDENTIALS)
    assert "secure" not in cookie_attributes(login.headers["Set-Cookie"])


async def test_the_session_cookie_is_secure_over_https(client: Client) -> None:
    response = await client.post("/auth/signup", json=CREDENTIALS, scheme="https")
    assert response.status_code == 201
    assert {"secure", "httponly", "samesite"} <= cookie_attributes(response.headers["Set-Cookie"])
    login = await client.post("/auth/login", json=CREDENTIALS, scheme="https")
    assert "secure" in cookie_attributes(login.headers["Set-Cookie"])
    logout = await client.post("/auth/logout", headers={"Authorization": f"Bearer {(await login.get_json())['token']}"},
                               scheme="https")
    assert "secure" in cookie_attributes(logout.headers["Set-Cookie"])  # the same cookie, deleted


@pytest.fixture
async def proxied(tmp_path: Path) -> AsyncIterator[Quart]:
    app = create_app(Settings(**QUICK_PASSWORDS, database_url=f"sqlite:///{tmp_path / 'proxied.db'}", trusted_proxies=1))
    async with app.test_app():
        yield app


async def test_forwarded_proto_counts_only_when_proxies_are_trusted(client: Client, proxied: Quart) -> None:
    forwarded = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "192.168.1.30"}
    ignored = await client.post("/auth/signup", json=CREDENTIALS, headers=forwarded)
    assert ignored.status_code == 201
    assert "secure" not in cookie_attributes(ignored.headers["Set-Cookie"])  # the default: not believed
    believed = await proxied.test_client().post("/auth/signup", json=CREDENTIALS, headers=forwarded)
    assert believed.status_code == 201
    assert "secure" in cookie_attributes(believed.headers["Set-Cookie"])
    assert_secured(believed.headers, "behind a proxy")


def test_certfile_and_keyfile_go_together() -> None:
    with pytest.raises(SystemExit):
        Settings(certfile="cert.pem")
    with pytest.raises(SystemExit):
        Settings(keyfile="key.pem")
    with pytest.raises(SystemExit):
        Settings(trusted_proxies=-1)
    assert Settings(certfile="cert.pem", keyfile="key.pem").certfile == "cert.pem"
