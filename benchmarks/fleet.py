"""`autotuner controller` holding N SpecTuners in one process, against N separate
`autotuner run` processes, side by side in one run.

Everything real but the cluster and the engines: the loopback API server (SpecTuners and their
Deployments, watches, status writes) and simulated vLLM /metrics (a few SimServers the targets
share) run in a process of their own (benchmarks/fleet_servers.py), so both sides' CPU and
memory are their own. The controller here runs its own watch, stepping pool and status writer,
on the real clock. Both sides run in advise mode with the same settings file. Only `--separate`
real `autotuner run` processes are started (200 would not fit this machine); their memory and
CPU are multiplied by N, which the report says.

Run: python -m benchmarks.fleet [--tuners 200] [--interval 15] [--duration 120] [--separate 3]
Target (issue 44): the controller's RSS under 10% of N separate processes', every target
stepping every interval.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from autotuner.actuators.kubeapi import api_client
from autotuner.fleet.loops import TunerLoop
from autotuner.fleet.runner import fleet_process
from autotuner.fleet.spec import GROUP, PLURAL, VERSION
from autotuner.settings import load_settings
from benchmarks.options import numbers
from benchmarks.sidecar_overhead import cpu_s, rss_mb
from tests.support.fleet import spectuner

ENGINES = 8  # simulated /metrics servers the targets share
SETTLE_S = 10.0  # the separate processes' imports and first steps, before measuring


class World:
    """benchmarks/fleet_servers.py as a child process."""

    def __init__(self, targets: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.fleet_servers", str(targets), str(ENGINES)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        urls = json.loads(self.process.stdout.readline())
        self.kube: str = urls["kube"]
        self.engines: list[str] = urls["engines"]

    def counts(self) -> dict[str, int]:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write("\n")
        self.process.stdin.flush()
        counts: dict[str, int] = json.loads(self.process.stdout.readline())
        return counts

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(30)


def main() -> None:
    args = numbers(__doc__, tuners=200, interval=15.0, duration=120.0, separate=3, workers=4)
    config = _settings_file(args.interval)
    world = World(max(args.tuners, args.separate))
    # Measured over as long as the controller (a step costs more as the history fills).
    rss, cpu = _separate(args.separate, world, config, args.interval + args.duration)
    world.close()
    world = World(args.tuners)
    report = _fleet(args, world, config)
    world.close()
    _report(args, report, rss, cpu)


def _settings_file(interval: float) -> Path:
    path = Path(tempfile.mkdtemp()) / "autotuner.yaml"
    path.write_text(
        f"mode: advise\n"
        f"engine: {{kind: vllm, build: 0.33.0}}\n"
        f"loop: {{interval_s: {interval}, window_s: 60}}\n"
        f"quality: {{enabled: false}}\n"
        f"exporter: {{host: 127.0.0.1, port: 0}}\n"
        f"log: {{format: json, level: warning}}\n"
    )
    return path


def _separate(count: int, world: World, config: Path, duration: float) -> tuple[list[float], ...]:
    """`count` real `autotuner run` processes, each on its own Deployment: mean RSS MB and CPU
    % of a core of each, measured for `duration` after SETTLE_S."""
    processes = [
        subprocess.Popen(
            [
                sys.executable, "-m", "autotuner.cli", "run", "--config", str(config),
                "--target", f"k8s://llm/deployment/t{i}",
                "--url", f"{world.engines[i % len(world.engines)]}/metrics",
                "--set", f"target.kube_server={world.kube}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in range(count)
    ]  # fmt: skip
    time.sleep(SETTLE_S)
    start = {p.pid: cpu_s(p.pid) for p in processes}
    samples: dict[int, list[float]] = {p.pid: [] for p in processes}
    began = time.monotonic()
    while time.monotonic() - began < duration:
        for p in processes:
            if p.poll() is not None:
                raise SystemExit(f"autotuner run {p.pid} exited early ({p.returncode})")
            samples[p.pid].append(rss_mb(p.pid))
        time.sleep(2)
    elapsed = time.monotonic() - began
    rss = [statistics.mean(samples[p.pid]) for p in processes]
    cpu = [100 * (cpu_s(p.pid) - start[p.pid]) / elapsed for p in processes]
    for p in processes:
        p.terminate()
        p.wait(30)
    return rss, cpu


def _fleet(args: argparse.Namespace, world: World, config: Path) -> dict[str, Any]:
    me = os.getpid()
    before_rss = rss_mb(me)
    api = api_client(world.kube, timeout_s=10)
    objects = k8s.CustomObjectsApi(api)
    for i in range(args.tuners):
        obj = spectuner(f"t{i}", f"t{i}")
        obj["spec"]["source"] = {"urls": [f"{world.engines[i % len(world.engines)]}/metrics"]}
        objects.create_namespaced_custom_object(GROUP, VERSION, "llm", PLURAL, obj)
    settings, _ = load_settings(config)
    logging.getLogger("fleet").setLevel(logging.WARNING)
    process = fleet_process(
        api,
        settings,
        config,
        namespaces=["llm"],
        identity="bench",
        logger=logging.getLogger("fleet"),
        workers=args.workers,
        lease_namespace=None,
    )
    timings: list[float] = []
    stepped: dict[tuple[str, str], list[float]] = {}
    original = process.fleet.step_one

    def timed(loop: TunerLoop) -> None:
        began = time.perf_counter()
        original(loop)
        timings.append(time.perf_counter() - began)
        stepped.setdefault(loop.key, []).append(began)

    process.fleet.step_one = timed  # type: ignore[method-assign]
    process.start()
    while len(process.fleet.loops) < args.tuners:
        time.sleep(0.1)
    time.sleep(args.interval)  # every loop's first step (their starts spread over one interval)
    counts_before, steps_before = world.counts(), len(timings)
    cpu_before, began = cpu_s(me), time.monotonic()
    first = began
    peak = 0.0
    while time.monotonic() - began < args.duration:
        peak = max(peak, rss_mb(me))
        time.sleep(1)
    elapsed = time.monotonic() - began
    cpu = 100 * (cpu_s(me) - cpu_before) / elapsed
    counts = {k: v - counts_before.get(k, 0) for k, v in world.counts().items()}
    process.stop(10)
    measured = timings[steps_before:]
    # The longest wait between two steps of one target within the measured time.
    gaps = [
        b - a
        for times in stepped.values()
        for a, b in itertools.pairwise(t for t in times if t >= first - args.interval)
    ]
    steps = len(measured)
    return {
        "elapsed_s": elapsed,
        "steps": steps,
        "steps_expected": args.tuners * elapsed / args.interval,
        "step_ms_median": 1000 * statistics.median(measured),
        "step_ms_p95": 1000 * sorted(measured)[int(0.95 * len(measured))],
        "step_gap_s_median": statistics.median(gaps),
        "step_gap_s_max": max(gaps),
        "targets_stepped": len(stepped),
        "peak_rss_mb": peak,
        "rss_before_fleet_mb": before_rss,
        "cpu_percent_of_a_core": cpu,
        "scrapes_per_step": counts.pop("scrapes", 0) / max(steps, 1),
        "api_requests_per_step": sum(counts.values()) / max(steps, 1),
        **{f"requests_per_min {k}": 60 * v / elapsed for k, v in sorted(counts.items()) if v},
    }


def _report(
    args: argparse.Namespace, report: dict[str, Any], rss: list[float], cpu: list[float]
) -> None:
    tuners = int(args.tuners)
    print(f"{tuners} SpecTuners, interval {args.interval:g}s, workers {args.workers}")
    for name, value in report.items():
        print(f"  controller {name}: {value:.2f}")
    one_rss, one_cpu = statistics.mean(rss), statistics.mean(cpu)
    print(
        f"  {len(rss)} separate `autotuner run`: mean RSS {one_rss:.1f} MB, CPU {one_cpu:.2f}% "
        f"of a core each (measured RSS {', '.join(f'{r:.1f}' for r in rss)})"
    )
    total = one_rss * tuners
    print(f"  x{tuners} (scaled, not run): {total:.0f} MB, {one_cpu * tuners:.0f}% of a core")
    every = report["targets_stepped"] == tuners and report["step_gap_s_max"] <= args.interval + 1
    print(
        f"  controller / separate memory: {100 * report['peak_rss_mb'] / total:.1f}% "
        f"(target < 10%: {report['peak_rss_mb'] < 0.1 * total}); every target stepped every "
        f"interval (longest gap <= interval + 1 s): {every}"
    )


if __name__ == "__main__":
    main()
