"""Why a Prometheus window has no running-requests series: a failed scrape of a target (its
`up` 0) is named; a selector that matches nothing, or an `up` answer that cannot be read, leaves
the plain detail. Every case is `empty_result`: the window is unusable either way."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from autotuner.core.observe.limits import ObservationLimits
from autotuner.errors import UnusableReason
from autotuner.sources.prometheus_api import PrometheusSource

PLAIN = 'no vllm:num_requests_running{namespace="llm"} series at http://prometheus:9090'
DOWN = [{"metric": {"__name__": "up", "instance": "10.0.3.7:8000"}, "value": [100.0, "0"]}]
UP = [{"metric": {"__name__": "up", "instance": "10.0.3.7:8000"}, "value": [100.0, "1"]}]


def observed_detail(up: object, status: int = 200) -> tuple[str, list[str]]:
    asked: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        query = request.url.params["query"]
        asked.append(query)
        if not query.startswith("up"):
            return answer([])
        if status != 200:
            return httpx.Response(status, text="down for maintenance")
        return answer(up)

    source = PrometheusSource(
        "http://prometheus:9090",
        'namespace="llm"',
        client=httpx.Client(transport=httpx.MockTransport(handle)),
        clock=lambda: 100.0,
    )
    observation = source.observe(10.0, limits=ObservationLimits())
    assert observation.reason is UnusableReason.EMPTY_RESULT
    return observation.detail or "", asked


def answer(result: object) -> httpx.Response:
    body: dict[str, Any] = {"status": "success", "data": {"resultType": "vector", "result": result}}
    return httpx.Response(200, json=body)


def test_a_failed_scrape_is_named_with_its_target() -> None:
    detail, asked = observed_detail(DOWN)
    assert detail == (
        f"{PLAIN}: the last scrape of 10.0.3.7:8000 failed (up 0), which marks its series stale "
        "until a scrape succeeds"
    )
    assert asked[-1] == 'up{namespace="llm"}'  # narrowed as every query of the window is


@pytest.mark.parametrize(
    ("up", "status"),
    [
        (UP, 200),  # scraped fine: the series is simply not there
        ([], 200),  # the selector matches no target
        ([{"metric": {}, "value": [100.0, "0"]}], 200),  # no instance label
        ([{"value": "0"}], 200),  # another shape
        ("up", 200),
        (DOWN, 500),  # no answer
    ],
)
def test_otherwise_the_detail_is_plain(up: object, status: int) -> None:
    assert observed_detail(up, status)[0] == PLAIN
