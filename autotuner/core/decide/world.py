"""What the loop shows the core of the world at a step: the target as read (a view the
actuators' LiveTarget meets), and the Context built from it with the resolved workload (the
engine's capabilities narrowed, whether a drafter is there to propose speculation)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from autotuner.core.decide.context import Context
from autotuner.core.decide.state import TunerState
from autotuner.core.engine.capabilities import EngineCapabilities
from autotuner.core.engine.resolution import Resolved
from autotuner.core.observe.observation import read_acceptance
from autotuner.core.predict.hardware import HardwareProfile
from autotuner.core.types import Observation, Setup


class RolloutView(Protocol):
    @property
    def done(self) -> bool: ...

    @property
    def stuck(self) -> str | None: ...


class TargetView(Protocol):
    """What the target shows this step (None where there is no target to read)."""

    @property
    def setup(self) -> Setup: ...

    @property
    def speculative_config(self) -> Mapping[str, Any] | None: ...

    @property
    def paused(self) -> bool: ...

    @property
    def rollout(self) -> RolloutView: ...


@dataclass(frozen=True)
class Standing:
    """What the operator configured about the target (the loop's settings)."""

    capabilities: EngineCapabilities
    paused: bool = False
    rollout_deadline_s: float = float("inf")
    low_precision_replay: bool = False
    window_s: float = 0.0  # the loop's evaluation window: a change is judged on a whole one


def as_deployed(observation: Observation, target: TargetView | None) -> Observation:
    """The window's per-position acceptance read under the deployed schedule and drafter (the
    target's args show them; the engine's metrics do not)."""
    if target is None:
        return observation
    return read_acceptance(observation, target.setup, target.speculative_config)


def context_of(
    now: float,
    resolved: Resolved,
    hardware: HardwareProfile,
    state: TunerState,
    observation: Observation,
    target: TargetView | None,
    *,
    standing: Standing,
    leader: bool,
    advisory: str | None,
) -> Context:
    """The Context of this step: the live model and workload, what the engine accepts now,
    the target's rollout and pause, and whether decisions are applied (`advisory`)."""
    engine = engine_now(standing.capabilities, resolved, state, observation, target, now)
    return Context(
        now=now,
        model=resolved.model,
        hardware=hardware,
        engine=engine,
        prefix_caching=engine.keeps_prefix_caching,
        workload=resolved.workload,
        deployed=target.setup if target else None,
        drafter_available=_drafter_available(state, observation, target)
        and resolved.drafter.predictable,
        drafter_problem=resolved.drafter.problem,
        leader=leader,
        paused=standing.paused or bool(target and target.paused),
        rollout_in_progress=bool(target and not target.rollout.done),
        rollout_stuck=target.rollout.stuck if target else None,
        rollout_deadline_s=standing.rollout_deadline_s,
        window_s=standing.window_s,
        low_precision_replay=standing.low_precision_replay,
        advisory=advisory,
    )


def engine_now(
    capabilities: EngineCapabilities,
    resolved: Resolved,
    state: TunerState,
    observation: Observation,
    target: TargetView | None,
    now: float,
) -> EngineCapabilities:
    """The configured capabilities on the build read from the engine (its capability table
    row, under the `build` preset) for this model, narrowed by what the engine's metrics show
    and what it refused lately, widened by what the running setup proves."""
    return (
        capabilities.deployed(
            resolved.build,
            resolved.model,
            resolved.kv_connector,
            resolved.data_parallel,
            resolved.drafter.method,
        )
        .shown_by(observation.live_setup)
        .without(k for k, r in state.refused.items() if r.until > now)
        .proven_by(target.setup if target else None)
    )


def _drafter_available(
    state: TunerState, observation: Observation, target: TargetView | None
) -> bool:
    """The operator configured a drafter (never invented): the target's speculative config,
    the one kept while speculation is off, or (no target) the engine speculating now."""
    return bool(
        (target and target.speculative_config)
        or state.drafter
        or (target is None and observation.live_setup and observation.live_setup.speculation)
    )
