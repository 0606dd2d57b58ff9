"""Prometheus metrics read from the ledger at scrape time (``prometheus_client`` collector)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from aviflow.records import JobState
from aviflow_hub.ledger.store import Ledger

WAIT_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 24 * 3600.0)
STATES = tuple(s.value for s in JobState)


class LedgerCollector(Collector):
    def __init__(self, ledger: Ledger, clock: Callable[[], float] = time.time) -> None:
        self.ledger = ledger
        self.clock = clock

    def collect(self) -> Iterator[Any]:
        now = self.clock()
        attempts = self.ledger.attempts()
        hours = CounterMetricFamily(
            "aviflow_gpu_hours",
            "Allocated GPU-hours (admission to end)",
            labels=["team", "user", "queue"],
        )
        sums: dict[tuple[str, str, str], float] = {}
        waits: dict[str, list[float]] = {}
        for a in attempts:
            key = (a.team or "", a.user, a.queue)
            sums[key] = sums.get(key, 0.0) + a.gpu_seconds(now) / 3600
            waits.setdefault(a.queue, []).append(a.queue_wait)
        for key, value in sorted(sums.items()):
            hours.add_metric(list(key), value)
        yield hours
        wait = HistogramMetricFamily(
            "aviflow_queue_wait_seconds",
            "Seconds from submission (or the previous attempt's end) to admission",
            labels=["queue"],
        )
        for queue, values in sorted(waits.items()):
            buckets = [(repr(b), sum(1 for v in values if v <= b)) for b in WAIT_BUCKETS]
            buckets.append(("+Inf", len(values)))
            wait.add_metric([queue], buckets, sum(values))
        yield wait
        jobs = GaugeMetricFamily("aviflow_jobs", "Jobs by status", labels=["status"])
        counts = dict.fromkeys(STATES, 0)
        for state, n in self.ledger.state_counts().items():
            if state in counts:  # a row with an unknown state is not a job we can show
                counts[state] = n
        for state, n in counts.items():
            jobs.add_metric([state], n)
        yield jobs


def registry_for(ledger: Ledger) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LedgerCollector(ledger))
    return registry
