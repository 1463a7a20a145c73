"""What holds a change, and what undoes one: when no change pays its restart over the horizon,
the plan holds and the dwell never starts, so the reason is the restart cost, not the dwell; a
switched-to engine that stops serving is reverted past the down deadline, not waited on."""

from __future__ import annotations

import numpy as np

from autotuner.core.decide.context import Context
from autotuner.core.decide.state import TunerState
from autotuner.core.decide.step import step
from autotuner.core.engine.capabilities import EngineCapabilities
from autotuner.core.observe.observation import unusable
from autotuner.core.types import Action, BlockReason, Decision, Setup, SetupKind
from autotuner.engines.vllm.capabilities import FOLLOW_BUILD
from autotuner.errors import UnusableReason
from autotuner.sim.truth import TruthEngine
from tests.support.policy import H200, MODEL, policy_settings

TRUTH = TruthEngine(MODEL, H200)
SPEC3 = Setup(spec_tokens=3)
ENGINE = FOLLOW_BUILD.serving(MODEL)  # vLLM 0.33's rows: replay with speculation included
# The same build without replay with speculation: replay alone serves less than spec:3 at
# small batch, so no move serves more whatever the load does.
NO_REPLAY_SPEC = ENGINE.model_copy(update={"replay_with_speculation": False})


SWITCHED = "switched"


def _holds(
    first_compile_s: float,
    dwell_s: float = 1.0,
    steps: int = 8,
    watched_s: float = 0.0,
    engine: EngineCapabilities = ENGINE,
    load_gone_at: float | None = None,
) -> list[BlockReason | str | None]:
    """Why each step at batch 480 held (SWITCHED where it switched), the engine left on
    spec:3; with `watched_s`, the demand of that long before is remembered (as if watched);
    with `load_gone_at`, a change was reverted then because the load it was made for had gone."""
    decisions = _decide(first_compile_s, dwell_s, steps, watched_s, engine, load_gone_at)
    return [SWITCHED if d.action is Action.SWITCH else d.blocked_by for d in decisions]


def _decide(
    first_compile_s: float,
    dwell_s: float,
    steps: int,
    watched_s: float,
    engine: EngineCapabilities,
    load_gone_at: float | None = None,
) -> list[Decision]:
    """The decisions of `steps` steps at batch 480, the engine left on spec:3."""
    settings = policy_settings(
        switch={"dwell_s": dwell_s},
        restart={"horizon_s": 60.0, "downtime_s": 0.5, "first_compile_s": first_compile_s},
        estimates={"batch_half_life_s": 1.5, "min_batch_weight": 2},
        exploration={"enabled": False},
    )
    state, now = TunerState(), 1000.0
    load = state.load
    for back in np.arange(watched_s, 0.0, -0.25):
        load = load.add(480.0, now - float(back), settings.forecast)
    state = state.updated(load=load, load_gone_at=load_gone_at)
    decisions = []
    for _ in range(steps):
        now += 0.25
        ctx = Context(now=now, model=MODEL, hardware=H200, engine=engine, deployed=SPEC3)
        window = TRUTH.observation(
            now=now, window_s=1, setup=SPEC3, batch=480, rates=(0.8, 0.7, 0.6)
        )
        result = step(state, window, ctx, settings)
        state = result.state
        decisions.append(result.decision)
    return decisions


def test_a_first_compile_longer_than_the_horizon_holds_for_its_cost() -> None:
    reasons = _holds(first_compile_s=60.0)
    assert reasons[-1] is BlockReason.RESTART_COST
    assert BlockReason.DWELL not in reasons
    assert SWITCHED not in reasons


def test_a_change_that_pays_waits_out_the_dwell_and_goes() -> None:
    reasons = _holds(first_compile_s=0.0)
    assert SWITCHED in reasons
    assert reasons[: reasons.index(SWITCHED)][-1] is BlockReason.DWELL  # waited it out


def test_a_large_gain_ends_the_dwell_early_and_still_waits_one_step() -> None:
    # At batch 480 replay serves far more than spec:3: its net gain summed over the steps it
    # pointed reaches what the smallest gain would need over the whole dwell well before it,
    # once the load has been watched for a dwell.
    reasons = _holds(first_compile_s=0.0, dwell_s=10.0, steps=20, watched_s=10.0)
    assert SWITCHED in reasons
    waited = reasons[: reasons.index(SWITCHED)]
    assert waited[-1] is BlockReason.DWELL  # one step of evidence at least
    assert waited.count(BlockReason.DWELL) * 0.25 < 10.0 / 2


