"""The benchmarks stay runnable (a tiny run; the figures come from running them by hand)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_observe_parse_benchmark_runs() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.observe_parse",
            "--replicas",
            "1",
            "--engines",
            "1",
            "--repeats",
            "1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "ratio ours / prometheus_client parser" in result.stdout


def test_decision_quality_benchmark_runs() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.decision_quality",
            "--hours",
            "2",
            "--interval",
            "600",
            "--traces",
            "step",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "oracle" in result.stdout
    assert result.stdout.count("targets:") == 2


def test_sidecar_overhead_benchmark_runs() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.sidecar_overhead",
            "--duration",
            "6",
            "--interval",
            "1",
            "--replicas",
            "2",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "peak RSS" in result.stdout


def test_bench_overhead_benchmark_runs() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.bench_overhead",
            "--streams",
            "16",
            "--output-len",
            "8",
            "--repeats",
            "1",
            "--step-ms",
            "5",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "ratio measured / configured" in result.stdout
