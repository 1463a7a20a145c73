"""From window totals (counter deltas, gauge samples) to an Observation: pure, no I/O.

Both sources (a direct scrape and a Prometheus server) reduce their data to `WindowTotals`;
this module decides whether the window is usable and what it says.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autotuner.core.engine.workload import PrefixCacheReading
from autotuner.core.observe.limits import ObservationLimits
from autotuner.core.predict.acceptance import from_counts, proposed_lengths, variable_length
from autotuner.core.types import AcceptanceStats, BatchStats, LiveSetup, Observation, Setup
from autotuner.errors import InputError, UnusableReason


@dataclass
class Ratio:
    """A sum/count pair of a histogram or counter ratio over the window."""

    total: float = 0.0
    count: float = 0.0

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count > 0 else None


@dataclass
class WindowTotals:
    """What one window measured, summed over engines and replicas."""

    start: float
    end: float
    last_sample_at: float
    series: int
    batch_samples: list[float] = field(default_factory=list)
    speculation: bool = False
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    accepted_per_position: list[float] = field(default_factory=list)
    generation_tokens_per_s: float | None = None
    prompt_tokens_per_s: float | None = None
    step_time: Ratio = field(default_factory=Ratio)
    time_per_output_token: Ratio = field(default_factory=Ratio)
    iteration_tokens: Ratio = field(default_factory=Ratio)
    prompt_length: Ratio = field(default_factory=Ratio)
    generation_length: Ratio = field(default_factory=Ratio)
    preemptions: float | None = None
    prefix_cache_queries: float | None = None  # prompt tokens looked up (None: not exported)
    prefix_cache_hits: float | None = None  # of them, found cached
    waiting_samples: list[float] = field(default_factory=list)
    kv_usage_samples: list[float] = field(default_factory=list)
    cache_config: Mapping[str, str] = field(default_factory=dict)


def unusable(
    source: str, reason: UnusableReason, detail: str, *, start: float = 0.0, end: float = 0.0
) -> Observation:
    return Observation(
        source=source,
        window_start=start,
        window_end=end,
        usable=False,
        reason=reason,
        detail=detail,
    )


def batch_stats(samples: Sequence[float]) -> BatchStats:
    values = np.asarray(samples, dtype=np.float64)
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return BatchStats(
        samples=len(values),
        mean=float(values.mean()),
        p50=float(p50),
        p90=float(p90),
        p99=float(p99),
        values=tuple(float(v) for v in values),
    )


def acceptance_stats(
    totals: WindowTotals,
    limits: ObservationLimits,
    *,
    setup: Setup | None = None,
    drafter: Mapping[str, Any] | None = None,
) -> AcceptanceStats:
    """The window's acceptance, each position's rate over the drafts that proposed it.

    `setup` is the deployed one (the target's args: they show a K schedule) and `drafter` its
    `--speculative-config` (some drafters propose fewer than K at will); without them the
    counters alone say whether every draft proposed K (core/acceptance.py `proposed_lengths`).
    """
    return _stats(
        totals.drafts,
        totals.draft_tokens,
        totals.accepted,
        totals.accepted_per_position,
        totals.batch_samples,
        limits.min_drafts,
        setup=setup,
        drafter=drafter,
    )


def _stats(
    drafts: float,
    draft_tokens: float,
    accepted: float,
    accepted_per_position: Sequence[float],
    batch_samples: Sequence[float],
    min_drafts: float,
    *,
    setup: Setup | None,
    drafter: Mapping[str, Any] | None,
) -> AcceptanceStats:
    proposals = proposed_lengths(
        spec_tokens=len(accepted_per_position),
        drafts=drafts,
        draft_tokens=draft_tokens,
        setup=setup,
        batch_samples=batch_samples,
        variable=variable_length(drafter),
    )
    estimate = from_counts(drafts, accepted_per_position, proposed=proposals.share)
    naive = from_counts(drafts, accepted_per_position)
    k = estimate.max_spec_tokens
    sufficient = drafts >= min_drafts
    return AcceptanceStats(
        drafts=drafts,
        draft_tokens=draft_tokens,
        accepted=accepted,
        accepted_per_position=tuple(accepted_per_position),
        per_position=estimate.conditional,
        per_position_low=estimate.conditional_low,
        per_position_high=estimate.conditional_high,
        tau=estimate.tau(k),
        acceptance_rate=accepted / draft_tokens if draft_tokens else 0.0,
        mean_acceptance_length=1 + accepted / drafts if drafts else 1.0,
        sufficient=sufficient,
        note=None
        if sufficient
        else (
            f"only {drafts:.0f} drafts in the window (need {min_drafts:.0f}): "
            "acceptance is reported but not trusted"
        ),
        trials_per_position=estimate.trials,
        lower_bound=estimate.lower_bound,
        proposed_share=proposals.share[:k],
        naive_per_position=naive.conditional,
        proposals=proposals.how,
        proposals_note=proposals.note,
        read_with=setup.label if setup is not None else None,
    )


def read_acceptance(
    observation: Observation, setup: Setup | None, drafter: Mapping[str, Any] | None = None
) -> Observation:
    """The observation with its acceptance read for the deployed setup (the loop and
    `observe --target` know it from the target's args; the window's own counts and batch
    samples are all it needs). Unchanged without acceptance, or when already read for it."""
    stats = observation.acceptance
    if stats is None or setup is None or stats.read_with == setup.label:
        return observation
    try:
        read = _stats(
            stats.drafts,
            stats.draft_tokens,
            stats.accepted,
            stats.accepted_per_position,
            observation.batch.values if observation.batch else (),
            0.0,
            setup=setup,
            drafter=drafter,
        )
    except InputError:  # the counts were checked when the window was built
        return observation
    read = read.model_copy(update={"sufficient": stats.sufficient, "note": stats.note})
    return observation.model_copy(update={"acceptance": read})


def live_setup(totals: WindowTotals) -> LiveSetup:
    config = totals.cache_config
    replay = config.get("use_replayssm")
    window = config.get("replayssm_buffer_len")
    return LiveSetup(
        speculation=totals.speculation,
        spec_tokens=len(totals.accepted_per_position) if totals.speculation else 0,
        replay=None if replay is None else replay.lower() == "true",
        replay_window=int(window) if window and window.isdigit() else None,
        mamba_ssm_cache_dtype=config.get("mamba_ssm_cache_dtype"),
        mamba_cache_mode=config.get("mamba_cache_mode"),
        cache_config_read=bool(config),
        cache_config_labels=tuple(sorted(config)),
    )


def build_observation(
    source: str,
    totals: WindowTotals,
    *,
    now: float,
    limits: ObservationLimits,
    setup: Setup | None = None,
    drafter: Mapping[str, Any] | None = None,
) -> Observation:
    """Decide whether the window is usable and summarise it. Never raises on bad data.

    `setup` and `drafter`: the deployed setup and `--speculative-config`, when known (see
    `acceptance_stats`; `read_acceptance` applies them to a window built without them)."""
    start, end = totals.start, totals.end
    problem = _unusable_because(totals, now, limits)
    if problem is not None:
        return unusable(source, *problem, start=start, end=end)
    acceptance = None
    if totals.speculation:
        try:
            acceptance = acceptance_stats(totals, limits, setup=setup, drafter=drafter)
        except InputError as exc:
            return unusable(source, UnusableReason.INVALID_VALUE, str(exc), start=start, end=end)
    prompt, generated = totals.prompt_length.mean, totals.generation_length.mean
    context = None if prompt is None else prompt + (generated or 0.0) / 2
    return Observation(
        source=source,
        window_start=start,
        window_end=end,
        usable=True,
        series=totals.series,
        batch=batch_stats(totals.batch_samples),
        acceptance=acceptance,
        step_time_s=totals.step_time.mean,
        time_per_output_token_s=totals.time_per_output_token.mean,
        generation_tokens_per_s=totals.generation_tokens_per_s,
        prompt_tokens_per_s=totals.prompt_tokens_per_s,
        mean_context_tokens=context,
        mean_prompt_tokens=prompt,
        mean_generation_tokens=generated,
        prefix_cache_hit_rate=prefix_hit_rate(totals),
        prefix_cache_queried_tokens=totals.prefix_cache_queries,
        mean_iteration_tokens=totals.iteration_tokens.mean,
        waiting_mean=_mean(totals.waiting_samples),
        kv_cache_usage_mean=_mean(totals.kv_usage_samples),
        preemptions=totals.preemptions,
        live_setup=live_setup(totals),
    )


def prefix_hit_rate(totals: WindowTotals) -> float | None:
    """Hits over queries in the window: None without the counters, without a query, or with a
    value that is not a count (never NaN); at most 1 (Prometheus's `increase()` extrapolates
    each series on its own, so the two may cross by a rounding)."""
    queries, hits = totals.prefix_cache_queries, totals.prefix_cache_hits
    if queries is None or hits is None or not math.isfinite(queries) or not math.isfinite(hits):
        return None
    if queries <= 0 or hits < 0:
        return None
    return min(hits / queries, 1.0)


def prefix_cache_reading(observation: Observation) -> PrefixCacheReading | None:
    """The window's prefix-cache inputs, or None when it lacks any of them (unusable, no
    lookups, no finished request): then nothing is charged for turning prefix caching off."""
    rate, prompt = observation.prefix_cache_hit_rate, observation.mean_prompt_tokens
    generated = observation.mean_generation_tokens
    if not observation.usable or rate is None or not prompt or not generated:
        return None
    return PrefixCacheReading(
        hit_rate=rate,
        prompt_tokens=prompt,
        generation_tokens=generated,
        looked_up_tokens=observation.prefix_cache_queried_tokens or 0.0,
    )


def _unusable_because(
    totals: WindowTotals, now: float, limits: ObservationLimits
) -> tuple[UnusableReason, str] | None:
    """Why the window cannot be used (empty, stale, too few samples, bad values), or None."""
    if totals.series == 0:
        return UnusableReason.EMPTY, "no vLLM series in the window"
    age = now - totals.last_sample_at
    if age > limits.max_age_s:
        return (
            UnusableReason.STALE,
            f"newest sample is {age:.0f}s old (limit {limits.max_age_s:.0f}s)",
        )
    if len(totals.batch_samples) < limits.min_batch_samples:
        return (
            UnusableReason.TOO_FEW_SAMPLES,
            f"{len(totals.batch_samples)} batch samples (need {limits.min_batch_samples})",
        )
    numbers = [
        *totals.batch_samples,
        totals.drafts,
        totals.accepted,
        *totals.accepted_per_position,
        *totals.waiting_samples,
        *totals.kv_usage_samples,
    ]
    if any(not math.isfinite(v) or v < 0 for v in numbers):
        return UnusableReason.INVALID_VALUE, "NaN, Inf or a negative value in the window"
    return None


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if values else None
