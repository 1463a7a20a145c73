"""Valuation: what each candidate setup is expected to serve over the batch distribution (the
objective), under each acceptance scenario, and the best of them with its gain, confidence and
interval."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from autotuner.core.decide.context import Situation
from autotuner.core.decide.search import candidates, schedules
from autotuner.core.decide.settings import ObjectiveKind
from autotuner.core.predict.acceptance import AcceptanceEstimate, from_conditional
from autotuner.core.types import Setup


@dataclass(frozen=True)
class Evaluation:
    """Every candidate's expected tokens/s (finite ones) and the best, against the running."""

    values: dict[Setup, float]  # expected tokens/s over the batch distribution
    best: Setup
    current_value: float
    best_value: float
    gain: float
    confidence: float
    notes: tuple[str, ...]
    intervals: dict[Setup, tuple[float, float]] = field(default_factory=dict)  # low, high
    checked: dict[Setup, bool] = field(default_factory=dict)  # family measured near this load
    setups: tuple[Setup, ...] = ()  # every candidate compared (infeasible ones too)


def evaluate(sit: Situation, current: Setup) -> Evaluation | None:
    """Expected tokens/s of every candidate over the batch distribution, and the best one."""
    state, settings = sit.state, sit.settings
    if state.batch.total < settings.estimates.min_batch_weight:
        return None
    batches, weights = state.batch.distribution()
    point = sit.acceptance
    setups, notes = candidates(state, sit.ctx, settings, point)
    if sit.ctx.engine.spec_schedule and settings.candidates.use_schedule and point is not None:
        setups += schedules(sit.predictor, setups, point)
    if current not in setups:
        setups.append(current)
    tables = [
        {s: objective(sit, s, batches, weights, scenario) for s in setups}
        for scenario in _scenarios(point)
    ]
    values = tables[0]
    notes += _adaptive_versus_schedule(values, setups)
    best = max(values, key=lambda s: values[s])
    if settings.objective.kind == ObjectiveKind.LATENCY_SLO and not math.isfinite(values[best]):
        notes.append("no setup meets the latency SLO: falling back to throughput")
    current_value, best_value = values[current], values[best]
    gain = (best_value / current_value - 1.0) if current_value > 0 else math.inf
    min_gain = settings.switch.min_gain
    confidence = _agreement(tables, current, best, min_gain) if gain >= min_gain else 0.0
    notes += _remembered(sit)
    typical = state.batch.quantile(0.5)
    finite = {s: v for s, v in values.items() if math.isfinite(v)}
    sigmas = {s: sit.predictor.sigma(s, typical, current) for s in finite}
    return Evaluation(
        values=finite,
        best=best,
        current_value=current_value,
        best_value=best_value,
        gain=gain,
        confidence=confidence,
        notes=tuple(notes),
        intervals={
            s: (v * math.exp(-sigmas[s]), v * math.exp(sigmas[s])) for s, v in finite.items()
        },
        checked={s: sit.predictor.checked(s, typical) for s in finite},
        setups=tuple(values),
    )


def _remembered(sit: Situation) -> list[str]:
    """Say so when the acceptance in use was observed long ago (speculation off since)."""
    age = sit.state.acceptance.age_s(sit.now) if sit.acceptance is not None else None
    if age is None or age <= sit.settings.estimates.acceptance_half_life_s:
        return []
    return [
        f"acceptance is remembered from {age / 60:.0f} min ago (speculation "
        "off since); its interval widens with age"
    ]


def objective(
    sit: Situation,
    setup: Setup,
    batches: npt.NDArray[np.int64],
    weights: npt.NDArray[np.float64],
    acceptance: AcceptanceEstimate | None,
) -> float:
    """Expected tokens/s over the batch distribution, calibrated; -inf when infeasible."""
    if setup.spec_tokens and (acceptance is None or setup.spec_tokens > acceptance.max_spec_tokens):
        return -math.inf
    accept = acceptance or from_conditional([])
    tokens, step = sit.predictor.curve(setup, batches, accept)
    wanted = sit.settings.objective
    if wanted.kind == ObjectiveKind.LATENCY_SLO and wanted.latency_slo_s:
        quantile = sit.state.batch.quantile(wanted.latency_percentile)
        at = int(np.argmin(np.abs(batches - quantile)))
        curve_tau = tokens[at] * step[at] / max(batches[at], 1)
        if step[at] / max(curve_tau, 1e-9) > wanted.latency_slo_s:
            return -math.inf
    return float(np.dot(weights, tokens))


def _scenarios(point: AcceptanceEstimate | None) -> list[AcceptanceEstimate | None]:
    """The acceptance point estimate, then its interval's low and high ends."""
    if point is None:
        return [None]
    low, high = from_conditional(point.conditional_low), from_conditional(point.conditional_high)
    return [point, low, high]


def _agreement(
    tables: list[dict[Setup, float]], current: Setup, best: Setup, min_gain: float
) -> float:
    """The share of acceptance scenarios in which `best` beats `current` by min_gain."""
    agreeing = sum(1 for t in tables if t[current] > 0 and t[best] / t[current] - 1.0 >= min_gain)
    return agreeing / len(tables)


def _adaptive_versus_schedule(values: dict[Setup, float], setups: Sequence[Setup]) -> list[str]:
    """Which way of varying K wins when the build offers both, and why."""
    adaptive = [s for s in setups if s.adaptive and math.isfinite(values[s])]
    scheduled = [s for s in setups if s.schedule and math.isfinite(values[s])]
    if not (adaptive and scheduled):
        return []
    best_adaptive = max(adaptive, key=lambda s: values[s])
    best_schedule = max(scheduled, key=lambda s: values[s])
    a, b = values[best_adaptive], values[best_schedule]
    if b >= a:
        why = (
            "the schedule drafts only what its band verifies (K=0 turns drafting off), while "
            "adaptive verification drafts K and verifies fewer"
        )
        winner, loser, ratio = best_schedule, best_adaptive, b / a if a > 0 else math.inf
    else:
        why = "adaptive verification picks the verified count at every batch, a schedule per band"
        winner, loser, ratio = best_adaptive, best_schedule, a / b if b > 0 else math.inf
    return [
        f"adaptive verification or a K schedule: {winner.label} predicted {ratio - 1:+.1%} over "
        f"{loser.label} ({why})"
    ]
