"""The loop reads the engine from its live args: tensor parallelism and memory utilisation from
the target's command line over the settings, the drafter from its --speculative-config (a method
the cost model cannot charge proposes no speculation), and /decision says where each came from."""

from __future__ import annotations

import sys
from pathlib import Path

from autotuner.actuators.exec import ExecActuator
from autotuner.core.engine.drafter import LIVE
from autotuner.core.engine.resolution import SETTINGS, Input
from autotuner.core.engine.workload import Workload
from autotuner.core.model.registry import load_model
from autotuner.core.model.spec import DrafterKind
from autotuner.core.predict.hardware import datasheet
from autotuner.core.types import Decision, Observation
from autotuner.settings import cli_overrides, load_settings
from autotuner.sim.truth import TruthEngine
from autotuner.telling.snapshot import decision_document
from tests.support.loop import wired

LLAMA = load_model("meta-llama/Llama-3.1-70B-Instruct-FP8")
H200 = datasheet("H200")
# The world names its requests' lengths: the mean context is observed from them.
TRUTH = TruthEngine(
    LLAMA, H200, Workload(drafter=DrafterKind.EAGLE, prompt_tokens=1024, generation_tokens=512)
)
EAGLE = '{"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-70B", "num_speculative_tokens": 3}'
MEDUSA = '{"method": "medusa", "model": "FasterDecoding/medusa-70b", "num_speculative_tokens": 3}'


def step(tmp_path: Path, args: list[str], *settings: str) -> tuple[Decision, dict[str, object]]:
    """One advisory step against a target whose args are `args`; the decision and /decision."""
    path = tmp_path / "vllm.args"
    path.write_text("\n".join(["--model", LLAMA.name, *args]) + "\n")
    actuator = ExecActuator(path, [sys.executable, "-c", "pass"], timeout_s=30)
    loaded, _ = load_settings(cli=cli_overrides(["quality.enabled=false", *settings]))

    def observe() -> Observation:
        return TRUTH.observation(
            now=1000.0, window_s=60, setup=actuator.read().setup, batch=16, rates=(0.7, 0.6, 0.5)
        )

    tuner = wired(loaded, (LLAMA, H200), observe, actuator, lambda: 1000.0)
    decision = tuner.step()
    return decision, decision_document(tuner.metrics.current())


def test_live_tensor_parallel_and_memory_utilisation_win_over_the_settings(
    tmp_path: Path,
) -> None:
    settings_only, settings_doc = step(tmp_path, [], "model.tensor_parallel=1")
    live, live_doc = step(
        tmp_path,
        ["--tensor-parallel-size", "2", "--gpu-memory-utilization=0.8"],
        "model.tensor_parallel=1",
    )
    inputs = live_doc["inputs"]
    assert isinstance(inputs, dict)
    assert inputs["tensor_parallel"]["value"] == 2
    assert inputs["tensor_parallel"]["source"] == LIVE
    assert "settings: 1" in inputs["tensor_parallel"]["note"]
    assert Input.model_validate(inputs["gpu_memory_utilization"]) == Input(value=0.8, source=LIVE)
    fallback = settings_doc["inputs"]
    assert isinstance(fallback, dict)
    assert fallback["tensor_parallel"]["source"] == SETTINGS
    assert fallback["context_tokens"]["source"] == "observed"
    # Twice the GPUs per replica: plain is predicted faster than on the settings' one GPU.
    plain = "plain"
    assert live.predicted_tokens_per_s[plain] > 1.3 * settings_only.predicted_tokens_per_s[plain]


def test_a_bare_model_without_a_drafter_proposes_no_speculation(tmp_path: Path) -> None:
    decision, document = step(tmp_path, [])
    assert set(decision.predicted_tokens_per_s) == {"plain"}
    inputs = document["inputs"]
    assert isinstance(inputs, dict)
    assert inputs["drafter"]["value"] == "none"


