"""Sync: submitting events, reading the log and the state, and the live socket (docs/protocol.md, "Endpoints").
What a commit wakes (live sockets, the run worker) is the store's ``on_commit`` hook's business
(server/app.py), not the route's."""

from __future__ import annotations

import uuid

from pydantic import ValidationError
from quart import Blueprint, Response, request, websocket

from server.compression import compressed_json, compressed_json_bytes
from server.errors import ApiError, describe
from server.live import follow, text_sender
from server.openapi import DEFAULT_LIMIT, MAX_LIMIT, MAX_STATE_LIMIT
from server.routes import Parts, chat_arg, int_arg, json_body
from server.store import Rejected
from server.validation import content_error
from shared.models import DomainEvent, SubmitResponse, UpdatesResponse


def create_blueprint(parts: Parts) -> Blueprint:
    routes = Blueprint("sync", __name__)
    store, settings = parts.store, parts.settings

    def batch_of(raw_events: list[object]) -> list[DomainEvent | Rejected]:
        """The events to append; one that is not valid (or over the content limit) is answered as
        rejected, with the reason, under its eventId, and leaves no trace (no eventId: the whole
        request is refused)."""
        batch: list[DomainEvent | Rejected] = []
        for index, raw in enumerate(raw_events):
            event_id = raw.get("eventId") if isinstance(raw, dict) else None
            try:
                event = DomainEvent.model_validate(raw)
            except ValidationError as e:
                error = describe(e)
            else:
                too_long = content_error(event, settings.max_content_chars)
                if too_long is None:
                    batch.append(event)
                    continue
                error = too_long
            try:
                event_id = str(uuid.UUID(str(event_id)))
            except ValueError:
                raise ApiError(422, "invalid_event", f"events[{index}] has no valid eventId: {error}", index=index) from None
            batch.append(Rejected(event_id, error))
        return batch

    @routes.post("/sync/events")
    async def post_events() -> Response:
        session = await parts.require_session()
        body = await json_body()
        raw_events = body.get("events") if isinstance(body, dict) else None
        if not isinstance(raw_events, list):
            raise ApiError(422, "invalid_event", 'The body must be {"events": [DomainEvent, ...]}.')
        if len(raw_events) > settings.max_batch_events:
            raise ApiError(413, "payload_too_large", f"At most {settings.max_batch_events} events per request: split the batch.")
        results, current = await store.append(session.account_id, session.device_id, batch_of(raw_events))
        response = SubmitResponse.model_construct(results=results, current_seq=current)
        # The wire form, serialized by pydantic (five times json's speed on a 100-event batch).
        return Response(response.model_dump_json(by_alias=True, exclude_none=True), content_type="application/json")

    @routes.get("/sync/updates")
    async def get_updates() -> Response:
        session = await parts.require_session()
        after = int_arg("afterSeq", 0)
        limit = int_arg("limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
        assert after is not None and limit is not None
        updates = await store.read_updates(session.account_id, after, limit)  # (CursorExpired: 410)
        await store.record_cursor(session.account_id, session.device_id, after)
        return await compressed_json(
            request.headers,
            UpdatesResponse(events=updates.events, has_more=updates.has_more, current_seq=updates.current_seq),
        )

    @routes.get("/sync/state")
    async def get_state() -> Response:
        session = await parts.require_session()
        up_to = int_arg("upToSeq", None)
        limit = int_arg("limit", DEFAULT_LIMIT, 1, MAX_STATE_LIMIT)
        assert limit is not None
        chat_id = chat_arg()
        # (InvalidPage: 400.) The JSON is made from the rows, not from models (server/state_wire.py).
        body = await store.read_state_json(session.account_id, up_to, chat_id, limit, request.args.get("page"))
        return await compressed_json_bytes(request.headers, body)

    @routes.websocket("/sync/live")
    async def live() -> None:
        try:
            session = await parts.session_of(websocket.headers, websocket.cookies)
        except ApiError:  # a cookie, but from another site's page
            await websocket.accept()
            await websocket.close(4403, "forbidden")
            return
        await websocket.accept()
        if session is None:
            await websocket.close(4401, "unauthorized")
            return
        try:
            cursor = int(websocket.args.get("afterSeq", "0"))
            if cursor < 0:
                raise ValueError
        except ValueError:
            await websocket.close(4400, "bad_request")
            return
        await store.record_cursor(session.account_id, session.device_id, cursor)
        await follow(text_sender(websocket.scope), websocket.close, parts.hub, session.account_id, cursor, settings.ping_seconds)

    return routes
