"""The OpenAPI 3.1 description of the HTTP API (docs/protocol.md), built from the wire models."""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from shared.models import (
    Credentials,
    DomainEvent,
    RunSummary,
    Session,
    StateResponse,
    SubmitResponse,
    UpdatesResponse,
)

# Page sizes of /sync/updates and /sync/state (server/routes/sync.py). A snapshot's pages may be larger: a
# client storing each page durably writes an index page once per page, so fewer, larger pages
# store about half the bytes (webapp/sync.py).
DEFAULT_LIMIT, MAX_LIMIT = 500, 1000
MAX_STATE_LIMIT = 5000


class Error(BaseModel):
    """Every error: a code, and a sentence for a person (plus extra fields for some codes)."""

    error: str
    message: str


class Submit(BaseModel):
    events: list[DomainEvent]


MAX_INT = 2**53 - 1  # the largest integer every JSON client reads exactly

# The contract itself (the events and their effects, every error code, WS /sync/live, which
# OpenAPI cannot describe) is the repository's docs/protocol.md.
DESCRIPTION = (
    "The sync API of the offline-first chat. Its contract, with the events and their effects, every error code and"
    " WS /sync/live (not described here), is docs/protocol.md in the repository."
)

ERRORS = {
    400: "Malformed JSON or a bad parameter",
    401: "No or bad credentials",
    403: "Not allowed (sign-up closed, or a cookie from another site's page)",
    409: "The username is taken; an upload's chunk at another offset than the server's (its offset in the answer)",
    410: "The cursor is below minAvailableSeq: fetch /sync/state and start from its upToSeq",
    413: "Body or batch over the configured limit",
    404: "No such file for this account (or none at all)",
    412: "A tus request without Tus-Resumable: 1.0.0",
    415: "A chunk that is not application/offset+octet-stream",
    422: "A batch-level schema error (per-event problems are reported per event); an upload whose bytes are not its SHA-256's",
    429: "Too many requests; see Retry-After",
}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _responses(ok: int, schema: dict[str, Any] | None, errors: list[int]) -> dict[str, Any]:
    responses: dict[str, Any] = {
        str(ok): {"description": "OK", **(_json(schema) if schema else {})},
    }
    for code in errors:
        responses[str(code)] = {"description": ERRORS[code], **_json(_ref("Error"))}
    return responses


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


ASSISTANT = {
    "type": "object",
    "required": ["id", "name", "kind", "model", "vision"],
    "properties": {
        "id": {"type": "string"},
        "name": {"type": "string"},
        "kind": {"type": "string", "enum": ["remote"]},
        "model": {"type": "string"},
        "vision": {"type": "boolean"},
    },
}


BINARY = {"type": "string", "format": "binary"}


