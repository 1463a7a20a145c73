"""Valuation: what each candidate setup is expected to serve over the forecast horizon (the
objective, piece by piece of the forecast), under each acceptance scenario; the plan over the
horizon net of restarts; and the best move now with its gain, confidence and interval."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from autotuner.core.decide.anchor import anchor_factors
from autotuner.core.decide.context import Situation
from autotuner.core.decide.estimates import BATCH_BINS, BIN_MIDDLES
from autotuner.core.decide.forecast import Forecast, day_forecast
from autotuner.core.decide.plan import Plan, best_plan
from autotuner.core.decide.reach import beyond_observed, within_noise_of_observed
from autotuner.core.decide.search import candidates, schedules, unquarantined
from autotuner.core.decide.settings import ObjectiveKind
from autotuner.core.predict.acceptance import AcceptanceEstimate, from_conditional
from autotuner.core.predict.predictor import Predictor
from autotuner.core.predict.prefill import prompt_share_weighed
from autotuner.core.types import Setup

# Draft positions past the deployed K valued from the observed decline: one, so a deeper K is
# reached one step at a time, each measured before the next is valued.
EXTRA_POSITIONS = 1
TAIL_SHARE = 0.5  # of the horizon: how long a plan's last setup is credited after it
NEGLIGIBLE = 1e-4  # a piece's probability at a bin below which the bin is left out
BIN_BLUR = 0.1  # log-space spread a moved history bin gets (the bins are ~0.4 wide)
# Demand not yet watched: every bin alike, in log demand (beyond what a setup fits, demand
# queues at its largest batch, and its predictions say so).
ANY_DEMAND = np.full(len(BIN_MIDDLES), 1.0 / len(BIN_MIDDLES))
LOG_MIDDLES = np.log(BIN_MIDDLES.astype(np.float64))
# The bins' edges in log batch; what lies beyond the bins counts in the end ones.
LOG_EDGES = np.log(np.asarray(BATCH_BINS, dtype=np.float64))
LOG_EDGES[0], LOG_EDGES[-1] = -np.inf, np.inf


@dataclass(frozen=True)
class Evaluation:
    """Every candidate's expected tokens/s over the horizon (finite ones), the plan over it,
    and the best move against the running setup."""

    values: dict[Setup, float]  # expected tokens/s over the forecast horizon, held throughout
    best: Setup
    current_value: float
    best_value: float
    gain: float
    confidence: float
    notes: tuple[str, ...]
    intervals: dict[Setup, tuple[float, float]] = field(default_factory=dict)  # low, high
    checked: dict[Setup, bool] = field(default_factory=dict)  # family measured near this load
    setups: tuple[Setup, ...] = ()  # every candidate compared (infeasible ones too)
    plan: Plan | None = None  # the setups over the horizon, net of restarts
    forecast: Forecast | None = None
    # The plan over the whole next period (None until the profile has seen all of it, or
    # when the horizon's plan holds).
    day_plan: Plan | None = None
    # Whether the move is another kind that serves at least what holding serves at every
    # batch (asked only while the load has been watched for less than a dwell).
    dominates: bool = False


def evaluate(sit: Situation, current: Setup) -> Evaluation | None:
    """Expected tokens/s of every candidate over the forecast horizon, the plan over it (net
    of restarts), and the best move now."""
    state, settings = sit.state, sit.settings
    if state.batch.total < settings.estimates.min_batch_weight:
        return None
    durations, pieces = outlook(sit, sit.forecast)
    mass = np.asarray(durations) @ pieces / sum(durations)
    point = _reached(sit)
    setups, notes = candidates(state, sit.ctx, settings, point)
    notes += _reach_note(sit.acceptance, point)
    if sit.ctx.engine.spec_schedule and settings.candidates.use_schedule and point is not None:
        found, held = unquarantined(state, sit.now, schedules(sit.predictor, setups, point, mass))
        setups, notes = setups + found, notes + held
    if current not in setups:
        setups.append(current)
    tables = [_rates(sit, setups, pieces, scenario) for scenario in _scenarios(point)]
    values = {s: _path_tokens((s,) * len(durations), tables[0], durations) for s in setups}
    values = {s: v / _span(durations) for s, v in values.items()}
    values, held_back = _guesses_that_pay(sit, current, values)
    setups = [s for s in setups if s in values]
    notes += held_back
    notes += _adaptive_versus_schedule(values, setups)
    notes += _ttft_ruled_out(sit, setups, point)
    if settings.objective.kind == ObjectiveKind.LATENCY_SLO and not any(
        math.isfinite(v) and s != current for s, v in values.items()
    ):
        notes.append("no setup meets the latency SLO: falling back to throughput")
    finite = {s: v for s, v in values.items() if math.isfinite(v)}
    plan = _plan(sit, current, finite, tables[0], durations)
    # Asked only when the horizon's plan moves now: that is the move it may hold.
    day = _day_plan(sit, current, finite, point) if plan.now(current) is not None else None
    best, best_value, current_value, gain = _best(plan, current, values, tables[0], durations)
    min_gain = settings.switch.min_gain
    confidence = (
        _agreement(tables, plan, current, best, durations, min_gain) if gain >= min_gain else 0.0
    )
    notes += _remembered(sit)
    notes += _prefill_weighed(sit, (best, current), values)
    notes += _prompts_weighed(sit, best, current, values)
    if sit.forecast is not None:
        notes.append(sit.forecast.describe())
        notes += _unwatched_note(sit)
    notes.append(plan.describe(current))
    if day is not None:
        notes.append(f"over the period: {day.describe(current)}")
    dominant = best != current and sit.unwatched > 0 and dominates(sit, best, current, point)
    typical = state.batch.quantile(0.5)
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
        plan=plan,
        forecast=sit.forecast,
        day_plan=day,
        dominates=dominant,
    )


Rates = dict[Setup, npt.NDArray[np.float64]]  # tokens/s in each piece of the horizon


def _reached(sit: Situation) -> AcceptanceEstimate | None:
    """The acceptance the candidates are valued on: the observed positions and
    EXTRA_POSITIONS more, continued from them (core/decide/reach.py), as deep as the engine's
    drafter and the settings allow."""
    point = sit.acceptance
    if point is None:
        return None
    allowed = max(sit.settings.candidates.spec_tokens, default=0)
    limit = min(sit.ctx.engine.serving(sit.ctx.model).max_spec_tokens, allowed)
    return beyond_observed(point, limit, EXTRA_POSITIONS)


def _reach_note(
    observed: AcceptanceEstimate | None, reached: AcceptanceEstimate | None
) -> list[str]:
    if observed is None or reached is None or reached is observed:
        return []
    deeper = reached.conditional[observed.max_spec_tokens :]
    return [
        f"K up to {reached.max_spec_tokens} valued: acceptance observed to position "
        f"{observed.max_spec_tokens}, continued at {', '.join(f'{r:.2f}' for r in deeper)} "
        "(the last observed decline)"
    ]


def _guesses_that_pay(
    sit: Situation, current: Setup, values: dict[Setup, float]
) -> tuple[dict[Setup, float], list[str]]:
    """`values` less the setups whose guessed draft positions do not pay beyond the forecast's
    noise (core/decide/reach.py), and a note naming them."""
    if sit.acceptance is None:
        return values, []
    seen, noise = sit.acceptance.max_spec_tokens, sit.settings.forecast.noise
    dropped = within_noise_of_observed(values, seen, noise, keep=current)
    if not dropped:
        return values, []
    said = ", ".join(f"{setup.label} (against {within.label})" for setup, within in dropped.items())
    return {s: v for s, v in values.items() if s not in dropped}, [
        f"drafting past position {seen} left out where it is within {noise:.0%} of the same "
        f"setup drafting within it: {said}"
    ]


def _prefill_weighed(
    sit: Situation, setups: tuple[Setup, ...], values: dict[Setup, float]
) -> list[str]:
    """What turning prefix caching off costs: for the setups compared and the best of those
    that pay it (said only where it costs something)."""
    paying = {s: v for s, v in values.items() if math.isfinite(v) and sit.predictor.prefill_cost(s)}
    strongest = (max(paying, key=paying.__getitem__),) if paying else ()
    said = []
    for setup in dict.fromkeys((*setups, *strongest)):
        cost = sit.predictor.prefill_cost(setup)
        if cost is not None and setup in paying:
            said.append(cost.weighed(setup.label, values[setup]))
    return said


def _prompts_weighed(
    sit: Situation, best: Setup, current: Setup, values: dict[Setup, float]
) -> list[str]:
    """What the prompts' prefill takes from each second under the best and the current setup,
    where it is large enough to say: speculation and replay speed up the decode share only."""
    if best == current or not all(math.isfinite(values.get(s, math.nan)) for s in (best, current)):
        return []
    said = prompt_share_weighed(
        (best.label, values[best], sit.predictor.workload_prefill(best)),
        (current.label, values[current], sit.predictor.workload_prefill(current)),
    )
    return [said] if said else []


def outlook(
    sit: Situation, ahead: Forecast | None
) -> tuple[tuple[float, ...], npt.NDArray[np.float64]]:
    """The pieces `ahead` cuts its span into: their lengths, and each piece's probability per
    batch bin: the batch history's shape (how windows spread: two modes stay two) moved to the
    piece's level and widened by how much less sure that level is than the first piece's;
    without a forecast, one piece of the payback horizon with the batch history as it is.

    While the load has been watched for less than a dwell, the pieces after the first are
    partly any demand at all, as much as the watch is missing: the trend of a few windows says
    little of where the load goes next (the first piece is the load now)."""
    horizon = sit.settings.restart.horizon_s
    history = sit.state.batch.probabilities()
    if ahead is None:
        return (horizon,), history[None, :]
    rows = [
        _moved(history, level, sigma, ahead.sigma[0])
        for level, sigma in zip(ahead.level, ahead.sigma, strict=True)
    ]
    missing = sit.unwatched
    if missing > 0:
        rows[1:] = [(1 - missing) * row + missing * ANY_DEMAND for row in rows[1:]]
    return ahead.durations, np.vstack(rows)


def _moved(
    history: npt.NDArray[np.float64], level: float, sigma: float, first: float
) -> npt.NDArray[np.float64]:
    """The batch history's shape moved to `level`, widened by `sigma` beyond `first`."""
    shift = math.log(level) - float(history @ LOG_MIDDLES)
    scale = math.hypot(BIN_BLUR, math.sqrt(max(sigma**2 - first**2, 0.0))) * math.sqrt(2)
    moved = (LOG_EDGES[:, None] - LOG_MIDDLES[None, :] - shift) / scale
    row = np.diff(0.5 * (1 + _erf(moved)) @ history)
    row[row < NEGLIGIBLE] = 0.0  # bins this unlikely are not worth predicting
    return np.asarray(row / row.sum(), dtype=np.float64)


