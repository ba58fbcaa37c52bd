"""``python -m server serve|compact [--database-url URL] [--retention-seconds S] ...``"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from hypercorn.asyncio import serve
from hypercorn.config import Config

from server.app import create_app, open_store, utc_now
from server.config import Settings, add_arguments


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m server")
    commands = parser.add_subparsers(dest="command", required=True)
    add_arguments(commands.add_parser("serve", help="run the app (Quart on Hypercorn)"))
    add_arguments(
        commands.add_parser("compact", help="run one compaction pass over every account and exit")
    )
    args = parser.parse_args(argv)
    overrides = {k: v for k, v in vars(args).items() if k != "command"}
    settings = Settings.from_env(**overrides)
    if args.command == "serve":
        asyncio.run(_serve(settings))
    elif args.command == "compact":
        asyncio.run(_compact(settings))


async def _compact(settings: Settings) -> None:
    store = open_store(settings.database_url, utc_now)
    await store.open()
    try:
        results = await store.compact_all(settings.retention_seconds, settings.compaction_grace_seconds)
    finally:
        await store.close()
    for r in results:
        print(
            f"{r.account_id}: {r.superseded_removed} superseded removed, {r.truncated} truncated,"
            f" min available seq {r.min_available_seq}"
        )
    print(f"compacted {len(results)} accounts")


async def _serve(settings: Settings) -> None:
    app = create_app(settings)
    config = Config()
    config.bind = [f"{settings.host}:{settings.port}"]
    config.accesslog = "-"
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"serving on http://{settings.host}:{settings.port} ({settings.database_url})", file=sys.stderr)
    await serve(app, config, shutdown_trigger=stop.wait)


if __name__ == "__main__":
    main()
