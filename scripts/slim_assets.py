"""Make the browser's downloads small (run by scripts/setup; each command is idempotent).

  python scripts/slim_assets.py stdlib ORIGINAL TRIMMED   Pyodide's python_stdlib.zip without what
      the app never imports: test suites, the REPL and debuggers, tkinter/idlelib/turtle,
      ensurepip/venv/lib2to3, mail and RPC clients (no sockets in a browser), multiprocessing (no
      processes), and the like. Read from ORIGINAL, which set-up keeps, so running it again gives
      the same file.
  python scripts/slim_assets.py store WHEEL...              each zip rewritten with its members
      stored, not deflated (same files, same names, same order): the server sends it br/gzip
      compressed, and one stream over the whole archive is far smaller than per-member deflate
      (python_stdlib.zip: 2.49 MB deflated, 1.61 MB stored then brotli). Pyodide unpacks wheels,
      and imports the stdlib with zipimport, either way.
  python scripts/slim_assets.py compress DIR                 a .br and a .gz beside each file of DIR
      (recursively) that compression makes smaller, at the smallest settings (made once, sent
      often); a variant newer than its file is kept, so a second run does nothing, and a body
      compressed before, in any checkout, is copied from ~/.cache/offline-chat/compressed.

What stays in the stdlib is everything else: the local helper runs Python a user sends, which may
import any of the general-purpose modules (statistics, fractions, csv, decimal, difflib, ...).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import sys
import zipfile
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import brotli

# Top-level names (packages or modules) of the stdlib zip the app never imports.
DROP_TOP = {
    "test", "unittest", "doctest.py", "pdb.py", "bdb.py", "pydoc.py", "pydoc_data", "_pyrepl",
    "idlelib", "tkinter", "turtle.py", "turtledemo", "ensurepip", "venv", "lib2to3", "distutils",
    "multiprocessing", "wsgiref", "xmlrpc", "imaplib.py", "smtplib.py", "poplib.py", "ftplib.py",
    "nntplib.py", "telnetlib.py", "mailbox.py", "webbrowser.py", "antigravity.py", "tabnanny.py",
    "pyclbr.py", "zipapp.py", "curses", "dbm", "msilib", "__phello__", "__hello__.py", "cProfile.py",
    "profile.py", "pstats.py", "trace.py", "pty.py", "tty.py",
}  # fmt: skip
# Directories dropped wherever they are (a package's own tests).
DROP_DIRS = {"test", "tests", "idle_test"}
MIN_SAVING = 0.05  # a variant that saves less than this share is not worth a second copy


def dropped(name: str) -> bool:
    parts = name.rstrip("/").split("/")
    return parts[0] in DROP_TOP or any(p in DROP_DIRS for p in parts[:-1]) or (
        name.endswith("/") and parts[-1] in DROP_DIRS
    )


def rewrite(source: bytes, keep: object = None) -> bytes:
    """The zip ``source`` with its members stored (and only those ``keep(name)`` accepts)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(source)) as original, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as result:
        for info in original.infolist():
            if keep is not None and not keep(info.filename):  # type: ignore[operator]
                continue
            copy = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            copy.external_attr = info.external_attr
            copy.compress_type = zipfile.ZIP_STORED
            result.writestr(copy, original.read(info))
    return out.getvalue()


def write_if_changed(path: Path, data: bytes) -> bool:
    if path.exists() and path.read_bytes() == data:
        return False
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)
    return True


def stdlib(original: Path, trimmed: Path) -> None:
    data = rewrite(original.read_bytes(), keep=lambda name: not dropped(name))
    changed = write_if_changed(trimmed, data)
    with zipfile.ZipFile(original) as z:
        before = len(z.namelist())
    with zipfile.ZipFile(trimmed) as z:
        after = len(z.namelist())
    print(f"{trimmed}: {after} of {before} entries{'' if changed else ' (unchanged)'}")


def store(paths: list[Path]) -> None:
    for path in paths:
        source = path.read_bytes()
        with zipfile.ZipFile(io.BytesIO(source)) as z:
            if all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist()):
                continue  # (done already)
        write_if_changed(path, rewrite(source))


# Compressed bodies by the SHA-256 of what they compress, and how: a new checkout's set-up copies
# them instead of compressing again (brotli at its best setting is most of a set-up's time once
# pip's and npm's caches are warm). Like those caches, it is outside the checkout.
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "offline-chat" / "compressed"
# encoding -> (the cache's name for the settings, the compressor at those settings)
HOW: dict[str, tuple[str, Callable[[bytes], bytes]]] = {
    "br": ("br-q11-w24", lambda data: bytes(brotli.compress(data, quality=11, lgwin=24))),
    "gzip": ("gz-9", lambda data: gzip.compress(data, compresslevel=9, mtime=0)),
}


def _compressed(data: bytes, encoding: str) -> bytes:
    """``data`` compressed as ``encoding``, from the cache when it has it."""
    settings, compressor = HOW[encoding]
    kept = CACHE / f"{hashlib.sha256(data).hexdigest()}.{settings}"
    try:
        return kept.read_bytes()
    except OSError:
        pass
    body = compressor(data)
    try:
        CACHE.mkdir(parents=True, exist_ok=True)
        temporary = kept.with_name(f"{kept.name}.{os.getpid()}.tmp")
        temporary.write_bytes(body)
        os.replace(temporary, kept)  # (whole or not at all: another set-up may read it meanwhile)
    except OSError as error:  # (no cache: compressed again next time)
        print(f"{kept}: not cached ({error})", file=sys.stderr)
    return body


def _variant(job: tuple[str, str]) -> str:
    path, encoding = Path(job[0]), job[1]
    data = path.read_bytes()
    body = _compressed(data, encoding)
    target = path.with_name(path.name + (".br" if encoding == "br" else ".gz"))
    if len(body) <= len(data) * (1 - MIN_SAVING):
        temporary = target.with_name(target.name + ".tmp")
        temporary.write_bytes(body)
        os.replace(temporary, target)
        return f"{target}: {len(body):,} bytes ({len(body) / len(data):.0%})"
    target.unlink(missing_ok=True)
    target.with_name(target.name + ".skip").write_bytes(b"")  # (not worth it: remembered)
    return f"{path}: not compressed as {encoding} (saves under {MIN_SAVING:.0%})"


def compress(directory: Path) -> None:
    jobs = []
    for path in sorted(directory.rglob("*")):
        if not path.is_file() or path.suffix in (".br", ".gz", ".skip", ".tmp") or path.name.startswith("."):
            continue
        for encoding, suffix in (("br", ".br"), ("gzip", ".gz")):
            done = [path.with_name(path.name + suffix), path.with_name(path.name + suffix + ".skip")]
            if not any(d.exists() and d.stat().st_mtime_ns >= path.stat().st_mtime_ns for d in done):
                jobs.append((str(path), encoding))
    if not jobs:
        return
    # Biggest first, on every core: brotli at its best setting takes ~50 s for the 9.6 MB wasm.
    jobs.sort(key=lambda job: -Path(job[0]).stat().st_size)
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for line in pool.map(_variant, jobs):
            print(line)


def main(argv: list[str]) -> None:
    command, *args = argv
    if command == "stdlib":
        stdlib(Path(args[0]), Path(args[1]))
    elif command == "store":
        store([Path(a) for a in args])
    elif command == "compress":
        compress(Path(args[0]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
