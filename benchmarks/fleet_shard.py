"""One `autotuner controller` process of benchmarks/fleet.py: the SpecTuners of its shard,
measured from an agreed wall-clock time for an agreed duration, so that every shard (a process
each) is measured over the same span. Prints one JSON line: its figures and its step times.

Run by benchmarks/fleet.py: python -m benchmarks.fleet_shard '{"kube": ..., ...}'
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from autotuner.actuators.kubeapi import api_client
from autotuner.fleet.loops import TunerLoop
from autotuner.fleet.runner import fleet_process
from autotuner.fleet.shards import Shard
from autotuner.settings import load_settings
from benchmarks.sidecar_overhead import cpu_s, rss_mb


def measure(
    *,
    kube: str,
    config: str,
    held: int,
    shard: int,
    shards: int,
    interval: float,
    workers: int,
    start_at: float,
    duration: float,
) -> dict[str, Any]:
    """This shard's loops (`held` of them) stepped on the real clock; figures taken from
    `start_at` (time.time()) for `duration` seconds."""
    me = os.getpid()
    before_rss = rss_mb(me)
    settings, _ = load_settings(Path(config))
    logging.getLogger("fleet").setLevel(logging.WARNING)
    process = fleet_process(
        api_client(kube, timeout_s=10),
        settings,
        Path(config),
        namespaces=["llm"],
        identity=f"bench-{shard}",
        logger=logging.getLogger("fleet"),
        workers=workers,
        lease_namespace=None,
        shard=Shard(shard, shards),
    )
    timings: list[tuple[float, float]] = []  # (began, seconds) of each step
    stepped: dict[tuple[str, str], list[float]] = {}
    original = process.fleet.step_one

    def timed(loop: TunerLoop) -> None:
        began = time.time()
        original(loop)
        timings.append((began, time.time() - began))
        stepped.setdefault(loop.key, []).append(began)

    process.fleet.step_one = timed  # type: ignore[method-assign]
    process.start()
    time.sleep(max(start_at - time.time(), 0.0))
    if len(process.fleet.loops) != held:
        raise SystemExit(f"shard {shard}: {len(process.fleet.loops)} loops, not {held}")
    cpu_before, queries_before, began = cpu_s(me), process.sources.queries, time.time()
    peak = 0.0
    while time.time() - began < duration:
        peak = max(peak, rss_mb(me))
        time.sleep(1)
    elapsed = time.time() - began
    cpu = 100 * (cpu_s(me) - cpu_before) / elapsed
    queries = process.sources.queries - queries_before
    process.stop(10)
    measured = [seconds for at, seconds in timings if began <= at < began + elapsed]
    # The longest wait between two steps of one target, within the measured span (and the
    # step before it).
    gaps = [
        b - a
        for times in stepped.values()
        for a, b in itertools.pairwise(t for t in times if t >= began - interval)
        if a < began + elapsed
    ]
    return {
        "shard": shard,
        "held": held,
        "elapsed_s": elapsed,
        "steps": len(measured),
        "step_s": measured,
        "gaps_s": gaps,
        "targets_stepped": len(stepped),
        "peak_rss_mb": peak,
        "rss_before_fleet_mb": before_rss,
        "cpu_percent_of_a_core": cpu,
        "prometheus_queries": queries,
    }


if __name__ == "__main__":
    print(json.dumps(measure(**json.loads(sys.argv[1]))), flush=True)
