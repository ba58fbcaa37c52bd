"""Settings: each one a command-line flag and a CHAT_* environment variable (flags win)."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, fields
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Argon2id's least memory: 8 KiB for each of its lanes (server/auth.py hashes with 4).
PASSWORD_MIN_MEMORY_KIB = 8 * 4


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8000
    database_url: str = "sqlite:///./data/chat.db"
    signup: str = "open"
    max_body_bytes: int = 1_000_000
    max_batch_events: int = 500
    max_content_chars: int = 100_000
    max_file_bytes: int = 20 * 1024 * 1024  # the largest attachment (server/attachments.py)
    max_account_bytes: int = 1024 * 1024 * 1024  # what one account's attachments may take together
    blob_dir: str = ""  # where attachments' files go with SQLite; none: "blobs" beside the database
    rate_limit_per_minute: float = 1200.0
    auth_rate_limit_per_minute: float = 30.0
    password_memory_kib: int = 65536  # Argon2id's memory for each password it hashes (server/auth.py)
    password_time_cost: int = 3  # Argon2id's passes over that memory
    ping_seconds: float = 25.0
    session_cache_seconds: float = 5.0
    compact_interval_seconds: float = 300.0
    retention_seconds: float = 30 * 86400.0
    compaction_grace_seconds: float = 60.0
    static_dir: Path = ROOT / "static"
    assistants_file: str = ""  # a JSON list of assistants (server/assistants.py); none: the demo
    assistants: str = ""  # the same JSON as text, e.g. in CHAT_ASSISTANTS
    upstream_timeout_seconds: float = 60.0
    run_lease_seconds: float = 30.0
    run_poll_seconds: float = 1.0
    run_checkpoint_seconds: float = 1.0  # the least time between checkpoints of a streaming reply
    demo_seconds_per_word: float = 0.05
    certfile: str = ""  # with keyfile: serve HTTPS (PEM files); README "Serving on your home network"
    keyfile: str = ""
    trusted_proxies: int = 0  # reverse proxies in front whose X-Forwarded-* headers are believed
    device_model_origins: str = ""  # more origins the page may call for "Model on this device"

    def __post_init__(self) -> None:
        if self.signup not in ("open", "closed"):
            raise SystemExit(f"signup must be open or closed, not {self.signup!r}")
        if bool(self.certfile) != bool(self.keyfile):
            raise SystemExit("certfile and keyfile go together: give both to serve HTTPS, or neither")
        if self.trusted_proxies < 0:
            raise SystemExit("trusted-proxies is a number of proxies: 0 or more")
        if self.password_time_cost < 1 or self.password_memory_kib < PASSWORD_MIN_MEMORY_KIB:
            raise SystemExit(f"password-time-cost is 1 or more, and password-memory-kib {PASSWORD_MIN_MEMORY_KIB} or more")
        if self.max_file_bytes < 0 or self.max_account_bytes < 0:
            raise SystemExit("max-file-bytes and max-account-bytes are numbers of bytes: 0 or more")

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, **overrides: object) -> Settings:
        env = dict(os.environ) if env is None else env
        values: dict[str, object] = {}
        for f in fields(cls):
            raw = env.get(f"CHAT_{f.name.upper()}")
            if raw is not None:
                values[f.name] = _convert(f.name, raw, type(getattr(cls, f.name)))
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]


def _convert(name: str, raw: str, kind: type) -> object:
    try:
        return kind(raw)
    except ValueError:
        raise SystemExit(f"CHAT_{name.upper()}={raw!r} is not a valid {kind.__name__}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for f in fields(Settings):
        default = getattr(Settings, f.name)
        parser.add_argument(
            "--" + f.name.replace("_", "-"),
            type=type(default),
            default=None,
            help=f"(env CHAT_{f.name.upper()}, default {default})",
        )