def test_after_a_load_went_before_a_change_settled_a_large_gain_waits_the_whole_dwell() -> None:
    # The same gain as above, but a change was lately reverted at a load that had gone before
    # it settled (a burst the trend read as a rise): a large gain no longer says the load holds.
    early = _holds(0.0, dwell_s=10.0, steps=60, watched_s=10.0, engine=NO_REPLAY_SPEC)
    whole = _holds(
        0.0, dwell_s=10.0, steps=60, watched_s=10.0, engine=NO_REPLAY_SPEC, load_gone_at=990.0
    )
    assert early.index(SWITCHED) * 0.25 < 10.0 / 2
    assert whole.index(SWITCHED) * 0.25 >= 10.0
    assert set(whole[1 : whole.index(SWITCHED)]) == {BlockReason.DWELL}
    held = _decide(0.0, 10.0, 8, 10.0, NO_REPLAY_SPEC, load_gone_at=990.0)
    assert any("a load went before a change settled lately" in d.sentence for d in held)


def test_the_first_minutes_of_a_run_wait_the_whole_dwell() -> None:
    # Nothing watched before: the first windows show no trend, so even a large gain waits
    # when the move (replay alone) serves less than spec:3 at some batch the load could reach.
    reasons = _holds(first_compile_s=0.0, dwell_s=10.0, steps=20, engine=NO_REPLAY_SPEC)
    assert SWITCHED not in reasons
    assert set(reasons[1:]) == {BlockReason.DWELL}


def test_a_kind_that_serves_more_at_every_batch_goes_before_the_load_is_watched() -> None:
    # Replay with speculation serves at least what spec:3 serves at every batch: whatever the
    # load does next, waiting for it to show a trend only serves less.
    decisions = _decide(0.0, dwell_s=10.0, steps=20, watched_s=0.0, engine=ENGINE)
    switches = [d for d in decisions if d.action is Action.SWITCH]
    assert switches, [d.sentence for d in decisions]
    assert decisions.index(switches[0]) * 0.25 < 10.0 / 2
    assert switches[0].target is not None
    assert switches[0].target.kind is SetupKind.REPLAY_SPEC
    assert any("valued over any demand" in note for note in switches[0].notes)


def test_the_dwell_evidence_adds_the_gain_over_the_time_it_pointed() -> None:
    replay = Setup(replay_window=16)
    state = TunerState().pending_since(replay, 10.0, gain=0.5)
    assert state.pending is not None
    assert state.pending.evidence == 0  # a first sight proves nothing yet
    state = state.pending_since(replay, 70.0, gain=0.2).pending_since(SPEC3, 100.0, gain=-0.1)
    assert state.pending is not None
    assert state.pending.since == 10.0
    assert state.pending.evidence == 0.2 * 60  # a step that sees no gain adds nothing


def test_an_engine_that_stops_serving_after_a_switch_is_reverted() -> None:
    """The switched-to engine dies (at start, or at its first request): verification does not
    wait for a settled window forever; past the down deadline the switch is reverted."""
    settings = policy_settings(
        switch={"dwell_s": 0.0},
        restart={"horizon_s": 60.0, "downtime_s": 0.5, "first_compile_s": 0.0},
        estimates={"batch_half_life_s": 1.5, "min_batch_weight": 2},
        exploration={"enabled": False},
        verification={"down_deadline_s": 30.0},
    )
    state, now, deployed = TunerState(), 1000.0, SPEC3
    decisions = []
    for _ in range(60):
        now += 1.0
        ctx = Context(now=now, model=MODEL, hardware=H200, engine=ENGINE, deployed=deployed)
        if deployed == SPEC3:
            window = TRUTH.observation(
                now=now, window_s=1, setup=SPEC3, batch=480, rates=(0.8, 0.7, 0.6)
            )
        else:  # the new setup never answers
            window = unusable("test", UnusableReason.SERVER_DOWN, "refused", start=now - 1, end=now)
        result = step(state, window, ctx, settings)
        state = result.state
        decisions.append(result.decision)
        if result.acts and result.decision.target is not None:
            deployed = result.decision.target
    actions = [d.action for d in decisions]
    switched, reverted = actions.index(Action.SWITCH), actions.index(Action.REVERT)
    waited = decisions[reverted].at - decisions[switched].at
    assert 30.0 < waited <= 32.0  # the deadline, not before it, and not forever
    assert "has not served since the switch" in decisions[reverted].sentence
    assert deployed == SPEC3
    assert state.quarantine  # the setup that died is not tried again at once
