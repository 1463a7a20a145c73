"""Gating: whether a better setup may be switched to now (gain, confidence, dwell, restart cost,
change budget, cooldown, data, rollout, pause, leadership, in that order), and the dwell clock."""

from __future__ import annotations

import math

import numpy as np

from autotuner.core.decide.anchor import running_miss
from autotuner.core.decide.context import Situation
from autotuner.core.decide.decisions import why_unusable
from autotuner.core.decide.reach import beyond_observed
from autotuner.core.decide.schedule_check import spec_tokens_in_window
from autotuner.core.decide.settings import CHANGE_ROOM
from autotuner.core.decide.state import TunerState
from autotuner.core.decide.valuation import EXTRA_POSITIONS, Evaluation, misses_latency_limits
from autotuner.core.decide.verification import SIMILAR_DEMAND_OCTAVES
from autotuner.core.predict.acceptance import AcceptanceEstimate
from autotuner.core.types import BlockReason, Setup
from autotuner.durations import format_duration

HOUR = 3600.0
# Holds that mean "the prediction is not sure enough": where an exploration may ask instead.
UNSURE = (BlockReason.BELOW_MIN_GAIN, BlockReason.LOW_CONFIDENCE)

# The least gain the dwell's evidence is counted against (a min_gain of 0 keeps a dwell).
EVIDENCE_FLOOR = 0.01

Check = tuple[bool, BlockReason, str]  # (failed, the rule, why it holds the change)


def first_block(
    sit: Situation, evaluation: Evaluation, *, dwell: bool = True, min_gain: float | None = None
) -> tuple[BlockReason, str] | None:
    """The first rule that holds the switch to `evaluation.best`, and why (None: none does).
    The rules are one table in the order they apply: the first that fails is named.
    `min_gain`: the least gain (default: `switch_min_gain`; a question has its own)."""
    if min_gain is None:
        least, minimum = switch_min_gain(sit)
    else:
        least, minimum = min_gain, f"the {min_gain * 100:g}% minimum"
    checks = [*_worth(sit, evaluation, dwell, least, minimum), *_allowed(sit, evaluation)]
    for failed, reason, why in checks:
        if failed:
            return reason, why
    return None


def switch_min_gain(sit: Situation) -> tuple[float, str]:
    """The least gain a predicted switch needs now, and how it reads: `switch.min_gain`,
    raised by `switch.gain_per_restart` for each restart in the last 24 hours past the first.
    The plan prices a restart's downtime, not the share of the day's budget it spends: a day
    that has already restarted takes a marginal step only when it is clearly worth one of the
    restarts its load may still need (the way back for the night). Confidence and the dwell
    stay at `switch.min_gain`: they guard against noise, which the day's restarts do not
    change."""
    switch = sit.settings.switch
    past_first = max(len(sit.state.recent_changes(sit.now)) - 1, 0)
    least = switch.min_gain + switch.gain_per_restart * past_first
    if least == switch.min_gain:
        return least, f"the {least * 100:g}% minimum"
    return least, (
        f"the {least * 100:g}% minimum ({switch.min_gain * 100:g}% and "
        f"{switch.gain_per_restart * 100:g}% for each restart past the first in the last 24 "
        f"hours: {past_first})"
    )


def _worth(
    sit: Situation, evaluation: Evaluation, dwell: bool, min_gain: float, minimum: str
) -> list[Check]:
    """Whether the change is worth its restart: gain, confidence, dwell, restart cost
    (`minimum`: how the least gain reads)."""
    switch = sit.settings.switch
    pending = sit.state.pending
    dwelt = (sit.now - pending.since) if pending is not None else 0.0
    pays, why = _pays(sit, evaluation)
    judged, short = _holds_where_judged(sit, evaluation)
    needed, every = _needed_confidence(sit, evaluation.best)
    return [
        (
            evaluation.gain < min_gain,
            BlockReason.BELOW_MIN_GAIN,
            f"that is below {minimum}",
        ),
        (
            evaluation.confidence < needed,
            BlockReason.LOW_CONFIDENCE,
            f"only {evaluation.confidence:.0%} of acceptance scenarios agree{every}",
        ),
        (
            # Without a pending change the plan holds: the dwell never starts, and the
            # restart cost below says why.
            dwell and pending is not None and not _dwelt(sit, evaluation, dwelt),
            BlockReason.DWELL,
            f"the forecast has pointed at a change for {dwelt:.0f}s of the "
            f"{switch.dwell_s:.0f}s dwell ({_dwell_rule(sit, evaluation)})",
        ),
        (not pays, BlockReason.RESTART_COST, why),
        (not judged, BlockReason.RESTART_COST, short),
    ]


