"""Before the load has been watched for a dwell (docs/policy.md, "Ahead of the load"): the
horizon after now is valued partly over any demand, as much as the watch is missing, and only a
move to another kind of setup that serves more at every batch is taken as worth making
whatever the load does next."""

from __future__ import annotations

import numpy as np

from autotuner.core.decide.context import Context, Situation, situation
from autotuner.core.decide.estimates import BIN_MIDDLES
from autotuner.core.decide.state import TunerState
from autotuner.core.decide.step import step
from autotuner.core.decide.valuation import dominates, outlook
from autotuner.core.types import Observation, Setup
from autotuner.engines.vllm.capabilities import FOLLOW_BUILD
from autotuner.sim.truth import TruthEngine
from tests.support.policy import H200, MODEL, SPEC3, policy_settings

ENGINE = FOLLOW_BUILD.serving(MODEL)
TRUTH = TruthEngine(MODEL, H200)
SETTINGS = policy_settings(
    switch={"dwell_s": 10.0},
    estimates={"batch_half_life_s": 1.5, "min_batch_weight": 2},
    exploration={"enabled": False},
)
START = 1000.0
BUSY = BIN_MIDDLES >= 128  # bins a load of 4 does not reach within the horizon


def _window(now: float) -> Observation:
    return TRUTH.observation(now=now, window_s=1, setup=SPEC3, batch=4, rates=(0.8, 0.7, 0.6))


def _watched(seconds: float) -> Situation:
    """The situation after watching spec:3 at batch 4 for `seconds`, a window every 0.25 s
    (paused: nothing is applied, whatever the policy would do)."""
    state, now = TunerState(), START
    while now < START + seconds:
        now += 0.25
        ctx = Context(
            now=now, model=MODEL, hardware=H200, engine=ENGINE, deployed=SPEC3, paused=True
        )
        state = step(state, _window(now), ctx, SETTINGS).state
    ctx = Context(now=now, model=MODEL, hardware=H200, engine=ENGINE, deployed=SPEC3)
    return situation(state, _window(now), ctx, SETTINGS)


def test_the_horizon_after_now_is_valued_over_any_demand_until_the_load_is_watched() -> None:
    early = _watched(1.0)
    assert 0.5 < early.unwatched < 1.0
    _, pieces = outlook(early, early.forecast)
    assert pieces[0][BUSY].sum() == 0  # now: the load as it is
    assert np.all(pieces[1:, BUSY].sum(axis=1) > 0.1)  # ahead: any demand, in part
    assert np.allclose(pieces.sum(axis=1), 1.0)

    late = _watched(12.0)
    assert late.unwatched == 0
    _, pieces = outlook(late, late.forecast)
    assert pieces[:, BUSY].sum() == 0  # a flat load of 4, watched: it stays there


def test_only_another_kind_that_serves_more_at_every_batch_is_taken_as_dominating() -> None:
    sit = _watched(1.0)
    point = sit.acceptance
    assert point is not None
    assert dominates(sit, Setup(spec_tokens=3, replay_window=16), SPEC3, point)
    assert not dominates(sit, Setup(replay_window=16), SPEC3, point)  # slower at small batch
    # Another K is the load's to choose, even one that serves more at every batch here.
    spec2 = Setup(spec_tokens=2)
    fewer, more = (sit.predictor.curve(s, BIN_MIDDLES, point)[0] for s in (spec2, SPEC3))
    assert np.all(fewer >= more)
    assert not dominates(sit, spec2, SPEC3, point)
