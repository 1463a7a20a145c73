"""The prefix-cache hit rate read from vLLM's token counters: against the simulator's truth,
across a restart, through Prometheus's API, and refused or absent where it cannot be read."""

from __future__ import annotations

import json
from collections.abc import Callable
from urllib.parse import parse_qs

import httpx
import pytest

from autotuner.core.engine.workload import Workload
from autotuner.core.model.registry import load_model
from autotuner.core.observe.limits import ObservationLimits
from autotuner.core.observe.observation import (
    WindowTotals,
    prefix_cache_reading,
    prefix_hit_rate,
)
from autotuner.core.predict.hardware import datasheet
from autotuner.core.predict.prefill import prefill_cost
from autotuner.core.types import Observation, Setup
from autotuner.errors import SourceError, UnusableReason
from autotuner.sim.engine import SimSetup, SimulatedVllm
from autotuner.sim.truth import TruthEngine
from autotuner.sources.invariants import check_scrape, check_totals
from autotuner.sources.prometheus_api import PrometheusSource
from autotuner.sources.promtext import parse
from autotuner.sources.vllm_metrics import engine_samples, wanted_names
from autotuner.sources.vllm_scrape import VllmScraper
from tests.support.clock import Clock

LIMITS = ObservationLimits(min_batch_samples=2, min_drafts=10, max_age_s=30)


def scraped(
    sim: SimulatedVllm,
    clock: Clock,
    scrapes: int = 5,
    between: Callable[[int], None] | None = None,
) -> Observation:
    """`scrapes` scrapes of `sim` two seconds apart, and the window they span."""

    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=sim.render(), headers={"content-type": "text/plain"})

    client = httpx.Client(transport=httpx.MockTransport(handle))
    scraper = VllmScraper(["http://a/metrics"], client=client, clock=clock)
    for i in range(scrapes):
        if between:
            between(i)
        scraper.record(scraper.scrape(), keep_s=1e9)
        clock.t += 2.0
    clock.t -= 2.0
    return scraper.observation(window_s=2.0 * (scrapes - 1), limits=LIMITS)


def test_the_scrape_reads_the_simulated_hit_rate_and_lengths() -> None:
    clock = Clock()
    sim = SimulatedVllm(
        setup=SimSetup(spec_tokens=0),
        load=lambda t: 16,
        step_time=lambda b, s: 0.02,
        engines=2,
        prompt_tokens=4096,
        prompt_lengths=True,
        output_tokens=512,
        prefix_hit_rate=0.6,
        clock=clock,
    )
    obs = scraped(sim, clock)
    assert obs.usable, obs.detail
    assert obs.prefix_cache_hit_rate == pytest.approx(0.6)
    assert obs.mean_prompt_tokens == pytest.approx(4096)
    assert obs.mean_generation_tokens == pytest.approx(512)
    # 2 engines x 16 requests x 50 steps/s for 8 s, one request per 512 tokens, 4096 looked up.
    assert obs.prefix_cache_queried_tokens == pytest.approx(2 * 16 * 50 * 8 / 512 * 4096)
    reading = prefix_cache_reading(obs)
    assert reading is not None
    workload = Workload(
        prefix_hit_rate=reading.hit_rate,
        prompt_tokens=reading.prompt_tokens,
        generation_tokens=reading.generation_tokens,
    )
    assert workload.prefix_hit_rate == pytest.approx(0.6)
    assert workload.prompt_tokens == pytest.approx(4096)


def test_no_lookups_no_hit_rate() -> None:
    """Prefix caching off: the counters are there and still, so nothing is known (not 0)."""
    clock = Clock()
    sim = SimulatedVllm(
        setup=SimSetup(spec_tokens=0, prefix_caching=False), prefix_hit_rate=0.6, clock=clock
    )
    obs = scraped(sim, clock)
    assert obs.usable, obs.detail
    assert "vllm:prefix_cache_queries_total" in sim.render().decode()
    assert obs.prefix_cache_hit_rate is None
    assert prefix_cache_reading(obs) is None


def test_the_hit_rate_is_read_after_the_last_restart_only() -> None:
    clock = Clock()
    sim = SimulatedVllm(setup=SimSetup(spec_tokens=0), prefix_hit_rate=0.9, clock=clock)

    def restart_midway(i: int) -> None:
        if i == 2:
            sim.prefix_hit_rate = 0.2
            sim.restart()

    obs = scraped(sim, clock, scrapes=6, between=restart_midway)
    assert obs.usable, obs.detail
    assert obs.prefix_cache_hit_rate == pytest.approx(0.2)


def test_the_older_spelling_is_read() -> None:
    text = "\n".join(
        [
            'vllm:num_requests_running{engine="0",model_name="m"} 4',
            'vllm:gpu_prefix_cache_queries_total{engine="0",model_name="m"} 1000',
            'vllm:gpu_prefix_cache_hits_total{engine="0",model_name="m"} 250',
        ]
    )
    sample = engine_samples("e", parse(text, wanted_names()))[("e", "0")]
    assert sample.counters["prefix_cache_queries"] == 1000
    assert sample.counters["prefix_cache_hits"] == 250


def test_the_real_capture_has_the_counters(vllm_capture: str) -> None:
    sample = engine_samples("e", parse(vllm_capture, wanted_names()))[("e", "0")]
    assert sample.counters["prefix_cache_queries"] == 315
    assert sample.counters["prefix_cache_hits"] == 0


