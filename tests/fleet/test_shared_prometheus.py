"""The fleet's one Prometheus source: every target's queries asked once for all of them, and
each target's window the same as its own source reads, against a real Prometheus scraping
simulated engines that serve different batches (scope labels `pod`)."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from contextlib import ExitStack

import httpx
import pytest

from autotuner.core.observe.limits import ObservationLimits
from autotuner.core.types import Observation
from autotuner.errors import UnusableReason
from autotuner.fleet.build import shared_observer
from autotuner.settings import Settings, load_settings
from autotuner.sim.engine import SimSetup, SimulatedVllm
from autotuner.sim.server import SimServer
from autotuner.sources.observers import PrometheusObserver
from autotuner.sources.prometheus_api import PrometheusSource
from autotuner.sources.scope import MetricsScope
from autotuner.sources.shared_prometheus import (
    SharedPrometheus,
    SharedSources,
    SharedView,
    equalities,
    grouped,
    merged,
)
from tests.integration.conftest import (
    StartPrometheus,
    free_port,
    scraped_without_a_failure,
    wait_for_samples,
)
from tests.integration.conftest import start_prometheus as start_prometheus  # the fixture

LIMITS = ObservationLimits(min_batch_samples=3, min_drafts=100, max_age_s=10)
RUNNING = "vllm:num_requests_running"
BATCHES = {"engine-a": 24, "engine-b": 8, "engine-c": 40}
WINDOW_S = 3.0


def test_only_equality_selectors_are_merged() -> None:
    assert equalities('pod="b", namespace="llm"') == (("namespace", "llm"), ("pod", "b"))
    assert equalities('{namespace="llm"}') == (("namespace", "llm"),)
    assert equalities('pod=~"a|b"') is None
    assert equalities('pod!="a"') is None
    assert equalities('pod="a", pod="b"') is None
    assert equalities("") is None
    members = [(("namespace", "llm"), ("pod", "b")), (("namespace", "llm"), ("pod", "a.1"))]
    assert merged(members) == 'namespace="llm", pod=~"a\\\\.1|b"'
    assert grouped("sum(rate(m[1m]))", ["pod"]) == "sum by (pod) (rate(m[1m]))"
    assert grouped("sum by (position) (x)", ["pod"]) == "sum by (pod, position) (x)"
    assert grouped("timestamp(m)", ["pod"]) == "timestamp(m)"


class Counted:
    """An HTTP client that counts the queries it sends."""

    def __init__(self) -> None:
        self.sent = 0
        self.client = httpx.Client(timeout=10, event_hooks={"request": [self.count]})

    def count(self, request: httpx.Request) -> None:
        self.sent += 1


def constant(batch: float) -> Callable[[float], float]:
    return lambda t: batch


@pytest.fixture
def prometheus(start_prometheus: StartPrometheus) -> Iterator[str]:
    setup = SimSetup(spec_tokens=3, acceptance=(0.85, 0.6, 0.4))
    with ExitStack() as stack:
        servers = {
            pod: stack.enter_context(
                SimServer(
                    SimulatedVllm(
                        setup=setup,
                        load=constant(batch),
                        step_time=lambda b, s: 0.025,
                        engines=1,
                    )
                )
            )
            for pod, batch in BATCHES.items()
        }
        hosts = {server.url.removeprefix("http://"): pod for pod, server in servers.items()}
        url = start_prometheus(list(hosts), "200ms", pods=hosts)
        # Each pod's series covers the window and the second before it (counted per series).
        wait_for_samples(url, RUNNING, int((WINDOW_S + 1.4) / 0.2))
        yield url


def selector(pod: str) -> str:
    return f'namespace="llm", pod="{pod}"'


def test_every_target_reads_its_own_window_from_one_set_of_queries_a_canary_its_own(
    prometheus: str,
) -> None:
    # Its windows here (this one's bucket and the next, 0.2 s on) end before a time whose last
    # seconds no failed scrape touches: a stale pod's window is unusable on its own or batched.
    fixed = [scraped_without_a_failure(prometheus, WINDOW_S + 2) - 0.4]
    counted = Counted()
    shared = SharedPrometheus(
        PrometheusSource(prometheus, client=counted.client, scrape_interval_s=0.2),
        bucket_s=0.2,
        clock=lambda: fixed[0],
    )
    views = {pod: shared.view(selector(pod)) for pod in BATCHES}
    for view in views.values():  # each is seen once, as a fleet's loops are in their steps
        view.observe(WINDOW_S, limits=LIMITS)
    fixed[0] += 0.2  # the next bucket: the next interval's steps
    counted.sent = shared.queries = 0
    together = {pod: view.observe(WINDOW_S, limits=LIMITS) for pod, view in views.items()}
    batched = counted.sent
    assert batched == shared.queries
    alone: dict[str, Observation] = {}
    for pod in BATCHES:
        own = Counted()
        source = PrometheusSource(
            prometheus,
            selector(pod),
            client=own.client,
            scrape_interval_s=0.2,
            clock=shared.now,  # the same instant the shared source reads
        )
        alone[pod] = source.observe(WINDOW_S, limits=LIMITS)
    # One target's set of queries served all three.
    assert batched == own.sent
    for pod, batch in BATCHES.items():
        ours, theirs = together[pod], alone[pod]
        assert ours.usable, ours.detail
        assert theirs.usable, theirs.detail
        assert ours.batch is not None
        assert ours.batch.mean == batch  # the pod's own series, not the sum of all
        assert ours.series == 1
        assert ours.model_dump(exclude={"detail"}) == theirs.model_dump(exclude={"detail"})
    # A canary's pods, or a selector that is not label="value" matchers, read on their own.
    shared.queries = 0
    narrowed = shared.view('namespace="llm"')
    narrowed.scope = MetricsScope("k8s://llm/leaderworkerset/vllm", (1,), "engine-b")
    regex = shared.view('pod=~"engine-(a|c)"')
    first = narrowed.observe(WINDOW_S, limits=LIMITS)
    second = regex.observe(WINDOW_S, limits=LIMITS)
    assert shared.queries == 0  # neither went through the batches
    assert first.batch is not None
    assert first.batch.mean == BATCHES["engine-b"]
    assert second.series == 2


def test_a_failed_batch_is_one_failure_for_every_target() -> None:
    down = f"http://127.0.0.1:{free_port()}"
    fixed = [1000.0]
    shared = SharedPrometheus(
        PrometheusSource(down, timeout_s=2), bucket_s=15.0, clock=lambda: fixed[0]
    )
    views = [shared.view(selector(pod)) for pod in BATCHES]
    for view in views:
        view.observe(WINDOW_S)  # each seen once
    fixed[0] += 15.0
    shared.queries = 0
    seen = [view.observe(WINDOW_S) for view in views]
    assert [o.reason for o in seen] == [UnusableReason.SERVER_DOWN] * len(views)
    assert shared.queries == 1  # asked once, the answer (a failure) shared


def test_the_fleet_reads_every_prometheus_target_through_one_shared_source() -> None:
    sources = SharedSources()
    observe = shared_observer(sources)

    def settings(selector: str, url: str = "http://prometheus:9090") -> Settings:
        tree = {"source": {"kind": "prometheus", "urls": [url], "selector": selector}}
        return load_settings(cli={**tree, "target": {"uri": "k8s://llm/deployment/vllm"}})[0]

    first = observe(settings(selector("engine-a")))
    second = observe(settings(selector("engine-b")))
    elsewhere = observe(settings(selector("engine-a"), "http://other:9090"))
    views = [o.source for o in (first, second, elsewhere) if isinstance(o, PrometheusObserver)]
    assert len(views) == 3
    assert all(isinstance(v, SharedView) for v in views)
    shared = [v.shared for v in views if isinstance(v, SharedView)]
    assert shared[0] is shared[1]  # one server: one source, its queries batched
    assert shared[2] is not shared[0]
    assert views[0].selector == selector("engine-a")


def test_a_series_no_target_owns_is_dropped() -> None:
    """Per-label regexes let through combinations of values no target has."""
    mine, theirs = (("namespace", "a"), ("pod", "x")), (("namespace", "b"), ("pod", "y"))
    result = [
        {"metric": {"namespace": "a", "pod": "x"}, "value": [0, "1"]},
        {"metric": {"namespace": "a", "pod": "y"}, "value": [0, "2"]},  # nobody's
        {"metric": {"namespace": "b", "pod": "y"}, "value": [0, "3"]},
    ]
    split = SharedPrometheus._split(result, [mine, theirs], ("namespace", "pod"))
    assert split == {mine: [result[0]], theirs: [result[2]]}


def test_a_batched_query_keeps_the_asking_targets_window_deadline() -> None:
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        shared = SharedPrometheus(PrometheusSource(url, timeout_s=30), bucket_s=15.0)
        view = shared.view(selector("engine-a"))
        view.deadline_s = 0.3  # all of this target's queries for one window
        seen = view.observe(WINDOW_S)
    assert seen.reason is UnusableReason.TIMEOUT
    assert "within 0.3s" in (seen.detail or "")