def _needed_confidence(sit: Situation, target: Setup) -> tuple[float, str]:
    """The share of acceptance scenarios a move to `target` needs, and why when it is all:
    a move into drafting on acceptance remembered from before speculation was turned off,
    which moved while it was measured, must hold at its interval's low end. No window measures
    acceptance before that restart, and the low end is where the workload may have gone."""
    moved = sit.state.acceptance_moved(sit.now)
    pinned = sit.settings.estimates.acceptance_pinned
    if not target.spec_tokens or moved <= 0 or pinned:
        return sit.settings.switch.min_confidence, ""
    age = sit.state.acceptance.age_s(sit.now) or 0.0
    per_hour = sit.state.acceptance_drift.per_s() * HOUR
    return 1.0, (
        f"; it drafts on acceptance remembered from {format_duration(age)} ago, which moved "
        f"{per_hour:.3f} an hour while measured (its interval is {moved:.2f} wider each side), "
        "so every scenario must"
    )


def _holds_where_judged(sit: Situation, evaluation: Evaluation) -> tuple[bool, str]:
    """Whether the move's own verification is predicted to keep it: verification judges it at
    the load now against the rate the running setup measured there, and reverts it more than
    `verification.regression_tolerance` below. A plan move predicted to fall that far short
    here waits for the load it is for, however the hours ahead value it (made now, it is
    predicted to cost two restarts and a quarantine). Without a measurement at this load, for
    a move that serves at least what holding serves at every batch, a move off a setup that
    misses the latency limits, or for a question outside the plan (an exploration asks because
    the prediction may be wrong), nothing holds it."""
    state, demand = sit.state, sit.demand_mean
    rate, batch, target = state.last_rate, state.last_batch, evaluation.best
    if evaluation.plan is None or evaluation.dominates:
        return True, ""
    if state.current is not None and misses_latency_limits(sit, state.current):
        return True, ""  # verification judges a move off it by the limits, not by tokens/s
    if rate is None or batch is None or not math.isfinite(demand):
        return True, ""
    if abs(math.log2(max(demand, 1.0) / max(batch, 1.0))) >= SIMILAR_DEMAND_OCTAVES:
        return True, ""
    predicted = _predicted_here(sit, target, demand)
    if predicted is None or not _scale_trusted(sit):
        return True, ""
    floor = rate * (1 - sit.settings.verification.regression_tolerance)
    return predicted >= floor, (
        f"at demand {demand:.0f} now, where its verification judges it, {target.label} is "
        f"predicted to serve {predicted:,.0f} tokens/s, {1 - predicted / rate:.0%} under the "
        f"{rate:,.0f} measured for {state.current.label if state.current else 'it'} here: "
        "it would be reverted"
    )


def _scale_trusted(sit: Situation) -> bool:
    """Whether the calibrated model's tokens/s for the running setup at the measured batch are
    within TRUSTED_SCALE of what it measured there. Further off, the model's absolute scale is
    not this machine's (an unprofiled machine, a calibration at its bounds: the real-vLLM
    tier, a CPU serving a tiny model under a GPU's profile): its ratios still rank setups,
    but its tokens/s cannot be set against a measurement."""
    return running_miss(sit, valued_acceptance(sit)) is not None