def test_more_hits_than_lookups_is_refused() -> None:
    text = "\n".join(
        [
            'vllm:num_requests_running{engine="0"} 4',
            'vllm:prefix_cache_queries_total{engine="0"} 100',
            'vllm:prefix_cache_hits_total{engine="0"} 101',
        ]
    )
    with pytest.raises(SourceError) as caught:
        check_scrape("http://a/metrics", parse(text, wanted_names()))
    assert caught.value.reason is UnusableReason.INVALID_VALUE
    assert "vllm:prefix_cache_hits_total" in caught.value.detail
    totals = WindowTotals(start=0, end=1, last_sample_at=1, series=1)
    totals.prefix_cache_queries, totals.prefix_cache_hits = 100.0, 150.0
    with pytest.raises(SourceError):
        check_totals("prometheus", totals)


@pytest.mark.parametrize(
    ("queries", "hits", "expected"),
    [
        (None, None, None),
        (0.0, 0.0, None),
        (1000.0, 600.0, 0.6),
        (1000.0, 1000.000001, 1.0),  # increase() rounding: at most 1
        (float("nan"), 1.0, None),
        (1000.0, float("inf"), None),
    ],
)
def test_the_hit_rate_is_a_share_or_none(
    queries: float | None, hits: float | None, expected: float | None
) -> None:
    totals = WindowTotals(start=0, end=1, last_sample_at=1, series=1)
    totals.prefix_cache_queries, totals.prefix_cache_hits = queries, hits
    found = prefix_hit_rate(totals)
    assert found == (pytest.approx(expected) if expected is not None else None)


def test_prometheus_reads_the_increases() -> None:
    """The Prometheus source asks increase() of the counters (the older spelling when the newer
    has no series) and divides them."""
    now = 10_000.0
    asked: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        query = parse_qs(request.url.query.decode())["query"][0]
        asked.append(query)
        result: list[dict[str, object]] = []
        if query.startswith("timestamp("):
            result = [{"metric": {}, "value": [now, str(now - 1)]}]
        elif request.url.path.endswith("query_range") and "num_requests_running" in query:
            result = [{"metric": {}, "values": [[now - i, "8"] for i in range(5)]}]
        elif "increase(vllm:gpu_prefix_cache_queries_total" in query:
            result = [{"metric": {}, "value": [now, "2000"]}]
        elif "increase(vllm:gpu_prefix_cache_hits_total" in query:
            result = [{"metric": {}, "value": [now, "1500"]}]
        body = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return httpx.Response(200, content=json.dumps(body).encode())

    source = PrometheusSource(
        "http://prom",
        client=httpx.Client(transport=httpx.MockTransport(answer)),
        clock=lambda: now,
    )
    obs = source.observe(10.0, limits=LIMITS)
    assert obs.usable, obs.detail
    assert obs.prefix_cache_hit_rate == pytest.approx(0.75)
    assert obs.prefix_cache_queried_tokens == pytest.approx(2000)
    assert any("vllm:prefix_cache_queries_total" in q for q in asked)  # the newer one first


def test_the_truth_engine_counts_what_its_workload_hits() -> None:
    model, gpu = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4"), datasheet("H200")
    workload = Workload(prefix_hit_rate=0.6, prompt_tokens=4096, generation_tokens=512)
    replay_spec = Setup.parse("replay+spec:3:16")
    truth = TruthEngine(
        model, gpu, workload, prefix_caching=lambda s: s.kind is not replay_spec.kind
    )
    rates = (0.8, 0.7, 0.6)
    kept = truth.observation(
        now=100.0, window_s=30.0, setup=Setup.parse("spec:3"), batch=64, rates=rates
    )
    assert kept.prefix_cache_hit_rate == pytest.approx(0.6)
    assert kept.mean_prompt_tokens == pytest.approx(4096)
    assert kept.generation_tokens_per_s == pytest.approx(
        truth.tokens_per_s(Setup.parse("spec:3"), 64, rates)
    )
    lost = truth.observation(now=100.0, window_s=30.0, setup=replay_spec, batch=64, rates=rates)
    assert lost.prefix_cache_hit_rate is None  # vLLM looks nothing up without the cache
    assert lost.generation_tokens_per_s == pytest.approx(truth.tokens_per_s(replay_spec, 64, rates))
    blind = TruthEngine(model, gpu, workload)  # the same engine, told nothing turns it off
    # vLLM times steps that carry the recomputed prefill; calibration takes it out again.
    plain_step = blind.step_time(replay_spec, 64, rates)
    assert truth.step_time(replay_spec, 64, rates) == pytest.approx(lost.step_time_s)
    assert lost.step_time_s is not None
    assert lost.step_time_s > plain_step
    whole = prefill_cost(model, gpu, workload, prefix_caching=False)
    cost = whole.recomputed() if whole is not None else None
    assert cost is not None
    tau = 1 + 0.8 + 0.8 * 0.7 + 0.8 * 0.7 * 0.6
    assert cost.decode_step_s(lost.step_time_s, 64 * tau) == pytest.approx(plain_step)
    assert truth.step_time(Setup.parse("spec:3"), 64, rates) == blind.step_time(
        Setup.parse("spec:3"), 64, rates
    )
    assert (lost.generation_tokens_per_s or 0.0) < blind.tokens_per_s(replay_spec, 64, rates)


def test_a_simulated_engine_reports_prompt_lengths_only_where_it_prefills_them() -> None:
    """The lengths are the tuner's cue to price every prompt's prefill; an engine whose steps
    carry none (its caller's step time prices no prompts) reports none."""
    for told in (True, False):
        sim = SimulatedVllm(load=lambda t: 8.0, prompt_tokens=2048, prompt_lengths=told)
        names = {family.name for family in sim.collect()}
        assert ("vllm:request_prompt_tokens" in names) is told
        assert "vllm:request_generation_tokens" in names
