"""The Prometheus source against a real Prometheus scraping the simulated vLLM on loopback:
it must agree with a direct scrape of the same endpoint."""

from __future__ import annotations

import threading
import time

import pytest

from autotuner.core.observe.limits import ObservationLimits
from autotuner.core.types import Observation
from autotuner.engines.vllm.builds import TABLE
from autotuner.errors import UnusableReason
from autotuner.sim.engine import SimSetup, SimulatedVllm
from autotuner.sim.server import SimServer
from autotuner.sources.prometheus_api import PrometheusSource
from autotuner.sources.vllm_scrape import VllmScraper
from tests.integration.conftest import (
    StartPrometheus,
    free_port,
    wait_for_sample_after,
    wait_for_samples,
    wait_for_target_down,
)

LIMITS = ObservationLimits(min_batch_samples=3, min_drafts=100, max_age_s=10)
RUNNING = "vllm:num_requests_running"
WINDOW_S = 8.0  # both sources' window in the agreement test


def test_prometheus_agrees_with_the_direct_scrape(start_prometheus: StartPrometheus) -> None:
    setup = SimSetup(spec_tokens=3, acceptance=(0.85, 0.6, 0.4))
    sim = SimulatedVllm(
        setup=setup,
        load=lambda t: 24,
        step_time=lambda b, s: 0.025,
        engines=2,
        prefix_hit_rate=0.6,
    )
    with SimServer(sim) as server:
        prometheus = start_prometheus([server.url.removeprefix("http://")], "200ms")
        wait_for_samples(prometheus, RUNNING, 10)
        direct: dict[str, Observation] = {}

        def scrape() -> None:
            scraper = VllmScraper([f"{server.url}/metrics"])
            # 8 s: a scrape answered late by a stall of the busy machine moves the rate by the
            # stall over the window (a direct rate 11.5% low in a 4 s window, once).
            direct["obs"] = scraper.observe(WINDOW_S, 0.2, limits=LIMITS)

        thread = threading.Thread(target=scrape)
        thread.start()
        thread.join()
        # The window ends at Prometheus's own scrape after the direct one ended: queried at
        # whatever later time the machine gets to it, increase() would extrapolate over the
        # scrapes it has not taken yet and read the rate low.
        scraped = wait_for_sample_after(prometheus, RUNNING, time.time())
        source = PrometheusSource(
            prometheus, 'job="vllm"', scrape_interval_s=0.2, clock=lambda: scraped
        )
        via_prometheus = source.observe(WINDOW_S, limits=LIMITS)
    ours, theirs = direct["obs"], via_prometheus
    assert ours.usable, ours.detail
    assert theirs.usable, theirs.detail
    assert theirs.series == ours.series == 2
    assert ours.acceptance is not None
    assert theirs.acceptance is not None
    # Stated tolerance: rates within 10% (increase() extrapolates to the window's edges),
    # conditional acceptance within 0.02, step time within 2%, batch exact (constant load).
    assert theirs.generation_tokens_per_s == pytest.approx(ours.generation_tokens_per_s, rel=0.10)
    assert theirs.acceptance.per_position == pytest.approx(ours.acceptance.per_position, abs=0.02)
    assert theirs.acceptance.tau == pytest.approx(ours.acceptance.tau, rel=0.02)
    assert theirs.step_time_s == pytest.approx(ours.step_time_s, rel=0.02)
    assert theirs.step_time_s == pytest.approx(0.025, rel=0.02)
    assert theirs.batch is not None
    assert ours.batch is not None
    assert theirs.batch.mean == ours.batch.mean == 24
    assert theirs.live_setup is not None
    assert ours.live_setup is not None
    # Prometheus adds its target's labels (here `namespace`) to the CacheConfig fields; the
    # build those fields show is the same.
    assert theirs.live_setup.model_copy(update={"cache_config_labels": ()}) == (
        ours.live_setup.model_copy(update={"cache_config_labels": ()})
    )
    shown = [
        TABLE.version_shown(s.cache_config_labels) for s in (theirs.live_setup, ours.live_setup)
    ]
    assert shown == ["0.33.0", "0.33.0"]
    assert theirs.live_setup.setup.label == "spec:3"
    # The prefix-cache hit rate: a ratio of two increase()s, each extrapolated alike.
    assert ours.prefix_cache_hit_rate == pytest.approx(0.6, abs=1e-6)
    assert theirs.prefix_cache_hit_rate == pytest.approx(0.6, abs=0.02)


