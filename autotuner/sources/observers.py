"""Observers: one call, one window. The direct scrape keeps a rolling window of its own
scrapes; the Prometheus observer asks the server for the window.

While a canary is held the loop hands each its scope (`narrow`): Prometheus then reads the
canary's pods alone; a direct scrape cannot (it reaches whichever pods its URLs reach) and says
so in a note, which the loop puts on the decision."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotuner.core.observe.observation import unusable
from autotuner.core.types import Observation
from autotuner.errors import SourceError
from autotuner.settings import Settings
from autotuner.sources.scope import MetricsScope
from autotuner.sources.sglang_info import with_live_config
from autotuner.sources.sglang_metrics import SOURCE as SGLANG

if TYPE_CHECKING:
    from autotuner.sources.prometheus_api import PrometheusSource


class ScrapeObserver:
    """Direct scrape: one scrape per step into a rolling window."""

    def __init__(self, settings: Settings) -> None:
        from autotuner.sources.readings import READINGS
        from autotuner.sources.vllm_scrape import VllmScraper

        self.window_s = settings.loop.window_s
        self.limits = settings.limits
        self.scraper = VllmScraper(
            settings.source.urls,
            timeout_s=settings.source.timeout_s,
            max_bytes=settings.source.max_bytes,
            reading=READINGS[settings.source.kind.value],
        )

    def narrow(self, scope: MetricsScope | None) -> str | None:
        """What this window reads during a canary: not the canary alone. A URL is a Service
        (or a pod) that answers for whichever pod it picks, so the groups still on the old
        setup stay in the window and verification judges the mix."""
        if scope is None:
            return None
        return (
            f"metrics: the direct scrape of {', '.join(self.scraper.urls)} cannot be narrowed "
            f"to {scope}: verification reads every group it reaches, old setup and new "
            "together (a Prometheus source reads the canary's pods alone)"
        )

    def __call__(self) -> Observation:
        try:
            self.scraper.record(self.scraper.scrape(), keep_s=2 * self.window_s)
        except SourceError as exc:
            now = self.scraper.clock()  # the clock the scrapes are stamped with
            return unusable(
                self.scraper.reading.source,
                exc.reason,
                exc.detail,
                start=now - self.window_s,
                end=now,
            )
        observation = self.scraper.observation(self.window_s, self.limits)
        if self.scraper.reading.source == SGLANG:  # its setup is in /server_info, not metrics
            return with_live_config(observation, self.scraper.urls[0], self.scraper.timeout_s)
        return observation


class PrometheusObserver:
    """Prometheus: its own source, or (the fleet) a view of one shared by many targets."""

    def __init__(self, settings: Settings, source: PrometheusSource | None = None) -> None:
        from autotuner.sources.prometheus_api import PrometheusSource

        self.window_s = settings.loop.window_s
        self.limits = settings.limits
        self.source = source or PrometheusSource(
            settings.source.urls[0],
            settings.source.selector,
            timeout_s=settings.source.timeout_s,
            scrape_interval_s=settings.source.scrape_interval_s,
            engine=settings.engine.engine.kind.value,
            pod_label=settings.source.pod_label,
        )

    def narrow(self, scope: MetricsScope | None) -> str | None:
        """Read the scope's pods alone from now on (None: every pod again)."""
        self.source.scope = scope
        return None

    def __call__(self) -> Observation:
        return self.source.observe(self.window_s, limits=self.limits)
