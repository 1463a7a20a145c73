"""`autotuner controller` holding N SpecTuners in one process, against N separate
`autotuner run` processes, side by side in one run.

Everything real but the cluster and the engines: the loopback API server (SpecTuners and their
Deployments, watches, status writes) and simulated vLLM /metrics (a few SimServers the targets
share) run in a process of their own (benchmarks/fleet_servers.py), so both sides' CPU and
memory are their own. The controller (one process per shard) runs its own watch, stepping pool
and status writer, on the real clock. Both sides run in advise mode with the same settings
file. Only `--separate` real `autotuner run` processes are started (200 would not fit this
machine); their memory and CPU are multiplied by N, which the report says.

Run: python -m benchmarks.fleet [--tuners 200] [--interval 15] [--duration 120] [--separate 3]
  [--shards 1] [--warmup 0] [--prometheus 0]
`--shards 2`: two controller processes (benchmarks/fleet_shard.py), each holding its shard, their
memory and CPU summed. `--warmup S`: measure from S seconds after the loops start (default one
interval), so that every loop's window is full (the steady state). `--prometheus 1`: every
SpecTuner reads a real Prometheus (scraping the engines, target i as pod t{i}) through the
fleet's shared source, and the report says the queries per step against one target's own.
Target (issue 44): the controller's RSS under 10% of N separate processes', every target
stepping every interval.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client as k8s

from autotuner.actuators.kubeapi import api_client
from autotuner.fleet.shards import shard_of
from autotuner.fleet.spec import GROUP, PLURAL, VERSION
from autotuner.sources.prometheus_api import PrometheusSource
from benchmarks.options import numbers
from benchmarks.sidecar_overhead import cpu_s, rss_mb
from tests.support.fleet import spectuner

ENGINES = 8  # simulated /metrics servers the targets share
SETTLE_S = 10.0  # the separate processes' imports and first steps, before measuring
PROMETHEUS_SCRAPE_S = 5.0  # --prometheus 1: its scrape interval, and the shared bucket
STARTUP_S = 30.0  # a controller's imports, first list and 200 loops built, before warm-up


class Prometheus:
    """A real Prometheus scraping the simulated engines, target t{i} as its own pod (the same
    engine behind several pods): every SpecTuner reads its own pod's series."""

    def __init__(self, engines: list[str], targets: int) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            raise SystemExit("--prometheus 1 needs the prometheus binary (scripts/test.sh)")
        folder = Path(tempfile.mkdtemp())
        pods = ", ".join(
            f'{{targets: ["{engines[i % len(engines)].removeprefix("http://")}"], '
            f"labels: {{namespace: llm, pod: t{i}}}}}"
            for i in range(targets)
        )
        (folder / "prometheus.yml").write_text(
            f"global: {{scrape_interval: {PROMETHEUS_SCRAPE_S:g}s}}\n"
            f"scrape_configs: [{{job_name: vllm, static_configs: [{pods}]}}]\n"
        )
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self.process = subprocess.Popen(
            [
                binary, f"--config.file={folder / 'prometheus.yml'}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.url = f"http://127.0.0.1:{port}"
        ends = time.monotonic() + 60
        while time.monotonic() < ends:
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise SystemExit("prometheus did not become ready within 60 s")

    def source(self, index: int) -> dict[str, Any]:
        """A SpecTuner's source: this server, its own pod."""
        return {
            "kind": "prometheus",
            "urls": [self.url],
            "selector": f'namespace="llm", pod="t{index}"',
            "scrape_interval_s": PROMETHEUS_SCRAPE_S,
        }

    def queries_of_one_window(self) -> int:
        """How many queries one target's own source asks for one window (`autotuner run`)."""
        sent = [0]

        def count(request: httpx.Request) -> None:
            sent[0] += 1

        client = httpx.Client(timeout=10, event_hooks={"request": [count]})
        source = PrometheusSource(
            self.url, 'namespace="llm", pod="t0"', client=client,
            scrape_interval_s=PROMETHEUS_SCRAPE_S,
        )  # fmt: skip
        observation = source.observe(60.0)
        if not observation.usable:
            raise SystemExit(f"prometheus: t0's window is not usable ({observation.detail})")
        return sent[0]

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(30)


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
    args = numbers(
        __doc__,
        tuners=200,
        interval=15.0,
        duration=120.0,
        separate=3,
        workers=4,
        shards=1,
        warmup=0.0,
        prometheus=0,
    )
    config = _settings_file(args.interval)
    world = World(max(args.tuners, args.separate))
    # Measured over as long as the controller (a step costs more as the history fills).
    rss, cpu = _separate(
        args.separate, world, config, max(args.warmup, args.interval) + args.duration
    )
    world.close()
    world = World(args.tuners)
    prometheus = Prometheus(world.engines, args.tuners) if args.prometheus else None
    try:
        report = _fleet(args, world, config, prometheus)
    finally:
        if prometheus is not None:
            prometheus.close()
        world.close()
    _report(args, report, rss, cpu)


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


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


def _fleet(
    args: argparse.Namespace, world: World, config: Path, prometheus: Prometheus | None
) -> dict[str, Any]:
    """The SpecTuners created, then `args.shards` controller processes (benchmarks/
    fleet_shard.py), each holding its shard, measured over the same span."""
    objects = k8s.CustomObjectsApi(api_client(world.kube, timeout_s=10))
    keys = []
    for i in range(args.tuners):
        obj = spectuner(f"t{i}", f"t{i}")
        obj["spec"]["source"] = (
            prometheus.source(i)
            if prometheus is not None
            else {"urls": [f"{world.engines[i % len(world.engines)]}/metrics"]}
        )
        objects.create_namespaced_custom_object(GROUP, VERSION, "llm", PLURAL, obj)
        keys.append(("llm", f"t{i}"))
    start_at = time.time() + STARTUP_S + max(args.warmup, args.interval)
    children = []
    for index in range(args.shards):
        job = {
            "kube": world.kube,
            "config": str(config),
            "held": sum(shard_of(k, args.shards) == index for k in keys),
            "shard": index,
            "shards": args.shards,
            "interval": args.interval,
            "workers": args.workers,
            "start_at": start_at,
            "duration": args.duration,
        }
        children.append(
            subprocess.Popen(
                [sys.executable, "-m", "benchmarks.fleet_shard", json.dumps(job)],
                stdout=subprocess.PIPE,
                text=True,
            )
        )
    time.sleep(max(start_at - time.time(), 0.0))
    counts_before, load_before = world.counts(), load_average()
    time.sleep(args.duration)
    counts_after, load_after = world.counts(), load_average()
    shards = [json.loads(c.communicate(timeout=120)[0]) for c in children]
    if any(c.returncode for c in children):
        raise SystemExit(f"a shard process failed: {[c.returncode for c in children]}")
    report = _combined(args, shards, counts_before, counts_after)
    # Other work on the machine takes the CPU the controllers need: say how busy it was.
    report["machine load average (1 min), start"] = load_before
    report["machine load average (1 min), end"] = load_after
    if prometheus is not None:
        report["prometheus_queries_per_window_one_target_alone"] = (
            prometheus.queries_of_one_window()
        )
        # The engines' /metrics were scraped by Prometheus, not by the controller.
        scraped = report.pop("scrapes_per_step") * report["steps"] / report["elapsed_s"]
        report["engine scrapes per s (Prometheus's)"] = scraped
    return report


def _combined(
    args: argparse.Namespace,
    shards: list[dict[str, Any]],
    counts_before: dict[str, int],
    counts_after: dict[str, int],
) -> dict[str, Any]:
    """Every shard's figures as one controller's: steps, gaps and step times pooled, memory
    and CPU summed (each shard's on its own line too)."""
    elapsed = statistics.mean(s["elapsed_s"] for s in shards)
    measured = sorted(t for s in shards for t in s["step_s"])
    gaps = [g for s in shards for g in s["gaps_s"]]
    steps = len(measured)
    counts = {k: v - counts_before.get(k, 0) for k, v in counts_after.items()}
    per_shard = {}
    if len(shards) > 1:
        for s in shards:
            expected = s["held"] * s["elapsed_s"] / args.interval
            per_shard[f"shard {s['shard']}: targets held"] = s["held"]
            per_shard[f"shard {s['shard']}: steps / expected %"] = 100 * s["steps"] / expected
            per_shard[f"shard {s['shard']}: peak RSS MB"] = s["peak_rss_mb"]
            per_shard[f"shard {s['shard']}: CPU % of a core"] = s["cpu_percent_of_a_core"]
    return {
        "elapsed_s": elapsed,
        "steps": steps,
        "steps_expected": args.tuners * elapsed / args.interval,
        "step_ms_median": 1000 * statistics.median(measured),
        "step_ms_p95": 1000 * measured[int(0.95 * len(measured))],
        "step_gap_s_median": statistics.median(gaps),
        "step_gap_s_max": max(gaps),
        "targets_stepped": sum(s["targets_stepped"] for s in shards),
        "peak_rss_mb": sum(s["peak_rss_mb"] for s in shards),
        "rss_before_fleet_mb": sum(s["rss_before_fleet_mb"] for s in shards),
        "cpu_percent_of_a_core": sum(s["cpu_percent_of_a_core"] for s in shards),
        "cpu_ms_per_step": 10
        * sum(s["cpu_percent_of_a_core"] for s in shards)
        * elapsed
        / max(steps, 1),
        **per_shard,
        "scrapes_per_step": counts.pop("scrapes", 0) / max(steps, 1),
        "prometheus_queries_per_step": sum(s["prometheus_queries"] for s in shards) / max(steps, 1),
        "api_requests_per_step": sum(counts.values()) / max(steps, 1),
        **{f"requests_per_min {k}": 60 * v / elapsed for k, v in sorted(counts.items()) if v},
    }


def _report(
    args: argparse.Namespace, report: dict[str, Any], rss: list[float], cpu: list[float]
) -> None:
    tuners = int(args.tuners)
    print(
        f"{tuners} SpecTuners, interval {args.interval:g}s, workers {args.workers}, "
        f"{args.shards} controller process(es), measured after {args.warmup:g}s of warm-up"
    )
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
