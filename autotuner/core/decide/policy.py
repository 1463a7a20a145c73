"""The policy: which setup to run, and whether a change pays for its restart.

Pure and deterministic: time, leadership, pause and rollout state come in through `Context`;
the carried estimates come in and go out as `TunerState`. DESIGN.md rules 1-3 and 6-8 live
here; actuators only carry out the Decision.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict

import numpy as np
import numpy.typing as npt

from autotuner.core.decide.estimates import BATCH_EDGES, BatchHistogram
from autotuner.core.decide.settings import PolicySettings
from autotuner.core.decide.state import TunerState, Verification
from autotuner.core.engine.capabilities import EngineCapabilities
from autotuner.core.engine.workload import Workload
from autotuner.core.model.spec import ModelSpec
from autotuner.core.observe.observation import read_acceptance
from autotuner.core.predict.acceptance import AcceptanceEstimate, from_conditional
from autotuner.core.predict.attribution import band_of
from autotuner.core.predict.hardware import HardwareProfile
from autotuner.core.predict.predictor import Predictor
from autotuner.core.types import (
    PLAIN,
    AcceptanceStats,
    Action,
    BlockReason,
    Decision,
    Observation,
    ScheduleBand,
    Setup,
)
from autotuner.errors import UnusableReason

HOUR = 3600.0
SCHEDULE_END = BATCH_EDGES[-1] - 1


@dataclass(frozen=True)
class Context:
    """What the policy is told about the world at this step."""

    now: float
    model: ModelSpec
    hardware: HardwareProfile
    engine: EngineCapabilities
    workload: Workload = field(default_factory=Workload)
    deployed: Setup | None = None  # read back from the target's args, when known
    drafter_available: bool = True  # the operator configured a drafter (never invented)
    drafter_problem: str | None = None  # why the deployed drafter cannot be predicted
    low_precision_replay: bool = False  # the target writes replay over a non-fp32 SSM state
    leader: bool = True
    paused: bool = False
    rollout_in_progress: bool = False
    rollout_stuck: str | None = None  # the target says the rollout cannot finish (why)
    rollout_deadline_s: float = math.inf  # a rollout after our change not done by then is stuck
    advisory: str | None = None  # why nothing decided is applied (advise mode, not leading)

    def predictor(self, state: TunerState, settings: PolicySettings) -> Predictor:
        """The calibrated model for this step: every tokens/s figure comes from it."""
        return Predictor(
            self.model,
            self.hardware,
            self.workload,
            state.calibration,
            self.now,
            settings.calibration.half_life_s,
            settings.calibration.bounds,
        )


@dataclass(frozen=True)
class Evaluation:
    values: dict[str, float]  # label -> expected tokens/s
    setups: dict[str, Setup]
    best: Setup
    current_value: float
    best_value: float
    gain: float
    confidence: float
    notes: tuple[str, ...]
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)  # label -> low, high
    checked: dict[str, bool] = field(default_factory=dict)  # family measured near this load


def decide(
    state: TunerState, observation: Observation, ctx: Context, settings: PolicySettings
) -> tuple[Decision, TunerState]:
    """One step: absorb the window, verify a change in flight, then keep, switch or hold."""
    state = absorb(state, observation, ctx, settings).decided()
    make = _maker(state, ctx)
    if state.verification is not None:
        verdict = _verify(state, observation, ctx, settings, make)
        if verdict is not None:
            return verdict
    current = state.current or PLAIN
    evaluation = evaluate(state, ctx, settings, current)
    if evaluation is None:
        reason = BlockReason.STALE_DATA if not observation.usable else BlockReason.INSUFFICIENT_DATA
        return make(
            Action.HOLD,
            f"hold {current.label}: not enough batch history to compare "
            f"setups ({_why_unusable(observation)})",
            blocked_by=reason,
        ), state
    state = _track_dwell(state, observation, ctx, settings, current, evaluation.best)
    wants = evaluation.best != current and evaluation.gain > 0
    blocked = _first_block(state, observation, ctx, settings, evaluation) if wants else None
    if not wants or (blocked is not None and blocked[0] in UNSURE):
        explored = _explore(state, observation, ctx, settings, evaluation, make)
        if explored is not None:
            return explored
    if not wants:
        return make(
            Action.KEEP,
            f"keep {current.label}: best of {len(evaluation.values)} "
            f"candidates ({evaluation.current_value:,.0f} tokens/s expected over the "
            f"batch distribution, p50 batch {state.batch.quantile(0.5):.0f})",
            **_numbers(evaluation),
        ), state
    if blocked is not None:
        reason, why = blocked
        return make(
            Action.HOLD,
            f"hold {current.label}: {evaluation.best.label} would gain "
            f"{_percent(evaluation.gain)} but {why}",
            blocked_by=reason,
            **_numbers(evaluation),
        ), state
    return _switch(state, ctx, settings, evaluation, make)


class _Make:
    """Builds this step's Decisions: id, time and running setup filled in, every other field
    named (a misspelt one is a TypeError, not a silently dropped key)."""

    def __init__(self, decision_id: int, now: float, current: Setup) -> None:
        self.decision_id, self.now, self.current = decision_id, now, current

    def __call__(
        self,
        action: Action,
        sentence: str,
        *,
        target: Setup | None = None,
        blocked_by: BlockReason | None = None,
        gain: float = 0.0,
        confidence: float = 0.0,
        predicted_tokens_per_s: dict[str, float] | None = None,
        predicted_interval: dict[str, tuple[float, float]] | None = None,
        notes: tuple[str, ...] = (),
        current: Setup | None = None,
    ) -> Decision:
        return Decision(
            id=self.decision_id,
            at=self.now,
            action=action,
            current=current or self.current,
            sentence=sentence,
            target=target,
            blocked_by=blocked_by,
            gain=gain,
            confidence=confidence,
            predicted_tokens_per_s=predicted_tokens_per_s or {},
            predicted_interval=predicted_interval or {},
            notes=notes,
        )


def _maker(state: TunerState, ctx: Context) -> _Make:
    return _Make(state.last_decision_id, ctx.now, state.current or PLAIN)


class _Numbers(TypedDict):
    target: Setup
    gain: float
    confidence: float
    predicted_tokens_per_s: dict[str, float]
    predicted_interval: dict[str, tuple[float, float]]
    notes: tuple[str, ...]


def _numbers(evaluation: Evaluation) -> _Numbers:
    return {
        "target": evaluation.best,
        "gain": evaluation.gain,
        "confidence": evaluation.confidence,
        "predicted_tokens_per_s": evaluation.values,
        "predicted_interval": evaluation.intervals,
        "notes": evaluation.notes,
    }


# Holds that mean "the prediction is not sure enough": where an exploration may ask instead.
UNSURE = (BlockReason.BELOW_MIN_GAIN, BlockReason.LOW_CONFIDENCE)


def _explore(
    state: TunerState,
    observation: Observation,
    ctx: Context,
    settings: PolicySettings,
    evaluation: Evaluation,
    make: _Make,
) -> tuple[Decision, TunerState] | None:
    """Try a setup family never measured at this load when its interval says it could win.

    Only from a setup measured here (we know where we stand), only when the load sits in the
    band now, for the family whose interval reaches highest above the running setup (by at
    least min_gain), at most once per family and band per quarantine period, and under every
    switch rule but the dwell (nothing is predicted to hold: it is a question asked once).
    Verification then keeps it or reverts it, and what was measured stays learned."""
    current, typical = make.current, state.batch.quantile(0.5)
    band = band_of(typical)
    if not settings.exploration.enabled or not evaluation.checked.get(current.label, False):
        return None
    if observation.batch is None or band_of(float(np.mean(demand(observation)))) != band:
        return None
    restarts = len(state.recent_changes(ctx.now))
    if restarts + 2 + settings.exploration.reserve > settings.restart.max_per_day:
        return None  # a question must not spend the restarts a predicted change needs
    chosen = _widest_chance(state, ctx, settings, evaluation, current, band)
    if chosen is None:
        return None
    target, high = chosen
    trial = replace(
        evaluation, best=target, best_value=high, gain=high / evaluation.current_value - 1
    )
    trial = replace(trial, confidence=1.0)
    if _first_block(state, observation, ctx, settings, trial, dwell=False) is not None:
        return None
    key = f"{target.kind.value}|{band}"
    low = evaluation.intervals[target.label][0]
    verification = Verification(
        target=target,
        previous=current,
        switched_at=ctx.now,
        predicted_gain=evaluation.values[target.label] / evaluation.current_value - 1,
        baseline_rate=state.last_rate,
        baseline_batch=state.last_batch,
        exploration=True,
    )
    state = state.exploring(key, ctx.now + settings.quarantine.setup_s).verifying(verification)
    return make(
        Action.SWITCH,
        f"explore {current.label} -> {target.label}: {target.kind.value} has not been measured "
        f"near batch {typical:.0f}, and its interval ({low:,.0f}-{high:,.0f} tokens/s) reaches "
        f"{_percent(trial.gain)} over {current.label}'s {evaluation.current_value:,.0f} (point "
        f"estimate {_percent(verification.predicted_gain)}); an exploration, tried once per "
        f"band every {settings.quarantine.setup_s / 3600:.0f} h, reverted if it measures worse",
        **_numbers(trial),
    ), state


def _widest_chance(
    state: TunerState,
    ctx: Context,
    settings: PolicySettings,
    evaluation: Evaluation,
    current: Setup,
    band: int,
) -> tuple[Setup, float] | None:
    """The unmeasured family's setup whose upper bound is highest and beats the running setup
    by min_gain (and overlaps its interval), not explored in this band lately."""
    current_low = evaluation.intervals.get(current.label, (evaluation.current_value,))[0]
    floor = max(evaluation.current_value * (1 + settings.switch.min_gain), current_low)
    options = []
    for label, (_, high) in evaluation.intervals.items():
        setup = evaluation.setups[label]
        if setup.kind is current.kind or evaluation.checked.get(label, False):
            continue
        if state.explored.get(f"{setup.kind.value}|{band}", 0.0) > ctx.now or high < floor:
            continue
        options.append((high, label))
    if not options:
        return None
    high, label = max(options)
    return evaluation.setups[label], high


def _switch(
    state: TunerState,
    ctx: Context,
    settings: PolicySettings,
    evaluation: Evaluation,
    make: _Make,
) -> tuple[Decision, TunerState]:
    current, best = make.current, evaluation.best
    state = state.verifying(
        Verification(
            target=best,
            previous=current,
            switched_at=ctx.now,
            predicted_gain=evaluation.gain,
            baseline_rate=state.last_rate,
            baseline_batch=state.last_batch,
        )
    )
    payback = (
        settings.restart.downtime_s
        * evaluation.current_value
        * settings.restart.share
        / max(evaluation.best_value - evaluation.current_value, 1e-9)
    )
    return make(
        Action.SWITCH,
        f"switch {current.label} -> {best.label}: {_percent(evaluation.gain)} "
        f"({evaluation.best_value:,.0f} vs {evaluation.current_value:,.0f} tokens/s "
        f"expected, p50 batch {state.batch.quantile(0.5):.0f}); the restart pays back in "
        f"{payback / 60:.0f} min; confidence {evaluation.confidence:.2f}",
        **_numbers(evaluation),
    ), state


def _track_dwell(
    state: TunerState,
    observation: Observation,
    ctx: Context,
    settings: PolicySettings,
    current: Setup,
    best: Setup,
) -> TunerState:
    """The dwell clock: since when the latest windows alone have favoured leaving `current`.

    The batch history moves slowly on purpose; the dwell asks the complementary question,
    whether recent load has kept favouring the recommended change by at least `min_gain`. A
    sustained shift is acted on one dwell after it began; noise around the crossover keeps
    resetting the clock.
    """
    if not observation.usable or observation.batch is None:
        return state
    if best == current:
        return state.not_pending()
    recent = BatchHistogram().add(
        demand(observation), ctx.now, settings.estimates.batch_half_life_s
    )
    batches, weights = recent.distribution()
    accept = state.acceptance.estimate(ctx.now, settings.estimates.acceptance_memory_half_life_s)
    now_best = objective(best, batches, weights, state, ctx, settings, accept)
    now_current = objective(current, batches, weights, state, ctx, settings, accept)
    favoured = now_current > 0 and now_best / now_current - 1 >= settings.switch.min_gain
    if not favoured:
        return state.not_pending()
    return state.pending_since(best, ctx.now)


def absorb(
    state: TunerState, observation: Observation, ctx: Context, settings: PolicySettings
) -> TunerState:
    """Fold a window into the carried estimates and calibration (unusable windows change
    nothing but the believed current setup)."""
    # What runs: the target's args when an actuator reads them (they show schedules), else
    # what the engine reports in its metrics, else what we last believed.
    live = observation.live_setup.setup if observation.live_setup else None
    known = ctx.deployed or (live if observation.usable else None) or state.current
    current = known or PLAIN
    state = state.running(current)
    if not observation.usable or observation.batch is None:
        return state
    update: dict[str, object] = {}
    settled = state.verification is None or observation.window_start >= (
        state.verification.switched_at + settings.verification.settle_s
    )
    if settled:
        update["batch"] = state.batch.add(
            demand(observation), ctx.now, settings.estimates.batch_half_life_s
        )
    stats = _unbiased_acceptance(observation, current, state.drafter)
    if stats is not None and stats.sufficient:
        update["acceptance"] = state.acceptance.add(
            stats, ctx.now, settings.estimates.acceptance_half_life_s
        )
    state = state.updated(**update)
    if known is not None and (live is None or live.spec_tokens == known.spec_tokens):
        state = _calibrate(state, observation, ctx, settings, known)
    if observation.generation_tokens_per_s and observation.series:
        state = state.updated(
            last_rate=observation.generation_tokens_per_s / observation.series,
            last_batch=float(np.mean(demand(observation))),
        )
    return state


def _unbiased_acceptance(
    observation: Observation, current: Setup, drafter: dict[str, Any] | None
) -> AcceptanceStats | None:
    """The window's acceptance read for the running setup: under a K schedule each position
    counts only the drafts that proposed it, and where the proposed lengths are unknown the
    deep positions are lower bounds (core/observation.py `read_acceptance`; a no-op when the
    controller already read it for the deployed setup)."""
    return read_acceptance(observation, current, drafter).acceptance


def _calibrate(
    state: TunerState,
    observation: Observation,
    ctx: Context,
    settings: PolicySettings,
    current: Setup,
) -> TunerState:
    """The running setup's measured step at the observed batch, against the model's time per
    kernel class: evidence for the attribution (core/attribution.py)."""
    assert observation.batch is not None
    batch = observation.batch.mean
    if not observation.step_time_s or batch < 1:
        return state
    estimate = state.acceptance.estimate(ctx.now, settings.estimates.acceptance_memory_half_life_s)
    accept = estimate or from_conditional([0.0] * current.spec_tokens)
    if current.spec_tokens > accept.max_spec_tokens:
        return state
    plain_s, setup_s = ctx.predictor(state, settings).class_times(current, round(batch), accept)
    return state.updated(
        calibration=state.calibration.add(
            current,
            batch,
            observation.step_time_s,
            plain_s,
            setup_s,
            ctx.now,
            half_life_s=settings.calibration.half_life_s,
        )
    )


def demand(observation: Observation) -> list[float]:
    """Requests each engine would run if they fit: running plus the mean waiting queue. The
    running gauge alone stops at the capacity of the current setup and would hide the load a
    roomier setup could serve."""
    assert observation.batch is not None
    waiting = observation.waiting_mean or 0.0
    return [value + waiting for value in observation.batch.values]


def batch_mean(observation: Observation) -> float:
    return observation.batch.mean if observation.batch else 0.0


def candidates(
    state: TunerState, ctx: Context, settings: PolicySettings, acceptance: AcceptanceEstimate | None
) -> tuple[list[Setup], list[str]]:
    """Setups this engine accepts, within the settings, never beyond observed acceptance."""
    notes: list[str] = []
    engine = ctx.engine.serving(ctx.model)
    windows = _replay_windows(ctx, engine, settings, notes)
    ks: tuple[int, ...] = ()
    if engine.speculation and ctx.drafter_available:
        if acceptance is None:
            notes.append("speculation not proposed: no acceptance observed yet")
        else:
            limit = min(acceptance.max_spec_tokens, engine.max_spec_tokens)
            ks = tuple(k for k in settings.candidates.spec_tokens if 1 <= k <= limit)
    elif engine.speculation and ctx.drafter_problem:
        notes.append(ctx.drafter_problem)
    setups = [PLAIN, *(Setup(replay_window=w) for w in windows)]
    speculating = [Setup(spec_tokens=k) for k in ks]
    if engine.replay_with_speculation:
        speculating += [
            Setup(spec_tokens=k, replay_window=w) for k in ks for w in windows if w > k + 1
        ]
    setups += speculating + _adaptive(speculating, ctx, notes)
    quarantined = {k for k, until in state.quarantine.items() if until > ctx.now}
    kept = [s for s in setups if s.label not in quarantined and engine.accepts(s)]
    if len(kept) < len(setups):
        notes.append(f"quarantined: {', '.join(sorted(quarantined))}")
    return kept, notes


def _replay_windows(
    ctx: Context, engine: EngineCapabilities, settings: PolicySettings, notes: list[str]
) -> tuple[int, ...]:
    """The replay windows to propose, and why none are where the model has state."""
    windows = settings.candidates.replay_windows
    if not (ctx.model.is_hybrid and engine.replay and windows):
        return ()
    refusal = engine.refusal(Setup(replay_window=windows[0]))
    if refusal is not None:
        notes.append(f"replay not proposed: {refusal}")
        return ()
    if ctx.model.ssm_state_dtype in ("float32", "fp32") or ctx.low_precision_replay:
        return windows
    notes.append(
        f"replay not proposed: the SSM state is {ctx.model.ssm_state_dtype}, and a "
        "low-precision state drifts under replay (target.allow_low_precision_replay overrides)"
    )
    return ()


def _adaptive(speculating: Sequence[Setup], ctx: Context, notes: list[str]) -> list[Setup]:
    """Each speculating setup with adaptive verification, where the build has it."""
    if not (ctx.engine.adaptive_verification and speculating):
        return []
    if ctx.workload.cudagraph_capture_tokens == 0:
        notes.append(
            "adaptive verification not proposed: it needs full CUDA graphs (the engine runs eager)"
        )
        return []
    return [s.model_copy(update={"adaptive": True}) for s in speculating]


def _adaptive_versus_schedule(values: dict[str, float], setups: Sequence[Setup]) -> list[str]:
    """Which way of varying K wins when the build offers both, and why."""
    adaptive = [s for s in setups if s.adaptive and math.isfinite(values[s.label])]
    scheduled = [s for s in setups if s.schedule and math.isfinite(values[s.label])]
    if not (adaptive and scheduled):
        return []
    best_adaptive = max(adaptive, key=lambda s: values[s.label])
    best_schedule = max(scheduled, key=lambda s: values[s.label])
    a, b = values[best_adaptive.label], values[best_schedule.label]
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


def _scenarios(point: AcceptanceEstimate | None) -> list[AcceptanceEstimate | None]:
    """The acceptance point estimate, then its interval's low and high ends."""
    if point is None:
        return [None]
    low, high = from_conditional(point.conditional_low), from_conditional(point.conditional_high)
    return [point, low, high]


