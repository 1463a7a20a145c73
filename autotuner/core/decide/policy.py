"""The policy's entry, `decide`: learn the window, verify a change in flight, then keep, switch,
explore or hold.

Pure and deterministic: time, leadership, pause and rollout state come in through `Context`;
the carried estimates come in and go out as `TunerState`. DESIGN.md rules 1-3 and 6-8 live
here and in the modules by concern it calls (learning, search, valuation, gating, exploration,
verification); actuators only carry out the Decision.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from autotuner.core.decide.context import Context, Situation, situation
from autotuner.core.decide.decisions import Make, numbers, percent, why_unusable
from autotuner.core.decide.exploration import explore
from autotuner.core.decide.gating import UNSURE, first_block, track_dwell
from autotuner.core.decide.learning import absorb
from autotuner.core.decide.settings import PolicySettings
from autotuner.core.decide.state import TunerState, Verification
from autotuner.core.decide.valuation import Evaluation, evaluate, misses_latency_limits
from autotuner.core.decide.verification import verify
from autotuner.core.types import PLAIN, Action, BlockReason, Decision, Observation, Setup
from autotuner.durations import format_duration


class Decided(NamedTuple):
    decision: Decision
    state: TunerState
    ranked: tuple[Setup, ...] = ()  # the candidates the decision compared, best first


def decide(
    state: TunerState, observation: Observation, ctx: Context, settings: PolicySettings
) -> Decided:
    """One step: absorb the window, verify a change in flight, then keep, switch or hold."""
    sit = situation_after(state, observation, ctx, settings)
    make = Make(sit.state.last_decision_id, ctx.now, sit.state.current or PLAIN)
    if sit.state.verification is not None:
        verdict = verify(sit, make)
        if verdict is not None:
            return Decided(*verdict)
    current = make.current
    evaluation = evaluate(sit, current)
    if evaluation is None:
        reason = BlockReason.STALE_DATA if not observation.usable else BlockReason.INSUFFICIENT_DATA
        decision = make(
            Action.HOLD,
            f"hold {current.label}: not enough batch history to compare "
            f"setups ({why_unusable(observation)})",
            blocked_by=reason,
        )
        return Decided(decision, sit.state)
    sit = sit.with_state(track_dwell(sit, current, evaluation))
    ranked = sorted(evaluation.values, key=lambda s: -evaluation.values[s])
    return Decided(*_choose(sit, evaluation, make), tuple(ranked))


def situation_after(
    state: TunerState, observation: Observation, ctx: Context, settings: PolicySettings
) -> Situation:
    """What a step decides on: the state with the window absorbed, and the forecast, the
    acceptance and the calibrated model that follow from it (pure: a tool that prints what a
    step saw calls it beside the step)."""
    return situation(
        absorb(state, observation, ctx, settings).decided(), observation, ctx, settings
    )


def _choose(sit: Situation, evaluation: Evaluation, make: Make) -> tuple[Decision, TunerState]:
    """Keep, switch, explore or hold, given the evaluation."""
    current, state = make.current, sit.state
    wants = evaluation.best != current and evaluation.gain > 0
    blocked = first_block(sit, evaluation) if wants else None
    if not wants or (blocked is not None and blocked[0] in UNSURE):
        explored = explore(sit, evaluation, make)
        if explored is not None:
            return explored
    if not wants:
        later = evaluation.plan.changes(current) if evaluation.plan else []
        plan = (
            f"; the plan moves to {later[0][1].label} in {format_duration(later[0][0])}"
            if later
            else ""
        )
        return make(
            Action.KEEP,
            f"keep {current.label}: best of {len(evaluation.values)} candidates over the "
            f"{format_duration(sit.settings.restart.horizon_s)} horizon "
            f"({evaluation.current_value:,.0f} tokens/s expected, p50 batch "
            f"{state.batch.quantile(0.5):.0f}){plan}",
            **numbers(evaluation),
        ), state
    if blocked is not None:
        reason, why = blocked
        return make(
            Action.HOLD,
            f"hold {current.label}: {evaluation.best.label} would "
            f"{_gain(sit, evaluation, current, 'meet', 'gain')} but {why}",
            blocked_by=reason,
            **numbers(evaluation),
        ), state
    return _switch(sit, evaluation, make)


def _switch(sit: Situation, evaluation: Evaluation, make: Make) -> tuple[Decision, TunerState]:
    current, best, restart = make.current, evaluation.best, sit.settings.restart
    seconds = sit.restart_s(best)
    state = sit.state.verifying(
        Verification(
            target=best,
            previous=current,
            switched_at=sit.now,
            predicted_gain=evaluation.gain,
            baseline_rate=sit.state.last_rate,
            baseline_batch=sit.state.last_batch,
            first_start=sit.first_start(best),
        )
    )
    payback = (
        seconds
        * evaluation.current_value
        * restart.share
        / max(evaluation.best_value - evaluation.current_value, 1e-9)
    )
    ahead = f"; {evaluation.forecast.describe()}" if evaluation.forecast else ""
    if evaluation.dominates:
        ahead += (
            f"; the load is not yet watched for a dwell, and {best.label} serves at least "
            f"what {current.label} serves at every batch"
        )
    return make(
        Action.SWITCH,
        f"switch {current.label} -> {best.label}: {_gain(sit, evaluation, current, 'meets', '')} "
        "over the "
        f"{format_duration(restart.horizon_s)} horizon ({evaluation.best_value:,.0f} vs "
        f"{evaluation.current_value:,.0f} tokens/s expected{ahead}); the {seconds:.0f}s "
        f"restart pays back in {payback / 60:.0f} min; confidence {evaluation.confidence:.2f}",
        **numbers(evaluation),
    ), state


def _gain(sit: Situation, evaluation: Evaluation, current: Setup, meet: str, gain: str) -> str:
    """The move's gain for the sentence; where the running setup misses the latency limits
    (it serves nothing under the objective, so the gain is not a number), that."""
    if not math.isfinite(evaluation.gain) and misses_latency_limits(sit, current):
        return f"{meet} the latency objective {current.label} misses (see the notes)"
    return f"{gain} {percent(evaluation.gain)}".strip()
