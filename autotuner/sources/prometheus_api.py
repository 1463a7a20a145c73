"""A Prometheus server's HTTP API as a source: the same Observation as a direct scrape (vLLM's
series, or SGLang's with `engine="sglang"`: sources/sglang_prometheus.py).

Counter deltas come from `increase()`, summed across replicas; the batch distribution from the
raw running-request samples of a range query; a restart inside the window (any counter reset)
makes the window unusable rather than letting `increase()` paper over it.

Each query's whole answer is bounded by `timeout_s` and all the queries of one window by
`deadline_s`; a 429 or 503 with a `Retry-After` that fits in what is left is waited out once;
an answer Prometheus marks partial (`warnings`) is refused, as are totals that contradict each
other (sources/invariants.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx

from autotuner.core.observe.limits import ObservationLimits
from autotuner.core.observe.observation import Ratio, WindowTotals, build_observation, unusable
from autotuner.core.types import Observation
from autotuner.deadline import Cut, Deadline, read_body, retry_after_s
from autotuner.engines.vllm.metrics import (
    COUNTERS,
    GAUGES,
    HISTOGRAMS,
    PER_POSITION,
    PREFIX_CACHE,
)
from autotuner.errors import SourceError, UnusableReason
from autotuner.sources.invariants import check_totals
from autotuner.sources.scope import MetricsScope, joined, pod_matcher
from autotuner.sources.sglang_metrics import SOURCE as SGLANG
from autotuner.sources.sglang_metrics import marked
from autotuner.sources.sglang_prometheus import sglang_totals

Vector = list[dict[str, Any]]
DEFAULT_MAX_BYTES = 16 * 2**20
RETRYABLE = frozenset({429, 503})


def flat(series: Vector) -> list[float]:
    """Every value of a range query's series, in one list."""
    return [float(v) for one in series for _, v in one["values"]]


