"""A few Prometheus metrics, rendered in the text exposition format at /metrics."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


def _labels(pairs: tuple[tuple[str, str], ...]) -> str:
    if not pairs:
        return ""
    inner = ",".join(f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"' for k, v in pairs)
    return "{" + inner + "}"


class Metrics:
    def __init__(self, live_sockets: Callable[[], int]) -> None:
        self._live_sockets = live_sockets
        self.events_appended = 0
        self.compaction_runs = 0
        self._latency: dict[tuple[tuple[str, str], ...], list[int]] = defaultdict(
            lambda: [0] * (len(LATENCY_BUCKETS) + 1)
        )
        self._latency_sum: dict[tuple[tuple[str, str], ...], float] = defaultdict(float)

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        key = (("route", route), ("method", method), ("status", str(status)))
        self._latency[key][bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self._latency_sum[key] += seconds

    def render(self) -> str:
        lines = [
            "# HELP chat_events_appended_total Events accepted into the logs.",
            "# TYPE chat_events_appended_total counter",
            f"chat_events_appended_total {self.events_appended}",
            "# HELP chat_live_sockets Open live sockets in this process.",
            "# TYPE chat_live_sockets gauge",
            f"chat_live_sockets {self._live_sockets()}",
            "# HELP chat_compaction_runs_total Compaction passes run by this process.",
            "# TYPE chat_compaction_runs_total counter",
            f"chat_compaction_runs_total {self.compaction_runs}",
            "# HELP chat_request_duration_seconds HTTP request latency.",
            "# TYPE chat_request_duration_seconds histogram",
        ]
        for key, counts in sorted(self._latency.items()):
            cumulative = 0
            for bound, count in zip((*LATENCY_BUCKETS, float("inf")), counts):
                cumulative += count
                le = "+Inf" if bound == float("inf") else repr(bound)
                lines.append(f"chat_request_duration_seconds_bucket{_labels((*key, ('le', le)))} {cumulative}")
            lines.append(f"chat_request_duration_seconds_sum{_labels(key)} {self._latency_sum[key]}")
            lines.append(f"chat_request_duration_seconds_count{_labels(key)} {cumulative}")
        return "\n".join(lines) + "\n"
