"""Gating: whether a better setup may be switched to now (gain, confidence, dwell, restart cost,
change budget, cooldown, data, rollout, pause, leadership, in that order), and the dwell clock."""

from __future__ import annotations

from autotuner.core.decide.context import Situation
from autotuner.core.decide.decisions import why_unusable
from autotuner.core.decide.estimates import BatchHistogram
from autotuner.core.decide.state import TunerState
from autotuner.core.decide.valuation import Evaluation, objective
from autotuner.core.types import BlockReason, Observation, Setup

HOUR = 3600.0
# Holds that mean "the prediction is not sure enough": where an exploration may ask instead.
UNSURE = (BlockReason.BELOW_MIN_GAIN, BlockReason.LOW_CONFIDENCE)

Check = tuple[bool, BlockReason, str]  # (failed, the rule, why it holds the change)


def first_block(
    sit: Situation, evaluation: Evaluation, *, dwell: bool = True
) -> tuple[BlockReason, str] | None:
    """The first rule that holds the switch to `evaluation.best`, and why (None: none does).
    The rules are one table in the order they apply: the first that fails is named."""
    for failed, reason, why in [*_worth(sit, evaluation, dwell), *_allowed(sit, evaluation)]:
        if failed:
            return reason, why
    return None


def _worth(sit: Situation, evaluation: Evaluation, dwell: bool) -> list[Check]:
    """Whether the change is worth its restart: gain, confidence, dwell, restart cost."""
    switch, restart = sit.settings.switch, sit.settings.restart
    pending = sit.state.pending
    dwelt = (sit.now - pending.since) if pending is not None else 0.0
    gain_tokens = evaluation.best_value - evaluation.current_value
    restart_tokens = restart.downtime_s * evaluation.current_value * restart.share
    return [
        (
            evaluation.gain < switch.min_gain,
            BlockReason.BELOW_MIN_GAIN,
            f"that is below the {switch.min_gain:.0%} minimum",
        ),
        (
            evaluation.confidence < switch.min_confidence,
            BlockReason.LOW_CONFIDENCE,
            f"only {evaluation.confidence:.0%} of acceptance scenarios agree",
        ),
        (
            dwell and dwelt < switch.dwell_s,
            BlockReason.DWELL,
            f"recent load has pointed at it for {dwelt:.0f}s of the {switch.dwell_s:.0f}s dwell",
        ),
        (
            gain_tokens * restart.horizon_s <= restart_tokens * restart.margin,
            BlockReason.RESTART_COST,
            f"{gain_tokens * restart.horizon_s:,.0f} tokens over the {restart.horizon_s:.0f}s "
            f"horizon do not pay {restart.margin:g} x the restart's "
            f"{restart_tokens:,.0f}",
        ),
    ]


def _allowed(sit: Situation, evaluation: Evaluation) -> list[Check]:
    """Whether a change may happen now: budget, cooldown, data, rollout, pause, leadership."""
    now, restart, ctx, observation = sit.now, sit.settings.restart, sit.ctx, sit.observation
    recent = sit.state.recent_changes(now)
    last_hour = sum(1 for t in recent if t > now - HOUR)
    last_change = max(recent) if recent else None
    return [
        (
            # A change is verified and may be reverted: it needs room for both.
            last_hour + 2 > restart.max_per_hour or len(recent) + 2 > restart.max_per_day,
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
            observation.usable and _insufficient(observation, evaluation.best),
            BlockReason.INSUFFICIENT_DATA,
            "this window has too few drafts to trust acceptance",
        ),
        (ctx.rollout_in_progress, BlockReason.ROLLOUT, "a rollout is in progress"),
        (ctx.paused, BlockReason.PAUSED, "tuning is paused"),
        (not ctx.leader, BlockReason.NOT_LEADER, "this instance is not the leader"),
    ]


def _insufficient(observation: Observation, target: Setup) -> bool:
    return bool(
        target.spec_tokens
        and observation.acceptance is not None
        and not observation.acceptance.sufficient
    )


def track_dwell(sit: Situation, current: Setup, best: Setup) -> TunerState:
    """The dwell clock: since when the latest windows alone have favoured leaving `current`.

    The batch history moves slowly on purpose; the dwell asks the complementary question,
    whether recent load has kept favouring the recommended change by at least `min_gain`. A
    sustained shift is acted on one dwell after it began; noise around the crossover keeps
    resetting the clock.
    """
    state, observation = sit.state, sit.observation
    if not observation.usable or observation.batch is None:
        return state
    if best == current:
        return state.not_pending()
    recent = BatchHistogram().add(sit.demand, sit.now, sit.settings.estimates.batch_half_life_s)
    batches, weights = recent.distribution()
    now_best = objective(sit, best, batches, weights, sit.acceptance)
    now_current = objective(sit, current, batches, weights, sit.acceptance)
    favoured = now_current > 0 and now_best / now_current - 1 >= sit.settings.switch.min_gain
    if not favoured:
        return state.not_pending()
    return state.pending_since(best, sit.now)
