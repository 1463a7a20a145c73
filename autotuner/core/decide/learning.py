"""Learning from a window: the batch demand, the acceptance and the calibration the state
carries, folded in before anything is decided."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from autotuner.core.decide.context import Context, demand, whole_window
from autotuner.core.decide.estimates import first_position_rate
from autotuner.core.decide.settings import PolicySettings
from autotuner.core.decide.state import TunerState
from autotuner.core.observe.observation import read_acceptance
from autotuner.core.predict.acceptance import from_conditional
from autotuner.core.predict.prefill import PrefillCost
from autotuner.core.types import PLAIN, AcceptanceStats, Observation, Setup


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
    state = _watch_restart(state.running(current), observation, ctx, settings)
    if not observation.usable or observation.batch is None:
        return state
    window = demand(observation)
    update: dict[str, object] = {}
    settled = measures_the_load(state, observation, ctx, settings)
    if settled:
        update["batch"] = state.batch.add(window, ctx.now, settings.estimates.batch_half_life_s)
        update["load"] = state.load.add(float(np.mean(window)), ctx.now, settings.forecast)
    stats = _unbiased_acceptance(observation, current, state.drafter)
    if stats is not None and stats.sufficient:
        update["acceptance"] = state.acceptance.add(
            stats, ctx.now, settings.estimates.acceptance_half_life_s
        )
        first = first_position_rate(stats)
        if first is not None:
            update["acceptance_drift"] = state.acceptance_drift.add(
                first, ctx.now, settings.estimates.acceptance_drift_half_life_s
            )
    state = state.updated(**update)
    if known is not None and (live is None or live.spec_tokens == known.spec_tokens):
        state = _calibrate(state, observation, ctx, settings, known)
    if settled and observation.generation_tokens_per_s and observation.series:
        state = state.updated(
            last_rate=observation.generation_tokens_per_s / observation.series,
            last_batch=float(np.mean(window)),
        )
    return state


def measures_the_load(
    state: TunerState, observation: Observation, ctx: Context, settings: PolicySettings
) -> bool:
    """Whether a window shows the load and not a restart: one that began before the latest
    change straddles the restart's gap, and one within the settle after the engine came back,
    or shorter than a whole window soon after it, holds the clients' reconnecting (a demand
    far below the load's, seen on the real engine as demand 1 under many streams). While the
    engine has not been seen serving the change, or after a change whose readiness is not
    watched (a revert, an operator's), the settle counts from the change itself."""
    settle = settings.verification.settle_s
    verification = state.verification
    if verification is not None:
        since = verification.serving_since
        if since is None:
            return False  # the engine has not been seen serving the change yet
        aftermath_ends = math.inf  # a change in flight: only whole windows count
    else:
        since = max(state.changes, default=None)
        if since is None:
            return True  # no change seen: every usable window is the load
        aftermath_ends = since + settle + ctx.window_s
    if observation.window_start < since + settle:
        return False
    return observation.window_start >= aftermath_ends or whole_window(observation, ctx.window_s)


def _watch_restart(
    state: TunerState, observation: Observation, ctx: Context, settings: PolicySettings
) -> TunerState:
    """Time the restart in flight from patch to ready: ready at the first usable window that
    began after the patch with the engine serving the new setup (an upper bound by up to one
    window and one step). A restart some step saw down is a measurement; one already serving
    at the first step after it only bounds the learned duration from above."""
    verification = state.verification
    serving = observation.usable and observation.batch is not None and not ctx.rollout_in_progress
    if verification is None or verification.ready_s is not None:
        if serving and state.current is not None:
            costs = state.restart_costs.seen_running(
                state.current, prefix_caching=ctx.prefix_caching(state.current)
            )
            return state.updated(restart_costs=costs)
        return state
    live = observation.live_setup.setup if observation.live_setup else None
    target = verification.target
    down = not serving or (live is not None and live.spec_tokens != target.spec_tokens)
    if down or observation.window_start < verification.switched_at:
        if not down or verification.seen_down:
            return state  # a window reaching back before the patch tells nothing yet
        return state.updated(verification=verification.with_fields(seen_down=True))
    took = ctx.now - verification.switched_at
    costs, caching = state.restart_costs, ctx.prefix_caching(target)
    if verification.seen_down:
        costs = costs.measured(
            target, took, verification.first_start, settings.restart, prefix_caching=caching
        )
    else:
        costs = costs.at_most(target, took, prefix_caching=caching)
    ready = verification.with_fields(ready_s=took, ready_at=observation.window_start)
    return state.updated(verification=ready, restart_costs=costs)


def _unbiased_acceptance(
    observation: Observation, current: Setup, drafter: dict[str, Any] | None
) -> AcceptanceStats | None:
    """The window's acceptance read for the running setup: under a K schedule each position
    counts only the drafts that proposed it, and where the proposed lengths are unknown the
    deep positions are lower bounds (core/observe/observation.py `read_acceptance`; a no-op
    when the controller already read it for the deployed setup)."""
    return read_acceptance(observation, current, drafter).acceptance


def _calibrate(
    state: TunerState,
    observation: Observation,
    ctx: Context,
    settings: PolicySettings,
    current: Setup,
) -> TunerState:
    """The running setup's measured step at the observed batch, against the model's time per
    kernel class: evidence for the attribution (core/predict/attribution.py). The model's
    class times do not depend on the calibration being learned."""
    assert observation.batch is not None
    batch = observation.batch.mean
    if not observation.step_time_s or batch < 1:
        return state
    accept = ctx.acceptance(state, settings) or from_conditional([0.0] * current.spec_tokens)
    if current.spec_tokens > accept.max_spec_tokens:
        return state
    predictor = ctx.predictor(state, settings)
    measured_s = _decode_step_s(predictor.workload_prefill(current), observation)
    if measured_s <= 0:
        return state
    plain_s, setup_s = predictor.class_times(current, round(batch), accept)
    return state.updated(
        calibration=state.calibration.add(
            current,
            batch,
            measured_s,
            plain_s,
            setup_s,
            ctx.now,
            half_life_s=settings.calibration.half_life_s,
        )
    )


def _decode_step_s(cost: PrefillCost | None, observation: Observation) -> float:
    """The decode part of the measured step: the prompts' prefill (and without prefix caching
    the recomputed one) rides in the same steps (chunked prefill), and the model charges it
    apart."""
    step_s = observation.step_time_s or 0.0
    if cost is None:
        return step_s
    tokens_per_step = (observation.generation_tokens_per_s or 0.0) / max(observation.series, 1)
    return cost.decode_step_s(step_s, tokens_per_step * step_s)