def test_prometheus_failure_modes_are_named(start_prometheus: StartPrometheus) -> None:
    sim = SimulatedVllm(load=lambda t: 4)
    with SimServer(sim) as server:
        prometheus = start_prometheus([server.url.removeprefix("http://")], "200ms")
        wait_for_samples(prometheus, RUNNING, 5)
        bad_query = PrometheusSource(prometheus, 'job="vllm",,', scrape_interval_s=0.2)
        assert bad_query.observe(2.0, limits=LIMITS).reason is UnusableReason.QUERY_ERROR
        nothing = PrometheusSource(prometheus, 'job="other"', scrape_interval_s=0.2)
        no_match = nothing.observe(2.0, limits=LIMITS)
        assert no_match.reason is UnusableReason.EMPTY_RESULT
        assert "scrape" not in (no_match.detail or ""), no_match.detail
        sim.restart()
        # A window ending at the first scrape after the restart holds scrapes from both sides.
        scraped = wait_for_sample_after(prometheus, RUNNING, time.time())
        after_restart = PrometheusSource(
            prometheus, 'job="vllm"', scrape_interval_s=0.2, clock=lambda: scraped
        )
        assert after_restart.observe(3.0, limits=LIMITS).reason is UnusableReason.RESET
    down = PrometheusSource(f"http://127.0.0.1:{free_port()}", timeout_s=1)
    assert down.observe(2.0, limits=LIMITS).reason is UnusableReason.SERVER_DOWN


def test_a_failed_scrape_is_named(start_prometheus: StartPrometheus) -> None:
    """A scrape that fails marks its target's series stale: the window is unusable, and its
    detail says the scrape failed rather than that nothing matched."""
    with SimServer(SimulatedVllm(load=lambda t: 4)) as server:
        target = server.url.removeprefix("http://")
        prometheus = start_prometheus([target], "200ms")
        wait_for_samples(prometheus, RUNNING, 5)
    failed_at = wait_for_target_down(prometheus, 'job="vllm"')
    source = PrometheusSource(
        prometheus, 'job="vllm"', scrape_interval_s=0.2, clock=lambda: failed_at
    )
    observed = source.observe(2.0, limits=LIMITS)
    assert observed.reason is UnusableReason.EMPTY_RESULT
    assert f"the last scrape of {target} failed (up 0)" in (observed.detail or ""), observed.detail


def test_speculation_off_through_prometheus(start_prometheus: StartPrometheus) -> None:
    sim = SimulatedVllm(setup=SimSetup(spec_tokens=0), load=lambda t: 6)
    with SimServer(sim) as server:
        prometheus = start_prometheus([server.url.removeprefix("http://")], "200ms")
        wait_for_samples(prometheus, RUNNING, 10)
        # The window ends at a scrape Prometheus took. Queried at whatever later time the machine
        # gets to it, a scrape that failed meanwhile (its timeout is the 200 ms interval) has
        # marked every series of the target stale, and the window is rightly unusable.
        scraped = wait_for_sample_after(prometheus, RUNNING, time.time())
        source = PrometheusSource(prometheus, scrape_interval_s=0.2, clock=lambda: scraped)
        obs = source.observe(2.0, limits=LIMITS)
    assert obs.usable, obs.detail
    assert obs.acceptance is None
    assert obs.live_setup is not None
    assert not obs.live_setup.speculation