def _predicted_here(sit: Situation, target: Setup, demand: float) -> float | None:
    """The target's calibrated tokens/s at `demand`, on the acceptance the candidates are
    valued on (None: it drafts deeper than that reaches)."""
    accept = valued_acceptance(sit)
    if target.spec_tokens > accept.max_spec_tokens:
        return None
    return sit.predictor.tokens_per_s_at(target, demand, accept)


def valued_acceptance(sit: Situation) -> AcceptanceEstimate:
    """The acceptance the candidates are valued on: the estimate continued one position past
    what was observed, up to the engine's and the settings' largest K."""
    limit = min(
        sit.ctx.engine.serving(sit.ctx.model).max_spec_tokens,
        max(sit.settings.candidates.spec_tokens, default=0),
    )
    return beyond_observed(sit.accept, limit, EXTRA_POSITIONS)


def _dwelt(sit: Situation, evaluation: Evaluation, dwelt: float) -> bool:
    """Whether the change has pointed long enough: for the whole dwell, or sooner when its net
    gain summed over the time it pointed reaches what the smallest gain would need over the
    dwell (hysteresis is against noise, and noise does not hold a large gain window after
    window; a marginal change still waits the whole dwell). The early way needs the load
    watched for a dwell first (the first windows of a run show no trend, and a change chosen
    for the load of the first minutes was measured worse in the demo's worlds), unless the
    move is to another kind of setup that serves at least what holding serves at every batch
    (valuation.dominates)."""
    switch, pending = sit.settings.switch, sit.state.pending
    assert pending is not None
    if dwelt >= switch.dwell_s:
        return True
    if _whole_dwell(sit, evaluation):
        return False
    need = max(switch.min_gain, EVIDENCE_FLOOR) * switch.dwell_s
    return pending.evidence >= need and (sit.unwatched == 0 or evaluation.dominates)


def _whole_dwell(sit: Situation, evaluation: Evaluation) -> bool:
    """Whether a large gain must wait the whole dwell too: a load was seen to go before a
    change settled lately (15-minute bursts every 2 h, each read as a rise in one window and
    each change reverted at the load before it), unless the move serves at least what holding
    serves at every batch."""
    memory = sit.settings.switch.load_gone_memory_s
    return sit.state.load_went_within(sit.now, memory) and not evaluation.dominates


def _dwell_rule(sit: Situation, evaluation: Evaluation) -> str:
    if _whole_dwell(sit, evaluation):
        return "the whole of it: a load went before a change settled lately"
    return "sooner as its gain is larger"


def _pays(sit: Situation, evaluation: Evaluation) -> tuple[bool, str]:
    """Whether the restart into `evaluation.best` pays back over the horizon: by the plan
    (restarts and the way back counted), or, for a move outside it (an exploration), by its
    gain over the horizon against the learned restart cost."""
    restart, current = sit.settings.restart, sit.state.current
    plan = evaluation.plan
    if plan is not None and current is not None:
        if plan.now(current) == evaluation.best:
            return _day_allows(sit, evaluation, current)
        moves = plan.changes(current)
        if moves:
            at, later = moves[0]
            return False, (
                f"over the {format_duration(restart.horizon_s)} horizon it pays to move later: "
                f"{later.label} in {format_duration(at)} ({plan.describe(current)})"
            )
        return False, (
            f"over the {format_duration(restart.horizon_s)} horizon no change pays its restarts, "
            f"the way back counted ({plan.describe(current)})"
        )
    seconds = sit.restart_s(evaluation.best)
    gain_tokens = (evaluation.best_value - evaluation.current_value) * restart.horizon_s
    restart_tokens = seconds * evaluation.current_value * restart.share
    return gain_tokens > restart_tokens * restart.margin, (
        f"{gain_tokens:,.0f} tokens over the {restart.horizon_s:.0f}s horizon do not pay "
        f"{restart.margin:g} x the restart's {restart_tokens:,.0f} ({seconds:.0f}s)"
    )


