"""The server's Prometheus metrics, served at /metrics by prometheus_client (the standard
implementation of the exposition format), each app with a registry of its own. Besides ours,
the process's own (CPU, memory, open files, start time) and the Python platform's."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    content_type = CONTENT_TYPE_LATEST  # (of what render() gives)

    def __init__(self, live_sockets: Callable[[], int]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.events_appended = Counter(
            "chat_events_appended", "Events accepted into the logs.", registry=self.registry
        )
        self.compaction_runs = Counter(
            "chat_compaction_runs", "Compaction passes run by this process.", registry=self.registry
        )
        self.blob_bytes_received = Counter(
            "chat_blob_bytes_received", "Bytes of attachments' upload chunks stored.", registry=self.registry
        )
        sockets = Gauge("chat_live_sockets", "Open live sockets in this process.", registry=self.registry)
        sockets.set_function(live_sockets)
        self._latency = Histogram(
            "chat_request_duration_seconds",
            "HTTP request latency.",
            ("route", "method", "status"),
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        self._latency.labels(route, method, str(status)).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
