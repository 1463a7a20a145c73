"""SGLang's metrics read right: the simulated SGLang 0.5.23 (sim/sglang.py) under a constant
load, scraped directly and through a real Prometheus, against the simulator's truth: the mean
kept per verify, the batch and the step time."""

from __future__ import annotations

import time

import pytest

from autotuner.core.model.registry import load_model
from autotuner.core.observe.limits import ObservationLimits
from autotuner.core.types import Setup
from autotuner.sim.server import SimServer
from autotuner.sim.sglang import SglangServer
from autotuner.sources.prometheus_api import PrometheusSource
from autotuner.sources.readings import SGLANG
from autotuner.sources.sglang_metrics import ASSUMPTION
from autotuner.sources.vllm_scrape import VllmScraper
from tests.integration.conftest import StartPrometheus, wait_for_sample_after, wait_for_samples
from tests.support.sglang_command import NEXTN_K3

LIMITS = ObservationLimits(min_batch_samples=3, min_drafts=100, max_age_s=10)
ACCEPTANCE = (0.85, 0.6, 0.4)
TAU = 1 + 0.85 + 0.85 * 0.6 + 0.85 * 0.6 * 0.4  # the truth: tokens kept per verify at K=3
STEP_S, BATCH = 0.025, 24
ARGS = [
    "--model-path",
    "Qwen/Qwen3.5-122B-A10B",
    "--enable-metrics",
    "--max-running-requests",
    "512",
    *NEXTN_K3,
]


def test_sglang_is_read_right_directly_and_through_prometheus(
    start_prometheus: StartPrometheus,
) -> None:
    kind = SglangServer(load_model("Qwen/Qwen3.5-122B-A10B"), ACCEPTANCE)
    sim = kind.simulator(
        setup=kind.running(Setup.parse("spec:3"), ARGS),
        load=lambda t: BATCH,
        step_time=lambda b, s: STEP_S,
    )
    with SimServer(sim, routes=kind.routes(sim, None)) as server:
        prometheus = start_prometheus([server.url.removeprefix("http://")], "200ms")
        wait_for_samples(prometheus, "sglang:num_running_reqs", 10)
        scraper = VllmScraper([f"{server.url}/metrics"], reading=SGLANG)
        direct = scraper.observe(4.0, 0.2, limits=LIMITS)
        # The window ends at Prometheus's own scrape of the same period's end, however late
        # the query comes.
        scraped = wait_for_sample_after(prometheus, "sglang:num_running_reqs", time.time())
        source = PrometheusSource(
            prometheus, scrape_interval_s=0.2, engine="sglang", clock=lambda: scraped
        )
        via_prometheus = source.observe(4.0, limits=LIMITS)
    for observation in (direct, via_prometheus):
        assert observation.usable, observation.detail
        assert observation.acceptance is not None
        # Stated tolerance: tau within 3% (finished requests move the counters), the step
        # time within 3%, the batch exact (constant load); the assumption said.
        assert observation.acceptance.tau == pytest.approx(TAU, rel=0.03)
        assert observation.step_time_s == pytest.approx(STEP_S, rel=0.03)
        assert observation.batch is not None
        assert observation.batch.mean == pytest.approx(BATCH)
        assert ASSUMPTION in (observation.acceptance.note or "")
