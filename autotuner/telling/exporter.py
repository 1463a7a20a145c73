"""The sidecar's own Prometheus metrics, in a private registry: the counters of what happened
(moved through the one table in `counting`), the phase timings, and the collectors that read
the latest step's Snapshot."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from autotuner.telling.collectors import COLLECTORS, PREFIX
from autotuner.telling.counting import (
    COUNTERS,
    COUNTS,
    CanaryRunOutcome,
    CanaryStage,
    Countable,
    Increment,
    canary_increment,
    every_labelled_increment,
)
from autotuner.telling.snapshot import Snapshot

PHASE_BUCKETS = (0.001, 0.005, 0.02, 0.1, 0.5, 2.0, 10.0, 60.0, 300.0)


class TunerMetrics:
    """Counters of what happened, plus one collector per concern over the latest Snapshot."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.lock = threading.Lock()
        self.snapshot = Snapshot()
        self.counters = {
            name: Counter(
                f"{PREFIX}_{name.value}", spec.documentation, spec.labels, registry=self.registry
            )
            for name, spec in COUNTERS.items()
        }
        for increment in every_labelled_increment():
            self.counters[increment.counter].labels(*increment.labels)
        self.phase_seconds = Histogram(
            f"{PREFIX}_step_phase_seconds",
            "Time spent in each phase of a loop step.",
            ["phase"],
            buckets=PHASE_BUCKETS,
            registry=self.registry,
        )
        for collector in COLLECTORS:
            self.registry.register(collector(self.current))

    def count(self, kind: Countable) -> None:
        """Move the counters `kind` moves (COUNTS); a kind not in the table moves none."""
        for increment in COUNTS.get(kind, ()):
            self._move(increment)

    def count_canary(self, stage: CanaryStage, outcome: CanaryRunOutcome) -> None:
        self._move(canary_increment(stage, outcome))

    def _move(self, increment: Increment) -> None:
        counter = self.counters[increment.counter]
        (counter.labels(*increment.labels) if increment.labels else counter).inc()

    def update(self, snapshot: Snapshot) -> None:
        with self.lock:
            self.snapshot = snapshot

    def current(self) -> Snapshot:
        with self.lock:
            return self.snapshot

    def render(self) -> bytes:
        return generate_latest(self.registry)
