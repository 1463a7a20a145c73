"""The loop's liveness (/healthz): a step must complete every `loop.stalled_after_s`, counted
from the start until the first one (a sidecar wedged in its first scrape is restarted)."""

from __future__ import annotations

import json
from pathlib import Path

from autotuner.actuators.base import Actuator
from autotuner.actuators.exec import ExecActuator
from autotuner.controller import Controller
from autotuner.core.decide.state import read_state
from autotuner.core.types import Observation, Setup
from autotuner.settings import Settings, cli_overrides, load_settings
from autotuner.sim.truth import TruthEngine
from tests.support.loop import wired
from tests.support.policy import H200, MODEL

TRUTH = TruthEngine(MODEL, H200)
START = 1_000.0
SPEC3 = Setup(spec_tokens=3)


def _settings() -> Settings:
    settings, _ = load_settings(cli=cli_overrides(["loop.interval_s=10"]))
    return settings


def _controller(clock: list[float], actuator: Actuator | None = None) -> Controller:
    def observe() -> Observation:
        return TRUTH.observation(
            now=clock[0], window_s=60, setup=SPEC3, batch=64, rates=(0.8, 0.7, 0.6)
        )

    return wired(_settings(), (MODEL, H200), observe, actuator, lambda: clock[0])


def test_a_loop_that_never_completes_a_step_stops_being_alive() -> None:
    clock = [START]
    tuner = _controller(clock)
    stalled = tuner.settings.loop.stalled_after_s
    assert tuner.alive()
    clock[0] = START + stalled - 1
    assert tuner.alive()
    clock[0] = START + stalled + 1
    assert not tuner.alive()  # wedged in its first step: restart it


def test_each_completed_step_restarts_the_count() -> None:
    clock = [START]
    tuner = _controller(clock)
    stalled = tuner.settings.loop.stalled_after_s
    clock[0] = START + stalled - 1
    tuner.step()
    clock[0] = START + 2 * stalled - 2
    assert tuner.alive()
    clock[0] = START + 2 * stalled
    assert not tuner.alive()


def test_shutdown_saves_what_was_learned_on_a_target_without_a_lease(tmp_path: Path) -> None:
    """A file or exec target has no Lease: the sidecar is its only writer, so a SIGTERM writes
    the state learned since the last periodic save."""
    args = tmp_path / "vllm.args"
    config = json.dumps({"method": "mtp", "num_speculative_tokens": 3})
    args.write_text(f"--model\nm\n--speculative-config\n{config}\n")
    actuator = ExecActuator(args, ["true"])
    clock = [START]
    tuner = _controller(clock, actuator)
    tuner.step()
    actuator.state_file.unlink(missing_ok=True)  # as if no periodic save had come yet
    tuner.shutdown()
    assert read_state(actuator.state_file.read_text()).state is not None
