"""``python -m server serve|compact|add-user NAME|export|import|chaos [--database-url URL] ...`` (see README.md)."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import logging
import signal
import sys
import uuid

from hypercorn.asyncio import serve
from hypercorn.config import Config
from pydantic import ValidationError

from server import auth
from server.app import create_app, opened
from server.chaos.options import add_arguments as chaos_arguments
from server.config import Settings, add_arguments
from server.errors import describe
from server.store import UsernameTaken
from server.transfer import export_account, import_account
from server.tuning import answer_protocol_errors_in_json, decline_websocket_compression, tune_garbage_collection
from shared.models import Credentials


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m server")
    commands = parser.add_subparsers(dest="command", required=True)
    add_arguments(commands.add_parser("serve", help="run the app (Quart on Hypercorn)"))
    add_arguments(
        commands.add_parser("compact", help="run one compaction pass over every account and exit")
    )
    add_user = commands.add_parser(
        "add-user", help="create an account (the only way when CHAT_SIGNUP=closed); reads the password from stdin"
    )
    add_user.add_argument("username")
    add_arguments(add_user)
    set_password = commands.add_parser(
        "set-password",
        help="give an account a new password (a forgotten one); reads it from stdin. Its devices stay signed in",
    )
    set_password.add_argument("username")
    add_arguments(set_password)
    for name, summary in (
        ("export", "write an account's chats and messages to stdout as a chat export (JSON)"),
        ("import", "add the chats and messages of a chat export read from stdin to an account"),
    ):
        transfer = commands.add_parser(name, help=summary)
        transfer.add_argument("--user", required=True, help="the account's username")
        if name == "export":
            transfer.add_argument(
                "--with-files", action="store_true", help="a tar of the export and its attachments' files (import reads it)"
            )
        add_arguments(transfer)
    chaos = commands.add_parser(
        "chaos", help="check the app keeps its promises under faults (Jepsen-style); exits 1 on any anomaly"
    )
    chaos_arguments(chaos)
    args = parser.parse_args(argv)
    if args.command == "chaos":
        from server.chaos.cli import main as chaos_main  # (its clients: websockets, Playwright, the test extras)

        sys.exit(chaos_main(args))
    overrides = {k: v for k, v in vars(args).items() if k not in ("command", "username", "user", "with_files")}
    settings = Settings.from_env(**overrides)
    if args.command == "serve":
        asyncio.run(_serve(settings))
    elif args.command == "compact":
        asyncio.run(_compact(settings))
    elif args.command == "add-user":
        sys.exit(asyncio.run(_add_user(settings, args.username)))
    elif args.command == "set-password":
        sys.exit(asyncio.run(_set_password(settings, args.username)))
    elif args.command == "export":
        sys.exit(asyncio.run(export_account(settings, args.user, sys.stdout.buffer, args.with_files)))
    elif args.command == "import":
        sys.exit(asyncio.run(import_account(settings, args.user, sys.stdin.buffer)))


def _credentials(username: str, refused: str) -> Credentials | None:
    """The username with a password from the terminal (asked) or stdin (its first line); None
    (and why, after ``refused``, on stderr) when they are not an account's."""
    prompt = sys.stdin.isatty()
    password = getpass.getpass(f"Password for {username}: ") if prompt else sys.stdin.readline().rstrip("\n")
    try:
        return Credentials(username=username, password=password)
    except ValidationError as e:
        print(f"{refused}: {describe(e)}", file=sys.stderr)
        return None


async def _add_user(settings: Settings, username: str) -> int:
    creds = _credentials(username, f"cannot add {username!r}")
    if creds is None:
        return 2
    async with opened(settings) as (store, _):
        try:
            await store.create_account(str(uuid.uuid4()), creds.username, auth.hash_password(creds.password, settings))
        except UsernameTaken:
            print(f"cannot add {username!r}: this username is taken", file=sys.stderr)
            return 1
    print(f"added {username}")
    return 0


async def _set_password(settings: Settings, username: str) -> int:
    creds = _credentials(username, f"cannot set the password of {username!r}")
    if creds is None:
        return 2
    async with opened(settings) as (store, _):
        account = await store.find_account(creds.username)
        if account is None:
            print(f"cannot set the password of {username!r}: there is no such account", file=sys.stderr)
            return 1
        await store.set_password_hash(account.id, auth.hash_password(creds.password, settings))
    print(f"set the password of {username}")
    return 0


async def _compact(settings: Settings) -> None:
    async with opened(settings) as (store, attachments):
        results = await store.compact_all(settings.retention_seconds, settings.compaction_grace_seconds)
        collected = await attachments.collect_garbage(settings.retention_seconds, settings.compaction_grace_seconds)
    for r in results:
        print(
            f"{r.account_id}: {r.superseded_removed} superseded removed, {r.truncated} truncated,"
            f" min available seq {r.min_available_seq}"
        )
    print(f"compacted {len(results)} accounts")
    print(
        f"attachments: {collected.blobs_deleted} files deleted, {collected.holdings_dropped} references dropped,"
        f" {collected.uploads_dropped} abandoned uploads dropped"
    )


async def _serve(settings: Settings) -> None:
    decline_websocket_compression()
    answer_protocol_errors_in_json()
    app = create_app(settings)
    config = Config()
    config.bind = [f"{settings.host}:{settings.port}"]
    config.graceful_timeout = 10
    if settings.certfile:  # HTTPS (and wss), by Hypercorn's own TLS
        config.certfile, config.keyfile = settings.certfile, settings.keyfile
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    async def shutdown() -> None:
        await stop.wait()
        logging.getLogger("server").info("stopping; open: %s", app.extensions["in_flight"].describe())
        app.extensions["hub"].go_away()  # live sockets close with 1001, clients reconnect elsewhere

    tune_garbage_collection()
    scheme = "https" if settings.certfile else "http"
    print(f"serving on {scheme}://{settings.host}:{settings.port} ({settings.database_url})", file=sys.stderr)
    await serve(app, config, shutdown_trigger=shutdown)


if __name__ == "__main__":
    main()