def _unwatched_note(sit: Situation) -> list[str]:
    """Say how much of the horizon was valued over any demand, while the load is unwatched."""
    missing = sit.unwatched
    if missing <= 0:
        return []
    return [
        f"the load has been watched for {1 - missing:.0%} of a dwell: after the first piece, "
        f"{missing:.0%} of the horizon is valued over any demand (every batch alike in log "
        "demand)"
    ]


def dominates(
    sit: Situation, move: Setup, current: Setup, point: AcceptanceEstimate | None
) -> bool:
    """Whether `move` is another kind of setup that serves at least what `current` serves at
    every batch (within the forecast's noise), in every acceptance scenario: worth making
    whatever the load does next. Another K or window of the same kind is the load's to
    choose, so it is never taken as such."""
    if move.kind is current.kind:
        return False
    active = np.ones(len(BIN_MIDDLES), dtype=np.bool_)
    floor = 1.0 - sit.settings.forecast.noise
    for scenario in _scenarios(point):
        mine = _per_bin(sit, move, scenario, active)
        theirs = _per_bin(sit, current, scenario, active)
        if mine is None or (theirs is not None and bool(np.any(mine < floor * theirs))):
            return False
    return True


def _erf(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return np.asarray(erf(values), dtype=np.float64)


def _rates(
    sit: Situation,
    setups: Sequence[Setup],
    pieces: npt.NDArray[np.float64],
    accept: AcceptanceEstimate | None,
) -> Rates:
    """Each setup's expected tokens/s in each piece of the horizon; -inf where it cannot run
    (or misses the latency SLO over the batch history)."""
    rates, active = {}, pieces.sum(axis=0) > 0
    for setup in setups:
        per_bin = _per_bin(sit, setup, accept, active)
        rates[setup] = pieces @ per_bin if per_bin is not None else np.full(len(pieces), -math.inf)
    return rates


def _per_bin(
    sit: Situation, setup: Setup, accept: AcceptanceEstimate | None, active: npt.NDArray[np.bool_]
) -> npt.NDArray[np.float64] | None:
    if setup.spec_tokens and (accept is None or setup.spec_tokens > accept.max_spec_tokens):
        return None
    if _latency_limited(sit):
        batches, weights = sit.state.batch.distribution()
        if not math.isfinite(objective(sit, setup, batches, weights, accept)):
            return None
    accept = accept or from_conditional([])
    return binned(sit.predictor, setup, accept, active) * anchor_factors(sit, setup, accept)


def binned(
    predictor: Predictor, setup: Setup, accept: AcceptanceEstimate, active: npt.NDArray[np.bool_]
) -> npt.NDArray[np.float64]:
    """Tokens/s at each batch bin's middle, predicted only where `active` (0 elsewhere)."""
    tokens = np.zeros(len(BIN_MIDDLES))
    tokens[active] = predictor.curve(setup, BIN_MIDDLES[active], accept)[0]
    return tokens


def _plan(
    sit: Situation,
    current: Setup,
    finite: dict[Setup, float],
    rates: Rates,
    durations: Sequence[float],
    *,
    max_restarts: int | None = None,
    tail_s: float | None = None,
) -> Plan:
    """The best plan over the pieces among the setups that can run, restarts charged at their
    learned cost (times the margin and the share of replicas restarting); at most
    `max_restarts` (default: the forecast's plan limit within the day's budget), the last
    setup credited `tail_s` after the pieces (default: half their span)."""
    restart = sit.settings.restart
    options = [current, *(s for s in finite if s != current)]
    table = np.vstack([np.where(np.isfinite(rates[s]), rates[s], 0.0) for s in options])
    lost = [sit.restart_s(s) * restart.margin * restart.share for s in options]
    room = restart.max_per_day - len(sit.state.recent_changes(sit.now)) - 1
    limit = min(sit.settings.forecast.max_plan_restarts, max(room, 1))
    return best_plan(
        current,
        options,
        table,
        durations,
        lost,
        noise=sit.settings.forecast.noise,
        max_restarts=limit if max_restarts is None else max_restarts,
        tail_s=_tail(durations) if tail_s is None else tail_s,
    )


def _day_plan(
    sit: Situation, current: Setup, finite: dict[Setup, float], point: AcceptanceEstimate | None
) -> Plan | None:
    """The plan over the whole next period by the profile of previous ones, as many restarts
    as a day's budget allows and the fewest within noise of the best: hysteresis on the whole
    day (a dip the horizon finds worth two restarts may not be worth them over the day)."""
    if not sit.settings.forecast.whole_day:
        return None
    ahead = day_forecast(sit.state.load, sit.now, sit.settings.forecast)
    if ahead is None:
        return None
    durations, pieces = outlook(sit, ahead)
    rates = _rates(sit, [current, *(s for s in finite if s != current)], pieces, point)
    budget = max(sit.settings.restart.max_per_day, 1)
    return _plan(sit, current, finite, rates, durations, max_restarts=budget, tail_s=0.0)


def _best(
    plan: Plan, current: Setup, values: dict[Setup, float], rates: Rates, durations: Sequence[float]
) -> tuple[Setup, float, float, float]:
    """(best move, its tokens/s, the running setup's, the gain): the plan's move when it moves
    now (its tokens/s over the horizon before restarts), else the best setup held throughout."""
    horizon = _span(durations)
    move = plan.now(current)
    if move is not None:
        gross = _path_tokens(plan.path, rates, durations)
        value = gross / horizon
        held = plan.holding / horizon
        return move, value, held, (value / held - 1.0) if held > 0 else math.inf
    best = max(values, key=lambda s: values[s])
    held, value = values[current], values[best]
    return best, value, held, (value / held - 1.0) if held > 0 else math.inf


def _path_tokens(path: Sequence[Setup], rates: Rates, durations: Sequence[float]) -> float:
    """Tokens of a path over the horizon, its last setup staying for the tail."""
    pieces = sum(rates[s][m] * d for m, (s, d) in enumerate(zip(path, durations, strict=True)))
    return float(pieces + rates[path[-1]][-1] * _tail(durations))


def _tail(durations: Sequence[float]) -> float:
    """How long after the horizon a plan's last setup is credited: half the horizon (it stays
    until the next change, at the last forecast level)."""
    return TAIL_SHARE * float(sum(durations))


def _span(durations: Sequence[float]) -> float:
    return float(sum(durations)) + _tail(durations)


def _remembered(sit: Situation) -> list[str]:
    """Say so when the acceptance in use was observed long ago (speculation off since)."""
    age = sit.state.acceptance.age_s(sit.now) if sit.acceptance is not None else None
    if age is None or age <= sit.settings.estimates.acceptance_half_life_s:
        return []
    moved = sit.state.acceptance_moved(sit.now)
    drift = (
        f" and by the {moved:.2f} it may have moved since, at the rate it moved while measured"
        if moved > 0
        else ""
    )
    return [
        f"acceptance is remembered from {age / 60:.0f} min ago (speculation "
        f"off since); its interval widens with age{drift}"
    ]


def objective(
    sit: Situation,
    setup: Setup,
    batches: npt.NDArray[np.int64],
    weights: npt.NDArray[np.float64],
    acceptance: AcceptanceEstimate | None,
) -> float:
    """Expected tokens/s over the batch distribution, calibrated; -inf when infeasible (or,
    under the latency objective, over its time per token or time to first token limit)."""
    if setup.spec_tokens and (acceptance is None or setup.spec_tokens > acceptance.max_spec_tokens):
        return -math.inf
    accept = acceptance or from_conditional([])
    tokens, step = sit.predictor.curve(setup, batches, accept)
    wanted = sit.settings.objective
    if wanted.kind == ObjectiveKind.LATENCY_SLO and wanted.latency_slo_s:
        at = _percentile_at(sit, batches)
        curve_tau = tokens[at] * step[at] / max(batches[at], 1)
        if step[at] / max(curve_tau, 1e-9) > wanted.latency_slo_s:
            return -math.inf
    if _over_ttft(sit, setup, batches, accept):
        return -math.inf
    return float(np.dot(weights, tokens))


def misses_latency_limits(sit: Situation, setup: Setup) -> bool:
    """Whether `setup` misses the latency objective's limits (time per output token, time to
    first token) over the batch history: what a change away from it is made for, so it is
    not the speed a verification holds the change to. Never under the throughput
    objective."""
    if not _latency_limited(sit):
        return False
    batches, weights = sit.state.batch.distribution()
    return not math.isfinite(objective(sit, setup, batches, weights, sit.acceptance))


def _latency_limited(sit: Situation) -> bool:
    wanted = sit.settings.objective
    return wanted.kind == ObjectiveKind.LATENCY_SLO and bool(
        wanted.latency_slo_s or wanted.ttft_slo_s
    )


def _percentile_at(sit: Situation, batches: npt.NDArray[np.int64]) -> int:
    """Where in `batches` the latency limits are checked: the batch history's
    latency_percentile."""
    quantile = sit.state.batch.quantile(sit.settings.objective.latency_percentile)
    return int(np.argmin(np.abs(batches - quantile)))


def _ttft_s(
    sit: Situation, setup: Setup, batches: npt.NDArray[np.int64], accept: AcceptanceEstimate
) -> tuple[int, float]:
    """(the latency percentile's batch, `setup`'s predicted TTFT there; NaN: the prompt
    length is unknown)."""
    batch = int(batches[_percentile_at(sit, batches)])
    return batch, float(sit.predictor.time_to_first_token_s(setup, [batch], accept)[0])


def _over_ttft(
    sit: Situation, setup: Setup, batches: npt.NDArray[np.int64], accept: AcceptanceEstimate
) -> bool:
    """Whether the latency objective's TTFT limit rules `setup` out (never while the prompt
    length is unknown)."""
    wanted = sit.settings.objective
    if wanted.kind != ObjectiveKind.LATENCY_SLO or wanted.ttft_slo_s is None:
        return False
    return _ttft_s(sit, setup, batches, accept)[1] > wanted.ttft_slo_s


def _ttft_ruled_out(
    sit: Situation, setups: Sequence[Setup], point: AcceptanceEstimate | None
) -> list[str]:
    """Which setups the TTFT limit rules out, with their predicted TTFT, for the decision's
    notes (said also when the prompt length is unknown, so the limit checks nothing)."""
    limit = sit.settings.objective.ttft_slo_s
    if sit.settings.objective.kind != ObjectiveKind.LATENCY_SLO or limit is None:
        return []
    batches, _ = sit.state.batch.distribution()
    accept = point or from_conditional([])
    runnable = [s for s in setups if not s.spec_tokens or s.spec_tokens <= accept.max_spec_tokens]
    times = {s: _ttft_s(sit, s, batches, accept) for s in runnable}
    if not times or all(math.isnan(t) for _, t in times.values()):
        return [f"ttft_slo_s {limit:g} s rules out nothing: the prompt length is unknown"]
    over = sorted((s for s, (_, t) in times.items() if t > limit), key=lambda s: times[s][1])
    if not over:
        return []
    batch = next(iter(times.values()))[0]
    percentile = sit.settings.objective.latency_percentile
    said = ", ".join(f"{s.label} ({times[s][1]:.2f} s)" for s in over)
    return [
        f"ruled out by time to first token over {limit:g} s at batch {batch} "
        f"(p{percentile * 100:.0f} of the batch): {said}"
    ]


def _scenarios(point: AcceptanceEstimate | None) -> list[AcceptanceEstimate | None]:
    """The acceptance point estimate, then its interval's low and high ends."""
    if point is None:
        return [None]
    low, high = from_conditional(point.conditional_low), from_conditional(point.conditional_high)
    return [point, low, high]


def _agreement(
    tables: list[Rates],
    plan: Plan,
    current: Setup,
    best: Setup,
    durations: Sequence[float],
    min_gain: float,
) -> float:
    """The share of acceptance scenarios in which the move beats holding by min_gain over the
    horizon (the plan's path when it moves now, else `best` held throughout). Where the
    running setup serves nothing that counts (it misses the latency objective's limits), any
    move that serves agrees."""
    path = plan.path if plan.now(current) == best else (best,) * len(durations)
    agreeing = 0
    for rates in tables:
        held = _path_tokens((current,) * len(durations), rates, durations)
        moved = _path_tokens(path, rates, durations)
        serves = math.isfinite(moved) and moved > 0
        agreeing += serves and (held <= 0 or moved / held - 1.0 >= min_gain)
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