class PrometheusSource:
    """Queries one Prometheus server; `selector` narrows every query (e.g. namespace="llm"),
    and so does `scope` while a canary is held: then only its pods' series are read, by their
    `pod_label` (kube-prometheus's PodMonitors and ServiceMonitors call it `pod`)."""

    def __init__(
        self,
        url: str,
        selector: str = "",
        *,
        client: httpx.Client | None = None,
        timeout_s: float = 10.0,
        deadline_s: float | None = None,
        scrape_interval_s: float = 15.0,
        max_bytes: int = DEFAULT_MAX_BYTES,
        clock: Callable[[], float] = time.time,
        engine: str = "vllm",
        pod_label: str = "pod",
    ) -> None:
        self.url = url.rstrip("/")
        self.engine = engine  # whose series the queries ask for: vllm or sglang
        self.selector = selector.strip().strip("{}")
        self.client = client or httpx.Client(timeout=timeout_s)
        self.timeout_s = timeout_s
        self.deadline_s = deadline_s if deadline_s is not None else 3 * timeout_s
        self.max_bytes = max_bytes
        self.window: Deadline | None = None  # the deadline of the window being queried
        self.scrape_interval_s = scrape_interval_s
        self.clock = clock
        self.pod_label = pod_label  # where the server keeps each series' pod name
        self.scope: MetricsScope | None = None  # a canary's pods, while one is held

    @property
    def matchers(self) -> str:
        """What narrows every query: the selector and, during a canary, its pods."""
        return joined(self.selector, pod_matcher(self.scope, self.pod_label))

    def series(self, metric: str) -> str:
        matchers = self.matchers
        return f"{metric}{{{matchers}}}" if matchers else metric

    def _get(self, path: str, params: dict[str, str], window: Deadline | None = None) -> Any:
        """One query's result, within its deadline and the window's (`window`, else this
        source's own), one wait for a Retry-After included."""
        deadline = Deadline(self.timeout_s)
        window = window or self.window
        if window is not None and window.remaining() < deadline.remaining():
            deadline = window
        status, body = self._fetch(path, params, deadline)
        if status in RETRYABLE:
            wait = retry_after_s(body) if isinstance(body, httpx.Response) else None
            if wait is None or not deadline.sleep(wait):
                raise SourceError(
                    UnusableReason.HTTP_ERROR,
                    f"{self.url}: HTTP {status} (Retry-After {wait if wait is not None else '-'}"
                    f"); no retry fits the {deadline.seconds:g}s deadline",
                )
            status, body = self._fetch(path, params, deadline)
        return self._result(status, body, params)

    def _fetch(
        self, path: str, params: dict[str, str], deadline: Deadline
    ) -> tuple[int, bytes | httpx.Response]:
        """(status, body), or the response itself when the server asks for a retry."""
        url = f"{self.url}{path}"
        try:
            with self.client.stream(
                "GET", url, params=params, timeout=deadline.timeout()
            ) as response:
                if response.status_code in RETRYABLE:
                    return response.status_code, response
                body = read_body(response, deadline, self.max_bytes)
        except httpx.TimeoutException:
            body = Cut.DEADLINE
        except httpx.HTTPError as exc:
            raise SourceError(UnusableReason.SERVER_DOWN, f"{self.url}: {exc}") from None
        if body is Cut.DEADLINE:
            raise SourceError(
                UnusableReason.TIMEOUT,
                f"{self.url}: no whole answer within {deadline.seconds:g}s",
            )
        if body is Cut.TOO_LARGE:
            raise SourceError(
                UnusableReason.TOO_LARGE, f"{self.url}: answer exceeds {self.max_bytes} bytes"
            )
        return response.status_code, body

    def _result(self, status: int, raw: bytes | httpx.Response, params: dict[str, str]) -> Any:
        try:
            body = json.loads(raw if isinstance(raw, bytes) else b"")
        except ValueError:
            raise SourceError(
                UnusableReason.HTTP_ERROR, f"{self.url}: HTTP {status}, not JSON"
            ) from None
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error", "unknown error") if isinstance(body, dict) else body
            raise SourceError(UnusableReason.QUERY_ERROR, f"{params.get('query')}: {error}")
        if body.get("warnings"):
            raise SourceError(
                UnusableReason.QUERY_ERROR,
                f"{params.get('query')}: a partial answer ({'; '.join(body['warnings'])})",
            )
        try:
            return body["data"]["result"]
        except (KeyError, TypeError):
            raise SourceError(
                UnusableReason.QUERY_ERROR, f"{params.get('query')}: no data.result"
            ) from None

    def instant(self, query: str, at: float, *, window: Deadline | None = None) -> Vector:
        params = {"query": query, "time": f"{at:.3f}"}
        result: Vector = self._get("/api/v1/query", params, window)
        return result

    def scalar(self, query: str, at: float) -> float | None:
        result = self.instant(f"sum({query})", at)
        return float(result[0]["value"][1]) if result else None

    def samples(self, query: str, start: float, end: float) -> list[float]:
        return flat(self.range_series(query, start, end))

    def range_series(
        self, query: str, start: float, end: float, *, window: Deadline | None = None
    ) -> Vector:
        """A range query's series (labels and values), one point per scrape interval."""
        step = f"{max(self.scrape_interval_s, 0.001):.3f}"
        result: Vector = self._get(
            "/api/v1/query_range",
            {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": step},
            window,
        )
        return result

    def totals(self, window_s: float, now: float) -> WindowTotals:
        w = f"{max(round(window_s * 1000), 1)}ms"

        def increase(metric: str) -> float | None:
            return self.scalar(f"increase({self.series(metric)}[{w}])", now)

        totals = self.opened(
            self.series(GAUGES["running"][0]),
            self.series(COUNTERS["generation_tokens"]),
            window_s,
            now,
            "a vLLM engine",
        )
        self._speculation(totals, w, now)
        rate = "rate({}[" + w + "])"
        totals.generation_tokens_per_s = self.scalar(
            rate.format(self.series(COUNTERS["generation_tokens"])), now
        )
        totals.prompt_tokens_per_s = self.scalar(
            rate.format(self.series(COUNTERS["prompt_tokens"])), now
        )
        totals.preemptions = increase(COUNTERS["preemptions"])
        totals.prefix_cache_queries = self._first_increase(
            PREFIX_CACHE["prefix_cache_queries"], w, now
        )
        if totals.prefix_cache_queries is not None:
            totals.prefix_cache_hits = self._first_increase(
                PREFIX_CACHE["prefix_cache_hits"], w, now
            )
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

    def opened(
        self, running: str, counter: str, window_s: float, now: float, engine: str
    ) -> WindowTotals:
        """The window with its batch samples (the `running` gauge): EMPTY_RESULT without that
        series, RESET when `counter` was reset inside it."""
        w = f"{max(round(window_s * 1000), 1)}ms"
        present = self.instant(f"timestamp({running})", now)
        if not present:
            raise SourceError(UnusableReason.EMPTY_RESULT, self._absent(running, now))
        if self.scalar(f"resets({counter}[{w}])", now):
            raise SourceError(
                UnusableReason.RESET, f"{engine} restarted inside the window (counter reset)"
            )
        return WindowTotals(
            start=now - window_s,
            end=now,
            last_sample_at=max(float(s["value"][1]) for s in present),
            series=len(present),
            batch_samples=self.samples(running, now - window_s, now),
        )

    def _absent(self, running: str, now: float) -> str:
        """Why a window has no `running` series. A failed scrape (`up` 0) marks every series of
        its target stale until one succeeds, which an operator mends elsewhere than a selector
        that matches nothing; asking `up` is best effort, on this failing path only."""
        detail = f"no {running} series at {self.url}"
        try:
            up = self.instant(self.series("up"), now)
            failed = sorted(str(s["metric"]["instance"]) for s in up if s["value"][1] == "0")
        except (SourceError, LookupError, TypeError):  # no answer, or one of another shape
            return detail
        if failed:
            detail += (
                f": the last scrape of {', '.join(failed)} failed (up 0), which marks its series "
                "stale until a scrape succeeds"
            )
        return detail

    def _speculation(self, totals: WindowTotals, window: str, now: float) -> None:
        """The drafts, draft tokens and accepted tokens of the window, by position too."""

        def increase(metric: str) -> float | None:
            return self.scalar(f"increase({self.series(metric)}[{window}])", now)

        drafts = increase(COUNTERS["drafts"])
        if drafts is None:
            return
        totals.speculation = True
        totals.drafts = drafts
        totals.draft_tokens = increase(COUNTERS["draft_tokens"]) or 0.0
        totals.accepted = increase(COUNTERS["accepted"]) or 0.0
        by_position = self.instant(
            f"sum by (position) (increase({self.series(PER_POSITION)}[{window}]))", now
        )
        values = {int(s["metric"]["position"]): float(s["value"][1]) for s in by_position}
        totals.accepted_per_position = [values.get(i, 0.0) for i in range(len(values))]

    def _first_increase(self, spellings: tuple[str, ...], window: str, now: float) -> float | None:
        """The window's increase of the first spelling the server has (None: none)."""
        for name in spellings:
            value = self.scalar(f"increase({self.series(name)}[{window}])", now)
            if value is not None:
                return value
        return None

    def observe(self, window_s: float, *, limits: ObservationLimits | None = None) -> Observation:
        """The window's Observation; all its queries within `deadline_s`."""
        now = self.clock()
        self.window = Deadline(self.deadline_s)
        try:
            if self.engine == SGLANG:
                totals = sglang_totals(self, window_s, now)  # checked with SGLang's names
            else:
                totals = self.totals(window_s, now)
                check_totals(self.url, totals)
        except SourceError as exc:
            return unusable("prometheus", exc.reason, exc.detail, start=now - window_s, end=now)
        finally:
            self.window = None
        observation = build_observation(
            "prometheus", totals, now=now, limits=limits or ObservationLimits()
        )
        return marked(observation) if self.engine == SGLANG else observation

    def close(self) -> None:
        self.client.close()
