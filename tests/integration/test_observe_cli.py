import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotuner.cli import app
from autotuner.core.types import Setup
from autotuner.sim.engine import SimSetup, SimulatedVllm
from autotuner.sim.server import SimServer
from tests.integration.conftest import free_port

runner = CliRunner()


def test_observe_json_against_a_live_endpoint() -> None:
    sim = SimulatedVllm(
        setup=SimSetup(spec_tokens=2, acceptance=(0.9, 0.5)),
        load=lambda t: 32,
        step_time=lambda b, s: 0.01,
    )
    with SimServer(sim) as server:
        result = runner.invoke(
            app,
            [
                "observe",
                "--url",
                f"{server.url}/metrics",
                "--window",
                "1s",
                "--interval",
                "200ms",
                "--min-drafts",
                "10",
                "--json",
            ],
        )
    assert result.exit_code == 0, result.output
    obs = json.loads(result.stdout)
    assert obs["usable"] is True
    assert obs["reason"] is None
    assert {"mean", "p50", "p90", "p99", "samples"} <= set(obs["batch"])
    assert obs["batch"]["p50"] == 32
    assert obs["acceptance"]["per_position"] == [0.9, 0.5]
    assert obs["acceptance"]["drafts"] > 0
    assert abs(obs["acceptance"]["tau"] - 2.35) < 1e-9
    assert abs(obs["step_time_s"] - 0.01) < 1e-9
    assert obs["generation_tokens_per_s"] > 0
    assert obs["live_setup"]["spec_tokens"] == 2


def test_observe_exits_3_with_the_reason_when_unusable() -> None:
    url = f"http://127.0.0.1:{free_port()}/metrics"
    result = runner.invoke(
        app,
        ["observe", "--url", url, "--window", "200ms", "--interval", "100ms", "--timeout", "1s"],
    )
    assert result.exit_code == 3
    assert "server_down" in result.stdout


def test_observe_bad_arguments_exit_2() -> None:
    result = runner.invoke(app, ["observe", "--url", "http://x", "--window", "soon"])
    assert result.exit_code == 2
    result = runner.invoke(app, ["observe", "--url", "http://x", "--source", "graphite"])
    assert result.exit_code == 2


def test_observe_reads_the_schedule_from_the_target(tmp_path: Path) -> None:
    """Under a K schedule the deep positions count only the drafts that proposed them: with
    the target's args `observe` reads them right, without it says they are lower bounds."""
    schedule = Setup.parse("spec:3@1-4:3,5-512:1")
    loads = (1, 8, 2, 16)
    sim = SimulatedVllm(
        setup=SimSetup.of(schedule, (0.8, 0.7, 0.6)),
        load=lambda t: loads[int(t * 20) % len(loads)],  # a new batch every 50 ms
        step_time=lambda b, s: 0.002 * b + 0.003 * s.k_at(b),
    )
    spec = {
        "method": "draft_model",
        "model": "draft",
        "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": [[1, 4, 3], [5, 512, 1]],
    }
    args = tmp_path / "args"
    args.write_text(f"--model\nm\n--speculative-config\n{json.dumps(spec)}\n")
    common = ["observe", "--window", "1s", "--interval", "70ms", "--min-drafts", "10", "--json"]
    with SimServer(sim) as server:
        common += ["--url", f"{server.url}/metrics"]
        plain = runner.invoke(app, common)
        read = runner.invoke(app, [*common, "--target", f"exec://{args}?restart=true"])
    assert plain.exit_code == 0, plain.output
    assert read.exit_code == 0, read.output
    naive = json.loads(plain.stdout)["acceptance"]
    assert naive["proposals"] == "unknown"
    assert naive["lower_bound"] == [False, True, True]
    assert naive["per_position"][1] < 0.5
    stats = json.loads(read.stdout)["acceptance"]
    assert stats["proposals"] == "schedule"
    assert stats["read_with"] == schedule.label
    assert stats["per_position"] == pytest.approx([0.8, 0.7, 0.6], abs=1e-6)
    assert stats["per_position"][1] > naive["per_position"][1]


def test_observe_with_an_unreadable_target_exits_1(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    result = runner.invoke(
        app, ["observe", "--url", "http://x", "--target", f"exec://{missing}?restart=true"]
    )
    assert result.exit_code == 1
