"""Accounts: sign-up, login and logout (docs/protocol.md, "Accounts and devices"). A session is a
bearer token for any client and, for the browser, the same token in an HttpOnly cookie."""

from __future__ import annotations

import asyncio
import json
import uuid

from pydantic import ValidationError
from quart import Blueprint, Response, request

from server import auth
from server.errors import ApiError, describe
from server.routes import SESSION_COOKIE, Parts, json_body, limit
from shared.models import Credentials, Session


def create_blueprint(parts: Parts) -> Blueprint:
    routes = Blueprint("accounts", __name__)
    store = parts.store

    def session_response(session: Session, status: int) -> Response:
        response = Response(json.dumps(session.wire()), status=status, content_type="application/json")
        # Secure when the request came over HTTPS (then the browser sends it back over HTTPS only);
        # not over plain http, where browsers refuse a Secure cookie from any host but localhost.
        response.set_cookie(
            SESSION_COOKIE,
            session.token,
            httponly=True,
            samesite="Strict",
            max_age=400 * 86400,
            secure=request.scheme == "https",
        )
        return response

    async def start_session(account_id: str, device_name: str | None) -> Session:
        token = auth.new_token()
        device_id = str(uuid.uuid4())
        await store.create_session(auth.token_hash(token), account_id, device_id, device_name or "device")
        return Session(user_id=account_id, device_id=device_id, token=token)

    async def credentials() -> Credentials:
        limit(parts.auth_limiter, request.remote_addr or "unknown")
        try:
            return Credentials.model_validate(await json_body())
        except ValidationError as e:
            raise ApiError(400, "bad_request", describe(e)) from None

    @routes.post("/auth/signup")
    async def signup() -> Response:
        if parts.settings.signup == "closed":
            raise ApiError(403, "forbidden", "Sign-up is closed here: ask the administrator for an account.")
        creds = await credentials()
        account_id = str(uuid.uuid4())
        password_hash = await asyncio.to_thread(auth.hash_password, creds.password, parts.settings)
        await store.create_account(account_id, creds.username, password_hash)  # (UsernameTaken: 409)
        return session_response(await start_session(account_id, creds.device_name), 201)

    @routes.post("/auth/login")
    async def login() -> Response:
        creds = await credentials()
        account = await store.find_account(creds.username)
        ok = account is not None and await asyncio.to_thread(auth.verify_password, creds.password, account.password_hash)
        if not ok or account is None:
            raise ApiError(401, "unauthorized", "Wrong username or password.")
        if auth.needs_rehash(account.password_hash, parts.settings):  # (the cost settings changed since)
            rehashed = await asyncio.to_thread(auth.hash_password, creds.password, parts.settings)
            await store.set_password_hash(account.id, rehashed)
        return session_response(await start_session(account.id, creds.device_name), 200)

    @routes.post("/auth/logout")
    async def logout() -> Response:
        header = request.headers.get("Authorization", "")
        token = header.removeprefix("Bearer ").strip() or request.cookies.get(SESSION_COOKIE)
        if token:
            parts.sessions.evict(auth.token_hash(token))
            await store.delete_session(auth.token_hash(token))
        response = Response(status=204)
        response.delete_cookie(SESSION_COOKIE, secure=request.scheme == "https", httponly=True, samesite="Strict")
        return response

    return routes
