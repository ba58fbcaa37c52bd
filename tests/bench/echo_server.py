"""The app as `python -m server serve` runs it, plus one trivial JSON POST route: the ceiling of
what Quart on Hypercorn does here at all. Only the benchmarks start it."""

from __future__ import annotations

import asyncio
import json
import sys

from hypercorn.asyncio import serve
from hypercorn.config import Config
from quart import Response, request

from server.app import create_app
from server.config import Settings
from server.tuning import decline_websocket_compression, tune_garbage_collection


def main() -> None:
    port, database_url = int(sys.argv[1]), sys.argv[2]
    # No rate limits: the benchmark measures throughput, and signs up one account per connection.
    settings = Settings(
        database_url=database_url,
        compact_interval_seconds=0,
        rate_limit_per_minute=0,
        auth_rate_limit_per_minute=0,
    )
    app = create_app(settings)

    @app.post("/bench/echo")
    async def echo() -> Response:
        body = json.loads(await request.get_data())
        return Response(json.dumps({"ok": True, "n": len(body)}), content_type="application/json")

    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    decline_websocket_compression()
    tune_garbage_collection()
    asyncio.run(serve(app, config))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
