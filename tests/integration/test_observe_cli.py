import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from autotuner.cli.main import app
from autotuner.core.types import Setup
from autotuner.sim.engine import SimSetup, SimulatedVllm
from autotuner.sim.server import SimServer
from tests.integration.conftest import free_port
from tests.support.cli import printed_json, refusal
from tests.support.clock import Clock

runner = CliRunner()


def test_observe_json_against_a_live_endpoint() -> None:
    sim = SimulatedVllm(
        setup=SimSetup(spec_tokens=2, acceptance=(0.9, 0.5)),
        load=lambda t: 32,
        step_time=lambda b, s: 0.01,
    )
    with SimServer(sim) as server:
        obs = printed_json(
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
        )
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
    refusal("observe", "--url", "http://x", "--window", "soon")
    refusal("observe", "--url", "http://x", "--source", "graphite")


class ScrapedVllm(SimulatedVllm):
    """A simulated engine whose time moves only when it is scraped: each scrape first runs
    `dt` simulated seconds at each batch of `loads` in turn (starting one further along each
    time, so that the batch gauge shows them all). Every interval between two scrapes then
    holds the same mix of batches, however many scrapes the window takes and however late
    each one comes."""

    def __init__(self, loads: tuple[float, ...], dt: float, **options: Any) -> None:
        self.loads, self.dt, self.turn, self.scrapes = loads, dt, 0, 0
        self.time = Clock()
        super().__init__(load=lambda t: self.loads[self.turn], clock=self.time, **options)

    def render(self) -> bytes:
        for i in range(len(self.loads)):
            self.turn = (self.scrapes + i) % len(self.loads)
            self.time.t += self.dt
            self.advance_to(self.time.t)
        self.scrapes += 1
        return super().render()


def test_observe_reads_the_schedule_from_the_target(tmp_path: Path) -> None:
    """Under a K schedule the deep positions count only the drafts that proposed them: with
    the target's args `observe` reads them right, without it says they are lower bounds."""
    schedule = Setup.parse("spec:3@1-4:3,5-512:1")
    sim = ScrapedVllm(
        loads=(1, 8, 2, 16),  # K = 3, 1, 3, 1: every scrape interval drafts at both
        dt=0.05,
        setup=SimSetup.of(schedule, (0.8, 0.7, 0.6)),
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
        naive = printed_json(*common)["acceptance"]
        stats = printed_json(*common, "--target", f"exec://{args}?restart=true")["acceptance"]
    assert naive["proposals"] == "unknown"
    assert naive["lower_bound"] == [False, True, True]
    # Position 1 over every draft: 0.7 x the share of drafts made at K = 3 (b / step(b)
    # requests' steps a second at batch b).
    drafts = {b: b / sim.step_time(b, sim.setup) for b in sim.loads}
    at_k3 = sum(n for b, n in drafts.items() if sim.setup.k_at(b) == 3) / sum(drafts.values())
    assert naive["per_position"][1] == pytest.approx(0.7 * at_k3, rel=1e-6)
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


def test_an_sglang_target_is_read_with_sglangs_flags(tmp_path: Path) -> None:
    """`observe --target` reads the target with the dialect of the engine its command line
    starts: SGLang's K is --speculative-num-steps, which vLLM's reading would not see."""
    from autotuner.actuators.targets import open_target
    from autotuner.cli.target import target_engine
    from autotuner.engines.kinds import EngineKind

    args = tmp_path / "sglang.args"
    lines = ["python3", "-m", "sglang.launch_server", "--model-path", "m"]
    lines += ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "2"]
    lines += ["--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3"]
    args.write_text("\n".join(lines) + "\n")
    uri = f"exec://{args}?restart=true"
    engine = target_engine(EngineKind.AUTO, uri, None)
    assert engine.kind is EngineKind.SGLANG
    assert open_target(uri, dialect=engine.dialect()).read().setup.spec_tokens == 2
