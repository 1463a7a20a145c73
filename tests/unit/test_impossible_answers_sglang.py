"""The impossible-answer corpus of tests/unit/test_vllm_scrape.py, run against SGLang's series.

Each vLLM case has its SGLang counterpart where SGLang exports the series, and the answer is
refused with the series named, never clamped into a usable window. Two vLLM classes have no
SGLang series to break: per-position counts (SGLang exports none; the geometric fit cannot rise
with position) stand as "fewer tokens than verify calls", and draft tokens fewer than drafts as
"verify calls with no drafting step". Window classes (what only deltas show) run through a
direct scrape and through Prometheus alike."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable

import httpx
import pytest

from autotuner.core.observe.limits import ObservationLimits
from autotuner.core.types import Observation
from autotuner.errors import UnusableReason
from autotuner.sources.prometheus_api import PrometheusSource
from autotuner.sources.readings import SGLANG
from autotuner.sources.vllm_scrape import VllmScraper
from tests.support.sglang_exposition import MODEL, Server, exposition

LIMITS = ObservationLimits(min_batch_samples=3, min_drafts=10, max_age_s=60)
K = 3
KEPT = 1 + 0.7 + 0.7**2 + 0.7**3  # tokens a verify keeps at one rate 0.7 per position
TOKENIZER = f'model_name="{MODEL}",engine_type="unified"'
ITL = "sglang:inter_token_latency_seconds"


def _server(t: float) -> Server:
    """20 verifies and 2 finished requests a second, since t = 0."""
    verifies, requests = 20 * t, 2 * t
    return Server(
        running=40.0,
        token_usage=0.5,
        spec_steps=K,
        verify_calls=verifies,
        generation_tokens=requests + verifies * KEPT,
        prompt_tokens=1000 * requests,
        cached_tokens=400 * requests,
        requests=requests,
        itl_sum=0.03 * verifies * KEPT,
        itl_count=verifies * KEPT,
    )


def _set(line_start: str, value: str) -> Callable[[str], str]:
    """The answer with the value of every series whose line starts with `line_start` replaced."""

    def edit(text: str) -> str:
        pattern = re.compile(rf"^({re.escape(line_start)}\S*) \S+$", re.MULTILINE)
        edited, count = pattern.subn(rf"\g<1> {value}", text)
        assert count, f"no series {line_start} in the answer"
        return edited

    return edit


def _appended(line: str) -> Callable[[str], str]:
    return lambda text: text + line + "\n"


def _without(name: str) -> Callable[[str], str]:
    return lambda text: "\n".join(x for x in text.splitlines() if not x.startswith(name)) + "\n"


# (vLLM's case it stands for, the edit of every answer, the words the refusal must say)
SCRAPE_CASES = [
    (
        "negative-counter",
        _set(f'sglang:generation_tokens_total{{{TOKENIZER},is_streaming="true"}}', "-5"),
        'sglang:generation_tokens_total{engine_type="unified"',
    ),
    (
        "nan-counter",
        _set(f"sglang:spec_verify_calls_total{{{TOKENIZER}}}", "NaN"),
        "sglang:spec_verify_calls_total",
    ),
    (
        "buckets-not-cumulative",
        _appended(f'{ITL}_bucket{{{TOKENIZER},le="0.1"}} 1e9'),
        "le=inf counts 50.66, below le=0.1's 1e+09",
    ),
    (
        "negative-histogram-sum",
        _set(f"{ITL}_sum{{{TOKENIZER}}}", "-0.5"),
        f"histogram sum {ITL}_sum",
    ),
    ("negative-histogram-count", _set(f"{ITL}_count{{{TOKENIZER}}}", "-1"), f"{ITL}_count"),
    (
        "count-is-not-the-inf-bucket",
        _set(f'{ITL}_bucket{{{TOKENIZER},le="+Inf"}}', "1e9"),
        "differs from its +Inf bucket (1e+09)",
    ),
    (
        "ratio-above-one",
        _set('sglang:token_usage{model_name="' + MODEL, "1.7"),
        "is 1.7, outside [0, 1]",
    ),
    (
        "prefix-cache-hits-above-queries",
        _set(f'sglang:cached_tokens_total{{{TOKENIZER},cache_source="device"}}', "1e12"),
        "sglang:cached_tokens_total = 1e+12 exceeds sglang:prompt_tokens_total",
    ),
]


class Clock:
    def __init__(self) -> None:
        self.now = 1.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _observe(edit: Callable[[str], str], servers: Callable[[float], Server]) -> Observation:
    """A 5 s window of 1 s scrapes of `servers`, each answer edited by `edit`."""
    clock = Clock()

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=edit(exposition(servers(clock.now))))

    client = httpx.Client(transport=httpx.MockTransport(answer))
    scraper = VllmScraper(
        ["http://sglang:30000/metrics"], client=client, clock=clock, reading=SGLANG
    )
    return scraper.observe(5.0, 1.0, limits=LIMITS, sleep=clock.sleep)


def test_the_untouched_answer_is_used() -> None:
    observation = _observe(lambda text: text, _server)
    assert observation.usable, observation.detail


@pytest.mark.parametrize(
    ("edit", "named"),
    [case[1:] for case in SCRAPE_CASES],
    ids=[case[0] for case in SCRAPE_CASES],
)
def test_an_impossible_answer_refuses_the_scrape(edit: Callable[[str], str], named: str) -> None:
    observation = _observe(edit, _server)
    assert not observation.usable
    assert observation.reason is UnusableReason.INVALID_VALUE
    assert named in (observation.detail or "")


def test_counters_without_the_running_gauge_say_the_gauge_is_missing() -> None:
    observation = _observe(_without("sglang:num_running_reqs"), _server)
    assert not observation.usable
    assert observation.reason is UnusableReason.EMPTY_RESULT
    assert "sglang:num_running_reqs is missing" in (observation.detail or "")


def _kept(per_verify: float) -> Callable[[float], Server]:
    def server(t: float) -> Server:
        base = _server(t)
        return dataclasses.replace(
            base, generation_tokens=base.requests + base.verify_calls * per_verify
        )

    return server


def _steps(steps: float) -> Callable[[float], Server]:
    return lambda t: dataclasses.replace(_server(t), spec_steps=steps)


def _cached_faster_than_prompt(t: float) -> Server:
    """Every scrape holds cached <= prompt tokens, but the window's cached tokens rose faster."""
    base = _server(t)
    return dataclasses.replace(
        base, prompt_tokens=1e6 + 1000 * base.requests, cached_tokens=1500 * base.requests
    )


