"""Faults of the sources over loopback: vLLM's /metrics, Prometheus's API and the canary's
/v1/completions trickling, hanging, resetting, overflowing, answering partly or asking to wait.

Each call must end by its deadline with a typed reason, and the next call (the fault gone)
must be usable: nothing is lost but the one window.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest

from autotuner.canary.run import CanaryPrompt, run_canary
from autotuner.core.observe.limits import ObservationLimits
from autotuner.errors import CanaryError, SourceError, UnusableReason
from autotuner.sources.prometheus_api import PrometheusSource
from autotuner.sources.vllm_scrape import VllmScraper
from tests.faults.conftest import Record
from tests.faults.loopback import (
    Behaviour,
    FaultServer,
    Request,
    answer,
    endless,
    fault_server,
    json_answer,
    reset_mid_body,
    trickle,
)
from tests.faults.timing import StillRunning, timed
from tests.support.fixtures import FIXTURES

METRICS = (FIXTURES / "vllm_cpu_spec_ngram.metrics.txt").read_text()
DEADLINE_S = 2.0
# A busy 2-core machine may keep a thread off the CPU for a while: the bound on a call is its
# deadline plus this; the old behaviour (a deadline per read) overshoots it by seconds.
SLACK_S = 1.5
GIVE_UP_S = 20.0  # a call still running then is wedged (the old code never ends)
LIMITS = ObservationLimits(min_batch_samples=3, min_drafts=10, max_age_s=60)


@pytest.fixture
def server() -> Any:
    with fault_server() as fake:
        yield fake


def reason_of(outcome: Any) -> Any:
    """The typed reason of a SourceError, else what the call gave (shown when it fails)."""
    return outcome.reason if isinstance(outcome, SourceError) else outcome


def bounded(outcome: Any, elapsed: float) -> None:
    assert not isinstance(outcome, StillRunning), f"still running after {outcome.after_s:g}s"
    assert elapsed < DEADLINE_S + SLACK_S, f"took {elapsed:.1f}s for a {DEADLINE_S:g}s deadline"


# --------------------------------------------------------------------------- vLLM /metrics


def scrape(server: FaultServer) -> tuple[Any, float]:
    scraper = VllmScraper([f"{server.url}/metrics"], timeout_s=DEADLINE_S)
    return timed(scraper.scrape, GIVE_UP_S)


# --------------------------------------------------------------------------- Prometheus


def prometheus(*, warnings: list[str] | None = None, drop: str | None = None) -> Any:
    """A Prometheus API answering the queries PrometheusSource sends, from fixed rates;
    `drop` leaves out the series of queries containing it, `warnings` marks answers partial."""

    def value(query: str) -> list[tuple[dict[str, str], str]]:
        if drop and drop in query:
            return []
        if "cache_config_info" in query:
            return []
        if "by (position)" in query:
            return [({"position": str(i)}, str(v)) for i, v in enumerate((90, 60, 40))]
        table = (
            ("resets(", "0"),
            ("num_drafts_total", "100"),
            ("num_draft_tokens_total", "300"),
            ("num_accepted_tokens_total", "190"),
            ("preemptions", "0"),
            ("_count", "50"),
            ("_sum", "5"),
            ("rate(", "400"),
        )
        return [({}, next((v for key, v in table if key in query), "1"))]

    def send(sock: socket.socket, request: Request, stop: threading.Event) -> None:
        query = request.query.get("query", "")
        if request.path.endswith("query_range"):
            start, end = float(request.query["start"]), float(request.query["end"])
            points = [
                [start + i * (end - start) / 4, "0.5" if "kv" in query else "8"] for i in range(5)
            ]
            result: list[dict[str, Any]] = [{"metric": {}, "values": points}]
            kind = "matrix"
        else:
            at = float(request.query.get("time", time.time()))
            if query.startswith("timestamp("):
                result = [{"metric": {}, "value": [at, str(at)]}]
            else:
                result = [{"metric": m, "value": [at, v]} for m, v in value(query)]
            kind = "vector"
        body: dict[str, Any] = {"status": "success", "data": {"resultType": kind, "result": result}}
        if warnings:
            body["warnings"] = warnings
        json_answer(body)(sock, request, stop)

    return send


def query(server: FaultServer, window: bool = False) -> tuple[Any, float]:
    source = PrometheusSource(server.url, timeout_s=DEADLINE_S, scrape_interval_s=1)
    if window:
        return timed(lambda: source.observe(60, limits=LIMITS), GIVE_UP_S)
    return timed(lambda: source.instant("up", time.time()), GIVE_UP_S)


def test_the_loopback_prometheus_gives_a_usable_window(server: FaultServer) -> None:
    server.route("/api/v1/query", prometheus())
    server.route("/api/v1/query_range", prometheus())
    observation, _ = query(server, window=True)
    assert observation.usable, observation.detail


def test_prometheus_partial_answers_are_refused(server: FaultServer, record: Record) -> None:
    partial = prometheus(warnings=["partial response: store 2 of 3 unreachable"])
    server.route("/api/v1/query", partial)
    server.route("/api/v1/query_range", partial)
    observation, elapsed = query(server, window=True)
    assert not observation.usable
    assert observation.reason is UnusableReason.QUERY_ERROR
    assert "partial" in (observation.detail or "")
    # Partial without saying so: a shard's draft tokens missing, the drafts there.
    server.route("/api/v1/query", prometheus(drop="num_draft_tokens_total"))
    server.route("/api/v1/query_range", prometheus())
    observation, _ = query(server, window=True)
    assert not observation.usable
    assert observation.reason is UnusableReason.INVALID_VALUE
    record(
        "Prometheus: a partial answer (warnings; a series missing)",
        "window unusable: query_error / invalid_value",
        elapsed,
    )


def test_prometheus_429_with_retry_after_is_waited_out(server: FaultServer, record: Record) -> None:
    busy = {"status": "error", "errorType": "too_many_requests", "error": "slow down"}
    server.route("/api/v1/query", json_answer(busy, 429, {"Retry-After": "1"}), prometheus())
    outcome, elapsed = query(server)
    assert not isinstance(outcome, Exception | StillRunning), outcome
    assert 1.0 <= elapsed < DEADLINE_S + SLACK_S
    server.route("/api/v1/query", json_answer(busy, 429, {"Retry-After": "30"}))
    refused, quick = query(server)
    assert isinstance(refused, SourceError)  # a wait past the deadline is not taken
    assert quick < SLACK_S
    record(
        "Prometheus: 429, Retry-After 1 s (then 30 s)",
        "waited 1 s and answered (a wait past the deadline: window unusable at once)",
        elapsed,
    )


# --------------------------------------------------------------------------- a body's faults


class Endpoint(NamedTuple):
    """Where the sidecar reads a window: its name in docs/faults.md's table, the path a fault
    is served on, a body it answers with, its answer once the fault is gone, and the read."""

    name: str
    path: str
    body: str
    healthy: Behaviour
    read: Callable[[FaultServer], tuple[Any, float]]


EMPTY_VECTOR = '{"status":"success","data":{"resultType":"vector","result":[]}}'
ENDPOINTS = [
    pytest.param(
        Endpoint("vLLM /metrics", "/metrics", METRICS, answer(METRICS), scrape), id="vllm"
    ),
    pytest.param(
        Endpoint("Prometheus", "/api/v1/query", EMPTY_VECTOR, prometheus(), query), id="prometheus"
    ),
]
# How the body is sent, the reason the window gets, and the fault and what the sidecar did in
# docs/faults.md's words.
FAULTS = [
    pytest.param(
        lambda body: trickle(body, 0.05),
        UnusableReason.TIMEOUT,
        "200, then one byte per 50 ms",
        "window unusable: timeout",
        id="trickling",
    ),
    # Bytes for most of the deadline, then silence: a deadline per read would wait it again.
    pytest.param(
        lambda body: trickle(body, 0.1, then_hang_after=19),
        UnusableReason.TIMEOUT,
        "1.9 s of bytes, then silence",
        "window unusable: timeout",
        id="hanging-mid-body",
    ),
    pytest.param(
        reset_mid_body,
        UnusableReason.SERVER_DOWN,
        "TCP reset mid-body",
        "window unusable: server_down",
        id="reset-mid-body",
    ),
    pytest.param(
        lambda body: endless(64 * 2**20),
        UnusableReason.TOO_LARGE,
        "a 64 MiB body",
        "window unusable: too_large (16 MiB cap)",
        id="oversized",
    ),
]


@pytest.mark.parametrize(("fault", "reason", "what", "did"), FAULTS)
@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_a_fault_ends_by_the_deadline_and_costs_one_window(
    server: FaultServer,
    record: Record,
    endpoint: Endpoint,
    fault: Callable[[str], Behaviour],
    reason: UnusableReason,
    what: str,
    did: str,
) -> None:
    server.route(endpoint.path, fault(endpoint.body), endpoint.healthy)
    outcome, elapsed = endpoint.read(server)
    bounded(outcome, elapsed)
    assert reason_of(outcome) is reason
    again, _ = endpoint.read(server)
    assert not isinstance(again, Exception | StillRunning), again  # the next read is whole
    record(f"{endpoint.name}: {what}", did, elapsed)


# --------------------------------------------------------------------------- the canary


def canary(server: FaultServer) -> tuple[Any, float]:
    prompts = [CanaryPrompt(name="add", prompt="Q: 17 + 25?\nA:", answer="42")]
    return timed(lambda: run_canary(server.url, prompts, timeout_s=DEADLINE_S), GIVE_UP_S)


REPLY = '{"choices":[{"text":" 42"}],"usage":{"completion_tokens":2},"model":"m"}'


@pytest.mark.parametrize(
    ("fault", "what", "did"),
    [
        pytest.param(
            trickle(REPLY, 0.05),
            "one byte per 50 ms",
            "canary failed (CanaryError)",
            id="trickling",
        ),
        pytest.param(
            trickle(REPLY, 0.1, then_hang_after=19),
            "1.9 s of bytes, then silence",
            "canary failed",
            id="hanging-mid-body",
        ),
    ],
)
def test_a_canary_completion_fault_ends_by_the_deadline(
    server: FaultServer, record: Record, fault: Behaviour, what: str, did: str
) -> None:
    server.route("/v1/completions", fault, answer(REPLY))
    outcome, elapsed = canary(server)
    bounded(outcome, elapsed)
    assert isinstance(outcome, CanaryError)
    assert not isinstance(canary(server)[0], Exception | StillRunning)  # the next run answers
    record(f"canary /v1/completions: {what}", did, elapsed)
