import json

from typer.testing import CliRunner

from autotuner.cli import app
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
