"""The snapshot arithmetic of a direct vLLM scrape: per-engine samples of the engine's series,
counter-reset detection, and deltas over a window."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from autotuner.core.observe.observation import Ratio, WindowTotals
from autotuner.engines.vllm.metrics import (
    CACHE_CONFIG,
    COUNTERS,
    GAUGES,
    HISTOGRAMS,
    PER_POSITION,
    PREFIX_CACHE,
    RESET_MARKERS,
)
from autotuner.errors import SourceError, UnusableReason
from autotuner.sources.promtext import Exposition, LabelKey


def wanted_names() -> frozenset[str]:
    """Every series name a scrape keeps (the rest of the exposition is skipped unread)."""
    names = set(COUNTERS.values()) | {PER_POSITION, CACHE_CONFIG, *RESET_MARKERS}
    for prefix_spellings in PREFIX_CACHE.values():
        names.update(prefix_spellings)
    for spellings in HISTOGRAMS.values():
        names.update(f"{base}_{part}" for base in spellings for part in ("sum", "count", "bucket"))
    for spellings in GAUGES.values():
        names.update(spellings)
    return frozenset(names)


SeriesKey = tuple[str, str]  # endpoint, engine (cache_config_info has no model_name label)


@dataclass
class EngineSample:
    """One engine's numbers from one scrape."""

    counters: dict[str, float] = field(default_factory=dict)
    per_position: dict[int, float] = field(default_factory=dict)
    histograms: dict[str, tuple[float, float]] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)
    created: dict[str, float] = field(default_factory=dict)
    cache_config: dict[str, str] = field(default_factory=dict)
    model_name: str = ""

    @property
    def speculation(self) -> bool:
        return "drafts" in self.counters


@dataclass(frozen=True)
class Snapshot:
    at: float
    engines: dict[SeriesKey, EngineSample]


def engine_samples(endpoint: str, exposition: Exposition) -> dict[SeriesKey, EngineSample]:
    """Split one endpoint's exposition into per-engine samples (engine and model_name labels)."""
    engines: dict[SeriesKey, EngineSample] = {}

    def sample_for(labels: LabelKey) -> EngineSample:
        found = dict(labels)
        sample = engines.setdefault((endpoint, found.get("engine", "")), EngineSample())
        if "model_name" in found:
            sample.model_name = found["model_name"]
        return sample

    def each(name: str) -> Iterable[tuple[LabelKey, float]]:
        return exposition.get(name, {}).items()

    for field_name, metric in COUNTERS.items():
        for labels, value in each(metric):
            target = sample_for(labels)
            target.counters[field_name] = target.counters.get(field_name, 0.0) + value
    for field_name, prefix_spellings in PREFIX_CACHE.items():
        name = next((n for n in prefix_spellings if n in exposition), None)
        for labels, value in each(name) if name else ():
            target = sample_for(labels)
            target.counters[field_name] = target.counters.get(field_name, 0.0) + value
    for labels, value in each(PER_POSITION):
        position = dict(labels).get("position", "")
        if position.isdigit():
            target = sample_for(labels)
            slot = int(position)
            target.per_position[slot] = target.per_position.get(slot, 0.0) + value
    for field_name, spellings in HISTOGRAMS.items():
        for base in spellings:
            sums, counts = exposition.get(f"{base}_sum", {}), exposition.get(f"{base}_count", {})
            if not sums:
                continue
            for labels, total in sums.items():
                sample_for(labels).histograms[field_name] = (total, counts.get(labels, 0.0))
            break
    for field_name, spellings in GAUGES.items():
        for name in spellings:
            if name in exposition:
                for labels, value in each(name):
                    target = sample_for(labels)
                    target.gauges[field_name] = target.gauges.get(field_name, 0.0) + value
                break
    for marker in RESET_MARKERS:
        for labels, value in each(marker):
            sample_for(labels).created[marker] = value
    for labels, _ in each(CACHE_CONFIG):
        found = dict(labels)
        target = sample_for(labels)
        target.cache_config = {k: v for k, v in found.items() if k not in ("engine", "model_name")}
    return engines


def is_reset(before: EngineSample, after: EngineSample) -> bool:
    """A counter went backwards or a `_created` stamp changed: the engine restarted."""
    if any(after.created.get(k, v) != v for k, v in before.created.items()):
        return True
    for name, value in before.counters.items():
        if after.counters.get(name, value) < value:
            return True
    return any(after.histograms.get(n, h)[1] < h[1] for n, h in before.histograms.items())