def test_the_deployed_drafter_decides_whether_speculation_is_proposed(tmp_path: Path) -> None:
    eagle, document = step(tmp_path, ["--speculative-config", EAGLE])
    assert any(label.startswith("spec:") for label in eagle.predicted_tokens_per_s)
    inputs = document["inputs"]
    assert isinstance(inputs, dict)
    assert inputs["drafter"]["source"] == LIVE
    assert inputs["drafter"]["value"].startswith("eagle")
    # A method the cost model does not charge: nothing is proposed beyond what runs, and why.
    medusa, _ = step(tmp_path, ["--speculative-config", MEDUSA])
    proposed = set(medusa.predicted_tokens_per_s) - {medusa.current.label}
    assert not any(label.startswith("spec:") for label in proposed)
    assert any("method medusa" in note and "not modelled" in note for note in medusa.notes)


def test_unreadable_live_args_fall_back_to_the_settings_and_say_so(tmp_path: Path) -> None:
    decision, document = step(
        tmp_path, ["--tensor-parallel-size", "two"], "model.tensor_parallel=2"
    )
    inputs = document["inputs"]
    assert isinstance(inputs, dict)
    assert Input.model_validate(inputs["tensor_parallel"]) == Input(value=2, source=SETTINGS)
    assert "cannot be read" in inputs["live_args"]["note"]
    assert decision.predicted_tokens_per_s


ADAPTIVE_EAGLE = (
    '{"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-70B", "num_speculative_tokens": 3, '
    '"enable_adaptive_verification": true}'
)


def test_a_running_adaptive_verification_shows_the_build_has_it(tmp_path: Path) -> None:
    """Not in the settings' capabilities, but the engine runs it: /decision's engine says the
    build has it, and the loop weighs adaptive setups (the running one among them)."""
    decision, document = step(tmp_path, ["--speculative-config", ADAPTIVE_EAGLE])
    assert decision.current.label == "spec:3@adaptive"
    engine = document["engine"]
    assert isinstance(engine, dict)
    assert engine["adaptive_verification"] is True
    assert any(label.endswith("@adaptive") and label != "spec:3@adaptive"
               for label in decision.predicted_tokens_per_s)  # fmt: skip
    plain, plain_doc = step(tmp_path, ["--speculative-config", EAGLE])
    plain_engine = plain_doc["engine"]
    assert isinstance(plain_engine, dict)
    assert plain_engine["adaptive_verification"] is False
    assert not any(label.endswith("@adaptive") for label in plain.predicted_tokens_per_s)


def test_decision_says_which_build_row_is_in_force_and_where_it_came_from(
    tmp_path: Path,
) -> None:
    _, declared = step(tmp_path, [], "engine.build=0.32.0")
    build = declared["build"]
    assert isinstance(build, dict)
    assert build["origin"] == "settings"
    assert build["version"] == "0.32.0"
    assert build["decides"] is True
    assert build["row"] is None  # an attention-only model: no SSM family row applies
    _, unread = step(tmp_path, [])  # an exec target has no image; nothing answers /version
    assert isinstance(unread["build"], dict)
    assert unread["build"]["origin"] == "the engine's metrics"  # 0.33's cache_config labels
    assert unread["build"]["version"] == "0.33.0"
    _, overridden = step(tmp_path, [], "engine.capabilities=gdn-replay")
    assert isinstance(overridden["build"], dict)
    assert overridden["build"]["decides"] is False
    assert overridden["build"]["override"] == "engine.capabilities: gdn-replay"


def test_the_engines_version_is_read_within_its_deadline() -> None:
    from autotuner.sources.detect import engine_version
    from tests.support.pages import serving

    with serving({"/version": '{"version": "0.32.0"}'}) as base:
        assert engine_version(base) == "0.32.0"
        assert engine_version(f"{base}/nowhere") is None  # a 404: not read
    assert engine_version(base, deadline_s=0.5) is None  # nothing listens any more
