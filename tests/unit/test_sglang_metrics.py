"""SGLang's /metrics read into an Observation: acceptance from counters (a geometric fit to the
mean accepted length, said in the Observation), batch from the running and queued gauges, the
first tensor-parallel rank only, restarts cut, bad values refused; directly and through
Prometheus (fixtures: tests/support/sglang_exposition.py, built from the wheel's definitions)."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator

import httpx
import pytest

from autotuner.core.observe.limits import ObservationLimits
from autotuner.core.observe.observation import WindowTotals
from autotuner.core.predict.acceptance import tokens_kept
from autotuner.core.types import AcceptanceStats, Observation, Setup
from autotuner.errors import UnusableReason
from autotuner.sources.prometheus_api import PrometheusSource
from autotuner.sources.readings import SGLANG
from autotuner.sources.sglang_info import live_setup_of, with_live_config
from autotuner.sources.sglang_metrics import ASSUMPTION, add_speculation, geometric_rate
from autotuner.sources.vllm_scrape import VllmScraper
from tests.support.pages import serving
from tests.support.sglang_exposition import Server, exposition

LIMITS = ObservationLimits(min_batch_samples=3, min_drafts=100, max_age_s=60)
RATE, K = 0.7, 3
MEAN_ACCEPTED = RATE + RATE**2 + RATE**3  # accepted drafts per verify at one rate per position


def _server(t: float, *, running: float = 40.0, restarted_at: float | None = None) -> Server:
    """A server at time t: 20 verifies and 2 finished requests a second, since a start."""
    since = t if restarted_at is None or t < restarted_at else t - restarted_at
    verifies, requests = 20 * since, 2 * since
    return Server(
        running=running,
        queued=5.0,
        token_usage=0.5,
        spec_steps=K,
        accept_length=4.0,  # the interval gauge says otherwise: it must not be read
        verify_calls=verifies,
        generation_tokens=requests + verifies * (1 + MEAN_ACCEPTED),
        prompt_tokens=1000 * requests,
        cached_tokens=400 * requests,
        requests=requests,
        itl_sum=0.03 * verifies * (1 + MEAN_ACCEPTED),  # 30 ms per output token
        itl_count=verifies * (1 + MEAN_ACCEPTED),
    )


def _acceptance(observation: Observation) -> AcceptanceStats:
    assert observation.acceptance is not None, observation.detail
    return observation.acceptance


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _scraper(servers: Iterator[Server], clock: Clock) -> VllmScraper:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=exposition(next(servers)))

    client = httpx.Client(transport=httpx.MockTransport(answer))
    return VllmScraper(["http://sglang:30000/metrics"], client=client, clock=clock, reading=SGLANG)


def _observe(servers: list[Server]) -> Observation:
    clock = Clock()
    scraper = _scraper(iter(servers), clock)
    for _ in servers:
        scraper.record(scraper.scrape(), keep_s=math.inf)
        clock.now += 1.0
    clock.now -= 1.0
    return scraper.observation(len(servers), LIMITS)


def test_acceptance_comes_from_the_counters_and_says_its_assumption() -> None:
    observation = _observe([_server(t) for t in range(10)])
    assert observation.usable, observation.detail
    stats = _acceptance(observation)
    assert stats.per_position == pytest.approx((RATE,) * K, abs=1e-6)
    assert stats.mean_acceptance_length == pytest.approx(1 + MEAN_ACCEPTED)
    assert ASSUMPTION in (stats.note or "")
    assert observation.source == "sglang"


def test_batch_is_the_first_ranks_running_gauge_and_queued_is_waiting() -> None:
    observation = _observe([_server(t, running=30.0 + t) for t in range(6)])
    batch = observation.batch
    assert batch is not None
    assert batch.values == (30.0, 31.0, 32.0, 33.0, 34.0, 35.0)  # not doubled by tp_rank 1
    assert observation.waiting_mean == 5.0
    assert observation.prefix_cache_hit_rate == pytest.approx(0.4)
    # 0.03 s per output token; a verify keeps 1 + MEAN_ACCEPTED of them per step
    assert observation.step_time_s == pytest.approx(0.03 * (1 + MEAN_ACCEPTED))


def test_a_restart_inside_the_window_is_cut_not_counted_backwards() -> None:
    observation = _observe([_server(t, restarted_at=5.0) for t in range(10)])
    stats = _acceptance(observation)
    assert stats.per_position == pytest.approx((RATE,) * K, abs=1e-6)
    assert stats.drafts == pytest.approx(20 * 4)  # the 5 scrapes after the restart


def test_a_negative_count_makes_the_window_unusable() -> None:
    clock = Clock()
    scraper = _scraper(iter([Server(verify_calls=-1.0, running=1.0)]), clock)
    observation = scraper.observe(0.0, 1.0, limits=LIMITS)
    assert not observation.usable
    assert observation.reason is UnusableReason.INVALID_VALUE


@pytest.mark.parametrize("rate", [0.0, 0.3, 0.7, 0.95, 1.0])
@pytest.mark.parametrize("k", [1, 3, 7])
def test_the_geometric_fit_inverts_the_mean(rate: float, k: int) -> None:
    assert geometric_rate(tokens_kept(rate, k) - 1, k) == pytest.approx(rate, abs=1e-9)


def _prometheus(query: str) -> float | None:
    """A Prometheus answering the queries of a 10 s window of the server above."""
    values = {
        "increase(sglang:spec_verify_calls_total": 200.0,
        "increase(sglang:generation_tokens_total": 20 + 200 * (1 + MEAN_ACCEPTED),
        "increase(sglang:num_requests_total": 20.0,
        "increase(sglang:prompt_tokens_total": 20000.0,
        "increase(sglang:cached_tokens_total": 8000.0,
        "avg_over_time(sglang:spec_num_steps": float(K),
        "resets(": 0.0,
    }
    return next((v for key, v in values.items() if key in query), None)


def _answer(request: httpx.Request) -> httpx.Response:
    query = request.url.params["query"]
    result: list[dict[str, object]]
    if request.url.path.endswith("query_range"):
        assert 'tp_rank="0"' in query
        result = [{"metric": {}, "values": [[0, "40"], [1, "40"], [2, "40"]]}]
    elif query.startswith("timestamp("):
        result = [{"metric": {}, "value": [100.0, "99.5"]}]
    else:
        value = _prometheus(query)
        result = [] if value is None else [{"metric": {}, "value": [100.0, str(value)]}]
    body = {"status": "success", "data": {"resultType": "vector", "result": result}}
    return httpx.Response(200, content=json.dumps(body))


def test_through_prometheus_the_same_acceptance_and_assumption() -> None:
    client = httpx.Client(transport=httpx.MockTransport(_answer))
    source = PrometheusSource(
        "http://prometheus:9090", client=client, clock=lambda: 100.0, engine="sglang"
    )
    observation = source.observe(10.0, limits=LIMITS)
    assert observation.usable, observation.detail
    assert observation.acceptance is not None
    assert observation.acceptance.per_position == pytest.approx((RATE,) * K, abs=1e-6)
    assert ASSUMPTION in (observation.acceptance.note or "")
    assert observation.batch is not None
    assert observation.batch.mean == 40.0


# /server_info's resolved fields as SGLang 0.5.23 names them (server_args.py:316-333).
INFO = {
    "version": "0.5.23",
    "speculative_algorithm": "EAGLE",
    "speculative_num_steps": 3,
    "speculative_adaptive": True,
    "enable_linear_replayssm": False,
    "enable_linear_replayssm_spec": True,
    "linear_replayssm_cache_len": 16,
    "mamba_ssm_dtype": "float32",
}


def test_the_live_setup_is_read_from_server_info_not_the_moving_gauge() -> None:
    live = live_setup_of(INFO)
    assert live is not None
    assert live.setup == Setup.parse("replay+spec:3:16")
    plain = live_setup_of({**INFO, "speculative_algorithm": None})
    assert plain is not None
    assert plain.setup == Setup()  # the -spec ring replays nothing without verifies
    assert live_setup_of({"version": "0.33.0"}) is None  # not SGLang's answer
    observation = _observe([_server(t) for t in range(6)])
    with serving({"/server_info": json.dumps(INFO)}) as base:
        read = with_live_config(observation, f"{base}/metrics", 5.0)
    assert read.live_setup is not None
    assert read.live_setup.setup == Setup.parse("replay+spec:3:16")
    with serving({}) as base:  # no answer: the metrics' reading stands
        assert with_live_config(observation, base, 5.0) == observation


def test_a_later_pipeline_rank_does_not_add_to_the_batch() -> None:
    """Every rank exports the scheduler's gauges: a pipeline-parallel rank 1 repeats rank 0's
    running requests, as tensor-parallel ranks do."""
    from autotuner.sources.promtext import parse
    from autotuner.sources.sglang_metrics import engine_samples, wanted_names
    from tests.support.sglang_exposition import MODEL

    labels = f'model_name="{MODEL}",engine_type="unified",tp_rank="0",pp_rank="1",moe_ep_rank="0"'
    text = exposition(Server(running=7.0)) + f"sglang:num_running_reqs{{{labels}}} 7\n"
    (sample,) = engine_samples("e", parse(text, wanted_names())).values()
    assert sample.gauges["running"] == 7.0


# Issue 39: (d generation - d requests) / d verify calls of 6 under spec_num_steps 3 was read
# as usable, clamped to 100% acceptance. A verify keeps at most K + 1 tokens.
IMPOSSIBLE_KEPT = 6.0


def test_more_tokens_per_verify_than_k_allows_refuses_the_scrape() -> None:
    def impossible(t: float) -> Server:
        server = _server(t)
        kept = server.requests + server.verify_calls * IMPOSSIBLE_KEPT
        return dataclasses.replace(server, generation_tokens=kept)

    observation = _observe([impossible(t) for t in range(10)])
    assert not observation.usable
    assert observation.reason is UnusableReason.INVALID_VALUE
    assert "more than the 4" in (observation.detail or "")


def test_through_prometheus_the_same_answer_is_refused_too() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        query = request.url.params.get("query", "")
        if "increase(sglang:generation_tokens_total" in query:
            body = {
                "status": "success",
                "data": {
                    "resultType": "vector",
                    "result": [{"metric": {}, "value": [100.0, str(20 + 200 * IMPOSSIBLE_KEPT)]}],
                },
            }
            return httpx.Response(200, content=json.dumps(body))
        return _answer(request)

    client = httpx.Client(transport=httpx.MockTransport(answer))
    source = PrometheusSource(
        "http://prometheus:9090", client=client, clock=lambda: 100.0, engine="sglang"
    )
    observation = source.observe(10.0, limits=LIMITS)
    assert not observation.usable
    assert observation.reason is UnusableReason.INVALID_VALUE


def test_k_plus_one_tokens_per_verify_is_still_read() -> None:
    """The bound itself (every draft accepted) is possible: read, not refused."""

    def every_draft(t: float) -> Server:
        server = _server(t)
        kept = server.requests + server.verify_calls * (K + 1)
        return dataclasses.replace(server, generation_tokens=kept)

    observation = _observe([every_draft(t) for t in range(10)])
    assert observation.usable, observation.detail
    assert _acceptance(observation).per_position == pytest.approx((1.0,) * K, abs=1e-6)


def test_a_window_whose_mean_k_rounds_to_zero_is_still_read() -> None:
    """spec_num_steps at 0 most of the window and 2 at its end (speculation turned on inside
    it): the verifies are possible under K = 2 and are fitted with at least one position."""
    totals = WindowTotals(start=0.0, end=10.0, last_sample_at=10.0, series=1)
    add_speculation(totals, {"verify_calls": 10, "generation_tokens": 26, "requests": 1}, 0, 2.0)
    assert totals.speculation
    assert totals.drafts == 10
    assert len(totals.accepted_per_position) == 1
