"""The background compactor: one pass over every account's log per interval."""

from __future__ import annotations

import asyncio
import logging

from server.config import Settings
from server.event_store import SqlEventStore
from server.metrics import Metrics

log = logging.getLogger(__name__)


async def run_compactor(store: SqlEventStore, settings: Settings, metrics: Metrics) -> None:
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
