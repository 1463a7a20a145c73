"""Parse + derive one Observation from a realistic 8-replica payload, beside prometheus_client.

Run: python -m benchmarks.observe_parse [--replicas 8] [--engines 5] [--repeats 20]
Prints time per scrape (all replicas) and peak memory for: prometheus_client's parser alone,
and this project's reader + the scrape checks + per-engine extraction + window derivation,
measured side by side.
"""

from __future__ import annotations

import statistics
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from autotuner.core.observe.limits import ObservationLimits
from autotuner.core.observe.observation import build_observation
from autotuner.sources.invariants import check_scrape
from autotuner.sources.promtext import parse
from autotuner.sources.vllm_metrics import Snapshot, engine_samples, wanted_names, window_totals
from benchmarks.options import numbers

CAPTURE = (
    Path(__file__).resolve().parents[1].parent
    / "shared"
    / "fixtures"
    / ("vllm_cpu_spec_ngram.metrics.txt")
)


def replica_payload(capture: str, engines: int, bump: float) -> str:
    """One replica: the real capture once per data-parallel engine (engine label rewritten),
    counters scaled so two payloads make a window."""
    parts = []
    for engine in range(engines):
        lines = []
        for line in capture.splitlines():
            if line.startswith("#"):
                lines.append(line)
                continue
            line = line.replace('engine="0"', f'engine="{engine}"')
            if engine and 'engine="' not in line:
                line = (
                    line.replace("{", f'{{engine="{engine}",', 1)
                    if "{" in line
                    else (line.replace(" ", f'{{engine="{engine}"}} ', 1))
                )
            if "_total{" in line and "vllm:" in line:
                name, value = line.rsplit(" ", 1)
                line = f"{name} {float(value) * bump}"
            lines.append(line)
        parts.append("\n".join(lines))
    return "\n".join(parts) + "\n"


def timed(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return statistics.median(times), peak


def main() -> None:
    args = numbers(__doc__, replicas=8, engines=5, repeats=20)
    capture = CAPTURE.read_text()
    before = [replica_payload(capture, args.engines, 1.0) for _ in range(args.replicas)]
    after = [replica_payload(capture, args.engines, 2.0) for _ in range(args.replicas)]
    size = sum(len(p) for p in after)
    wanted = wanted_names()

    def reference() -> None:
        for payload in after:
            for family in text_string_to_metric_families(payload):
                for _ in family.samples:
                    pass

    first = Snapshot(
        at=0.0,
        engines={
            k: v
            for i, p in enumerate(before)
            for k, v in engine_samples(f"r{i}", parse(p, wanted)).items()
        },
    )
    limits = ObservationLimits(min_batch_samples=1)

    def ours() -> None:
        engines = {}
        for i, payload in enumerate(after):
            exposition = parse(payload, wanted)
            check_scrape(f"r{i}", exposition)
            engines.update(engine_samples(f"r{i}", exposition))
        totals = window_totals([first, Snapshot(at=15.0, engines=engines)])
        build_observation("vllm", totals, now=15.0, limits=limits)

    ref_time, ref_peak = timed(reference, args.repeats)
    our_time, our_peak = timed(ours, args.repeats)
    print(f"payload: {args.replicas} replicas x {args.engines} engines, {size / 1e6:.2f} MB")
    print(f"{'':40} {'ms/scrape':>10} {'peak MiB':>9}")
    print(f"{'prometheus_client parser alone':40} {ref_time * 1e3:10.1f} {ref_peak / 2**20:9.1f}")
    print(
        f"{'ours: parse + checks + Observation':40} {our_time * 1e3:10.1f} {our_peak / 2**20:9.1f}"
    )
    print(
        f"ratio ours / prometheus_client parser: time {our_time / ref_time:.3f}, "
        f"peak memory {our_peak / ref_peak:.3f}"
    )
    print(f"ours per 2 MB: {our_time * 1e3 * 2e6 / size:.1f} ms")


if __name__ == "__main__":
    main()
