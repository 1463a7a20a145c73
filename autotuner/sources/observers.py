"""Observers: one call, one window. The direct scrape keeps a rolling window of its own
scrapes; the Prometheus observer asks the server for the window."""

from __future__ import annotations

from autotuner.core.observe.observation import unusable
from autotuner.core.types import Observation
from autotuner.errors import SourceError
from autotuner.settings import Settings
from autotuner.sources.sglang_info import with_live_config
from autotuner.sources.sglang_metrics import SOURCE as SGLANG


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
    def __init__(self, settings: Settings) -> None:
        from autotuner.sources.prometheus_api import PrometheusSource

        self.window_s = settings.loop.window_s
        self.limits = settings.limits
        self.source = PrometheusSource(
            settings.source.urls[0],
            settings.source.selector,
            timeout_s=settings.source.timeout_s,
            scrape_interval_s=settings.source.scrape_interval_s,
            engine=settings.engine.engine.kind.value,
        )

    def __call__(self) -> Observation:
        return self.source.observe(self.window_s, limits=self.limits)
