"""vLLM's adaptive verification (PR #47808) as a setup: read, written, predicted and proposed."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from autotuner.core.decide.context import Context, situation
from autotuner.core.decide.learning import absorb
from autotuner.core.decide.search import candidates
from autotuner.core.decide.state import TunerState
from autotuner.core.decide.valuation import evaluate
from autotuner.core.engine.capabilities import EngineCapabilities, needed
from autotuner.core.engine.workload import Workload
from autotuner.core.model.registry import load_model
from autotuner.core.predict.acceptance import from_conditional, geometric
from autotuner.core.predict.costmodel import predict
from autotuner.core.types import ScheduleBand, Setup
from autotuner.engines.vllm.capabilities import UPSTREAM
from autotuner.engines.vllm.setup import parse_setup, render
from autotuner.errors import InputError
from autotuner.sim.truth import TruthEngine
from tests.support.policy import H200, MODEL, policy_settings

SUPER_FP4 = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4")
ADAPTIVE = UPSTREAM.model_copy(update={"adaptive_verification": True})
BATCHES = [1, 8, 32, 64, 128, 256, 384, 512]


@pytest.mark.parametrize(
    "text",
    ["spec:3@adaptive", "replay+spec:2:16@adaptive", "spec:3@1-64:3,65-512:1@adaptive"],
)
def test_the_label_round_trips(text: str) -> None:
    setup = Setup.parse(text)
    assert setup.adaptive
    assert setup.label == text
    assert Setup.parse("spec:3") != Setup.parse("spec:3@adaptive")


@pytest.mark.parametrize("text", ["plain@adaptive", "replay:16@adaptive"])
def test_adaptive_verification_without_drafts_is_refused(text: str) -> None:
    with pytest.raises(InputError, match="adaptive verification needs speculation"):
        Setup.parse(text)


def test_it_is_written_into_and_read_from_the_speculative_config() -> None:
    args = ["--speculative-config", '{"method":"mtp","num_speculative_tokens":3,"x":1}']
    on = render(args, Setup.parse("spec:4@adaptive"))
    config = json.loads(on[1])
    assert config == {
        "method": "mtp",
        "num_speculative_tokens": 4,
        "x": 1,
        "enable_adaptive_verification": True,
    }
    assert parse_setup(on) == Setup.parse("spec:4@adaptive")
    off = render(on, Setup.parse("spec:4"))
    assert "enable_adaptive_verification" not in json.loads(off[1])
    assert parse_setup(off) == Setup.parse("spec:4")
    written_as_text = ["--speculative-config", '{"method":"mtp","num_speculative_tokens":2,'
                       '"enable_adaptive_verification":"false"}']  # fmt: skip
    assert not parse_setup(written_as_text).adaptive


def test_a_build_without_it_refuses_it_and_a_running_setup_proves_it() -> None:
    setup = Setup.parse("spec:3@adaptive")
    reason = UPSTREAM.refusal(setup)
    assert reason is not None
    assert "enable_adaptive_verification" in reason
    assert needed(setup, Setup.parse("spec:3")) == "adaptive_verification"
    assert UPSTREAM.proven_by(setup).accepts(setup)
    assert UPSTREAM.proven_by(Setup.parse("spec:3")) == UPSTREAM
    assert not UPSTREAM.proven_by(None).adaptive_verification


def _tokens(setup: Setup, batches: list[int] = BATCHES) -> np.ndarray:
    return predict(SUPER_FP4, H200, setup, batches, geometric(0.7, 6), Workload()).tokens_per_s


def test_it_verifies_the_count_that_serves_most_below_its_ceiling() -> None:
    adaptive = predict(
        SUPER_FP4, H200, Setup.parse("spec:6@adaptive"), BATCHES, geometric(0.7, 6), Workload()
    )
    assert (adaptive.spec_tokens <= 6).all()
    assert adaptive.spec_tokens[-1] < adaptive.spec_tokens[0], adaptive.spec_tokens
    # Never worse than drafting and verifying all K; the same memory (slots for the ceiling).
    assert (adaptive.tokens_per_s >= _tokens(Setup.parse("spec:6")) * (1 - 1e-9)).all()
    assert (
        adaptive.max_batch
        == predict(
            SUPER_FP4, H200, Setup.parse("spec:6"), [1], geometric(0.7, 6), Workload()
        ).max_batch
    )
    # Each verified count is the best of "draft K, verify k" at that batch: the drafter's K
    # passes are paid, so a fixed K equal to the verified count (drafting only it) is faster.
    for i, batch in enumerate(BATCHES):
        k = int(adaptive.spec_tokens[i])
        flat = Setup(spec_tokens=6, schedule=(ScheduleBand(start_batch=1, end_batch=4096,
                                                           spec_tokens=k),))  # fmt: skip
        assert _tokens(flat, [batch])[0] >= adaptive.tokens_per_s[i] * (1 - 1e-9)


def test_a_schedule_band_is_the_ceiling_of_its_steps() -> None:
    # Four GPUs, so batch 256 runs (the band is the running batch's, not the demand's).
    setup = Setup.parse("spec:4@1-64:4,65-4096:1@adaptive")
    curve = predict(
        SUPER_FP4, H200, setup, [8, 256], geometric(0.7, 4), Workload(tensor_parallel=4)
    )
    assert curve.effective_batch[1] == 256
    assert curve.spec_tokens[1] <= 1
    # On one GPU at most 60 run: that is the batch whose band sets the ceiling.
    one = predict(SUPER_FP4, H200, setup, [256], geometric(0.7, 4), Workload())
    assert one.effective_batch[0] < 65
    assert one.spec_tokens[0] > 1


def _context(engine: EngineCapabilities = ADAPTIVE, workload: Workload | None = None) -> Context:
    return Context(
        now=0.0,
        model=MODEL,
        hardware=H200,
        engine=engine,
        workload=workload or Workload(),
    )


SETTINGS = policy_settings(
    candidates={"spec_tokens": (1, 2, 3), "replay_windows": (16,)},
    exploration={"enabled": False},
)


def test_the_policy_proposes_it_only_where_the_build_has_it() -> None:
    accept = from_conditional([0.8, 0.7, 0.6])
    proposed, _ = candidates(TunerState(), _context(), SETTINGS, accept)
    assert Setup.parse("spec:3@adaptive") in proposed
    without, _ = candidates(TunerState(), _context(UPSTREAM), SETTINGS, accept)
    assert not any(s.adaptive for s in without)
    eager, notes = candidates(
        TunerState(), _context(workload=Workload(cudagraph_capture_tokens=0)), SETTINGS, accept
    )
    assert not any(s.adaptive for s in eager)
    assert any("full CUDA graphs" in note for note in notes)


def _warm(state: TunerState, batches: list[int]) -> TunerState:
    truth, ctx = TruthEngine(MODEL, H200, Workload()), _context()
    for minute, batch in enumerate(batches * 3):
        obs = truth.observation(
            now=60.0 * (minute + 1),
            window_s=60.0,
            setup=Setup.parse("spec:3"),
            batch=float(batch),
            rates=(0.6, 0.6, 0.6),  # speculation loses at the top: a schedule exists
        )
        state = absorb(state, obs, replace(ctx, now=60.0 * (minute + 1)), SETTINGS)
    return state


def test_with_a_schedule_too_the_decision_says_which_wins_and_why() -> None:
    state = _warm(TunerState(), [16, 64, 256, 320])
    ctx = replace(_context(), now=60.0 * 12)
    window = TruthEngine(MODEL, H200, Workload()).observation(
        now=ctx.now, window_s=60.0, setup=Setup.parse("spec:3"), batch=320.0, rates=(0.6,) * 3
    )
    sit = situation(state, window, ctx, SETTINGS)
    evaluation = evaluate(sit, Setup.parse("spec:3"))
    assert evaluation is not None
    assert any(s.adaptive for s in evaluation.setups)
    assert any(s.schedule for s in evaluation.setups)
    said = [n for n in evaluation.notes if n.startswith("adaptive verification or a K schedule")]
    assert len(said) == 1, evaluation.notes
    assert "schedule drafts only what its band verifies" in said[0]