@functools.cache  # (the models' JSON Schema takes pydantic a fifth of a second: made once a process)
def openapi() -> dict[str, Any]:
    """The document /openapi.json serves (the same dict at every call: read it, never change it)."""
    models: list[tuple[type[BaseModel], Any]] = [
        (Credentials, "validation"),
        (Session, "serialization"),
        (Submit, "validation"),
        (SubmitResponse, "serialization"),
        (UpdatesResponse, "serialization"),
        (StateResponse, "serialization"),
        (RunSummary, "serialization"),
        (Error, "serialization"),
    ]
    _, definitions = models_json_schema(models, ref_template="#/components/schemas/{model}", by_alias=True)
    seq = {"type": "integer", "minimum": 0, "maximum": MAX_INT}
    limit = {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}
    state_limit = {"type": "integer", "minimum": 1, "maximum": MAX_STATE_LIMIT}
    sync_security: list[dict[str, list[str]]] = [{"bearer": []}, {"cookie": []}]
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Offline-first chat: sync API",
            "version": "1",
            "description": DESCRIPTION,
        },
        "components": {
            "schemas": definitions["$defs"],
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "cookie": {"type": "apiKey", "in": "cookie", "name": "chat_session"},
            },
        },
        "paths": {
            "/auth/signup": {
                "post": {
                    "summary": "Create an account and a session",
                    "requestBody": {"required": True, **_json(_ref("Credentials"))},
                    "responses": _responses(201, _ref("Session"), [400, 403, 409, 413, 429]),
                }
            },
            "/auth/login": {
                "post": {
                    "summary": "Start a session on a new device",
                    "requestBody": {"required": True, **_json(_ref("Credentials"))},
                    "responses": _responses(200, _ref("Session"), [400, 401, 413, 429]),
                }
            },
            "/auth/logout": {
                "post": {"summary": "End this session", "responses": {"204": {"description": "Signed out"}}}
            },
            "/sync/events": {
                "post": {
                    "summary": "Submit events: each is accepted, a duplicate, or rejected",
                    "security": sync_security,
                    "requestBody": {"required": True, **_json(_ref("Submit"))},
                    "responses": _responses(200, _ref("SubmitResponse"), [400, 401, 403, 413, 422, 429]),
                }
            },
            "/sync/updates": {
                "get": {
                    "summary": "The events after a cursor, in seq order",
                    "security": sync_security,
                    "parameters": [
                        _query("afterSeq", seq, "the cursor (default 0)"),
                        _query("limit", limit, "page size (default 500)"),
                    ],
                    "responses": _responses(200, _ref("UpdatesResponse"), [400, 401, 403, 410, 429]),
                }
            },
            "/sync/state": {
                "get": {
                    "summary": "The state at upToSeq (default: now), paged",
                    "security": sync_security,
                    "parameters": [
                        _query("upToSeq", seq, "the seq of the snapshot (default: the current seq)"),
                        _query("chatId", {"type": "string", "format": "uuid"}, "one chat only"),
                        _query("limit", state_limit, "page size (default 500)"),
                        _query("page", {"type": "string"}, "the nextPage of the previous page"),
                    ],
                    "responses": _responses(200, _ref("StateResponse"), [400, 401, 403, 410, 429]),
                }
            },
            "/assistants": {
                "get": {
                    "summary": "The server-side assistants",
                    "security": sync_security,
                    "responses": _responses(200, {"type": "array", "items": ASSISTANT}, [401, 403, 429]),
                }
            },
            "/runs": {
                "get": {
                    "summary": "The assistant runs of a chat: status, error, usage",
                    "security": sync_security,
                    "parameters": [
                        {"name": "chatId", "in": "query", "required": True, "schema": {"type": "string", "format": "uuid"}},
                    ],
                    "responses": _responses(200, {"type": "array", "items": _ref("RunSummary")}, [400, 401, 403, 429]),
                }
            },
            "/blobs/{sha256}": {
                "parameters": [
                    {"name": "sha256", "in": "path", "required": True, "schema": {"type": "string", "pattern": "^[0-9a-f]{64}$"}},
                ],
                "get": {
                    "summary": "Download an attachment's file the account holds (served as what the server sniffs)",
                    "security": sync_security,
                    "parameters": [_query("name", {"type": "string"}, "the download's file name")],
                    "responses": {
                        **_responses(200, None, [400, 401, 403, 404, 429]),
                        "200": {"description": "The file", "content": {"application/octet-stream": {"schema": BINARY}}},
                        "304": {"description": "Not modified (If-None-Match)"},
                    },
                },
                "patch": {
                    "summary": "Append a chunk to the account's upload of the file (tus 1.0 core)",
                    "security": sync_security,
                    "parameters": [
                        {"name": "Tus-Resumable", "in": "header", "required": True, "schema": {"type": "string", "enum": ["1.0.0"]}},
                        {"name": "Upload-Offset", "in": "header", "required": True, "schema": {"type": "integer", "minimum": 0}},
                        {"name": "Upload-Length", "in": "header", "required": False, "schema": {"type": "integer", "minimum": 0}},
                    ],
                    "requestBody": {
                        "required": True,
                        "content": {"application/offset+octet-stream": {"schema": BINARY}},
                    },
                    "responses": {
                        **_responses(204, None, [400, 401, 403, 409, 412, 413, 415, 422, 429]),
                        "204": {"description": "Stored: the new Upload-Offset"},
                    },
                },
            },
            "/healthz": {"get": {"summary": "The process is up", "responses": {"200": {"description": "OK"}}}},
            "/readyz": {
                "get": {
                    "summary": "The process can serve",
                    "responses": {"200": {"description": "Ready"}, "503": {"description": "Not ready"}},
                }
            },
        },
    }


DOCS_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Chat API</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/static/page.css"></head>
<body><h1>Chat sync API</h1>
<p>The machine-readable description: <a href="/openapi.json">/openapi.json</a> (OpenAPI 3.1).</p>
<div id="paths"></div>
<script type="module" src="/static/docs.js"></script></body></html>
"""
