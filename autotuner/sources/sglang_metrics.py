"""The snapshot arithmetic of a direct SGLang scrape: per-server samples of SGLang's series,
counter-reset detection, deltas over a window, and acceptance from the counters.

SGLang exports no per-position acceptance and its acceptance gauges are interval means reset
every --decode-log-interval steps (not rate()-able). The acceptance here comes from counters
that move once per finished request: over the window, each verify kept
(d generation - d requests) / d verify calls tokens (the first token of a request comes from
its prefill, not from a verify). Per-position rates then assume one conditional rate p at every
position (a geometric fit: p + p^2 + ... + p^K equals the mean accepted drafts), and the
Observation says so (`ASSUMPTION`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from autotuner.core.observe.observation import Ratio, WindowTotals
from autotuner.core.predict.acceptance import tokens_kept
from autotuner.core.types import Observation
from autotuner.engines.sglang.metrics import COUNTERS, GAUGES, HISTOGRAMS
from autotuner.errors import SourceError, UnusableReason
from autotuner.sources.invariants import SGLANG_PREFIX_CACHE, check_totals
from autotuner.sources.promtext import Exposition, LabelKey
from autotuner.sources.vllm_metrics import (
    EngineSample,
    SeriesKey,
    Snapshot,
    add_gauges,
    add_histograms,
    since_last_reset,
)

SOURCE = "sglang"
ASSUMPTION = (
    "SGLang exports no per-position acceptance: the per-position rates are a geometric fit to "
    "the mean accepted length per verify (one rate at every position), read from "
    "sglang:generation_tokens_total, sglang:num_requests_total and "
    "sglang:spec_verify_calls_total"
)


def wanted_names() -> frozenset[str]:
    """Every series name a scrape keeps (the rest of the exposition is skipped unread)."""
    names = {*COUNTERS.values(), *GAUGES.values()}
    parts = ("sum", "count", "bucket")  # the buckets only to check them (sources/invariants.py)
    names.update(f"{base}_{part}" for base in HISTOGRAMS.values() for part in parts)
    return frozenset(names)


def _first_rank(labels: LabelKey) -> bool:
    """A scheduler series of the first tensor- and pipeline-parallel rank (the others repeat
    its numbers)."""
    named = dict(labels)
    return named.get("tp_rank", "0") == "0" and named.get("pp_rank", "0") == "0"


def engine_samples(endpoint: str, exposition: Exposition) -> dict[SeriesKey, EngineSample]:
    """One endpoint's numbers (one SGLang server: its data-parallel ranks and streaming labels
    summed); empty when it exports no SGLang series. A NaN, infinite or negative value raises
    SourceError(INVALID_VALUE)."""
    sample = EngineSample()

    def each(name: str) -> Iterable[tuple[LabelKey, float]]:
        for labels, value in exposition.get(name, {}).items():
            if not math.isfinite(value) or value < 0:
                raise SourceError(
                    UnusableReason.INVALID_VALUE, f"{endpoint}: {name} = {value} is not a count"
                )
            sample.model_name = dict(labels).get("model_name", sample.model_name)
            yield labels, value

    for field_name, metric in COUNTERS.items():
        for _, value in each(metric):
            sample.counters[field_name] = sample.counters.get(field_name, 0.0) + value
    for field_name, metric in GAUGES.items():
        for labels, value in each(metric):
            if _first_rank(labels):
                sample.gauges[field_name] = sample.gauges.get(field_name, 0.0) + value
    for field_name, base in HISTOGRAMS.items():
        counts = dict(each(f"{base}_count"))
        for labels, total in each(f"{base}_sum"):
            before = sample.histograms.get(field_name, (0.0, 0.0))
            sample.histograms[field_name] = (before[0] + total, before[1] + counts.get(labels, 0))
    if not (sample.counters or sample.gauges):
        return {}
    return {(endpoint, ""): sample}


# Counters agree only to a rounding (Prometheus's increase() extrapolates to the window's edges).
_SLACK = 1e-6


def geometric_rate(mean_accepted: float, spec_tokens: int) -> float:
    """The one conditional rate p whose p + p^2 + ... + p^K is `mean_accepted` (clamped to
    [0, K]); bisection, since the sum rises with p."""
    if spec_tokens < 1:
        raise ValueError("a geometric fit needs K >= 1")
    target = min(max(mean_accepted, 0.0), float(spec_tokens))
    low, high = 0.0, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        if tokens_kept(middle, spec_tokens) - 1 < target:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def _spec_tokens(samples: Sequence[EngineSample]) -> tuple[int, float]:
    """K in use: the mean of sglang:spec_num_steps over the window (it moves under
    --speculative-adaptive), and the most it reached (the bound on a verify's tokens); 0 when
    the gauge is absent."""
    steps = [s.gauges["spec_steps"] for s in samples if "spec_steps" in s.gauges]
    return (round(sum(steps) / len(steps)), max(steps)) if steps else (0, 0.0)


def add_speculation(
    totals: WindowTotals, delta: dict[str, float], spec_tokens: int, most_steps: float = 0.0
) -> None:
    """Drafts, draft tokens and per-position accepted counts that the counters imply under the
    geometric assumption (the core reads them as it reads vLLM's counters).

    Raises SourceError(INVALID_VALUE) when the counters say what no verify can do: keep fewer
    than one token (its own) or more than K + 1 (K = the most spec_num_steps reached in the
    window, `most_steps`), or verify with no drafting steps at all."""
    verifies = delta.get("verify_calls", 0.0)
    if verifies <= 0:
        return
    kept = (delta.get("generation_tokens", 0.0) - delta.get("requests", 0.0)) / verifies
    _possible(kept, verifies, max(float(spec_tokens), most_steps))
    # Drafting happened (the check passed): a mean under one half still drafted at least one.
    spec_tokens = max(spec_tokens, 1)
    accepted = kept - 1
    rate = geometric_rate(accepted, spec_tokens)
    positions = [verifies * rate ** (i + 1) for i in range(spec_tokens)]
    by_position = totals.accepted_per_position
    if len(by_position) < spec_tokens:
        by_position.extend([0.0] * (spec_tokens - len(by_position)))
    for i, value in enumerate(positions):
        by_position[i] += value
    totals.speculation = True
    totals.drafts += verifies
    totals.draft_tokens += verifies * spec_tokens
    totals.accepted += sum(positions)


def _possible(kept: float, verifies: float, bound: float) -> None:
    """Refuse, never clamp: a kept count outside [1, K + 1] per verify is a broken exposition
    (or two servers' counters added), not 0% or 100% acceptance."""
    if bound < 1:
        why = f"{verifies:g} verify calls in the window while spec_num_steps is {bound:g}"
    elif kept > (bound + 1) * (1 + _SLACK):
        why = (
            f"{kept:g} tokens kept per verify call in the window, more than the {bound + 1:g} "
            f"that spec_num_steps {bound:g} allows"
        )
    elif kept < 1 - _SLACK:
        why = (
            f"{kept:g} tokens kept per verify call in the window (generation tokens less "
            "requests, per verify call): a verify keeps at least its own token"
        )
    else:
        return
    raise SourceError(UnusableReason.INVALID_VALUE, f"sglang: {why}; the scrape is not used")


def window_totals(snapshots: Sequence[Snapshot]) -> WindowTotals:
    """Deltas and samples over the snapshots, each server cut at its last restart.

    Raises SourceError(EMPTY) without SGLang series and SourceError(RESET) when no server keeps
    two samples after its last restart."""
    if not snapshots or not any(s.engines for s in snapshots):
        raise SourceError(UnusableReason.EMPTY, "no SGLang series in the scraped payloads")
    keys = sorted({key for s in snapshots for key in s.engines})
    totals = WindowTotals(
        start=snapshots[0].at, end=snapshots[-1].at, last_sample_at=snapshots[-1].at, series=0
    )
    ratios = {name: Ratio() for name in HISTOGRAMS}
    rates: dict[str, float] = {}
    for key in keys:
        timeline = since_last_reset([(s.at, s.engines[key]) for s in snapshots if key in s.engines])
        if len(timeline) < 2:
            continue
        totals.series += 1
        samples = [sample for _, sample in timeline]
        add_gauges(totals, samples)
        (t0, first), (t1, last) = timeline[0], timeline[-1]
        delta = {n: last.counters[n] - first.counters.get(n, 0.0) for n in last.counters}
        add_speculation(totals, delta, *_spec_tokens(samples))
        for name in ("generation_tokens", "prompt_tokens"):
            if name in delta and t1 > t0:
                rates[name] = rates.get(name, 0.0) + delta[name] / (t1 - t0)
        if "cached_tokens" in delta and "prompt_tokens" in delta:
            totals.prefix_cache_queries = (totals.prefix_cache_queries or 0.0) + delta[
                "prompt_tokens"
            ]
            totals.prefix_cache_hits = (totals.prefix_cache_hits or 0.0) + delta["cached_tokens"]
        add_histograms(ratios, first, last)
    if totals.series == 0:
        raise SourceError(
            UnusableReason.RESET,
            "every SGLang server restarted inside the window: too little left after the reset",
        )
    totals.generation_tokens_per_s = rates.get("generation_tokens")
    totals.prompt_tokens_per_s = rates.get("prompt_tokens")
    for name, ratio in ratios.items():
        setattr(totals, name, ratio)
    per_step(totals)
    check_totals("sglang", totals, SGLANG_PREFIX_CACHE)
    return totals


def per_step(totals: WindowTotals) -> None:
    """SGLang's inter-token latency splits each interval over the tokens it brought
    (metrics_collector.py:2161-2173): a decode step takes that times the tokens a step keeps
    (1 + accepted drafts per verify; 1 without speculation)."""
    kept = 1 + totals.accepted / totals.drafts if totals.drafts else 1.0
    totals.step_time = Ratio(totals.step_time.total * kept, totals.step_time.count)


def marked(observation: Observation) -> Observation:
    """The observation with the geometric assumption said where its acceptance is read (the
    note travels with it into /decision)."""
    stats = observation.acceptance
    if stats is None:
        return observation
    note = ASSUMPTION if not stats.note else f"{stats.note}; {ASSUMPTION}"
    return observation.model_copy(update={"acceptance": stats.model_copy(update={"note": note})})
