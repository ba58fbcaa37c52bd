"""The background compactor: one pass over every account's log per interval, and, with the same
retention window, the garbage collection of attachments (server/attachments.py)."""

from __future__ import annotations

import asyncio
import logging

from server.attachments import Attachments
from server.config import Settings
from server.event_store import SqlEventStore
from server.metrics import Metrics

log = logging.getLogger(__name__)


async def run_compactor(store: SqlEventStore, attachments: Attachments, settings: Settings, metrics: Metrics) -> None:
    while True:
        await asyncio.sleep(settings.compact_interval_seconds)
        try:
            results = await store.compact_all(settings.retention_seconds, settings.compaction_grace_seconds)
        except Exception:  # a failed pass is retried at the next interval
            log.exception("compaction failed")
            continue
        metrics.compaction_runs.inc()
        removed = sum(r.superseded_removed + r.truncated for r in results)
        log.info("compaction: %d accounts, %d events removed", len(results), removed)
        try:
            collected = await attachments.collect_garbage(settings.retention_seconds, settings.compaction_grace_seconds)
        except Exception:
            log.exception("garbage collection of attachments failed")
            continue
        if collected.blobs_deleted or collected.holdings_dropped or collected.uploads_dropped:
            log.info(
                "attachments: %d files deleted, %d references dropped, %d abandoned uploads dropped",
                collected.blobs_deleted, collected.holdings_dropped, collected.uploads_dropped,
            )  # fmt: skip
