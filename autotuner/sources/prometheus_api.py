"""A Prometheus server's HTTP API as a source: the same Observation as a direct scrape.

Counter deltas come from `increase()`, summed across replicas; the batch distribution from the
raw running-request samples of a range query; a restart inside the window (any counter reset)
makes the window unusable rather than letting `increase()` paper over it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

from autotuner.core.observe.limits import ObservationLimits
from autotuner.core.observe.observation import Ratio, WindowTotals, build_observation, unusable
from autotuner.core.types import Observation
from autotuner.errors import SourceError, UnusableReason
from autotuner.sources.vllm_metrics import COUNTERS, GAUGES, HISTOGRAMS, PER_POSITION

Vector = list[dict[str, Any]]


class PrometheusSource:
    """Queries one Prometheus server; `selector` narrows every query (e.g. namespace="llm")."""

    def __init__(
        self,
        url: str,
        selector: str = "",
        *,
        client: httpx.Client | None = None,
        timeout_s: float = 10.0,
        scrape_interval_s: float = 15.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.url = url.rstrip("/")
        self.selector = selector.strip().strip("{}")
        self.client = client or httpx.Client(timeout=timeout_s)
        self.timeout_s = timeout_s
        self.scrape_interval_s = scrape_interval_s
        self.clock = clock

    def series(self, metric: str) -> str:
        return f"{metric}{{{self.selector}}}" if self.selector else metric

    def _get(self, path: str, params: dict[str, str]) -> Any:
        try:
            response = self.client.get(f"{self.url}{path}", params=params, timeout=self.timeout_s)
        except httpx.TimeoutException:
            raise SourceError(UnusableReason.TIMEOUT, f"{self.url}: no answer") from None
        except httpx.HTTPError as exc:
            raise SourceError(UnusableReason.SERVER_DOWN, f"{self.url}: {exc}") from None
        try:
            body = response.json()
        except ValueError:
            raise SourceError(
                UnusableReason.HTTP_ERROR, f"{self.url}: HTTP {response.status_code}, not JSON"
            ) from None
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error", "unknown error") if isinstance(body, dict) else body
            raise SourceError(UnusableReason.QUERY_ERROR, f"{params.get('query')}: {error}")
        return body["data"]["result"]

    def instant(self, query: str, at: float) -> Vector:
        result: Vector = self._get("/api/v1/query", {"query": query, "time": f"{at:.3f}"})
        return result

    def scalar(self, query: str, at: float) -> float | None:
        result = self.instant(f"sum({query})", at)
        return float(result[0]["value"][1]) if result else None

    def samples(self, query: str, start: float, end: float) -> list[float]:
        step = f"{max(self.scrape_interval_s, 0.001):.3f}"
        result = self._get(
            "/api/v1/query_range",
            {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": step},
        )
        return [float(v) for series in result for _, v in series["values"]]

    def totals(self, window_s: float, now: float) -> WindowTotals:
        w = f"{max(round(window_s * 1000), 1)}ms"

        def increase(metric: str) -> float | None:
            return self.scalar(f"increase({self.series(metric)}[{w}])", now)

        running = self.series(GAUGES["running"][0])
        present = self.instant(f"timestamp({running})", now)
        if not present:
            raise SourceError(UnusableReason.EMPTY_RESULT, f"no {running} series at {self.url}")
        resets = self.scalar(f"resets({self.series(COUNTERS['generation_tokens'])}[{w}])", now)
        if resets:
            raise SourceError(
                UnusableReason.RESET, "a vLLM engine restarted inside the window (counter reset)"
            )
        totals = WindowTotals(
            start=now - window_s,
            end=now,
            last_sample_at=max(float(s["value"][1]) for s in present),
            series=len(present),
            batch_samples=self.samples(running, now - window_s, now),
        )
        drafts = increase(COUNTERS["drafts"])
        if drafts is not None:
            totals.speculation = True
            totals.drafts = drafts
            totals.draft_tokens = increase(COUNTERS["draft_tokens"]) or 0.0
            totals.accepted = increase(COUNTERS["accepted"]) or 0.0
            by_position = self.instant(
                f"sum by (position) (increase({self.series(PER_POSITION)}[{w}]))", now
            )
            values = {int(s["metric"]["position"]): float(s["value"][1]) for s in by_position}
            totals.accepted_per_position = [values.get(i, 0.0) for i in range(len(values))]
        rate = "rate({}[" + w + "])"
        totals.generation_tokens_per_s = self.scalar(
            rate.format(self.series(COUNTERS["generation_tokens"])), now
        )
        totals.prompt_tokens_per_s = self.scalar(
            rate.format(self.series(COUNTERS["prompt_tokens"])), now
        )
        totals.preemptions = increase(COUNTERS["preemptions"])
        for name, spellings in HISTOGRAMS.items():
            for base in spellings:
                count = increase(f"{base}_count")
                if count is not None:
                    setattr(totals, name, Ratio(increase(f"{base}_sum") or 0.0, count))
                    break
        totals.waiting_samples = self.samples(
            self.series(GAUGES["waiting"][0]), now - window_s, now
        )
        kv_new, kv_old = (self.series(n) for n in GAUGES["kv_usage"])
        totals.kv_usage_samples = self.samples(f"{kv_new} or {kv_old}", now - window_s, now)
        info = self.instant(self.series("vllm:cache_config_info"), now)
        if info:
            totals.cache_config = {
                k: v
                for k, v in info[0]["metric"].items()
                if k not in ("__name__", "engine", "model_name", "instance", "job")
            }
        return totals

    def observe(self, window_s: float, *, limits: ObservationLimits | None = None) -> Observation:
        now = self.clock()
        try:
            totals = self.totals(window_s, now)
        except SourceError as exc:
            return unusable("prometheus", exc.reason, exc.detail, start=now - window_s, end=now)
        return build_observation(
            "prometheus", totals, now=now, limits=limits or ObservationLimits()
        )

    def close(self) -> None:
        self.client.close()
