"""Timing the named phases of one loop step (exported per phase, and logged with the step)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from autotuner.telling.exporter import TunerMetrics


class PhaseTimer:
    """Times each named phase of one step (exported per phase, and logged with the step)."""

    def __init__(self, metrics: TunerMetrics) -> None:
        self.metrics = metrics
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - started
            self.seconds[phase] = elapsed
            self.metrics.phase_seconds.labels(phase).observe(elapsed)
