"""What the policy is told about the world at a step (`Context`), and the step's `Situation`:
everything a decision reads, built once (one Predictor, one acceptance estimate, one demand)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from autotuner.core.decide.forecast import Forecast, forecast
from autotuner.core.decide.settings import PolicySettings
from autotuner.core.decide.state import TunerState
from autotuner.core.engine.capabilities import EngineCapabilities
from autotuner.core.engine.workload import Workload
from autotuner.core.model.spec import ModelSpec
from autotuner.core.predict.acceptance import AcceptanceEstimate, from_conditional
from autotuner.core.predict.hardware import HardwareProfile
from autotuner.core.predict.predictor import Predictor
from autotuner.core.predict.prefill import keeps_prefix_caching
from autotuner.core.types import Observation, Setup


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
    window_s: float = 0.0  # the loop's evaluation window (0: unknown, no window is too short)
    advisory: str | None = None  # why nothing decided is applied (advise mode, not leading)
    # Whether the engine keeps prefix caching under a setup (the build's companions say).
    prefix_caching: Callable[[Setup], bool] = keeps_prefix_caching

    def predictor(self, state: TunerState, settings: PolicySettings) -> Predictor:
        """The calibrated model for `state`'s calibration: every tokens/s figure comes from it."""
        return Predictor(
            self.model,
            self.hardware,
            self.workload,
            state.calibration,
            self.now,
            settings.calibration.half_life_s,
            settings.calibration.bounds,
            prefix_caching=self.prefix_caching,
            as_run=self.engine.as_run,
            piecewise=self.engine.piecewise_graphs,
        )

    def acceptance(self, state: TunerState, settings: PolicySettings) -> AcceptanceEstimate | None:
        """The acceptance decided on now: the pinned rates where settings pin them, else the
        remembered measurements, their interval widened by how far acceptance may have moved
        since its last window (None: never observed)."""
        pinned = settings.estimates.acceptance_pinned
        if pinned:
            return from_conditional(pinned)
        half_life = settings.estimates.acceptance_memory_half_life_s
        remembered = state.acceptance.estimate(self.now, half_life)
        return remembered and remembered.widened(state.acceptance_moved(self.now))


@dataclass(frozen=True)
class Situation:
    """One step as the policy sees it once the window is learned: every helper reads from it
    instead of rebuilding the same figures. `state` follows the step's transitions
    (`with_state`); none of them touches what the predictor and the estimate were built on."""

    state: TunerState
    observation: Observation
    ctx: Context
    settings: PolicySettings
    predictor: Predictor
    acceptance: AcceptanceEstimate | None  # the remembered estimate (None: never observed)
    demand: tuple[float, ...]  # requests per engine in the window (empty: no batch read)
    demand_mean: float  # their mean (nan when there are none)
    forecast: Forecast | None = None  # demand over the payback horizon (None: none seen yet)
    # How much of the load's watch is missing: 1 at the first window, 0 once the load has been
    # watched for a dwell (or a trend window, the shorter).
    unwatched: float = 0.0

    @property
    def now(self) -> float:
        return self.ctx.now

    @property
    def accept(self) -> AcceptanceEstimate:
        """The estimate, or no acceptance at all when none was observed (plain's curves)."""
        return self.acceptance or NO_ACCEPTANCE

    def with_state(self, state: TunerState) -> Situation:
        return replace(self, state=state)

    def restart_s(self, setup: Setup) -> float:
        """Seconds from patch to ready a restart into `setup` is expected to take now."""
        caching = self.ctx.prefix_caching(setup)
        return self.state.restart_costs.expected_s(
            setup, self.settings.restart, prefix_caching=caching
        )

    def first_start(self, setup: Setup) -> bool:
        """Whether a restart into `setup` compiles anew (its compile key has not run)."""
        caching = self.ctx.prefix_caching(setup)
        costs = self.state.restart_costs
        return costs.compile_s(setup, self.settings.restart, prefix_caching=caching) > 0


NO_ACCEPTANCE = from_conditional([])


def situation(
    state: TunerState, observation: Observation, ctx: Context, settings: PolicySettings
) -> Situation:
    """The step's situation over a state that has already learned the window."""
    window = tuple(demand(observation)) if observation.batch is not None else ()
    return Situation(
        state=state,
        observation=observation,
        ctx=ctx,
        settings=settings,
        predictor=ctx.predictor(state, settings),
        acceptance=ctx.acceptance(state, settings),
        demand=window,
        demand_mean=float(np.mean(window)) if window else math.nan,
        forecast=forecast(state.load, ctx.now, settings.restart.horizon_s, settings.forecast),
        unwatched=_unwatched(state, settings),
    )


def _unwatched(state: TunerState, settings: PolicySettings) -> float:
    """The share of a dwell (or a trend window, the shorter) the recent windows do not span."""
    recent = state.load.recent
    watched = recent[-1][0] - recent[0][0] if recent else 0.0
    enough = min(settings.switch.dwell_s, settings.forecast.trend_window_s)
    return max(1.0 - watched / enough, 0.0) if enough > 0 else 0.0


def demand(observation: Observation) -> list[float]:
    """Requests each engine would run if they fit: running plus the mean waiting queue. The
    running gauge alone stops at the capacity of the current setup and would hide the load a
    roomier setup could serve."""
    assert observation.batch is not None
    waiting = observation.waiting_mean or 0.0
    return [value + waiting for value in observation.batch.values]


# A window is whole at this share of the loop's window: scrapes fall on the loop's steps, so a
# source's steady window may be a step short of it.
WHOLE_WINDOW = 0.75


def whole_window(observation: Observation, window_s: float) -> bool:
    """The window spans the loop's whole window (a window of a restarted engine's counters
    starts with the engine and is short at first); any window is whole when the loop's window
    is unknown (0)."""
    return observation.window_end - observation.window_start >= WHOLE_WINDOW * window_s