# (vLLM's case it stands for, the servers over the window, the Prometheus answers that differ
# from a consistent 10 s window of them, the words the refusal must say)
WINDOW_CASES = [
    (
        "accepted-above-drafted",
        _kept(6.0),
        {"increase(sglang:generation_tokens_total": 20 + 200 * 6.0},
        "6 tokens kept per verify call in the window, more than the 4",
    ),
    (
        "per-position-above-drafts",
        _kept(0.5),
        {"increase(sglang:generation_tokens_total": 20 + 200 * 0.5},
        "a verify keeps at least its own token",
    ),
    (
        "draft-tokens-fewer-than-drafts",
        _steps(0.0),
        {"avg_over_time(sglang:spec_num_steps": 0.0},
        "verify calls in the window while spec_num_steps is 0",
    ),
    (
        "prefix-cache-hits-above-queries-in-the-window",
        _cached_faster_than_prompt,
        {"increase(sglang:cached_tokens_total": 40000.0},
        "sglang:cached_tokens_total rose by",
    ),
]


@pytest.mark.parametrize(
    ("servers", "named"),
    [(case[1], case[3]) for case in WINDOW_CASES],
    ids=[case[0] for case in WINDOW_CASES],
)
def test_an_impossible_window_refuses_the_direct_scrape(
    servers: Callable[[float], Server], named: str
) -> None:
    observation = _observe(lambda text: text, servers)
    assert not observation.usable
    assert observation.reason is UnusableReason.INVALID_VALUE
    assert named in (observation.detail or "")


def _prometheus(changed: dict[str, float]) -> PrometheusSource:
    values = {
        "increase(sglang:spec_verify_calls_total": 200.0,
        "increase(sglang:generation_tokens_total": 20 + 200 * KEPT,
        "increase(sglang:num_requests_total": 20.0,
        "increase(sglang:prompt_tokens_total": 20000.0,
        "increase(sglang:cached_tokens_total": 8000.0,
        "avg_over_time(sglang:spec_num_steps": float(K),
        "resets(": 0.0,
    } | changed

    def answer(request: httpx.Request) -> httpx.Response:
        query = request.url.params["query"]
        result: list[dict[str, object]]
        if request.url.path.endswith("query_range"):
            result = [{"metric": {}, "values": [[0, "40"], [1, "40"], [2, "40"]]}]
        elif query.startswith("timestamp("):
            result = [{"metric": {}, "value": [100.0, "99.5"]}]
        else:
            value = next((v for key, v in values.items() if key in query), None)
            result = [] if value is None else [{"metric": {}, "value": [100.0, str(value)]}]
        body = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return httpx.Response(200, content=json.dumps(body))

    client = httpx.Client(transport=httpx.MockTransport(answer))
    return PrometheusSource(
        "http://prometheus:9090", client=client, clock=lambda: 100.0, engine="sglang"
    )


def test_through_prometheus_the_consistent_window_is_used() -> None:
    observation = _prometheus({}).observe(10.0, limits=LIMITS)
    assert observation.usable, observation.detail


@pytest.mark.parametrize(
    ("changed", "named"),
    [(case[2], case[3]) for case in WINDOW_CASES],
    ids=[case[0] for case in WINDOW_CASES],
)
def test_through_prometheus_an_impossible_window_is_refused(
    changed: dict[str, float], named: str
) -> None:
    observation = _prometheus(changed).observe(10.0, limits=LIMITS)
    assert not observation.usable
    assert observation.reason is UnusableReason.INVALID_VALUE
    assert named in (observation.detail or "")


def test_a_k_that_moved_bounds_a_verify_by_the_most_it_reached() -> None:
    """Under --speculative-adaptive the gauge's mean understates the K some verifies ran with:
    the bound is the most K the window saw, so a real 3.6 tokens a verify at a mean K of 2 (a
    window of K 1 then K 3) is read, not refused."""
    moving = [1.0, 1.0, 3.0, 3.0, 3.0, 1.0]

    def servers(t: float) -> Server:
        return dataclasses.replace(_kept(3.6)(t), spec_steps=moving[min(int(t), 5)])

    observation = _observe(lambda text: text, servers)
    assert observation.usable, observation.detail
    assert observation.acceptance is not None