def _agreement(tables: list[dict[str, float]], current: str, best: str, min_gain: float) -> float:
    """The share of acceptance scenarios in which `best` beats `current` by min_gain."""
    agreeing = sum(1 for t in tables if t[current] > 0 and t[best] / t[current] - 1.0 >= min_gain)
    return agreeing / len(tables)


def evaluate(
    state: TunerState, ctx: Context, settings: PolicySettings, current: Setup
) -> Evaluation | None:
    """Expected tokens/s of every candidate over the batch distribution, and the best one."""
    if state.batch.total < settings.estimates.min_batch_weight:
        return None
    batches, weights = state.batch.distribution()
    point = state.acceptance.estimate(ctx.now, settings.estimates.acceptance_memory_half_life_s)
    setups, notes = candidates(state, ctx, settings, point)
    if ctx.engine.spec_schedule and settings.candidates.use_schedule and point is not None:
        setups += _schedules(state, ctx, settings, setups, point)
    if current not in setups:
        setups.append(current)
    tables = [
        {s.label: objective(s, batches, weights, state, ctx, settings, scenario) for s in setups}
        for scenario in _scenarios(point)
    ]
    values = tables[0]
    by_label = {s.label: s for s in setups}
    notes += _adaptive_versus_schedule(values, setups)
    runnable = {k: v for k, v in values.items() if k != current.label or current in setups}
    best_label = max(runnable, key=lambda k: runnable[k])
    if settings.objective.kind == "latency_slo" and not math.isfinite(values[best_label]):
        notes.append("no setup meets the latency SLO: falling back to throughput")
    current_value = values[current.label]
    best_value = values[best_label]
    gain = (best_value / current_value - 1.0) if current_value > 0 else math.inf
    min_gain = settings.switch.min_gain
    confidence = (
        _agreement(tables, current.label, best_label, min_gain) if gain >= min_gain else 0.0
    )
    age = state.acceptance.age_s(ctx.now) if point is not None else None
    if age is not None and age > settings.estimates.acceptance_half_life_s:
        notes.append(
            f"acceptance is remembered from {age / 60:.0f} min ago (speculation "
            "off since); its interval widens with age"
        )
    predictor, typical = ctx.predictor(state, settings), state.batch.quantile(0.5)
    finite = {k: v for k, v in values.items() if math.isfinite(v)}
    sigmas = {k: predictor.sigma(by_label[k], typical, current) for k in finite}
    return Evaluation(
        values=finite,
        setups=by_label,
        best=by_label[best_label],
        current_value=current_value,
        best_value=best_value,
        gain=gain,
        confidence=confidence,
        notes=tuple(notes),
        intervals={
            k: (v * math.exp(-sigmas[k]), v * math.exp(sigmas[k])) for k, v in finite.items()
        },
        checked={k: predictor.checked(by_label[k], typical) for k in finite},
    )


