"""RSS and CPU of `autotuner run` against 8 simulated replicas, beside a bare Python sleep.

Run: python -m benchmarks.sidecar_overhead [--duration 600] [--interval 15] [--replicas 8]
Targets (issue #6): RSS under 80 MB, under 1% of one core on average.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autotuner.sim.engine import SimSetup, SimulatedVllm
from autotuner.sim.server import SimServer
from benchmarks.options import numbers

TICKS = os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


Row = tuple[str, float, float, float]  # name, peak RSS MB, mean RSS MB, CPU % of a core


def main() -> None:
    args = numbers(__doc__, duration=600.0, interval=15.0, replicas=8)
    servers = [
        SimServer(SimulatedVllm(setup=SimSetup(), load=lambda t: 64.0, engines=1))
        for _ in range(args.replicas)
    ]
    sidecar = _start_sidecar(",".join(f"{s.url}/metrics" for s in servers), args.interval)
    baseline = subprocess.Popen(
        [sys.executable, "-c", f"import time; time.sleep({args.duration + 30})"]
    )
    named: list[tuple[str, subprocess.Popen[bytes]]] = [
        ("autotuner run", sidecar),
        ("python sleep (baseline)", baseline),
    ]
    rows, elapsed = _watch(named, args.duration)
    for server in servers:
        server.close()
    _report(rows, args.replicas, args.interval, elapsed)


def _start_sidecar(urls: str, interval: float) -> subprocess.Popen[bytes]:
    """`autotuner run` in advise mode against the simulated replicas' metrics."""
    folder = Path(tempfile.mkdtemp())
    config = folder / "autotuner.yaml"
    config.write_text(f"""\
mode: advise
source: {{urls: [{urls}]}}
loop: {{interval_s: {interval}, window_s: 60}}
exporter: {{host: 127.0.0.1, port: 0}}
log: {{format: json, level: warning}}
""")
    return subprocess.Popen(
        [sys.executable, "-m", "autotuner.cli", "run", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _watch(
    named: list[tuple[str, subprocess.Popen[bytes]]], duration: float
) -> tuple[list[Row], float]:
    """Sample each process's RSS every 5 s for `duration` past its imports, then stop it:
    (its row, seconds measured)."""
    processes = [process for _, process in named]
    time.sleep(5)  # past imports: measure the steady state
    start_cpu = {p.pid: cpu_s(p.pid) for p in processes}
    peaks = {p.pid: 0.0 for p in processes}
    means: dict[int, list[float]] = {p.pid: [] for p in processes}
    started = time.time()
    while time.time() - started < duration:
        for process in processes:
            if process.poll() is not None:
                raise SystemExit(f"process {process.pid} exited early")
            value = rss_mb(process.pid)
            peaks[process.pid] = max(peaks[process.pid], value)
            means[process.pid].append(value)
        time.sleep(5)
    elapsed = time.time() - started
    rows = []
    for name, process in named:
        used = cpu_s(process.pid) - start_cpu[process.pid]
        samples = means[process.pid]
        rows.append((name, peaks[process.pid], sum(samples) / len(samples), 100 * used / elapsed))
        process.terminate()
    return rows, elapsed


def _report(rows: list[Row], replicas: int, interval: float, elapsed: float) -> None:
    print(f"{replicas} simulated replicas, interval {interval:g}s, {elapsed:.0f}s measured")
    print(f"{'':26} {'peak RSS MB':>12} {'mean RSS MB':>12} {'CPU % of a core':>16}")
    for name, peak, mean, cpu in rows:
        print(f"{name:26} {peak:12.1f} {mean:12.1f} {cpu:16.3f}")
    (_, peak, _, cpu), (_, base_peak, _, base_cpu) = rows
    print(
        f"ratio sidecar / baseline: peak RSS {peak / base_peak:.2f}x; CPU above baseline "
        f"{cpu - base_cpu:.3f}% of a core"
    )
    print(f"targets: RSS < 80 MB: {peak < 80}; CPU < 1% of a core: {cpu < 1.0}")


if __name__ == "__main__":
    main()
