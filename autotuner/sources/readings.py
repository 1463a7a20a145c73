"""How a direct scrape reads one engine's /metrics: the series it keeps, the per-engine samples
of one answer, the window's totals and what the Observation must say of them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autotuner.core.observe.observation import WindowTotals
from autotuner.core.types import Observation
from autotuner.sources import sglang_metrics, vllm_metrics
from autotuner.sources.invariants import check_scrape, check_sglang_scrape
from autotuner.sources.promtext import Exposition
from autotuner.sources.vllm_metrics import EngineSample, SeriesKey, Snapshot


def _as_is(observation: Observation) -> Observation:
    return observation


@dataclass(frozen=True)
class Reading:
    source: str  # the engine, as Observations name their source
    wanted: frozenset[str]
    samples: Callable[[str, Exposition], dict[SeriesKey, EngineSample]]
    totals: Callable[[Sequence[Snapshot]], WindowTotals]
    check: Callable[[str, Exposition], None]
    finish: Callable[[Observation], Observation]


VLLM = Reading(
    "vllm",
    vllm_metrics.wanted_names(),
    vllm_metrics.engine_samples,
    vllm_metrics.window_totals,
    check_scrape,
    _as_is,
)
SGLANG = Reading(
    sglang_metrics.SOURCE,
    sglang_metrics.wanted_names(),
    sglang_metrics.engine_samples,
    sglang_metrics.window_totals,
    check_sglang_scrape,
    sglang_metrics.marked,
)
READINGS = {reading.source: reading for reading in (VLLM, SGLANG)}
