"""The decision core, pure: every rule around the policy (drift, a stuck rollout, advise mode, a
refused restart, the throttled blocked Event) and each blocking reason, as tables of (state,
observation, context) -> Step."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autotuner.core.decide.context import Context, situation
from autotuner.core.decide.settings import PolicySettings
from autotuner.core.decide.state import TunerState, Verification
from autotuner.core.decide.step import NoticeKind, restart_refused, step
from autotuner.core.decide.valuation import evaluate, objective
from autotuner.core.observe.limits import ObservationLimits
from autotuner.core.predict.acceptance import from_conditional
from autotuner.core.predict.predictor import Predictor
from autotuner.core.types import Action, BlockReason, Decision, Observation, ScheduleBand, Setup
from autotuner.sim.truth import TruthEngine
from tests.support.policy import H200, MODEL, policy_settings
from tests.support.policy import STATIC_K as ENGINE

TRUTH = TruthEngine(MODEL, H200)
SPEC3, PLAIN, REPLAY = Setup(spec_tokens=3), Setup(), Setup(replay_window=16)
RATES = (0.8, 0.7, 0.6)
# Nothing in the way of a switch: each table row below turns one rule back on.
OPEN = policy_settings(
    switch={"dwell_s": 0, "min_confidence": 0},
    restart={"downtime_s": 1, "cooldown_s": 0, "max_per_hour": 100, "max_per_day": 100},
    verification={"settle_s": 60},
    estimates={"min_batch_weight": 1},
    candidates={"spec_tokens": (1, 2, 3), "replay_windows": (16,)},
    exploration={"enabled": False},  # the exploration rule has its own tests
)
NOW = 100_000.0


def window(setup: Setup, batch: float = 512, now: float = NOW) -> Observation:
    return TRUTH.observation(
        now=now,
        window_s=60,
        setup=setup,
        batch=batch,
        rates=RATES,
        limits=ObservationLimits(min_drafts=10),
    )


def context(**fields: object) -> Context:
    base = Context(now=NOW, model=MODEL, hardware=H200, engine=ENGINE, deployed=SPEC3)
    return replace(base, **fields)  # type: ignore[arg-type]


def learned(setup: Setup = SPEC3, batch: float = 512) -> TunerState:
    """A state that has watched `setup` at `batch` for ten minutes (nothing applied)."""
    state = TunerState(current=setup)
    for minute in range(10, 0, -1):
        now = NOW - 60 * minute
        ctx = context(now=now, deployed=setup, paused=True)
        state = step(state, window(setup, batch, now), ctx, OPEN).state
    return state


def in_flight(switched_at: float = NOW - 120) -> TunerState:
    verification = Verification(
        target=REPLAY, previous=SPEC3, switched_at=switched_at, predicted_gain=0.3
    )
    return learned().verifying(verification)


def test_the_open_table_row_switches() -> None:
    made = step(learned(), window(SPEC3), context(), OPEN)
    assert made.decision.action is Action.SWITCH
    assert made.decision.target is not None
    assert made.decision.target.replay_window  # replay wins at batch 512 here
    assert made.state.verification is not None
    assert made.state.current == made.decision.target
    assert made.state.changes[-1] == NOW


def _high_scenario_gain(
    state: TunerState, ctx: Context, settings: PolicySettings
) -> tuple[float, float]:
    """(point gain, gain with the optimistic acceptance) of the best candidate over spec:3."""
    sit = situation(state, window(SPEC3), ctx, settings)
    evaluation = evaluate(sit, SPEC3)
    assert evaluation is not None
    point = state.acceptance.estimate(ctx.now, OPEN.estimates.acceptance_memory_half_life_s)
    assert point is not None
    high = from_conditional(point.conditional_high)
    batches, weights = state.batch.distribution()

    def value(setup: Setup) -> float:
        return objective(sit, setup, batches, weights, high)

    return evaluation.gain, value(evaluation.best) / value(SPEC3) - 1


def _row(reason: BlockReason) -> tuple[TunerState, Observation, Context, PolicySettings]:
    state, observation, ctx, settings = learned(), window(SPEC3), context(), OPEN
    if reason is BlockReason.BELOW_MIN_GAIN:
        settings = policy_settings(OPEN, switch={"min_gain": 50.0})
    elif reason is BlockReason.LOW_CONFIDENCE:
        # Valued on the model alone: anchored to what spec:3 measures, spec:3's rate would not
        # move with the acceptance scenario (objective() below does not anchor).
        settings = policy_settings(OPEN, calibration={"anchor_octaves": 0.0})
        point, high = _high_scenario_gain(state, ctx, settings)
        assert high < point
        switch = {"min_gain": (point + high) / 2, "min_confidence": 1.0}
        settings = policy_settings(settings, switch=switch)
    elif reason is BlockReason.DWELL:
        settings = policy_settings(OPEN, switch={"dwell_s": 3600})
    elif reason is BlockReason.RESTART_COST:
        settings = policy_settings(OPEN, restart={"downtime_s": 10**9})
    elif reason is BlockReason.BUDGET:
        settings = policy_settings(OPEN, restart={"max_per_day": 0})
    elif reason is BlockReason.COOLDOWN:
        state = state.updated(changes=(NOW - 60,))
        settings = policy_settings(OPEN, restart={"cooldown_s": 3600})
    elif reason is BlockReason.STALE_DATA:
        observation = observation.model_copy(update={"usable": False})
    elif reason is BlockReason.INSUFFICIENT_DATA:
        # No replay: at a load where the recommendation is a shorter K (found by asking the
        # policy), this window has too few drafts to trust acceptance.
        settings = policy_settings(OPEN, candidates={"replay_windows": ()})
        batch = _shorter_k_load(settings)
        state = learned(SPEC3, batch=batch)
        stats = window(SPEC3, batch=batch).acceptance
        assert stats is not None
        short = stats.model_copy(update={"sufficient": False})
        observation = window(SPEC3, batch=batch).model_copy(update={"acceptance": short})
    elif reason is BlockReason.ROLLOUT:
        ctx = context(rollout_in_progress=True)
    elif reason is BlockReason.PAUSED:
        ctx = context(paused=True)
    elif reason is BlockReason.NOT_LEADER:
        ctx = context(leader=False)
    return state, observation, ctx, settings


def _shorter_k_load(settings: PolicySettings) -> int:
    """A batch at which the policy, running spec:3, would switch to a shorter K."""
    for batch in (16, 32, 48, 64, 96, 128, 192, 256, 384):
        made = step(learned(SPEC3, batch), window(SPEC3, batch), context(), settings)
        target = made.decision.target
        switches = made.decision.action is Action.SWITCH
        if switches and target is not None and 0 < target.spec_tokens < 3:
            return batch
    raise AssertionError("spec:3 is never left for a shorter K")


BLOCKS = [r for r in BlockReason if r is not BlockReason.VERIFYING]


@pytest.mark.parametrize("reason", BLOCKS, ids=[r.value for r in BLOCKS])
def test_each_blocking_reason_holds_the_switch_and_changes_nothing(reason: BlockReason) -> None:
    state, observation, ctx, settings = _row(reason)
    made = step(state, observation, ctx, settings)
    if reason is BlockReason.STALE_DATA and made.decision.target is None:
        pytest.fail(f"no recommendation to hold: {made.decision.sentence}")
    assert made.decision.action is Action.HOLD, made.decision.sentence
    assert made.decision.blocked_by is reason, made.decision.sentence
    assert made.decision.target is not None
    assert made.state.current == state.current
    assert made.state.verification is None
    assert made.state.changes == state.changes


def _with_restarts(hours_ago: tuple[float, ...]) -> TunerState:
    return learned().updated(changes=tuple(NOW - h * 3600 for h in sorted(hours_ago)[::-1]))


def test_restarts_past_the_first_raise_the_gain_a_switch_needs() -> None:
    """Each restart in the last 24 hours past the first adds switch.gain_per_restart to the
    least gain a predicted switch needs: a gain g clears 0.6 g with two recent restarts and
    is held under 1.2 g with three, unless those are more than a day old."""
    gain = step(learned(), window(SPEC3), context(), OPEN).decision.gain
    assert gain > 0
    settings = policy_settings(OPEN, switch={"min_gain": 0.0, "gain_per_restart": 0.6 * gain})
    two = step(_with_restarts((5, 3)), window(SPEC3), context(), settings)
    assert two.decision.action is Action.SWITCH, two.decision.sentence
    three = step(_with_restarts((5, 4, 3)), window(SPEC3), context(), settings)
    assert three.decision.action is Action.HOLD
    assert three.decision.blocked_by is BlockReason.BELOW_MIN_GAIN
    assert "for each restart past the first in the last 24 hours: 2)" in three.decision.sentence
    assert three.state.changes == _with_restarts((5, 4, 3)).changes
    old = step(_with_restarts((27, 26, 25)), window(SPEC3), context(), settings)
    assert old.decision.action is Action.SWITCH, old.decision.sentence
    flat = policy_settings(settings, switch={"gain_per_restart": 0.0})
    assert step(_with_restarts((5, 4, 3)), window(SPEC3), context(), flat).decision.action is (
        Action.SWITCH
    )


def test_a_revert_is_a_restart_the_raised_minimum_counts() -> None:
    """A revert spends a restart like a switch: after a restart 5 h ago, a switch and its
    revert, the next predicted switch needs the minimum raised twice; without the revert's
    restart, once."""
    before = _with_restarts((5,)).verifying(
        Verification(target=REPLAY, previous=SPEC3, switched_at=NOW - 120, predicted_gain=0.3)
    )
    stuck = context(deployed=REPLAY, rollout_stuck="ProgressDeadlineExceeded: 0/1 nodes")
    made = step(before, window(REPLAY), stuck, OPEN)
    assert made.decision.action is Action.REVERT
    # The quarantine is the revert's other lesson; it is lifted so the same move is weighed.
    reverted = made.state.updated(quarantine={})
    later = NOW + 60
    flat = policy_settings(OPEN, switch={"min_gain": 0.0, "gain_per_restart": 0.0})
    gain = step(reverted, window(SPEC3, now=later), context(now=later), flat).decision.gain
    assert gain > 0
    raised = policy_settings(flat, switch={"gain_per_restart": 0.6 * gain})
    held = step(reverted, window(SPEC3, now=later), context(now=later), raised).decision
    assert held.action is Action.HOLD, held.sentence
    assert held.blocked_by is BlockReason.BELOW_MIN_GAIN
    assert "for each restart past the first in the last 24 hours: 2)" in held.sentence
    unreverted = reverted.updated(changes=reverted.changes[:-1])
    moved = step(unreverted, window(SPEC3, now=later), context(now=later), raised).decision
    assert moved.action is Action.SWITCH, moved.sentence


def _stops_drafting_at(batch: int) -> Setup:
    """spec:3 below `batch`, no drafts from it up."""
    bands = (
        ScheduleBand(start_batch=1, end_batch=batch - 1, spec_tokens=3),
        ScheduleBand(start_batch=batch, end_batch=8191, spec_tokens=0),
    )
    return Setup(spec_tokens=3, schedule=bands)


def test_a_window_that_drafted_nothing_does_not_hold_a_move_into_drafting() -> None:
    """A K schedule at its K = 0 band drafts nothing, so its window has no drafts: that says
    nothing of acceptance (as plain's window does not), and a move into speculation valued on
    the acceptance remembered from spec:3 goes. (A window too short of drafts from a setup that
    drafts at its batch still holds: the INSUFFICIENT_DATA row of the table above.)"""
    settings = policy_settings(OPEN, candidates={"replay_windows": (), "use_schedule": False})
    batch = 16
    schedule = _stops_drafting_at(batch)
    observation = window(schedule, batch)
    assert observation.acceptance is not None
    assert not observation.acceptance.sufficient
    remembered = learned(SPEC3, batch)
    made = step(
        remembered.updated(current=schedule), observation, context(deployed=schedule), settings
    )
    assert made.decision.action is Action.SWITCH, made.decision.sentence
    assert made.decision.target is not None
    assert made.decision.target.spec_tokens
    assert made.state.verification is not None


def test_a_verification_in_flight_holds_while_the_window_is_not_settled() -> None:
    made = step(in_flight(switched_at=NOW - 30), window(REPLAY), context(deployed=REPLAY), OPEN)
    assert made.decision.action is Action.HOLD
    assert made.decision.blocked_by is BlockReason.VERIFYING


@pytest.mark.parametrize(
    ("ctx_fields", "why"),
    [
        ({"rollout_stuck": "ProgressDeadlineExceeded: 0/1 nodes"}, "ProgressDeadlineExceeded"),
        ({"rollout_in_progress": True, "rollout_deadline_s": 60.0}, "deadline passed"),
    ],
    ids=["the target says stuck", "the deadline passed"],
)
def test_a_stuck_rollout_reverts_and_quarantines(ctx_fields: dict[str, object], why: str) -> None:
    state = in_flight(switched_at=NOW - 120)
    made = step(state, window(REPLAY), context(deployed=REPLAY, **ctx_fields), OPEN)
    assert made.decision.action is Action.REVERT
    assert made.decision.target == SPEC3
    assert made.decision.current == REPLAY
    assert why in made.decision.sentence
    assert made.rollout_stuck
    assert made.state.current == SPEC3
    assert made.state.verification is None
    assert made.state.quarantine[REPLAY.label] == NOW + OPEN.quarantine.setup_s
    assert made.state.changes[-1] == NOW


def test_a_rollout_within_its_deadline_is_waited_for() -> None:
    state = in_flight(switched_at=NOW - 120)
    ctx = context(deployed=REPLAY, rollout_in_progress=True, rollout_deadline_s=900.0)
    made = step(state, window(REPLAY), ctx, OPEN)
    assert made.decision.action is Action.HOLD
    assert not made.rollout_stuck
    assert made.state.verification is not None


def test_drift_is_adopted_noted_and_counts_as_a_change() -> None:
    state = learned()
    settings = policy_settings(OPEN, restart={"cooldown_s": 600})
    made = step(state, window(PLAIN), context(deployed=PLAIN), settings)
    assert [n.kind for n in made.notices] == [NoticeKind.DRIFT]
    assert made.decision.blocked_by is BlockReason.COOLDOWN  # backing off
    assert "managed flags changed outside the tuner (spec:3 -> plain)" in made.notices[0].message
    assert made.notices[0].message in made.decision.notes
    assert made.state.current == PLAIN
    assert NOW in made.state.changes


def test_no_drift_while_our_own_change_is_what_runs() -> None:
    made = step(in_flight(), window(REPLAY), context(deployed=REPLAY), OPEN)
    assert all(n.kind is not NoticeKind.DRIFT for n in made.notices)


@pytest.mark.parametrize("why", ["advisory mode", "not the leader", "no target to patch"])
def test_advise_mode_recommends_and_keeps_only_what_it_learned(why: str) -> None:
    before = learned()
    made = step(before, window(SPEC3), context(advisory=why), OPEN)
    assert made.decision.action is Action.SWITCH
    assert f"{why}: not applied" in made.decision.notes
    assert [n.kind for n in made.notices] == [NoticeKind.RECOMMENDED]
    assert made.state.current == before.current
    assert made.state.verification is None
    assert made.state.changes == before.changes
    assert made.state.batch != before.batch  # the window was learned from
    assert made.state.last_decision_id == before.last_decision_id + 1


def test_a_refused_schedule_means_static_k_for_the_refusal_period() -> None:
    scheduled = Setup(
        spec_tokens=3,
        schedule=(
            ScheduleBand(start_batch=1, end_batch=4, spec_tokens=3),
            ScheduleBand(start_batch=5, end_batch=8191, spec_tokens=1),
        ),
    )
    decision = Decision(
        id=7, at=NOW, action=Action.SWITCH, current=SPEC3, target=scheduled, sentence="switch"
    )
    made = restart_refused(learned(), decision, "exit 1", context(), OPEN)
    assert made.state.quarantine[scheduled.label] == NOW + OPEN.quarantine.setup_s
    assert made.state.refused["spec_schedule"].until == NOW + OPEN.quarantine.capability_s
    assert [n.kind for n in made.notices] == [NoticeKind.REVERTED, NoticeKind.CAPABILITY_REFUSED]
    assert "rolled back to spec:3" in made.decision.notes[-1]
    can_schedule = ENGINE.model_copy(update={"spec_schedule": True})
    active = [name for name, r in made.state.refused.items() if r.until > NOW]
    assert not can_schedule.without(active).spec_schedule


def test_a_refused_change_that_needed_nothing_new_only_quarantines() -> None:
    decision = Decision(
        id=7,
        at=NOW,
        action=Action.SWITCH,
        current=SPEC3,
        target=Setup(spec_tokens=2),
        sentence="switch",
    )
    made = restart_refused(learned(), decision, "exit 1", context(), OPEN)
    assert made.state.refused == {}
    assert "spec:2" in made.state.quarantine
    assert [n.kind for n in made.notices] == [NoticeKind.REVERTED]


@pytest.mark.parametrize(
    ("last_id", "told"), [(0, True), (1, False), (20, True), (21, False)], ids=str
)
def test_a_blocked_switch_is_told_at_the_first_decision_and_every_twentieth(
    last_id: int, told: bool
) -> None:
    state = learned().updated(last_decision_id=last_id, changes=(NOW - 60,))
    settings = policy_settings(OPEN, restart={"cooldown_s": 3600})
    made = step(state, window(SPEC3), context(), settings)
    assert made.decision.blocked_by is BlockReason.COOLDOWN
    assert (NoticeKind.BLOCKED in [n.kind for n in made.notices]) is told


def test_a_decision_fits_one_calibrated_predictor(monkeypatch: pytest.MonkeyPatch) -> None:
    """Learning reads the model's own class times; every figure after it comes from the
    step's one calibrated Predictor (fitted once, not per candidate and scenario)."""
    state, built = learned(), []
    original = Context.predictor

    def counted(self: Context, state: TunerState, settings: PolicySettings) -> Predictor:
        predictor = original(self, state, settings)
        built.append(predictor)
        return predictor

    monkeypatch.setattr(Context, "predictor", counted)
    made = step(state, window(SPEC3), context(), OPEN)
    assert made.decision.predicted_tokens_per_s  # every candidate was valued
    assert len(built) == 2  # the learning's and the decision's
    assert sum("fit" in vars(p) for p in built) == 1


def test_a_pinned_acceptance_is_what_the_policy_decides_on() -> None:
    """policy.estimates.acceptance_pinned replaces the measured acceptance in every decision:
    at batch 1, where the measured drafter keeps speculation on, drafts that are never
    accepted send it off."""
    state = learned(SPEC3, batch=1)
    ctx = context()
    rates = (0.02, 0.01, 0.01)
    pinned = OPEN.model_copy(
        update={"estimates": OPEN.estimates.model_copy(update={"acceptance_pinned": rates})}
    )
    measured = ctx.acceptance(state, OPEN)
    assert measured is not None
    assert measured.conditional != rates
    decided_on = ctx.acceptance(state, pinned)
    assert decided_on is not None
    assert decided_on.conditional == rates
    kept = step(state, window(SPEC3, 1), ctx, OPEN).decision
    assert kept.target is None or kept.target.spec_tokens > 0
    made = step(state, window(SPEC3, 1), ctx, pinned).decision
    assert made.target is not None
    assert made.target.spec_tokens == 0