def window_totals(snapshots: Sequence[Snapshot]) -> WindowTotals:
    """Deltas and samples over the snapshots, each engine cut at its last reset.

    Raises SourceError(EMPTY) without vLLM series and SourceError(RESET) when no engine keeps
    two samples after its last restart.
    """
    if not snapshots or not any(s.engines for s in snapshots):
        raise SourceError(UnusableReason.EMPTY, "no vLLM series in the scraped payloads")
    keys = sorted({key for s in snapshots for key in s.engines})
    totals = WindowTotals(
        start=snapshots[0].at,
        end=snapshots[-1].at,
        last_sample_at=snapshots[-1].at,
        series=len(keys),
    )
    per_position: dict[int, float] = {}
    rates: dict[str, float] = {}
    ratios = {name: Ratio() for name in HISTOGRAMS}
    kept = 0
    for key in keys:
        timeline = since_last_reset([(s.at, s.engines[key]) for s in snapshots if key in s.engines])
        if len(timeline) < 2:
            continue
        kept += 1
        add_gauges(totals, [sample for _, sample in timeline])
        (t0, first), (t1, last) = timeline[0], timeline[-1]
        delta = {n: last.counters[n] - first.counters.get(n, 0.0) for n in last.counters}
        if last.speculation:
            _add_speculation(totals, per_position, first, last, delta)
        for name in ("generation_tokens", "prompt_tokens"):
            if name in delta and t1 > t0:
                rates[name] = rates.get(name, 0.0) + delta[name] / (t1 - t0)
        if "preemptions" in delta:
            totals.preemptions = (totals.preemptions or 0.0) + delta["preemptions"]
        _add_prefix_cache(totals, delta)
        add_histograms(ratios, first, last)
        if last.cache_config and not totals.cache_config:
            totals.cache_config = dict(last.cache_config)
    if kept == 0:
        raise SourceError(
            UnusableReason.RESET,
            "every engine restarted inside the window: too little left after the reset",
        )
    totals.accepted_per_position = [per_position.get(i, 0.0) for i in range(len(per_position))]
    totals.generation_tokens_per_s = rates.get("generation_tokens")
    totals.prompt_tokens_per_s = rates.get("prompt_tokens")
    totals.step_time = ratios["step_time"]
    totals.time_per_output_token = ratios["time_per_output_token"]
    totals.iteration_tokens = ratios["iteration_tokens"]
    totals.prompt_length = ratios["prompt_length"]
    totals.generation_length = ratios["generation_length"]
    return totals


Timeline = list[tuple[float, EngineSample]]


def since_last_reset(timeline: Timeline) -> Timeline:
    cut = 0
    for i in range(1, len(timeline)):
        if is_reset(timeline[i - 1][1], timeline[i][1]):
            cut = i
    return timeline[cut:]


def add_gauges(totals: WindowTotals, samples: Sequence[EngineSample]) -> None:
    for sample in samples:
        if "running" in sample.gauges:
            totals.batch_samples.append(sample.gauges["running"])
        if "waiting" in sample.gauges:
            totals.waiting_samples.append(sample.gauges["waiting"])
        if "kv_usage" in sample.gauges:
            totals.kv_usage_samples.append(sample.gauges["kv_usage"])


def _add_speculation(
    totals: WindowTotals,
    per_position: dict[int, float],
    first: EngineSample,
    last: EngineSample,
    delta: dict[str, float],
) -> None:
    totals.speculation = True
    totals.drafts += delta.get("drafts", 0.0)
    totals.draft_tokens += delta.get("draft_tokens", 0.0)
    totals.accepted += delta.get("accepted", 0.0)
    for position, value in last.per_position.items():
        before = first.per_position.get(position, 0.0)
        per_position[position] = per_position.get(position, 0.0) + value - before


def _add_prefix_cache(totals: WindowTotals, delta: dict[str, float]) -> None:
    """The prompt tokens looked up in the prefix cache and those found, where the engine
    counts them (None where no engine does)."""
    if "prefix_cache_queries" in delta:
        totals.prefix_cache_queries = (totals.prefix_cache_queries or 0.0) + delta[
            "prefix_cache_queries"
        ]
        totals.prefix_cache_hits = (totals.prefix_cache_hits or 0.0) + delta.get(
            "prefix_cache_hits", 0.0
        )


def add_histograms(ratios: dict[str, Ratio], first: EngineSample, last: EngineSample) -> None:
    for name, ratio in ratios.items():
        if name in last.histograms:
            total_before, count_before = first.histograms.get(name, (0.0, 0.0))
            total_after, count_after = last.histograms[name]
            ratio.total += total_after - total_before
            ratio.count += count_after - count_before
