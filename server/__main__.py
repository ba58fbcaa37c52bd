"""``python -m server serve [--host H] [--port P] [--database-url URL] ...``"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from hypercorn.asyncio import serve
from hypercorn.config import Config

from server.app import create_app
from server.config import Settings, add_arguments


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m server")
    commands = parser.add_subparsers(dest="command", required=True)
    add_arguments(commands.add_parser("serve", help="run the app (Quart on Hypercorn)"))
    args = parser.parse_args(argv)
    overrides = {k: v for k, v in vars(args).items() if k != "command"}
    settings = Settings.from_env(**overrides)
    if args.command == "serve":
        asyncio.run(_serve(settings))


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