def objective(
    setup: Setup,
    batches: npt.NDArray[np.int64],
    weights: npt.NDArray[np.float64],
    state: TunerState,
    ctx: Context,
    settings: PolicySettings,
    acceptance: AcceptanceEstimate | None,
) -> float:
    """Expected tokens/s over the batch distribution, calibrated; -inf when infeasible."""
    if setup.spec_tokens and (acceptance is None or setup.spec_tokens > acceptance.max_spec_tokens):
        return -math.inf
    accept = acceptance or from_conditional([])
    tokens, step = calibrated(setup, batches, state, ctx, settings, accept)
    if settings.objective.kind == "latency_slo" and settings.objective.latency_slo_s:
        quantile = state.batch.quantile(settings.objective.latency_percentile)
        at = int(np.argmin(np.abs(batches - quantile)))
        curve_tau = tokens[at] * step[at] / max(batches[at], 1)
        if step[at] / max(curve_tau, 1e-9) > settings.objective.latency_slo_s:
            return -math.inf
    return float(np.dot(weights, tokens))


def calibrated(
    setup: Setup,
    batches: npt.NDArray[np.int64],
    state: TunerState,
    ctx: Context,
    settings: PolicySettings,
    acceptance: AcceptanceEstimate,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Predicted tokens/s and step time per batch, corrected by measured/predicted factors."""
    return ctx.predictor(state, settings).curve(setup, batches, acceptance)


def _schedules(
    state: TunerState,
    ctx: Context,
    settings: PolicySettings,
    setups: Sequence[Setup],
    acceptance: AcceptanceEstimate,
) -> list[Setup]:
    """For each replay option and each largest K, the best K per batch band (neighbours with
    equal K merged). vLLM reserves state slots for the largest K at every batch, so each K is
    evaluated with the capacity of the schedule's largest K."""
    edges = np.asarray(BATCH_EDGES)
    points = np.maximum(np.round(np.sqrt(edges[:-1] * (edges[1:] - 1))), edges[:-1]).astype(
        np.int64
    )
    schedules = []
    for window in sorted({s.replay_window for s in setups}):
        ks = sorted({s.spec_tokens for s in setups if s.replay_window == window} - {0})
        for top in ks:
            options = list(range(top + 1))
            table = np.vstack(
                [
                    calibrated(_flat(top, k, window), points, state, ctx, settings, acceptance)[0]
                    for k in options
                ]
            )
            best_k = [options[i] for i in np.argmax(table, axis=0)]
            bands: list[ScheduleBand] = []
            for i, k in enumerate(best_k):
                start, end = int(edges[i]), int(edges[i + 1] - 1)
                if bands and bands[-1].spec_tokens == k:
                    bands[-1] = bands[-1].model_copy(update={"end_batch": end})
                else:
                    bands.append(ScheduleBand(start_batch=start, end_batch=end, spec_tokens=k))
            if len(bands) > 1 and max(best_k) == top:
                schedules.append(
                    Setup(spec_tokens=top, replay_window=window, schedule=tuple(bands))
                )
    return schedules


def _flat(top: int, k: int, window: int) -> Setup:
    """K drafts at every batch, with the state slots of a schedule whose largest K is `top`."""
    if k == top:
        return Setup(spec_tokens=top, replay_window=window)
    band = ScheduleBand(start_batch=1, end_batch=SCHEDULE_END, spec_tokens=k)
    return Setup(spec_tokens=top, replay_window=window, schedule=(band,))


def _first_block(
    state: TunerState,
    observation: Observation,
    ctx: Context,
    settings: PolicySettings,
    evaluation: Evaluation,
    *,
    dwell: bool = True,
) -> tuple[BlockReason, str] | None:
    # One table, in the order the rules apply (the first that fails is named): longer than
    # most functions here on purpose, since splitting it would hide that order.
    now, switch, restart = ctx.now, settings.switch, settings.restart
    pending = state.pending
    dwelt = (now - pending.since) if pending is not None else 0.0
    gain_tokens = evaluation.best_value - evaluation.current_value
    restart_tokens = restart.downtime_s * evaluation.current_value * restart.share
    recent = state.recent_changes(now)
    last_hour = sum(1 for t in recent if t > now - HOUR)
    last_change = max(recent) if recent else None
    checks: list[tuple[bool, BlockReason, str]] = [
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
            f"this window is unusable ({_why_unusable(observation)})",
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
    for failed, reason, why in checks:
        if failed:
            return reason, why
    return None


def _insufficient(observation: Observation, target: Setup) -> bool:
    return bool(
        target.spec_tokens
        and observation.acceptance is not None
        and not observation.acceptance.sufficient
    )


def _verify(
    state: TunerState,
    observation: Observation,
    ctx: Context,
    settings: PolicySettings,
    make: _Make,
) -> tuple[Decision, TunerState] | None:
    """Judge a change once the rollout settled: revert it when it measures worse."""
    verification = state.verification
    assert verification is not None
    target, previous = verification.target, verification.previous
    quality = verification.quality
    if quality is not None and quality.status == "failed":
        # Quality before speed: changed answers revert whatever the throughput says.
        return revert(
            state,
            ctx,
            settings,
            make,
            f"the quality canary got worse ({quality.summary})",
            confidence=quality.confidence or 0.0,
        )
    if _unsettled(verification, observation, ctx, settings):
        decision = make(
            Action.HOLD,
            f"verifying {previous.label} -> {target.label}: waiting for a settled "
            "window after the rollout",
            target=target,
            blocked_by=BlockReason.VERIFYING,
        )
        return decision, state
    measured, reference, batch = _measured_against_previous(state, observation, ctx, settings)
    explored = verification.exploration
    tolerance = (
        settings.exploration.tolerance if explored else settings.verification.regression_tolerance
    )
    if math.isfinite(reference) and measured < reference * (1 - tolerance):
        return revert(
            state,
            ctx,
            settings,
            make,
            f"{'the exploration ' if explored else ''}measured {measured:,.0f} tokens/s per "
            f"engine at demand {batch:.0f}, {1 - measured / reference:.0%} below the "
            f"{reference:,.0f} the previous setup gives",
            gain=measured / reference - 1,
            quarantine=not explored,
        )
    if quality is not None and quality.status == "pending":
        # Speed alone may revert; only the canary may declare the change good.
        decision = make(
            Action.HOLD,
            f"verifying {previous.label} -> {target.label}: {measured:,.0f} tokens/s per engine "
            f"vs {reference:,.0f} holds up; waiting for the quality canary on the new setup",
            target=target,
            blocked_by=BlockReason.VERIFYING,
        )
        return decision, state
    return _verified(state, make, measured, reference, batch)


def _verified(
    state: TunerState, make: _Make, measured: float, reference: float, batch: float
) -> tuple[Decision, TunerState]:
    """The change held up (and its quality check passed or was skipped): it is the known good."""
    verification = state.verification
    assert verification is not None
    target, quality = verification.target, verification.quality
    decision = make(
        Action.KEEP,
        f"verified {target.label}: {measured:,.0f} tokens/s per engine at demand "
        f"{batch:.0f} vs {reference:,.0f} for {verification.previous.label} "
        f"({measured / reference - 1:+.1%}; predicted {verification.predicted_gain:+.1%})",
        target=target,
        gain=measured / reference - 1 if reference else 0.0,
        notes=(f"quality: {quality.status}: {quality.summary}",) if quality else (),
    )
    return decision, state.verified()


def _unsettled(
    verification: Verification, observation: Observation, ctx: Context, settings: PolicySettings
) -> bool:
    """No window yet that shows the new setup alone, warmed up and measured."""
    live = observation.live_setup.setup if observation.live_setup else None
    return (
        ctx.rollout_in_progress
        or not observation.usable
        or observation.window_start < verification.switched_at + settings.verification.settle_s
        or (live is not None and live.spec_tokens != verification.target.spec_tokens)
        or not observation.generation_tokens_per_s
        or observation.batch is None
        # A window idle more than it serves (demand below one request) measures the load's
        # absence, not the setup: the tokens/s of a server left alone would revert any change.
        or float(np.mean(demand(observation))) < 1.0
    )


def _measured_against_previous(
    state: TunerState, observation: Observation, ctx: Context, settings: PolicySettings
) -> tuple[float, float, float]:
    """(measured tokens/s per engine, what the previous setup gives at this demand, demand).

    Compare engines' throughput at the same demand: per-request rates would mislead when the
    two setups fit different numbers of requests. The reference is the rate measured before
    the change when demand is in the same band, else the previous setup's calibrated
    prediction (nan when it cannot be predicted)."""
    verification = state.verification
    assert verification is not None
    assert observation.generation_tokens_per_s is not None
    previous = verification.previous
    batch = float(np.mean(demand(observation)))
    measured = observation.generation_tokens_per_s / max(observation.series, 1)
    accept = state.acceptance.estimate(ctx.now, settings.estimates.acceptance_memory_half_life_s)
    accept = accept or from_conditional([])
    expected_previous = float("nan")
    if previous.spec_tokens <= accept.max_spec_tokens:
        sizes = np.asarray([max(round(batch), 1)])
        expected_previous = float(calibrated(previous, sizes, state, ctx, settings, accept)[0][0])
    baseline = verification.baseline_rate
    same_band = (
        verification.baseline_batch is not None
        and abs(math.log2(max(batch, 1) / max(verification.baseline_batch, 1))) < 0.5
    )
    reference = baseline if same_band and baseline else expected_previous
    return measured, reference, batch


def revert(
    state: TunerState,
    ctx: Context,
    settings: PolicySettings,
    make: _Make,
    why: str,
    *,
    gain: float = 0.0,
    confidence: float = 0.0,
    quarantine: bool = True,
) -> tuple[Decision, TunerState]:
    """Back to the previous setup; the tried one is quarantined, unless it was an exploration
    that was only slower here (what it measured stays learned, and its family is not explored
    in this band again for the period; at another load it may still win)."""
    verification = state.verification
    assert verification is not None
    target, previous = verification.target, verification.previous
    hours = f"{settings.quarantine.setup_s / 3600:.1f} h"
    until = ctx.now + settings.quarantine.setup_s if quarantine else None
    state = state.reverted(ctx.now, until)
    after = (
        f"{target.label} quarantined for {hours}"
        if quarantine
        else f"{target.kind.value} not explored again at this load for {hours}"
    )
    decision = make(
        Action.REVERT,
        f"revert {target.label} -> {previous.label}: {why}; {after}",
        target=previous,
        current=target,
        notes=(f"predicted gain was {verification.predicted_gain:+.1%}",),
        gain=gain,
        confidence=confidence,
    )
    return decision, state


def _percent(gain: float) -> str:
    """A gain for a sentence; infinite when the running setup has no estimate yet."""
    return f"{gain:+.1%}" if math.isfinite(gain) else "an unknown amount (no estimate for now)"


def _why_unusable(observation: Observation) -> str:
    if observation.usable:
        return "usable"
    reason = observation.reason or UnusableReason.EMPTY
    return f"{reason.value}: {observation.detail}"
