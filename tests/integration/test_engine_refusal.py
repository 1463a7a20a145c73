"""An engine that refuses a flag: the exec actuator's restart fails with the new args, the
controller puts the old args back, quarantines the setup and stops proposing what it needed
(here a per-batch K schedule: static K from then on). Real restart commands, fake clock."""

from __future__ import annotations

import sys
from pathlib import Path

from autotuner.actuators.exec import ExecActuator
from autotuner.controller import Controller
from autotuner.core.engine.workload import Workload
from autotuner.core.model.registry import load_model
from autotuner.core.predict.hardware import datasheet
from autotuner.core.types import Action, Decision, Observation
from autotuner.settings import cli_overrides, load_settings
from autotuner.sim.truth import TruthEngine
from autotuner.telling.snapshot import decision_document
from tests.support.loop import wired
from tests.support.settings import ACT_AT_ONCE

MODEL = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4")
B200 = datasheet("B200")
TP2 = Workload(tensor_parallel=2)
TRUTH = TruthEngine(MODEL, B200, TP2)
MTP = '{"method": "mtp", "num_speculative_tokens": 3}'
# An engine build without Dynamic SD: it exits when the schedule is in its args.
NO_SCHEDULES = (
    "import os, sys; args = open(os.environ['AUTOTUNER_ARGS_FILE']).read(); "
    "sys.exit('unknown field num_speculative_tokens_per_batch_size' "
    "if 'per_batch_size' in args else 0)"
)
MIXED = [32, 64, 128, 300, 320, 300]  # speculation pays at the low half only: a schedule wins
# Acceptance high enough that drafting at the low half gains more than the plan's noise (at a
# flat 0.3 plain serves within 2% of the best schedule, and the plan keeps it).
RATES = (0.6, 0.5, 0.4)


def controller(folder: Path, clock: list[float]) -> tuple[Controller, ExecActuator]:
    args = folder / "vllm.args"
    args.write_text(f"--model\n{MODEL.name}\n--speculative-config\n{MTP}\n")
    actuator = ExecActuator(args, [sys.executable, "-c", NO_SCHEDULES], timeout_s=30)
    settings, _ = load_settings(
        cli=cli_overrides(
            [
                *ACT_AT_ONCE,
                "model.gpu=B200",
                "model.tensor_parallel=2",
                "engine.capabilities.spec_schedule=true",
                "policy.switch.min_gain=0.02",
                "policy.candidates.replay_windows=[]",
                "quality.enabled=false",
            ]
        )
    )

    def observe() -> Observation:
        return TRUTH.observation(
            now=clock[0],
            window_s=60,
            setup=actuator.read().setup,
            batch=MIXED[int(clock[0] // 60) % len(MIXED)],
            rates=RATES,
        )

    return wired(settings, (MODEL, B200), observe, actuator, lambda: clock[0]), actuator


def test_a_refused_schedule_is_rolled_back_and_static_k_used_instead(tmp_path: Path) -> None:
    clock = [1000.0]
    tuner, actuator = controller(tmp_path, clock)
    decisions: list[Decision] = []
    for _ in range(60):
        clock[0] += 60
        decisions.append(tuner.step())
    scheduled = [
        d for d in decisions if d.action is Action.SWITCH and d.target and d.target.schedule
    ]
    assert scheduled, [d.sentence for d in decisions[-3:]]
    refused = scheduled[0]
    assert refused.target is not None
    previous = refused.current
    assert any(n.startswith("patch failed: restart command exited 1") for n in refused.notes)
    assert f"rolled back to {previous.label}; " in refused.notes[-1]
    state = tuner.state
    assert state is not None
    assert set(state.refused) == {"spec_schedule"}
    why = state.refused["spec_schedule"].why
    assert "unknown field num_speculative_tokens_per_batch_size" in why
    assert refused.target.label in state.quarantine
    # From then on only static K is proposed, and the engine keeps running static K.
    later = decisions[decisions.index(refused) + 1 :]
    assert later
    assert all("@" not in label for d in later for label in d.predicted_tokens_per_s)
    assert all(d.target is None or not d.target.schedule for d in later)
    live = actuator.read().setup
    assert live.schedule == ()
    document = decision_document(tuner.metrics.current())
    assert document["state"]["refused"]["spec_schedule"]["why"] == why
    reasons = [reason for reason, _, _ in actuator.events]
    assert "CapabilityRefused" in reasons
    assert "SetupReverted" in reasons


def test_status_shows_what_the_engine_refused(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from autotuner.cli.main import app

    clock = [1000.0]
    tuner, actuator = controller(tmp_path, clock)
    for _ in range(60):
        clock[0] += 60
        tuner.step()
    assert tuner.state is not None
    actuator.save_state(tuner.state.model_dump_json(), expected_version=None)
    uri = f"exec://{actuator.args_file}?restart=true"
    result = CliRunner().invoke(app, ["status", "--target", uri])
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())  # Rich wraps at the terminal width
    assert "refused by the engine: spec_schedule (spec:" in text
    assert "unknown field num_speculative_tokens_per_batch_size" in text
    assert "quarantined: spec:" in text
