"""What a setup turns off is part of its cost (docs/costmodel.md, "What a setup turns off:
prefix caching"): on vLLM 0.33 replay with speculation runs without prefix caching, and the
policy weighs the prefill its hits were saving against what replay gains."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from autotuner.core.decide.context import Context
from autotuner.core.decide.settings import PolicySettings
from autotuner.core.decide.state import TunerState
from autotuner.core.decide.step import step
from autotuner.core.engine.workload import Workload
from autotuner.core.types import Action, BlockReason, Decision, Setup, SetupKind
from autotuner.engines.vllm.capabilities import FOLLOW_BUILD
from autotuner.sim.worlds import Prior
from tests.support.policy import H200, MODEL, SPEC3, cost_model_world, policy_settings

ENGINE = FOLLOW_BUILD.serving(MODEL)  # vLLM 0.33's rows for NemotronH
SETTINGS = policy_settings(switch={"dwell_s": 0}, exploration={"enabled": False})
INTERVAL = 60.0


def _decide_at_batch_256(workload: Workload) -> list[Decision]:
    """The decisions of ten steps at batch 256 from spec:3, the workload's prefix cache as
    given (the truth: the cost model itself)."""
    return _decide(workload, 256.0, SETTINGS)


def _decide(workload: Workload, batch: float, settings: PolicySettings) -> list[Decision]:
    """Ten steps at `batch` from spec:3 on the cost model's own world."""
    world = cost_model_world(Prior(MODEL, H200, workload), lambda t: batch, (0.8, 0.7, 0.6))
    ctx = Context(
        now=0.0,
        model=MODEL,
        hardware=H200,
        engine=ENGINE,
        workload=workload,
        deployed=SPEC3,
        prefix_caching=ENGINE.keeps_prefix_caching,
    )
    state, decisions = TunerState(), []
    for t in np.arange(INTERVAL, 11 * INTERVAL, INTERVAL):
        observation = world.observation(SPEC3, float(t), INTERVAL)
        result = step(state, observation, replace(ctx, now=float(t)), settings)
        state = result.state
        decisions.append(result.decision)
    return decisions


def test_the_build_says_which_setups_turn_prefix_caching_off() -> None:
    assert ENGINE.keeps_prefix_caching(SPEC3)
    assert ENGINE.keeps_prefix_caching(Setup())
    assert not ENGINE.keeps_prefix_caching(Setup(spec_tokens=3, replay_window=16))
    assert not ENGINE.keeps_prefix_caching(Setup(replay_window=16))  # FlashInfer's companions


def test_without_a_hit_rate_replay_with_speculation_wins_at_large_batch() -> None:
    targets = [d.target for d in _decide_at_batch_256(Workload()) if d.target is not None]
    assert any(t.kind is SetupKind.REPLAY_SPEC for t in targets)
    assert not any(
        "without prefix caching" in n for d in _decide_at_batch_256(Workload()) for n in d.notes
    )


def test_high_hits_on_long_prompts_keep_the_setup_with_prefix_caching_and_say_why() -> None:
    cached = Workload(prefix_hit_rate=0.9, prompt_tokens=8192, generation_tokens=256)
    decisions = _decide_at_batch_256(cached)
    targets = [d.target for d in decisions if d.target is not None]
    assert not any(ENGINE.keeps_prefix_caching(t) is False for t in targets)
    weighed = [n for d in decisions for n in d.notes if n.startswith("weighed:")]
    assert weighed
    assert "without prefix caching loses" in weighed[0]
    assert "at hit rate 90%" in weighed[0]


def test_long_prompts_say_what_their_prefill_takes_from_each_second() -> None:
    """Speculation and replay speed up the decode share only: with 8k-token prompts per 512
    output tokens the decision says how much of each second the prompts take under each."""
    long = Workload(prefix_hit_rate=0.0, prompt_tokens=8192, generation_tokens=512)
    moves = [d for d in _decide_at_batch_256(long) if d.target is not None]
    assert moves
    said = [n for d in moves for n in d.notes if "-token prompts per 512 output tokens" in n]
    assert said
    assert "(P/G 16.0, 0% cached)" in said[0]
    assert "of each second under" in said[0]
    assert not [n for d in _decide_at_batch_256(Workload()) for n in d.notes if "P/G" in n]


def _decide_at_batch_64(workload: Workload) -> list[Decision]:
    """Ten steps at batch 64 from spec:3 with no prefix-cache hits, a move asked to pay 25%."""
    settings = policy_settings(
        switch={"dwell_s": 0, "min_gain": 0.25}, exploration={"enabled": False}
    )
    return _decide(workload, 64.0, settings)


def test_the_same_move_pays_at_short_prompts_and_not_at_long_ones() -> None:
    """spec:3 -> replay with speculation at batch 64 speeds up decoding by about half; with
    prompts half as long as the answers (P/G 0.5) that is what is served, with prompts 8x the
    answers the prompts' prefill takes most of each second and the same move serves a fifth
    more: below the 25% asked, it is held, and the decision says why."""
    short = Workload(prefix_hit_rate=0.0, prompt_tokens=256, generation_tokens=512)
    long = Workload(prefix_hit_rate=0.0, prompt_tokens=4096, generation_tokens=512)
    moved = [d for d in _decide_at_batch_64(short) if d.action is Action.SWITCH]
    assert moved
    assert moved[0].target is not None
    assert moved[0].target.kind is SetupKind.REPLAY_SPEC
    assert moved[0].gain is not None
    assert moved[0].gain > 0.45
    held = _decide_at_batch_64(long)
    assert not [d for d in held if d.action is Action.SWITCH]
    assert {d.blocked_by for d in held} == {BlockReason.BELOW_MIN_GAIN}
    assert all(d.gain is not None and 0.1 < d.gain < 0.25 for d in held)
    notes = [n for d in held for n in d.notes if "(P/G 8.0, 0% cached)" in n]
    assert notes
    assert "replay+spec" in notes[0]
