"""`autotuner controller` holding N SpecTuners in one process, against N separate
`autotuner run` processes, side by side in one run.

Everything real but the cluster and the engines: the loopback API server (SpecTuners and
their Deployments, watches, status writes), simulated vLLM /metrics (a few SimServers shared
by the targets), the fleet's own watch, stepping thread and status writer, on the real clock.
Both sides run in advise mode with the same settings file. Only `--separate` real `autotuner
run` processes are started (200 would not fit this machine beside the fleet); their memory and
CPU are scaled to N, which the report says.

Run: python -m benchmarks.fleet [--tuners 200] [--interval 15] [--duration 60] [--separate 3]
Target (issue 44): the fleet's RSS under 10% of N separate processes', every target stepping
every interval.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from autotuner.actuators.kubeapi import api_client
from autotuner.fleet.runner import fleet_process
from autotuner.settings import load_settings
from autotuner.sim.engine import SimSetup, SimulatedVllm
from autotuner.sim.server import SimServer
from benchmarks.options import numbers
from benchmarks.sidecar_overhead import cpu_s, rss_mb
from tests.support.fake_apiserver import FakeApiServer, deployment
from tests.support.fleet import ARGS, spectuner

ENGINES = 8  # simulated /metrics servers the targets share
SCRAPES = [0]  # requests the simulated engines answered


def _count_scrape() -> None:
    SCRAPES[0] += 1


SETTLE_S = 10.0  # the separate processes' imports and first steps, before measuring


def main() -> None:
    args = numbers(__doc__, tuners=200, interval=15.0, duration=60.0, separate=3, workers=4)
    engines = [
        SimServer(
            SimulatedVllm(setup=SimSetup(), load=lambda t: 64.0, engines=1),
            on_request=_count_scrape,
        )
        for _ in range(ENGINES)
    ]
    config = _settings_file(engines[0].url, args.interval)
    # The separate processes first, on an API server of their own: neither side's CPU or
    # requests are counted in the other's figures.
    others = FakeApiServer()
    for i in range(args.separate):
        others.put("Deployment", deployment(f"t{i}", args=ARGS))
    rss, cpu = _separate(args.separate, others.url, engines, config, args.interval).result()
    others.close()
    server = FakeApiServer()
    for i in range(args.tuners):
        server.put("Deployment", deployment(f"t{i}", args=ARGS))
    fleet_rss, fleet_cpu, steps, report = _fleet(args, server, config, engines)
    _report(args, fleet_rss, fleet_cpu, steps, report, rss, cpu)
    server.close()
    for engine in engines:
        engine.close()


def _settings_file(url: str, interval: float) -> Path:
    path = Path(tempfile.mkdtemp()) / "autotuner.yaml"
    path.write_text(
        f"mode: advise\n"
        f"engine: {{kind: vllm, build: 0.33.0}}\n"
        f"source: {{urls: ['{url}/metrics']}}\n"
        f"loop: {{interval_s: {interval}, window_s: 60}}\n"
        f"quality: {{enabled: false}}\n"
        f"exporter: {{host: 127.0.0.1, port: 0}}\n"
        f"log: {{format: json, level: warning}}\n"
    )
    return path


class _Separate(threading.Thread):
    """`count` real `autotuner run` processes, each on its own Deployment, measured for
    `duration` after SETTLE_S: mean RSS MB and CPU % of a core, per process."""

    def __init__(
        self, count: int, kube: str, engines: list[SimServer], config: Path, duration: float
    ) -> None:
        super().__init__(daemon=True)
        self.commands = [
            [
                sys.executable,
                "-m",
                "autotuner.cli",
                "run",
                "--config",
                str(config),
                "--target",
                f"k8s://llm/deployment/t{i}",
                "--url",
                f"{engines[i % len(engines)].url}/metrics",
                "--set",
                f"target.kube_server={kube}",
            ]
            for i in range(count)
        ]
        self.duration = duration
        self.rss: list[float] = []
        self.cpu: list[float] = []

    def run(self) -> None:
        processes = [
            subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for c in self.commands
        ]
        time.sleep(SETTLE_S)
        start = {p.pid: cpu_s(p.pid) for p in processes}
        samples: dict[int, list[float]] = {p.pid: [] for p in processes}
        began = time.monotonic()
        while time.monotonic() - began < self.duration:
            for p in processes:
                if p.poll() is not None:
                    raise SystemExit(f"autotuner run {p.pid} exited early ({p.returncode})")
                samples[p.pid].append(rss_mb(p.pid))
            time.sleep(2)
        elapsed = time.monotonic() - began
        for p in processes:
            self.rss.append(statistics.mean(samples[p.pid]))
            self.cpu.append(100 * (cpu_s(p.pid) - start[p.pid]) / elapsed)
            p.terminate()
            p.wait(30)

    def result(self) -> tuple[list[float], list[float]]:
        self.join()
        return self.rss, self.cpu


def _separate(
    count: int, kube: str, engines: list[SimServer], config: Path, interval: float
) -> _Separate:
    thread = _Separate(count, kube, engines, config, max(interval * 2, 20.0))
    thread.start()
    return thread


def _fleet(
    args: argparse.Namespace, server: FakeApiServer, config: Path, engines: list[SimServer]
) -> tuple[float, float, list[int], dict[str, float]]:
    tuners, interval, duration, workers = (
        int(args.tuners),
        float(args.interval),
        float(args.duration),
        int(args.workers),
    )
    before_rss = rss_mb(_self_pid())
    settings, _ = load_settings(config)
    logging.getLogger("fleet").setLevel(logging.WARNING)
    process = fleet_process(
        api_client(server.url, timeout_s=10),
        settings,
        config,
        namespaces=["llm"],
        identity="bench",
        logger=logging.getLogger("fleet"),
        workers=workers,
        lease_namespace=None,
    )
    for i in range(tuners):
        obj = spectuner(f"t{i}", f"t{i}")
        obj["spec"]["source"] = {"urls": [f"{engines[i % len(engines)].url}/metrics"]}
        server.put("SpecTuner", obj)
    timings: list[float] = []
    stepped: dict[tuple[str, str], list[float]] = {}
    original = process.fleet.step_one

    def timed(loop):  # type: ignore[no-untyped-def]
        began = time.perf_counter()
        original(loop)
        timings.append(time.perf_counter() - began)
        stepped.setdefault(loop.key, []).append(began)

    process.fleet.step_one = timed  # type: ignore[method-assign]
    process.start()
    while len(process.fleet.loops) < tuners:
        time.sleep(0.1)
    time.sleep(interval)  # every loop's first step (their starts spread over one interval)
    requests_before = len(server.requests)
    timings.clear()
    scrapes_before = SCRAPES[0]
    cpu_before, began = cpu_s(_self_pid()), time.monotonic()
    peak = 0.0
    while time.monotonic() - began < duration:
        peak = max(peak, rss_mb(_self_pid()))
        time.sleep(1)
    elapsed = time.monotonic() - began
    cpu = 100 * (cpu_s(_self_pid()) - cpu_before) / elapsed
    kinds = Counter(_kind(m, p) for m, p, _ in server.requests[requests_before:])
    steps_done = len(timings)
    scrapes = SCRAPES[0] - scrapes_before
    process.stop(10)
    per_minute = {k: 60 * n / elapsed for k, n in kinds.items()}
    report = {
        "elapsed_s": elapsed,
        "step_ms_median": 1000 * statistics.median(timings),
        "step_ms_p95": 1000 * sorted(timings)[int(0.95 * len(timings))],
        "steps": steps_done,
        "scrapes_per_step": scrapes / max(steps_done, 1),
        "api_requests_per_step": (len(server.requests) - requests_before) / max(steps_done, 1),
        "peak_rss_mb": peak,
        "rss_before_fleet_mb": before_rss,
        **{f"requests_per_min {k}": v for k, v in per_minute.items()},
    }
    # The longest wait between two steps of one target, over the whole run.
    gaps = [b - a for times in stepped.values() for a, b in itertools.pairwise(times)]
    report["step_gap_s_max"] = max(gaps)
    report["step_gap_s_median"] = statistics.median(gaps)
    return peak, cpu, [len(stepped), tuners], report


def _kind(method: str, path: str) -> str:
    if "/spectuners" in path:
        return f"{method} spectuner{'/status' if path.endswith('/status') else ''}"
    return f"{method} {path.split('/')[-2] if method == 'GET' else 'target'}"


def _self_pid() -> int:
    import os

    return os.getpid()


def _report(
    args: argparse.Namespace,
    fleet_rss: float,
    fleet_cpu: float,
    steps: list[int],
    report: dict[str, float],
    rss: list[float],
    cpu: list[float],
) -> None:
    tuners = int(args.tuners)
    print(f"{tuners} SpecTuners, interval {args.interval:g}s, workers {args.workers}")
    for name, value in report.items():
        print(f"  fleet {name}: {value:.1f}")
    print(f"  fleet process CPU: {fleet_cpu:.1f}% of a core (the loopback API server included)")
    print(f"  targets stepped: {steps[0]} of {steps[1]}")
    one_rss, one_cpu = statistics.mean(rss), statistics.mean(cpu)
    print(
        f"  {len(rss)} separate `autotuner run`: mean RSS {one_rss:.1f} MB, "
        f"CPU {one_cpu:.2f}% of a core each (measured {', '.join(f'{r:.1f}' for r in rss)})"
    )
    total = one_rss * tuners
    print(f"  x{tuners} (scaled, not run): {total:.0f} MB, {one_cpu * tuners:.0f}% of a core")
    every = steps[0] == steps[1] and report["step_gap_s_max"] <= args.interval + 1
    print(
        f"  fleet / separate memory: {100 * fleet_rss / total:.1f}% (target < 10%: "
        f"{fleet_rss < 0.1 * total}); every target stepped every interval (longest gap "
        f"<= interval + 1 s): {every}"
    )


if __name__ == "__main__":
    main()
