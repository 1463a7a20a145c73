"""Verification: judging a change once the new setup serves a settled window (kept, or reverted
when it measures worse or its quality canary failed), and the revert itself."""

from __future__ import annotations

import math
from dataclasses import replace

from autotuner.core.decide.anchor import EVERY_BATCH
from autotuner.core.decide.context import Situation, whole_window
from autotuner.core.decide.decisions import Make
from autotuner.core.decide.schedule_check import MAX_WINDOWS, judge_schedule, regions, unverified
from autotuner.core.decide.state import (
    Answer,
    Exploration,
    QualityStatus,
    Refusal,
    TunerState,
    Verification,
)
from autotuner.core.decide.valuation import evaluate, misses_latency_limits
from autotuner.core.engine.capabilities import Capability
from autotuner.core.predict.acceptance import first_position
from autotuner.core.types import Action, BlockReason, Decision
from autotuner.durations import format_duration
from autotuner.errors import UnusableReason

# The rate measured before a change is the reference while demand stays within half an octave
# (a factor sqrt 2) of the demand it was measured at; beyond it, the previous setup's prediction.
SIMILAR_DEMAND_OCTAVES = 0.5
# How many windows past the settle a demand far below the one before the switch is waited out.
RECONNECT_WINDOWS = 3
# A change reverted at a demand this many octaves below the one before the switch was made for
# a load that had gone before it settled (a burst the trend read as a rise).
LOAD_GONE_OCTAVES = 1.0
# What a window says when the engine itself is not answering (not a bad scrape of a live one).
NOT_SERVING = (UnusableReason.SERVER_DOWN, UnusableReason.HTTP_ERROR)


def verify(sit: Situation, make: Make) -> tuple[Decision, TunerState] | None:
    """Judge a change once the rollout settled: revert it when it measures worse."""
    state, settings = sit.state, sit.settings
    verification = state.verification
    assert verification is not None
    quality = verification.quality
    if quality is not None and quality.status is QualityStatus.FAILED:
        # Quality before speed: changed answers revert whatever the throughput says.
        why = f"the quality canary got worse ({quality.summary})"
        return revert(sit, make, why, confidence=quality.confidence or 0.0)
    down_s = _stopped_serving_s(sit, verification)
    if down_s is not None:
        reason = sit.observation.reason.value if sit.observation.reason else "down"
        why = f"the engine has not served since the switch {down_s:.0f} s ago ({reason})"
        return revert(sit, make, why)
    unsettled = _unsettled(sit, verification)
    if unsettled is not None:
        return _waiting(make, verification, unsettled), state
    measured, reference, batch = _measured_against_previous(sit, verification)
    switch = (verification.previous, verification.target)
    failed = judge_schedule(sit, switch, measured, reference, batch)
    if failed is not None:
        gain = measured / reference - 1 if math.isfinite(reference) and reference else 0.0
        return revert(sit, make, failed.why, gain=gain, refuse=failed.capability)
    explored = verification.exploration
    tolerance = (
        settings.exploration.tolerance if explored else settings.verification.regression_tolerance
    )
    # A move off a setup that misses the latency limits is judged by them, not by tokens/s.
    # The windows a schedule waits for past the first are asked only whether it collapsed or
    # was not run: held to the tolerance each, more windows would only revert more noise.
    slower = (
        verification.windows_judged == 0
        and math.isfinite(reference)
        and measured < reference * (1 - tolerance)
        and not misses_latency_limits(sit, verification.previous)
    )
    held_by_plan = slower and explored and _plan_holds(sit, verification)
    if slower and not held_by_plan:
        return revert(
            sit,
            make,
            f"{'the exploration ' if explored else ''}measured {measured:,.0f} tokens/s per "
            f"engine at demand {batch:.0f}, {1 - measured / reference:.0%} below the "
            f"{reference:,.0f} the previous setup gives",
            gain=measured / reference - 1,
            quarantine=not explored,
            load_gone=not explored and _load_gone(verification, batch),
        )
    if sit.ctx.engine.as_run(verification.target).schedule:
        pending = _regions_pending(sit, make, verification, batch)
        if pending is not None:
            return pending
    if quality is not None and quality.status is QualityStatus.PENDING:
        # Speed alone may revert; only the canary may declare the change good.
        why = (
            f"{measured:,.0f} tokens/s per engine vs {reference:,.0f} holds up; waiting for "
            "the quality canary on the new setup"
        )
        return _waiting(make, verification, why), state
    return _verified(state, make, measured, reference, batch, held_by_plan)


