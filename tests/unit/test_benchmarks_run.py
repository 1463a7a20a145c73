"""The benchmarks stay runnable (tiny runs; the figures come from running them by hand)."""

import pytest

from tests.support.run import python_module


@pytest.mark.parametrize(
    ("module", "args", "expected"),
    [
        (
            "observe_parse",
            ["--replicas", "1", "--engines", "1", "--repeats", "1"],
            "ratio ours / prometheus_client parser",
        ),
        ("fidelity", ["--context", "1024"], "worst |error|"),
        ("schedule_cost", [], "Model Runner V1: "),
        (
            "decision_quality",
            [
                *("--quick", "--hours", "12", "--worlds", "measured,combined,step"),
                *("--jobs", "1", "--decisions"),
            ],
            "h switch spec:3 -> ",
        ),
        (
            "switch_timing",
            ["--worlds", "published-drift", "--at", "0.08,3.25"],
            "[gdn-replay] published-drift: one switch spec:3 -> replay:16",
        ),
        ("sidecar_overhead", ["--duration", "6", "--interval", "1", "--replicas", "2"], "peak RSS"),
        (
            "canary_cost",
            ["--streams", "4", "--seconds", "1", "--output-len", "8", "--max-tokens", "4"],
            "canary tokens / one minute served",
        ),
        (
            "bench_overhead",
            ["--streams", "16", "--output-len", "8", "--repeats", "1", "--step-ms", "5"],
            "ratio measured / configured",
        ),
    ],
)
def test_benchmark_runs(module: str, args: list[str], expected: str) -> None:
    result = python_module(f"benchmarks.{module}", *args, timeout_s=300)
    assert result.returncode == 0, result.stderr
    assert expected in result.stdout
