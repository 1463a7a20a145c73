"""Figures the loop shows beside a decision, from the same calibrated model: what one engine
can serve in a setup (the canary's budget), the crossover against the strongest rival, the
calibration factors, and the quick rule's acceptance rate."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autotuner.core.decide.context import NO_ACCEPTANCE, Context
from autotuner.core.decide.settings import PolicySettings
from autotuner.core.decide.state import TunerState
from autotuner.core.predict.acceptance import from_conditional
from autotuner.core.predict.attribution import Factor
from autotuner.core.predict.comparisons import Crossover
from autotuner.core.predict.report import equivalent_rate
from autotuner.core.types import Decision, Observation, Setup

Capacity = Callable[[Setup], float]  # tokens/s one engine can serve in a setup


def capacity(
    state: TunerState, observation: Observation, ctx: Context, settings: PolicySettings
) -> Capacity:
    """Tokens/s one engine can serve in a setup (the canary's budget): the calibrated model's
    peak, or what it serves now when that is more."""
    predictor = ctx.predictor(state, settings)
    accept = ctx.acceptance(state, settings) or NO_ACCEPTANCE
    observed = (observation.generation_tokens_per_s or 0.0) / max(observation.series, 1)

    def serves(setup: Setup) -> float:
        if setup.spec_tokens > accept.max_spec_tokens:
            return observed
        return max(observed, predictor.peak_tokens_per_s(setup, accept))

    return serves


@dataclass(frozen=True)
class Outlook:
    """What the dashboard shows next to a step's decision."""

    running: Setup | None  # what runs, as far as the loop can tell
    crossover: Crossover | None
    calibration: list[Factor]
    quick_rule_rate: float | None


def outlook(
    state: TunerState,
    decision: Decision,
    ranked: Sequence[Setup],
    observation: Observation,
    ctx: Context,
    settings: PolicySettings,
) -> Outlook:
    """The figures for the state a step ends with; `ranked` is the candidates best first."""
    predictor = ctx.predictor(state, settings)
    accept = ctx.acceptance(state, settings) or NO_ACCEPTANCE
    current = state.current or decision.current
    if ctx.deployed is not None:
        running: Setup | None = ctx.deployed
    else:
        running = observation.live_setup.setup if observation.live_setup else state.current
    return Outlook(
        running=running,
        crossover=predictor.crossover(current, ranked, accept),
        calibration=predictor.fit.factors(),
        quick_rule_rate=_quick_rule_rate(observation, running),
    )


def _quick_rule_rate(observation: Observation, running: Setup | None) -> float | None:
    """The window's acceptance as one rate, at the running K (the quick rule's input)."""
    if observation.acceptance is None or running is None or not running.spec_tokens:
        return None
    accept = from_conditional(observation.acceptance.per_position)
    return equivalent_rate(accept, min(running.spec_tokens, accept.max_spec_tokens))
