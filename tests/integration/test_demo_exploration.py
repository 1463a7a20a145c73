"""`autotuner demo --world wrong-prior` shows an exploration: speculation measures slower than
modelled and replay (never run) is faster, so the prior ranks speculation first where the
truth ranks replay first; the tuner tries replay once and keeps or reverts it as the truth
says. On the simulated clock (`--fast`) the run takes the same steps however slow the machine
is, so nothing here depends on wall-clock time."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotuner.actuators.manifest import ManifestActuator
from autotuner.cli.main import app
from autotuner.core.decide.settings import ExplorationSettings, SwitchSettings
from autotuner.core.engine.workload import Workload
from autotuner.core.model.registry import load_model
from autotuner.core.predict.hardware import datasheet
from autotuner.core.types import Setup, SetupKind
from autotuner.sim.deployment import SimulatedDeployment, demo_manifest
from autotuner.sim.truth import TruthEngine, wrong_prior_error
from tests.support.clock import Clock

MODEL = "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4"  # the demo's default, on an H200
RATES = (0.8, 0.7, 0.6)  # the demo's default acceptance


@pytest.mark.slow
def test_the_wrong_prior_demo_explores_and_keeps_what_the_truth_says(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["demo", "--world", "wrong-prior", "--fast", "--no-live", "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "demo.json").read_text())
    explorations = summary["explorations"]
    assert explorations, [d["sentence"] for d in summary["decisions"]]
    first = explorations[0]
    explored, left = Setup.parse(first["to"]), Setup.parse(first["from"])
    assert explored.kind is SetupKind.REPLAY
    assert left.kind is SetupKind.SPEC
    assert "has not been measured near batch" in first["sentence"]
    # The calibrated point estimate alone would not have switched: only the interval asked.
    point = re.search(r"point estimate ([+-][\d.]+)%", first["sentence"])
    assert point is not None, first["sentence"]
    assert float(point.group(1)) / 100 < SwitchSettings().min_gain
    # Kept or reverted as the world's truth says, at the demand it was tried at.
    series = summary["series"]
    at = min(range(len(series["t"])), key=lambda i: abs(series["t"][i] - first["at_s"]))
    truth = TruthEngine(load_model(MODEL), datasheet("H200"), Workload(), wrong_prior_error)
    demand = series["demand"][at]
    gain = truth.tokens_per_s(explored, demand, RATES) / truth.tokens_per_s(left, demand, RATES)
    expected = "kept" if gain > 1 - ExplorationSettings().tolerance else "reverted"
    assert expected == "kept"  # this world: replay really is faster there
    assert first["outcome"] == expected, first
    assert first["verdict"].startswith(f"verified {explored.label}:")
    # What the operator reads: the exploration, its verdict, and the count.
    output = " ".join(result.stdout.split())  # rich wraps long lines
    assert f"switch: explore {left.label} -> {explored.label}:" in output
    assert f"keep: verified {explored.label}:" in output
    assert f"{len(explorations)} exploration(s): {len(explorations)} kept" in output
    assert "held at 24" in output


def up(dep: SimulatedDeployment) -> bool:
    return dep.server.up


def test_a_polled_deployment_restarts_on_its_own_clock(tmp_path: Path) -> None:
    """Without its watcher thread (the demo's simulated clock) the restart gap passes on the
    deployment's clock, not in real time."""
    manifest = tmp_path / "vllm.yaml"
    manifest.write_text(demo_manifest(MODEL, Setup(spec_tokens=3)))
    clock = Clock()
    truth = TruthEngine(load_model(MODEL), datasheet("H200"))
    with SimulatedDeployment(
        manifest,
        truth,
        load=lambda t: 32.0,
        acceptance=RATES,
        restart_gap_s=60.0,
        clock=clock,
        watch=False,
    ) as dep:
        assert dep.watcher is None
        dep.poll()
        assert up(dep)
        ManifestActuator(manifest).apply(
            Setup(replay_window=16),
            state=None,
            expected_version=None,
            saved_speculative_config={"method": "mtp"},
        )
        dep.poll()
        assert not up(dep)
        clock.t += 59.0
        dep.poll()
        assert not up(dep)  # an hour of real time would not matter: the clock did not move
        assert dep.restarts == 0
        clock.t += 1.0
        dep.poll()
        assert up(dep)
        assert dep.restarts == 1
        assert dep.sim.setup.setup == Setup(replay_window=16)
        assert [label for _, label in dep.history] == ["spec:3", "replay:16"]
