"""Assistants and their runs: which server-side assistants a client may ask, and how each run of a
chat ended and what it cost (the runs themselves are requested by an event: server/runs.py)."""

from __future__ import annotations

from quart import Blueprint, Response

from server.assistants import Assistant
from server.errors import ApiError
from server.routes import Parts, chat_arg, json_response


def create_blueprint(parts: Parts, assistants: dict[str, Assistant]) -> Blueprint:
    routes = Blueprint("runs", __name__)

    @routes.get("/assistants")
    async def list_assistants() -> Response:
        """The server-side assistants a client can request runs of."""
        await parts.require_session()
        return json_response([a.public() for a in assistants.values()])

    @routes.get("/runs")
    async def list_runs() -> Response:
        """The assistant runs of one chat: how each ended, why, and what it cost."""
        session = await parts.require_session()
        chat_id = chat_arg()
        if chat_id is None:
            raise ApiError(400, "bad_request", "chatId is required.")
        return json_response([run.summary().wire() for run in await parts.runs.run_store.chat_runs(session.account_id, chat_id)])

    return routes
