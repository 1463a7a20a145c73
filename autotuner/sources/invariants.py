"""What every vLLM or SGLang `/metrics` answer must satisfy on its own, before any delta is taken.

Counter deltas hide impossible absolute values (a counter stuck at -5 has a delta of 0), so each
scrape is checked as it is read, by class of invariant rather than by case:

* counters are finite and never negative;
* counters that count the same events agree with each other (`ORDERED`: each pair is "never
  more than"): a draft holds at least one token (vLLM counts a draft only when it proposed
  one), so draft tokens are never fewer than drafts; accepted tokens never above draft tokens;
  accepted counts per draft position never rising with position nor above the number of drafts
  (acceptance is prefix-only); prefix-cache hits never above the queried tokens;
* histograms are cumulative (buckets never fall as `le` rises), their `_count` equals their
  `+Inf` bucket and their sums are never negative;
* gauges lie in their range (`RANGES`: a 0..1 ratio at 1.7 is refused);
* the running-requests gauge is present (the batch size comes from it).

A scrape that breaks one is refused whole with the series named: nothing from it is used.
SGLang's answers are held to the same classes where it exports the series (`check_sglang_scrape`:
finite non-negative counters, cumulative histograms whose `_count` is their `+Inf` bucket, the
token-usage ratio in [0, 1], cached prompt tokens never above prompt tokens, the running gauge
present); it has no per-position or draft counters, so the order of drafts and accepted tokens
is checked on the window's deltas instead (sources/sglang_metrics.add_speculation).
`check_totals` holds a window's totals (e.g. Prometheus's `increase()`s) to the same order.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterable

from autotuner.core.observe.observation import WindowTotals
from autotuner.engines.sglang import metrics as sglang
from autotuner.engines.vllm.metrics import (
    COUNTERS,
    GAUGES,
    HISTOGRAMS,
    PER_POSITION,
    PREFIX_CACHE,
)
from autotuner.errors import SourceError, UnusableReason
from autotuner.sources.promtext import Exposition, LabelKey

RUNNING = GAUGES["running"][0]
# (smaller, larger): the first counter never exceeds the second, per engine.
ORDERED = (
    ("drafts", "draft_tokens"),
    ("accepted", "draft_tokens"),
)
# The closed range of each bounded gauge, by the GAUGES key (a NaN, an Inf or a negative
# count in any gauge is refused with the window: core/observe/observation.py).
RANGES = {"kv_usage": (0.0, 1.0)}


def check_scrape(url: str, exposition: Exposition) -> None:
    """Raise SourceError(INVALID_VALUE) naming the first series that breaks an invariant, or
    SourceError(EMPTY_RESULT) when vLLM counters come without the running-requests gauge."""
    _counters(url, exposition)
    _ordered(url, exposition)
    _prefix_cache(url, exposition)
    _per_position(url, exposition)
    _histograms(url, exposition)
    _gauges(url, exposition)
    _running_gauge(url, exposition)


# (hits, queries): the counters a window's prefix-cache totals come from, by engine.
VLLM_PREFIX_CACHE = (PREFIX_CACHE["prefix_cache_hits"][0], PREFIX_CACHE["prefix_cache_queries"][0])
SGLANG_PREFIX_CACHE = (sglang.COUNTERS["cached_tokens"], sglang.COUNTERS["prompt_tokens"])


def check_totals(
    where: str, totals: WindowTotals, prefix_cache: tuple[str, str] = VLLM_PREFIX_CACHE
) -> None:
    """Raise SourceError(INVALID_VALUE) when a window's counter totals contradict each other
    (the same order as each scrape's counters); `prefix_cache` names the engine's counters."""
    queries, hits = totals.prefix_cache_queries, totals.prefix_cache_hits
    if queries is not None and hits is not None and hits > queries * (1 + _SLACK) + _SLACK:
        raise _invalid(
            where,
            f"{prefix_cache[0]} rose by {hits:g} in the window, more than "
            f"{prefix_cache[1]} ({queries:g})",
        )
    if not totals.speculation:
        return
    values = {"drafts": totals.drafts, "draft_tokens": totals.draft_tokens}
    values["accepted"] = totals.accepted
    for smaller, larger in ORDERED:
        if values[smaller] > values[larger] + _SLACK:
            raise _invalid(
                where,
                f"{COUNTERS[smaller]} rose by {values[smaller]:g} in the window, more than "
                f"{COUNTERS[larger]} ({values[larger]:g})",
            )
    rows = [totals.drafts, *totals.accepted_per_position]
    for position, (before, after) in enumerate(itertools.pairwise(rows)):
        if after > before + _SLACK:
            raise _invalid(
                where,
                f"{PER_POSITION} at position {position} rose by {after:g} in the window, more "
                f"than {'the drafts' if position == 0 else 'the position before it'} "
                f"({before:g})",
            )


# increase() extrapolates each series to the window's edges: totals agree only to a rounding.
_SLACK = 1e-6


def series(name: str, labels: LabelKey) -> str:
    """A series as Prometheus writes it: name{label="value",...}."""
    inner = ",".join(f'{k}="{v}"' for k, v in labels)
    return f"{name}{{{inner}}}" if inner else name


def _invalid(url: str, why: str) -> SourceError:
    return SourceError(UnusableReason.INVALID_VALUE, f"{url}: {why}; the scrape is not used")


def _counter_names() -> Iterable[str]:
    yield from COUNTERS.values()
    for prefix_spellings in PREFIX_CACHE.values():
        yield from prefix_spellings
    yield PER_POSITION
    for spellings in HISTOGRAMS.values():
        for base in spellings:
            yield f"{base}_count"
            yield f"{base}_bucket"


def _counters(url: str, exposition: Exposition, names: Iterable[str] | None = None) -> None:
    for name in _counter_names() if names is None else names:
        for labels, value in exposition.get(name, {}).items():
            if not math.isfinite(value) or value < 0:
                raise _invalid(url, f"counter {series(name, labels)} is {value:g}")


def _without(labels: LabelKey, name: str) -> LabelKey:
    return tuple((k, v) for k, v in labels if k != name)


def _histograms(url: str, exposition: Exposition, bases: Iterable[str] | None = None) -> None:
    every = (base for spellings in HISTOGRAMS.values() for base in spellings)
    for base in every if bases is None else bases:
        for labels, total in exposition.get(f"{base}_sum", {}).items():
            if not math.isfinite(total) or total < 0:
                raise _invalid(url, f"histogram sum {series(f'{base}_sum', labels)} is {total:g}")
        buckets = exposition.get(f"{base}_bucket", {})
        _cumulative(url, f"{base}_bucket", buckets)
        _count_is_inf(url, base, buckets, exposition.get(f"{base}_count", {}))


def _count_is_inf(
    url: str, base: str, buckets: dict[LabelKey, float], counts: dict[LabelKey, float]
) -> None:
    """A histogram's `_count` is its `+Inf` bucket: every observation falls in that one."""
    for labels, value in buckets.items():
        if dict(labels).get("le") not in ("+Inf", "Inf", "inf"):
            continue
        count = counts.get(_without(labels, "le"))
        if count is not None and count != value:
            raise _invalid(
                url,
                f"{series(f'{base}_count', _without(labels, 'le'))} = {count:g} differs from "
                f"its +Inf bucket ({value:g})",
            )


def _cumulative(url: str, name: str, buckets: dict[LabelKey, float]) -> None:
    """Each histogram's buckets must not fall as `le` rises."""
    grouped: dict[LabelKey, list[tuple[float, float]]] = defaultdict(list)
    for labels, count in buckets.items():
        try:
            bound = float(dict(labels).get("le", ""))
        except ValueError:
            raise _invalid(url, f"bucket {series(name, labels)} has no numeric le") from None
        grouped[_without(labels, "le")].append((bound, count))
    for labels, rows in grouped.items():
        rows.sort()
        for (low, below), (high, above) in itertools.pairwise(rows):
            if above < below:
                raise _invalid(
                    url,
                    f"histogram {series(name, labels)} is not cumulative: le={high:g} counts "
                    f"{above:g}, below le={low:g}'s {below:g}",
                )


def _ordered(url: str, exposition: Exposition) -> None:
    for smaller, larger in ORDERED:
        _not_above(url, exposition, COUNTERS[smaller], COUNTERS[larger])


def _not_above(url: str, exposition: Exposition, smaller: str, larger: str) -> None:
    """Every series of `smaller` is at most the same-labelled series of `larger`."""
    bounds = exposition.get(larger, {})
    for labels, value in exposition.get(smaller, {}).items():
        bound = bounds.get(labels)
        if bound is not None and value > bound:
            raise _invalid(
                url,
                f"{series(smaller, labels)} = {value:g} exceeds {series(larger, labels)} = "
                f"{bound:g}",
            )


def _per_position(url: str, exposition: Exposition) -> None:
    """a_0 <= drafts and a_(i+1) <= a_i per engine: position i+1 is accepted only after i."""
    drafts = exposition.get(COUNTERS["drafts"], {})
    grouped: dict[LabelKey, list[tuple[int, float, LabelKey]]] = defaultdict(list)
    for labels, value in exposition.get(PER_POSITION, {}).items():
        position = dict(labels).get("position", "")
        if position.isdigit():
            grouped[_without(labels, "position")].append((int(position), value, labels))
    for engine, rows in grouped.items():
        rows.sort()
        bound = drafts.get(engine)
        first, labels = rows[0][1], rows[0][2]
        if bound is not None and first > bound:
            what = f"{series(PER_POSITION, labels)} = {first:g}"
            raise _invalid(url, f"{what} exceeds {series(COUNTERS['drafts'], engine)} = {bound:g}")
        for (_, before, _), (_, after, labels) in itertools.pairwise(rows):
            if after > before:
                raise _invalid(
                    url,
                    f"{series(PER_POSITION, labels)} = {after:g} exceeds the position before it "
                    f"({before:g}): acceptance is prefix-only",
                )


def _prefix_cache(url: str, exposition: Exposition) -> None:
    """A prefix-cache hit is a queried token found: hits never exceed queries, per engine
    (each spelling pair on its own)."""
    pairs = zip(
        PREFIX_CACHE["prefix_cache_hits"], PREFIX_CACHE["prefix_cache_queries"], strict=True
    )
    for hits_name, queries_name in pairs:
        _not_above(url, exposition, hits_name, queries_name)


def _gauges(url: str, exposition: Exposition) -> None:
    for key, bounds in RANGES.items():
        for name in GAUGES[key]:
            _in_range(url, exposition, name, bounds)


def _in_range(url: str, exposition: Exposition, name: str, bounds: tuple[float, float]) -> None:
    low, high = bounds
    for labels, value in exposition.get(name, {}).items():
        if math.isfinite(value) and not low <= value <= high:
            raise _invalid(
                url, f"gauge {series(name, labels)} is {value:g}, outside [{low:g}, {high:g}]"
            )


def _running_gauge(url: str, exposition: Exposition) -> None:
    present = next((name for name in COUNTERS.values() if exposition.get(name)), None)
    if present is not None and not exposition.get(RUNNING):
        raise SourceError(
            UnusableReason.EMPTY_RESULT,
            f"{url}: {RUNNING} is missing although {present} is there: the batch size cannot "
            "be read without it",
        )


def check_sglang_scrape(url: str, exposition: Exposition) -> None:
    """Raise SourceError(INVALID_VALUE) naming the first SGLang series that breaks an invariant
    (the classes above, where SGLang exports the series), or SourceError(EMPTY_RESULT) when its
    counters come without the running-requests gauge."""
    counters = [*sglang.COUNTERS.values()]
    counters += [f"{base}_{part}" for base in sglang.HISTOGRAMS.values() for part in _COUNTED]
    _counters(url, exposition, counters)
    _histograms(url, exposition, sglang.HISTOGRAMS.values())
    for key, bounds in RANGES.items():
        _in_range(url, exposition, sglang.GAUGES[key], bounds)
    # SGLang labels the two apart (cache_source; is_streaming): each is summed over the
    # server's series before they are compared.
    cached, prompt = (_summed(exposition, name) for name in SGLANG_PREFIX_CACHE)
    if cached is not None and prompt is not None and cached > prompt:
        raise _invalid(
            url,
            f"{SGLANG_PREFIX_CACHE[0]} = {cached:g} exceeds {SGLANG_PREFIX_CACHE[1]} = "
            f"{prompt:g}: a cached token is a prompt token",
        )
    running = sglang.GAUGES["running"]
    present = next((name for name in sglang.COUNTERS.values() if exposition.get(name)), None)
    if present is not None and not exposition.get(running):
        raise SourceError(
            UnusableReason.EMPTY_RESULT,
            f"{url}: {running} is missing although {present} is there: the batch size cannot "
            "be read without it",
        )


_COUNTED = ("count", "bucket")


def _summed(exposition: Exposition, name: str) -> float | None:
    values = exposition.get(name)
    return sum(values.values()) if values else None
