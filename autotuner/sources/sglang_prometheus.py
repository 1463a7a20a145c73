"""SGLang's window through a Prometheus server's HTTP API: the same totals as a direct scrape
of SGLang (sources/sglang_metrics.py), from `increase()` of its counters and range queries of
its gauges (the first tensor-parallel rank's: the others repeat its numbers)."""

from __future__ import annotations

from typing import Any, Protocol

from autotuner.core.observe.observation import Ratio, WindowTotals
from autotuner.engines.sglang.metrics import COUNTERS, GAUGES, HISTOGRAMS
from autotuner.sources.invariants import SGLANG_PREFIX_CACHE, check_totals
from autotuner.sources.scope import joined
from autotuner.sources.sglang_metrics import add_speculation, per_step


class PrometheusSource(Protocol):
    """The queries of sources/prometheus_api.py's PrometheusSource this module asks."""

    @property
    def url(self) -> str: ...
    @property
    def matchers(self) -> str: ...

    def series(self, metric: str) -> str: ...
    def instant(self, query: str, at: float) -> list[dict[str, Any]]: ...
    def scalar(self, query: str, at: float) -> float | None: ...
    def samples(self, query: str, start: float, end: float) -> list[float]: ...
    def opened(
        self, running: str, counter: str, window_s: float, now: float, engine: str
    ) -> WindowTotals: ...


def _scheduler(source: PrometheusSource, metric: str) -> str:
    """A scheduler gauge of the first tensor- and pipeline-parallel rank (an absent pp_rank
    label matches ""), narrowed by the selector (and a canary's pods)."""
    matchers = joined(source.matchers, 'tp_rank="0"', 'pp_rank=~"0|"')
    return f"{metric}{{{matchers}}}"


def _per_server(source: PrometheusSource, over: str, w: str, now: float, servers: int) -> float:
    """spec_num_steps over the window (`over`: avg_ or max_over_time), per server (the scalar
    sums the servers'); 0 without the gauge."""
    steps = source.scalar(f"{over}({_scheduler(source, GAUGES['spec_steps'])}[{w}])", now)
    return (steps or 0.0) / max(servers, 1)


def sglang_totals(source: PrometheusSource, window_s: float, now: float) -> WindowTotals:
    """The window's totals from SGLang's series (SourceError when it has none, or restarted)."""
    w = f"{max(round(window_s * 1000), 1)}ms"
    totals = source.opened(
        _scheduler(source, GAUGES["running"]),
        source.series(COUNTERS["generation_tokens"]),
        window_s,
        now,
        "an SGLang server",
    )
    delta = {
        name: value
        for name, metric in COUNTERS.items()
        if (value := source.scalar(f"increase({source.series(metric)}[{w}])", now)) is not None
    }
    steps = _per_server(source, "avg_over_time", w, now, totals.series)
    most = _per_server(source, "max_over_time", w, now, totals.series)
    add_speculation(totals, delta, round(steps), max(most, steps))
    for name in ("generation_tokens", "prompt_tokens"):
        if name in delta:
            setattr(totals, f"{name}_per_s", delta[name] / window_s)
    if "cached_tokens" in delta and "prompt_tokens" in delta:
        totals.prefix_cache_queries = delta["prompt_tokens"]
        totals.prefix_cache_hits = delta["cached_tokens"]
    for name, base in HISTOGRAMS.items():
        count_delta = source.scalar(f"increase({source.series(base + '_count')}[{w}])", now)
        if count_delta is not None:
            total = source.scalar(f"increase({source.series(base + '_sum')}[{w}])", now)
            setattr(totals, name, Ratio(total or 0.0, count_delta))
    per_step(totals)
    check_totals(source.url, totals, SGLANG_PREFIX_CACHE)
    span = (now - window_s, now)
    totals.waiting_samples = source.samples(_scheduler(source, GAUGES["waiting"]), *span)
    totals.kv_usage_samples = source.samples(_scheduler(source, GAUGES["kv_usage"]), *span)
    return totals
