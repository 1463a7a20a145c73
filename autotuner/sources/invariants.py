"""What every vLLM `/metrics` answer must satisfy on its own, before any delta is taken.

Counter deltas hide impossible absolute values (a counter stuck at -5 has a delta of 0), so each
scrape is checked as it is read: counters finite and never negative; accepted tokens never above
draft tokens; accepted counts per draft position never rising with position nor above the number
of drafts (acceptance is prefix-only); histogram buckets cumulative and sums never negative; and
the running-requests gauge present (the batch size comes from it). A scrape that breaks one is
refused whole with the series named: nothing from it is used.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterable

from autotuner.errors import SourceError, UnusableReason
from autotuner.sources.promtext import Exposition, LabelKey
from autotuner.sources.vllm_metrics import COUNTERS, GAUGES, HISTOGRAMS, PER_POSITION

RUNNING = GAUGES["running"][0]


def check_scrape(url: str, exposition: Exposition) -> None:
    """Raise SourceError(INVALID_VALUE) naming the first series that breaks an invariant, or
    SourceError(EMPTY_RESULT) when vLLM counters come without the running-requests gauge."""
    _counters(url, exposition)
    _histograms(url, exposition)
    _accepted_within_drafted(url, exposition)
    _per_position(url, exposition)
    _running_gauge(url, exposition)


def series(name: str, labels: LabelKey) -> str:
    """A series as Prometheus writes it: name{label="value",...}."""
    inner = ",".join(f'{k}="{v}"' for k, v in labels)
    return f"{name}{{{inner}}}" if inner else name


def _invalid(url: str, why: str) -> SourceError:
    return SourceError(UnusableReason.INVALID_VALUE, f"{url}: {why}; the scrape is not used")


def _counter_names() -> Iterable[str]:
    yield from COUNTERS.values()
    yield PER_POSITION
    for spellings in HISTOGRAMS.values():
        for base in spellings:
            yield f"{base}_count"
            yield f"{base}_bucket"


def _counters(url: str, exposition: Exposition) -> None:
    for name in _counter_names():
        for labels, value in exposition.get(name, {}).items():
            if not math.isfinite(value) or value < 0:
                raise _invalid(url, f"counter {series(name, labels)} is {value:g}")


def _without(labels: LabelKey, name: str) -> LabelKey:
    return tuple((k, v) for k, v in labels if k != name)


def _histograms(url: str, exposition: Exposition) -> None:
    for spellings in HISTOGRAMS.values():
        for base in spellings:
            for labels, total in exposition.get(f"{base}_sum", {}).items():
                if not math.isfinite(total) or total < 0:
                    raise _invalid(
                        url, f"histogram sum {series(f'{base}_sum', labels)} is {total:g}"
                    )
            _cumulative(url, f"{base}_bucket", exposition.get(f"{base}_bucket", {}))


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


def _accepted_within_drafted(url: str, exposition: Exposition) -> None:
    accepted, drafted = COUNTERS["accepted"], COUNTERS["draft_tokens"]
    totals = exposition.get(drafted, {})
    for labels, value in exposition.get(accepted, {}).items():
        bound = totals.get(labels)
        if bound is not None and value > bound:
            raise _invalid(
                url,
                f"{series(accepted, labels)} = {value:g} exceeds {series(drafted, labels)} = "
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


def _running_gauge(url: str, exposition: Exposition) -> None:
    present = next((name for name in COUNTERS.values() if exposition.get(name)), None)
    if present is not None and not exposition.get(RUNNING):
        raise SourceError(
            UnusableReason.EMPTY_RESULT,
            f"{url}: {RUNNING} is missing although {present} is there: the batch size cannot "
            "be read without it",
        )