def _plan_holds(sit: Situation, verification: Verification) -> bool:
    """Whether the plan, valued with what the exploration measured, holds the explored setup
    over the horizon: on a rising morning replay may measure under speculation at 80 and win
    at the 300 the forecast goes to, and going back costs a restart now and another when the
    plan moves to it for the peak. The miss measured here is taken to hold at every batch of
    the family (calibration learns it for this band only): an answer slower than modelled is
    not kept on the model's hopes for the bands it has not run in."""
    calibration = sit.settings.calibration.model_copy(update={"anchor_octaves": EVERY_BATCH})
    settings = sit.settings.model_copy(update={"calibration": calibration})
    evaluation = evaluate(replace(sit, settings=settings), verification.target)
    if evaluation is None:
        return False
    return evaluation.best == verification.target or (
        evaluation.gain < sit.settings.switch.min_gain
    )


def _regions_pending(
    sit: Situation, make: Make, verification: Verification, batch: float
) -> tuple[Decision, TunerState] | None:
    """A schedule is kept only once a settled window has measured each region of batch the
    load visits (each band, and around each edge where K changes), at most MAX_WINDOWS; until
    then this window's regions are recorded and the change waits (None: all measured)."""
    target = sit.ctx.engine.as_run(verification.target)
    seen = tuple(r.label for r in regions(target) if r.holds(batch))
    checked = tuple(dict.fromkeys((*verification.regions_checked, *seen)))
    judged = verification.windows_judged + 1
    left = unverified(sit, target, checked)
    if not left or judged >= MAX_WINDOWS:
        return None
    updated = verification.with_fields(regions_checked=checked, windows_judged=judged)
    names = ", ".join(r.label for r in left)
    why = f"the schedule holds up at demand {batch:.0f}; waiting for a window in {names}"
    return _waiting(make, updated, why), sit.state.updated(verification=updated)


def _waiting(make: Make, verification: Verification, why: str) -> Decision:
    target, previous = verification.target, verification.previous
    return make(
        Action.HOLD,
        f"verifying {previous.label} -> {target.label}: {why}",
        target=target,
        blocked_by=BlockReason.VERIFYING,
    )


def _verified(
    state: TunerState,
    make: Make,
    measured: float,
    reference: float,
    batch: float,
    held_by_plan: bool = False,
) -> tuple[Decision, TunerState]:
    """The change held up (and its quality check passed or was skipped): it is the known good.
    `held_by_plan`: an exploration that measured slower here, kept for the hours ahead."""
    verification = state.verification
    assert verification is not None
    target, quality = verification.target, verification.quality
    why = (
        f"; the plan, valued with that measurement, holds {target.label} for the hours ahead"
        if held_by_plan
        else ""
    )
    decision = make(
        Action.KEEP,
        f"verified {target.label}: {measured:,.0f} tokens/s per engine at demand "
        f"{batch:.0f} vs {reference:,.0f} for {verification.previous.label} "
        f"({measured / reference - 1:+.1%}; predicted {verification.predicted_gain:+.1%}){why}",
        target=target,
        gain=measured / reference - 1 if reference else 0.0,
        notes=(f"quality: {quality.status}: {quality.summary}",) if quality else (),
    )
    return decision, state.verified()


def _stopped_serving_s(sit: Situation, verification: Verification) -> float | None:
    """Seconds since the switch while the engine does not answer, once past what its restart
    may take (None: it serves, or may still be coming up)."""
    observation = sit.observation
    if sit.ctx.rollout_in_progress or observation.usable or observation.reason not in NOT_SERVING:
        return None
    since = sit.now - verification.switched_at
    expected = sit.restart_s(verification.target)
    allowed = max(sit.settings.verification.down_deadline_s, 2 * expected)
    return since if since > allowed else None


