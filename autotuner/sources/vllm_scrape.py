"""Direct scrape of one or more engines' `/metrics` endpoints into Observations (vLLM's, or
SGLang's with `reading=SGLANG`, sources/readings.py)."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Sequence

import httpx

from autotuner.core.observe.limits import ObservationLimits
from autotuner.core.observe.observation import build_observation, unusable
from autotuner.core.types import Observation
from autotuner.deadline import Cut, Deadline, read_body
from autotuner.errors import SourceError, UnusableReason
from autotuner.sources.promtext import parse
from autotuner.sources.readings import VLLM, Reading
from autotuner.sources.vllm_metrics import Snapshot

DEFAULT_MAX_BYTES = 16 * 2**20


class VllmScraper:
    """Scrapes an engine's endpoints (vLLM's; another engine's with its `reading`) and keeps
    the recent snapshots of a rolling window.

    The HTTP client is injected (tests pass a transport); without one, a keep-alive client is
    made. `timeout_s` bounds each endpoint's whole answer, not each read. Every failure becomes
    a SourceError with a typed reason.
    """

    def __init__(
        self,
        urls: Sequence[str],
        *,
        client: httpx.Client | None = None,
        timeout_s: float = 5.0,
        max_bytes: int = DEFAULT_MAX_BYTES,
        clock: Callable[[], float] = time.time,
        reading: Reading = VLLM,
    ) -> None:
        if not urls:
            raise ValueError("at least one /metrics URL is needed")
        self.urls = list(urls)
        self.client = client or httpx.Client(timeout=timeout_s)
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self.clock = clock
        self.reading = reading
        self.history: deque[Snapshot] = deque()

    def fetch(self, url: str) -> str:
        """The body of one `/metrics` answer, all of it within `timeout_s` (however slowly
        it comes), or a SourceError with the reason."""
        deadline = Deadline(self.timeout_s)
        try:
            with self.client.stream("GET", url, timeout=deadline.timeout()) as response:
                if response.status_code >= 400:
                    raise SourceError(
                        UnusableReason.HTTP_ERROR, f"{url}: HTTP {response.status_code}"
                    )
                if "html" in response.headers.get("content-type", ""):
                    raise SourceError(UnusableReason.NOT_METRICS, f"{url}: got an HTML page")
                body = read_body(response, deadline, self.max_bytes)
        except httpx.TimeoutException:
            body = Cut.DEADLINE
        except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError) as exc:
            raise SourceError(UnusableReason.SERVER_DOWN, f"{url}: {exc}") from None
        except httpx.HTTPError as exc:
            raise SourceError(UnusableReason.HTTP_ERROR, f"{url}: {exc}") from None
        if body is Cut.DEADLINE:
            raise SourceError(
                UnusableReason.TIMEOUT, f"{url}: no whole answer within {self.timeout_s:g}s"
            )
        if body is Cut.TOO_LARGE:
            raise SourceError(
                UnusableReason.TOO_LARGE, f"{url}: body exceeds {self.max_bytes} bytes; refused"
            )
        text = body.decode("utf-8", errors="replace")
        if text.lstrip().startswith("<"):
            raise SourceError(UnusableReason.NOT_METRICS, f"{url}: body is HTML, not metrics")
        return text

    def scrape(self) -> Snapshot:
        """One scrape of every endpoint (all must answer, each checked on its own: see
        sources/invariants.py), timestamped by the clock once every answer is in: the counters
        are the servers' as they answered, and parsing them first would add its own time (longer
        on a busy machine) to one snapshot's time and not the next's."""
        bodies = [(url, self.fetch(url)) for url in self.urls]
        answered = self.clock()
        engines = {}
        for url, body in bodies:
            exposition = parse(body, self.reading.wanted)
            self.reading.check(url, exposition)
            found = self.reading.samples(url, exposition)
            if not found:
                engine = self.reading.source
                raise SourceError(
                    UnusableReason.NOT_METRICS,
                    f"{url}: no {engine} series (is this {engine} /metrics?)",
                )
            engines.update(found)
        return Snapshot(at=answered, engines=engines)

    def record(self, snapshot: Snapshot, keep_s: float) -> None:
        self.history.append(snapshot)
        while self.history and self.history[0].at < snapshot.at - keep_s:
            self.history.popleft()

    def observation(self, window_s: float, limits: ObservationLimits) -> Observation:
        """The Observation of the snapshots recorded over the last `window_s`."""
        now = self.clock()
        recent = [s for s in self.history if s.at >= now - window_s - 1e-9]
        try:
            totals = self.reading.totals(recent)
        except SourceError as exc:
            return unusable(
                self.reading.source, exc.reason, exc.detail, start=now - window_s, end=now
            )
        observation = build_observation(self.reading.source, totals, now=now, limits=limits)
        return self.reading.finish(observation)

    def observe(
        self,
        window_s: float,
        interval_s: float,
        *,
        limits: ObservationLimits | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> Observation:
        """Scrape every `interval_s` for `window_s`, and on until the scrapes hold the batch
        samples a window needs (`limits.min_batch_samples`), then summarise (the CLI's one-shot
        mode). A slow engine's scrapes can take the whole window; a few more, each within its
        own timeout, make a window that answers instead of one refused as too few."""
        limits = limits or ObservationLimits()
        self.history.clear()
        started = self.clock()
        deadline = started + window_s
        while True:
            try:
                self.record(self.scrape(), keep_s=math.inf)
            except SourceError as exc:
                now = self.clock()
                return unusable(
                    self.reading.source, exc.reason, exc.detail, start=now - window_s, end=now
                )
            left = deadline - self.clock()
            if left <= 1e-9 and len(self.history) >= limits.min_batch_samples:
                break
            sleep(min(interval_s, left) if left > 0 else interval_s)
        # Slow scrapes stretch the loop past window_s; summarise every scrape it took.
        return self.observation(self.clock() - started, limits)

    def close(self) -> None:
        self.client.close()
