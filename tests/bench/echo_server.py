"""The app as `python -m server serve` runs it, plus two trivial routes: a JSON POST, the ceiling
of what Quart on Hypercorn does here at all; and a PUT that reads its body and drops it, the
ceiling of an upload (bench_attachments.py). Only the benchmarks start it."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from hypercorn.asyncio import serve
from hypercorn.config import Config
from quart import Response, request

from server.app import ChatRequest, create_app
from server.config import Settings
from server.tuning import answer_protocol_errors_in_json, decline_websocket_compression, tune_garbage_collection


class BenchRequest(ChatRequest):
    """The app's requests, and a PUT to /bench/put of any size (one body: an upload's ceiling)."""

    def __init__(self, method: str, scheme: str, path: str, *args: Any, **kwargs: Any) -> None:
        if method == "PUT" and path == "/bench/put":
            kwargs["max_content_length"] = None
        super().__init__(method, scheme, path, *args, **kwargs)


def main() -> None:
    port, database_url = int(sys.argv[1]), sys.argv[2]
    # No rate limits: the benchmark measures throughput, and signs up one account per connection.
    settings = Settings(
        database_url=database_url,
        compact_interval_seconds=0,
        rate_limit_per_minute=0,
        auth_rate_limit_per_minute=0,
        max_file_bytes=64 * 1024 * 1024,  # (bench_attachments.py's 50 MB file)
    )
    app = create_app(settings)
    app.request_class = BenchRequest

    @app.post("/bench/echo")
    async def echo() -> Response:
        body = json.loads(await request.get_data())
        return Response(json.dumps({"ok": True, "n": len(body)}), content_type="application/json")

    @app.put("/bench/put")
    async def put() -> Response:
        received = 0
        async for chunk in request.body:
            received += len(chunk)
        return Response(json.dumps({"n": received}), content_type="application/json")

    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    decline_websocket_compression()
    answer_protocol_errors_in_json()
    tune_garbage_collection()
    asyncio.run(serve(app, config))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