def _unsettled(sit: Situation, verification: Verification) -> str | None:
    """Why this window cannot judge the change (None: it can). Only a whole window of the new
    setup alone, begun past the settle time counted from when the engine was seen serving it
    (not from the patch: a restart may end anywhere inside a step), at a demand the load has
    come back to after the restart, is evidence."""
    observation, ctx = sit.observation, sit.ctx
    live = observation.live_setup.setup if observation.live_setup else None
    if ctx.rollout_in_progress:
        return "waiting for a settled window after the rollout (the rollout is in progress)"
    if not observation.usable or observation.batch is None:
        return "waiting for a settled window after the rollout (no usable window yet)"
    ready_at = verification.serving_since
    if ready_at is None or (
        live is not None and live.spec_tokens != verification.target.spec_tokens
    ):
        return f"waiting for the engine to answer with {verification.target.label}"
    settled_from = ready_at + sit.settings.verification.settle_s
    if observation.window_start < settled_from:
        left = settled_from - observation.window_start
        return (
            f"waiting for a settled window: the engine answered with "
            f"{verification.target.label} {sit.now - ready_at:.0f} s ago; "
            f"{left:.0f} s of the {sit.settings.verification.settle_s:.0f} s settle left"
        )
    if not whole_window(observation, ctx.window_s):
        length = observation.window_end - observation.window_start
        return (
            f"waiting for a settled window: this one is {length:.1f} s, shorter than the "
            f"{ctx.window_s:.0f} s window"
        )
    if not observation.generation_tokens_per_s or sit.demand_mean < 1.0:
        # A window idle more than it serves (demand below one request) measures the load's
        # absence, not the setup: the tokens/s of a server left alone would revert any change.
        return "waiting for a settled window with load on the engine"
    return _load_not_back(sit, verification, settled_from)


def _load_not_back(sit: Situation, verification: Verification, settled_from: float) -> str | None:
    """Right after a restart the load's clients are still reconnecting: a demand far below
    the one before the switch is waited out for a few windows (then judged: the load may
    really have fallen, and the reference is then the previous setup's prediction)."""
    before = verification.baseline_batch
    if before is None or sit.ctx.window_s <= 0:
        return None
    fell = math.log2(max(before, 1) / max(sit.demand_mean, 1)) >= SIMILAR_DEMAND_OCTAVES
    waited = sit.observation.window_start - settled_from
    if fell and waited < RECONNECT_WINDOWS * sit.ctx.window_s:
        return (
            f"waiting for the load to come back: demand {sit.demand_mean:.0f} per engine vs "
            f"{before:.0f} before the switch"
        )
    return None


def _load_gone(verification: Verification, batch: float) -> bool:
    """Whether the load the change was made for had gone by the window that judged it."""
    before = verification.baseline_batch
    return before is not None and math.log2(max(before, 1) / max(batch, 1)) >= LOAD_GONE_OCTAVES


def _measured_against_previous(
    sit: Situation, verification: Verification
) -> tuple[float, float, float]:
    """(measured tokens/s per engine, what the previous setup gives at this demand, demand).

    Compare engines' throughput at the same demand: per-request rates would mislead when the
    two setups fit different numbers of requests. The reference is the rate measured before
    the change: as measured when demand is similar, else carried to this demand along the
    calibrated model's curve (`_carried`); the previous setup's calibrated prediction only when
    nothing was measured before the change (nan when it cannot be predicted)."""
    observation = sit.observation
    assert observation.generation_tokens_per_s is not None
    batch, before = sit.demand_mean, verification.baseline_batch
    measured = observation.generation_tokens_per_s / max(observation.series, 1)
    baseline = verification.baseline_rate
    if not baseline or before is None:
        return measured, _previous_at(sit, verification, batch), batch
    if abs(math.log2(max(batch, 1) / max(before, 1))) < SIMILAR_DEMAND_OCTAVES:
        return measured, baseline, batch
    return measured, _carried(sit, verification, baseline, before, batch), batch


