"""The options of ``python -m server chaos`` (apart from the rest of the command, so that the
command's parser needs none of the chaos run's clients)."""

from __future__ import annotations

import argparse
from pathlib import Path

KINDS = ("kill", "pause", "cut", "offline", "wipe", "compact", "upstream", "browser")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=600, help="how long the workload and the nemesis run (default 600)")
    parser.add_argument("--servers", type=int, default=2, help="server processes on one PostgreSQL database (default 2; SQLite: 1)")
    parser.add_argument("--devices", type=int, default=6, help="engine devices: the sync engine under CPython (default 6)")
    parser.add_argument("--browsers", type=int, default=2, help="Chromium pages running the app (default 2)")
    parser.add_argument("--database-url", default=None, help="a PostgreSQL database to run in (a schema of its own); default: SQLite")
    parser.add_argument("--seed", type=int, default=None, help="the seed of every random choice (default: one drawn and printed)")
    parser.add_argument("--history", type=Path, default=None, help="write the history here (JSON lines)")
    parser.add_argument("--check", type=Path, default=None, metavar="FILE", help="only check a saved history, and exit")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between a device's operations, on average (default 1)")
    parser.add_argument("--faults-every", type=float, default=3.0, help="seconds between faults, on average (default 3)")
    parser.add_argument("--faults", default=",".join(KINDS), help=f"the nemesis's kinds, comma-separated (default all: {','.join(KINDS)})")
    parser.add_argument(
        "--heal-seconds", type=float, default=900,
        help="the longest wait for everything to settle after the heal, while the log moves (default 900)",
    )
