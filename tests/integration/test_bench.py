"""`autotuner bench` against the simulated deployment (real HTTP, real restarts through the
manifest), resume after an interruption, a server that does not come back, and calibration.

The sweeps run on the simulated engine's own clock (EngineClock): its steps take their
simulated step times, the restart gap passes on it, and the sweep reads tokens/s and its
waits from it, so what they measure is the simulator's truth on any machine however busy. The
CLI test runs the production path: the wall clock, the manifest watched by a thread."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from autotuner.actuators.manifest import ManifestActuator
from autotuner.bench.calibrate import Measured, calibrate
from autotuner.bench.sweep import Plan, Point, Sweep
from autotuner.canary.run import BUILT_IN
from autotuner.cli.main import app
from autotuner.core.engine.workload import Workload
from autotuner.core.model.registry import load_model
from autotuner.core.predict.acceptance import from_conditional
from autotuner.core.predict.costmodel import predict
from autotuner.core.predict.hardware import KernelEfficiency, datasheet
from autotuner.core.types import Setup
from autotuner.errors import SweepError
from autotuner.sim.clock import EngineClock
from autotuner.sim.deployment import SimulatedDeployment, demo_manifest
from autotuner.sim.server import greedy_text
from autotuner.sim.truth import TruthEngine

MODEL_ID = "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4"
MODEL = load_model(MODEL_ID)
H200 = datasheet("H200")


TRUTH = TruthEngine(MODEL, H200)
ACCEPTANCE = (0.8, 0.7, 0.6)
PLAN = Plan(
    setups=(Setup(spec_tokens=3), Setup(replay_window=16)),
    batches=(4, 16, 64),
    repeats=1,
    output_len=96,
    prompts=("p",),
)


def deployment(
    tmp_path: Path, gap: float = 0.3, *, wall: bool = False, **options: Any
) -> SimulatedDeployment:
    """On its engine's own clock (every request first looks at the manifest, so the sweep's
    probe after a change sees the restart); `wall`: in real time, the manifest watched by a
    thread, as `autotuner bench` meets a real server."""
    manifest = tmp_path / "vllm.yaml"
    manifest.write_text(demo_manifest(MODEL_ID, Setup(spec_tokens=3)))
    if wall:
        # The watcher sees a manifest change within 20 ms, inside the sweep's 0.2 s before it
        # probes (a probe answered by the old setup would start the measurement before the
        # restart); the CLI test's speeds are not compared, only its setups and canaries.
        options.setdefault("poll_s", 0.02)
    else:
        options.setdefault("engine_clock", EngineClock())
    return SimulatedDeployment(manifest, TRUTH, acceptance=ACCEPTANCE, restart_gap_s=gap, **options)


def sweep(
    dep: SimulatedDeployment,
    out: Path,
    plan: Plan = PLAN,
    ready_timeout_s: float = 20,
    **options: Any,
) -> Sweep:
    """The sweep on the deployment's clock: its engine's, unless it runs in real time."""
    if isinstance(dep.clock, EngineClock):
        options.setdefault("clock", dep.clock)
    return Sweep(
        url=dep.server.url,
        actuator=ManifestActuator(dep.manifest.path),
        out=out,
        plan=plan,
        model=MODEL,
        hardware=H200,
        ready_timeout_s=ready_timeout_s,
        **options,
    )


def truth_tps(setup: Setup, batch: int) -> float:
    accept = from_conditional(list(ACCEPTANCE)[: setup.spec_tokens])
    return float(predict(MODEL, H200, setup, [batch], accept, Workload()).tokens_per_s[0])


def test_full_sweep_matches_the_simulators_truth(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    with deployment(tmp_path) as dep:
        points = sweep(dep, out).run()
    assert len(points) == 6
    assert all(p.status == "ok" for p in points)
    by = {(p.setup, p.batch): p for p in points}
    # In the engine's own time the sweep measures the truth up to whole steps: a request that
    # needs 96 / 2.696 = 35.6 spec:3 steps takes 36 (1.1% fewer tokens/s); replay keeps one
    # token a step (96 steps, exact).
    whole_steps = 0.02
    for batch in PLAN.batches:
        spec, replay = by[("spec:3", batch)], by[("replay:16", batch)]
        assert spec.tokens_per_s == pytest.approx(
            truth_tps(Setup(spec_tokens=3), batch), rel=whole_steps
        )
        assert replay.tokens_per_s == pytest.approx(
            truth_tps(Setup(replay_window=16), batch), rel=1e-6
        )
        expected = truth_tps(Setup(spec_tokens=3), batch) / truth_tps(
            Setup(replay_window=16), batch
        )
        measured = spec.tokens_per_s / replay.tokens_per_s
        assert measured == pytest.approx(expected, rel=whole_steps)
        assert spec.acceptance == pytest.approx(list(ACCEPTANCE), abs=0.01)
        assert spec.step_time_s is not None
        assert spec.predicted_tokens_per_s is not None
    files = ("header.json", "results.jsonl", "results.csv", "results.json", "plot.png", "plot.svg")
    for name in files:
        assert (out / name).exists(), name
    header = json.loads((out / "header.json").read_text())
    assert header["model"] == MODEL_ID
    assert header["output_len"] == 96
    assert (out / "plot.png").read_bytes().startswith(b"\x89PNG")
    assert "matplotlib" in (out / "plot.svg").read_text().lower()


def test_each_setup_gets_a_canary_and_the_report_shows_quality(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    broken = {p.prompt for p in BUILT_IN[::2]}  # half the prompts answer differently on replay
    holder: list[SimulatedDeployment] = []

    def generate(prompt: str, max_tokens: int) -> str:
        text = greedy_text(prompt, max_tokens)
        replay = holder[0].sim.setup.setup.replay_window > 0
        return " zz" + text if replay and prompt in broken else text

    plan = replace(PLAN, batches=(4,), canary=BUILT_IN, canary_max_tokens=8)
    with deployment(tmp_path, generate=generate) as dep:
        holder.append(dep)
        sweep(dep, out, plan=plan).run()
    assert sorted(path.name for path in (out / "canary").iterdir()) == [
        "replay_16.json",
        "spec_3.json",
    ]
    quality = json.loads((out / "results.json").read_text())["quality"]
    assert quality["spec:3"]["verdict"] == "reference"
    assert quality["replay:16"]["verdict"] == "worse"
    assert quality["replay:16"]["exact_match_rate"] == pytest.approx(0.5)
    assert quality["replay:16"]["against"] == "spec:3"


def test_canary_runs_that_cannot_be_compared_are_reported_not_fatal(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    plan = replace(PLAN, batches=(4,), canary=BUILT_IN[:4], canary_max_tokens=4)
    with deployment(tmp_path) as dep:
        runner = sweep(dep, out, plan=plan)
        runner.run()
    folder = out / "canary"
    # The replay run was made with another canary set (say, a resumed sweep after an edit).
    other = json.loads((folder / "replay_16.json").read_text())
    other["prompts"] = [
        {"name": p.name, "prompt": p.prompt, "answer": p.answer} for p in BUILT_IN[4:8]
    ]
    (folder / "replay_16.json").write_text(json.dumps(other))
    quality = runner.quality()
    assert quality["spec:3"]["verdict"] == "reference"
    assert quality["replay:16"] == {
        "verdict": "error",
        "summary": "the two canary runs used different prompt sets",
    }
    # A damaged file is reported too; the next readable run becomes the reference.
    (folder / "spec_3.json").write_text("{not json")
    quality = runner.quality()
    assert quality["spec:3"]["verdict"] == "error"
    assert "unreadable" in quality["spec:3"]["summary"]
    assert quality["replay:16"]["verdict"] == "reference"


def test_interrupted_sweep_resumes_where_it_stopped(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    seen: list[Point] = []

    def stop_after_two(point: Point) -> None:
        seen.append(point)
        if len(seen) == 2:
            raise KeyboardInterrupt

    with deployment(tmp_path) as dep:
        with pytest.raises(KeyboardInterrupt):
            sweep(dep, out, on_point=stop_after_two).run()
        assert len(sweep(dep, out).finished()) == 2
        resumed: list[Point] = []
        points = sweep(dep, out, on_point=resumed.append).run()
    assert len(points) == 6
    assert len(resumed) == 4  # only the missing points ran
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == 6


def test_a_server_that_does_not_come_back_stops_the_sweep(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    with deployment(tmp_path, gap=60) as dep:
        stuck = sweep(dep, out, ready_timeout_s=2)
        with pytest.raises(SweepError, match="did not come back"):
            stuck.run()
        kept = stuck.finished()
    assert len(kept) == 3  # the first setup's points (no restart needed) were kept
    assert {p.setup for p in kept.values()} == {"spec:3"}


def test_refused_setups_are_recorded_not_skipped(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    manifest = tmp_path / "vllm.yaml"
    manifest.write_text(
        demo_manifest(MODEL_ID, Setup(spec_tokens=3)).replace(
            "- --max-num-seqs",
            "- --mamba-ssm-cache-dtype\n            - bfloat16\n            - --max-num-seqs",
        )
    )
    with SimulatedDeployment(
        manifest, TRUTH, acceptance=ACCEPTANCE, restart_gap_s=0.3, engine_clock=EngineClock()
    ) as dep:
        points = sweep(dep, out).run()
    refused = [p for p in points if p.status == "refused"]
    assert {p.setup for p in refused} == {"replay:16"}
    assert all("drifts" in p.message for p in refused)


def test_calibrate_recovers_a_perturbed_efficiency() -> None:
    true_ssm = 0.5
    truth = H200.model_copy(
        update={"efficiency": KernelEfficiency(**{**H200.efficiency.model_dump(), "ssm": true_ssm})}
    )
    points = []
    # Plain and replay run the one-token SSM kernel whose efficiency is perturbed; native
    # speculation's multi-token kernel has its own (ssm_verify), which `calibrate` does not fit.
    for setup in (Setup(), Setup(replay_window=16), Setup(replay_window=32)):
        for batch in (8, 64, 128, 256):
            accept = from_conditional(list(ACCEPTANCE)[: setup.spec_tokens])
            step = float(predict(MODEL, truth, setup, [batch], accept, Workload()).step_time_s[0])
            points.append(Measured(setup, batch, ACCEPTANCE[: setup.spec_tokens], step))
    fit = calibrate(MODEL, H200, points)
    assert fit.profile.efficiency.ssm == pytest.approx(true_ssm, rel=0.10)
    assert max(fit.error_after.values()) < 0.02
    assert max(fit.error_before.values()) > 0.05
    assert fit.profile.source == "calibrated"


def test_bench_and_calibrate_cli(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    runner = CliRunner()
    with deployment(tmp_path, wall=True) as dep:
        result = runner.invoke(
            app,
            [
                "bench",
                "--url",
                dep.server.url,
                "--target",
                f"file://{dep.manifest.path}",
                "--setups",
                "spec:3,replay:16",
                "--batches",
                "4,16",
                "--repeats",
                "1",
                "--output-len",
                "16",
                "--out",
                str(out),
                "--model",
                MODEL_ID,
                "--gpu",
                "H200",
            ],
        )
    assert result.exit_code == 0, result.output
    assert "replay:16" in result.stdout
    assert "quality replay:16: identical: 12/12 outputs identical" in result.stdout
    fitted = tmp_path / "fitted.json"
    result = runner.invoke(
        app,
        [
            "calibrate",
            "--from",
            str(out),
            "--model",
            MODEL_ID,
            "--gpu",
            "H200",
            "--out",
            str(fitted),
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(fitted.read_text())["source"] == "calibrated"
    bad = runner.invoke(app, ["calibrate", "--from", str(tmp_path / "nothing")])
    assert bad.exit_code == 2