def _day_allows(sit: Situation, evaluation: Evaluation, current: Setup) -> tuple[bool, str]:
    """Whether the plan over the whole period lets the horizon's move go now: it holds the
    running setup now and does not reach the move's setup within the horizon when the move
    is not worth its restarts over the day (no plan for the day: nothing to hold it)."""
    day, horizon = evaluation.day_plan, sit.settings.restart.horizon_s
    if day is None or day.now(current) is not None:
        return True, ""
    if any(setup == evaluation.best for at, setup in day.changes(current) if at < horizon):
        return True, ""
    return False, (
        f"over the period the plan with the fewest restarts within "
        f"{sit.settings.forecast.noise:.0%} of the best holds {current.label} "
        f"({day.describe(current)})"
    )


def _allowed(sit: Situation, evaluation: Evaluation) -> list[Check]:
    """Whether a change may happen now: budget, cooldown, data, rollout, pause, leadership."""
    now, restart, ctx, observation = sit.now, sit.settings.restart, sit.ctx, sit.observation
    recent = sit.state.recent_changes(now)
    last_hour = sum(1 for t in recent if t > now - HOUR)
    last_change = max(recent) if recent else None
    return [
        (
            # A change is verified and may be reverted: it needs room for both.
            last_hour + CHANGE_ROOM > restart.max_per_hour
            or len(recent) + CHANGE_ROOM > restart.max_per_day,
            BlockReason.BUDGET,
            f"the change budget has no room for this change and its possible revert "
            f"({last_hour}/h of {restart.max_per_hour}, {len(recent)}/day of "
            f"{restart.max_per_day})",
        ),
        (
            last_change is not None and now - last_change < restart.cooldown_s,
            BlockReason.COOLDOWN,
            f"the last change was {now - (last_change or now):.0f}s ago (cooldown "
            f"{restart.cooldown_s:.0f}s)",
        ),
        (
            not observation.usable,
            BlockReason.STALE_DATA,
            f"this window is unusable ({why_unusable(observation)})",
        ),
        (
            observation.usable and _insufficient(sit, evaluation.best),
            BlockReason.INSUFFICIENT_DATA,
            "this window has too few drafts to trust acceptance",
        ),
        (ctx.rollout_in_progress, BlockReason.ROLLOUT, "a rollout is in progress"),
        (ctx.paused, BlockReason.PAUSED, "tuning is paused"),
        (not ctx.leader, BlockReason.NOT_LEADER, "this instance is not the leader"),
    ]


def _insufficient(sit: Situation, target: Setup) -> bool:
    """Whether a move into drafting waits for a window with drafts enough to trust. A window
    in which the running setup drafted at none of its batches (a K schedule's band at K = 0)
    says nothing of acceptance, as plain's says nothing: the move is valued on the acceptance
    remembered, as from plain (`_needed_confidence` asks more of it where it moved while
    measured), or a schedule that stops drafting at large batch could not leave that band
    for speculation however much it would gain."""
    acceptance = sit.observation.acceptance
    if not target.spec_tokens or acceptance is None or acceptance.sufficient:
        return False
    return _drafted_at_window(sit)


def _drafted_at_window(sit: Situation) -> bool:
    """Whether the running setup drafts at any of the window's batch samples (unknown: it
    may have)."""
    current = sit.state.current
    drafted = spec_tokens_in_window(sit.observation, current) if current is not None else None
    return drafted is None or bool(np.any(drafted[1] > 0))


def track_dwell(sit: Situation, current: Setup, evaluation: Evaluation) -> TunerState:
    """The dwell clock: since when the plan over the horizon has held a change.

    The forecast looks ahead, so the clock starts before the change pays; it keeps its start
    while the plan keeps holding a change (the setup it names may change meanwhile), and noise
    that makes the plan hold still resets it.
    """
    state, observation = sit.state, sit.observation
    if not observation.usable or observation.batch is None:
        return state
    plan = evaluation.plan
    moves = plan.changes(current) if plan is not None else []
    if not moves:
        return state.not_pending()
    return state.pending_since(moves[0][1], sit.now, plan.gain if plan is not None else 0.0)
