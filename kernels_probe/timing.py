"""Timing done properly: warm-up, synchronisation, many repetitions, median and spread."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from autotuner.core.predict.hardware import Measurement


def measure(
    run: Callable[[int], object],
    *,
    work: float,
    unit: str,
    sync: Callable[[], None] = lambda: None,
    warmup: int = 3,
    repeats: int = 15,
    min_time_s: float = 0.002,
) -> Measurement:
    """Rate (work / second) of `run(i)`: `i` lets the caller rotate buffers so caches do not
    flatter the result. Each sample repeats the call until it lasts `min_time_s`."""
    for i in range(warmup):
        run(i)
    sync()
    inner = 1
    while True:  # calibrate: enough calls per sample for the clock's resolution
        start = time.perf_counter()
        for i in range(inner):
            run(i)
        sync()
        if time.perf_counter() - start >= min_time_s or inner >= 1 << 16:
            break
        inner *= 2
    rates = []
    for r in range(repeats):
        start = time.perf_counter()
        for i in range(inner):
            run(r * inner + i)
        sync()
        elapsed = (time.perf_counter() - start) / inner
        rates.append(work / elapsed)
    values = np.asarray(rates)
    return Measurement(
        median=float(np.median(values)),
        p10=float(np.percentile(values, 10)),
        p90=float(np.percentile(values, 90)),
        unit=unit,
        samples=repeats,
    )
