"""From window totals (counter deltas, gauge samples) to an Observation: pure, no I/O.

Both sources (a direct scrape and a Prometheus server) reduce their data to `WindowTotals`;
this module decides whether the window is usable and what it says.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from autotuner.core.acceptance import from_counts
from autotuner.core.types import (
    AcceptanceStats,
    BatchStats,
    LiveSetup,
    Observation,
    UnusableReason,
)
from autotuner.errors import InputError
from autotuner.settings import ObservationLimits


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


def acceptance_stats(totals: WindowTotals, limits: ObservationLimits) -> AcceptanceStats:
    estimate = from_counts(totals.drafts, totals.accepted_per_position)
    k = estimate.max_spec_tokens
    sufficient = totals.drafts >= limits.min_drafts
    return AcceptanceStats(
        drafts=totals.drafts,
        draft_tokens=totals.draft_tokens,
        accepted=totals.accepted,
        accepted_per_position=tuple(totals.accepted_per_position),
        per_position=estimate.conditional,
        per_position_low=estimate.conditional_low,
        per_position_high=estimate.conditional_high,
        tau=estimate.tau(k),
        acceptance_rate=totals.accepted / totals.draft_tokens if totals.draft_tokens else 0.0,
        mean_acceptance_length=1 + totals.accepted / totals.drafts if totals.drafts else 1.0,
        sufficient=sufficient,
        note=None
        if sufficient
        else (
            f"only {totals.drafts:.0f} drafts in the window (need {limits.min_drafts:.0f}): "
            "acceptance is reported but not trusted"
        ),
    )


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
    )


def build_observation(
    source: str, totals: WindowTotals, *, now: float, limits: ObservationLimits
) -> Observation:
    """Decide whether the window is usable and summarise it. Never raises on bad data."""
    start, end = totals.start, totals.end
    if totals.series == 0:
        return unusable(
            source, UnusableReason.EMPTY, "no vLLM series in the window", start=start, end=end
        )
    age = now - totals.last_sample_at
    if age > limits.max_age_s:
        return unusable(
            source,
            UnusableReason.STALE,
            f"newest sample is {age:.0f}s old (limit {limits.max_age_s:.0f}s)",
            start=start,
            end=end,
        )
    if len(totals.batch_samples) < limits.min_batch_samples:
        return unusable(
            source,
            UnusableReason.TOO_FEW_SAMPLES,
            f"{len(totals.batch_samples)} batch samples (need {limits.min_batch_samples})",
            start=start,
            end=end,
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
        return unusable(
            source,
            UnusableReason.INVALID_VALUE,
            "NaN, Inf or a negative value in the window",
            start=start,
            end=end,
        )
    acceptance = None
    if totals.speculation:
        try:
            acceptance = acceptance_stats(totals, limits)
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
        mean_iteration_tokens=totals.iteration_tokens.mean,
        waiting_mean=_mean(totals.waiting_samples),
        kv_cache_usage_mean=_mean(totals.kv_usage_samples),
        preemptions=totals.preemptions,
        live_setup=live_setup(totals),
    )


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if values else None