def _carried(
    sit: Situation, verification: Verification, baseline: float, before: float, batch: float
) -> float:
    """The previous setup's rate at `batch`, from what it measured at `before`: the model's
    ratio between the two demands times the measurement. The ratio, not the model's own
    tokens/s: on a machine whose speed the profile misses by more than calibration's bounds
    (a MIG slice under a whole GPU's profile; the CPU tier under a GPU's) those are off by
    that factor, which would revert a good change on a slower machine and inflate its gain on
    a faster one."""
    there = _previous_at(sit, verification, before)
    here = _previous_at(sit, verification, batch)
    if not (math.isfinite(there) and math.isfinite(here)) or there <= 0:
        return here
    return baseline * here / there


def _previous_at(sit: Situation, verification: Verification, batch: float) -> float:
    """The previous setup's calibrated tokens/s at `batch` (nan: it drafts deeper than the
    acceptance reaches)."""
    previous = verification.previous
    if previous.spec_tokens > sit.accept.max_spec_tokens:
        return float("nan")
    return sit.predictor.tokens_per_s_at(previous, batch, sit.accept)


def _answered_no(sit: Situation, state: TunerState) -> tuple[TunerState, str]:
    """An exploration measured slower: its family is not asked again at this load while the
    answer is remembered (`exploration.answer_memory_s`, at least the quarantine), unless
    acceptance moves away from where it was measured."""
    verification = sit.state.verification
    assert verification is not None
    settings = sit.settings
    memory = max(settings.exploration.answer_memory_s, settings.quarantine.setup_s)
    acceptance = first_position(sit.acceptance)
    if verification.band is None:  # asked by a sidecar from before answers were kept
        memory, acceptance = settings.quarantine.setup_s, None
    else:
        key = Exploration(verification.target.kind, verification.band)
        state = state.answered(key, Answer(at=sit.now, acceptance=acceptance), sit.now + memory)
    after = f"{verification.target.kind.value} not explored again at this load for "
    after += format_duration(memory)
    if acceptance is not None and memory > settings.quarantine.setup_s:
        tolerance = settings.exploration.answer_acceptance_tolerance
        after += (
            f" while the first draft position's acceptance stays within {tolerance:.2f} of "
            f"{acceptance:.2f}"
        )
    return state, after


def revert(
    sit: Situation,
    make: Make,
    why: str,
    *,
    gain: float = 0.0,
    confidence: float = 0.0,
    quarantine: bool = True,
    refuse: Capability | None = None,
    load_gone: bool = False,
) -> tuple[Decision, TunerState]:
    """Back to the previous setup; the tried one is quarantined, unless it was an exploration
    that was only slower here (what it measured stays learned, and its family is not asked
    about in this band again while the answer is remembered; at another load it may win).
    `refuse`: the capability the failure shows the engine does not serve well (nothing
    needing it is proposed for `quarantine.capability_s`). `load_gone`: the load it was made
    for had gone before it settled, so for `switch.load_gone_memory_s` no change passes its
    dwell early."""
    verification = sit.state.verification
    assert verification is not None
    target, previous = verification.target, verification.previous
    period = sit.settings.quarantine.setup_s
    state = sit.state.reverted(sit.now, sit.now + period if quarantine else None)
    if quarantine:
        after = f"{target.label} quarantined for {period / 3600:.1f} h"
    else:
        state, after = _answered_no(sit, state)
    if refuse is not None:
        refused_s = sit.settings.quarantine.capability_s
        refusal = Refusal(why=f"{target.label}: {why}", until=sit.now + refused_s)
        state = state.refusing(refuse, refusal)
        after += f"; {refuse} refused for {refused_s / 3600:.0f} h"
    if load_gone:
        switch = sit.settings.switch
        state = state.load_went(sit.now)
        after += (
            f"; the load it was made for (demand {verification.baseline_batch:.0f}) had gone "
            f"before it settled: for {format_duration(switch.load_gone_memory_s)} every change "
            f"waits the whole {format_duration(switch.dwell_s)} dwell"
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
