"""A LeaderWorkerSet canary's metrics scope: the pods of the groups its partition lets roll,
the PromQL matcher built from it, every query of a Prometheus window narrowed by it, and a
direct scrape that says it cannot be."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from autotuner.actuators.kinds import lws_canary_scope
from autotuner.errors import InputError
from autotuner.settings import load_settings
from autotuner.sources.observers import PrometheusObserver, ScrapeObserver
from autotuner.sources.prometheus_api import PrometheusSource
from autotuner.sources.scope import MetricsScope, joined, literal, pod_matcher
from tests.support.serving_objects import lws

URI = "k8s://llm/leaderworkerset/vllm"
CANARY = MetricsScope(target=URI, groups=(1,), pods="vllm-(1)(-[0-9]+)?")
MATCHER = 'pod=~"vllm-(1)(-[0-9]+)?"'


def held(replicas: int, partition: int, name: str = "vllm") -> dict[str, Any]:
    obj = lws(["--model", "m"], name=name, replicas=replicas)
    obj["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"]["partition"] = partition
    return obj


def test_the_scope_is_the_groups_the_partition_lets_roll() -> None:
    assert lws_canary_scope(held(2, 1), URI) == CANARY
    three = lws_canary_scope(held(3, 2), URI)
    assert three is not None
    assert three.groups == (2,)
    wide = lws_canary_scope(held(4, 2), URI)
    assert wide is not None
    assert (wide.groups, wide.pods) == ((2, 3), "vllm-(2|3)(-[0-9]+)?")
    assert "group 1 of k8s://llm/leaderworkerset/vllm" in str(CANARY)


@pytest.mark.parametrize("partition", [0, 2, 5])
def test_no_scope_when_the_partition_holds_nothing_back_or_everything(partition: int) -> None:
    assert lws_canary_scope(held(2, partition), URI) is None


def test_the_pattern_matches_the_canary_groups_leader_and_workers_alone() -> None:
    scope = lws_canary_scope(held(2, 1), URI)
    assert scope is not None
    # LWS names a group's leader <name>-<group> and its workers <name>-<group>-<worker>;
    # Prometheus matches a label regex whole, as fullmatch does.
    for pod in ("vllm-1", "vllm-1-1", "vllm-1-15"):
        assert re.fullmatch(scope.pods, pod), pod
    for pod in ("vllm-0", "vllm-0-1", "vllm-10", "vllm-11-1", "vllm-1x", "xvllm-1", "vllm-1-"):
        assert not re.fullmatch(scope.pods, pod), pod


def test_a_dot_in_the_name_is_a_literal_dot() -> None:
    scope = lws_canary_scope(held(2, 1, name="qwen3.5"), URI)
    assert scope is not None
    assert scope.pods == r"qwen3\.5-(1)(-[0-9]+)?"
    assert re.fullmatch(scope.pods, "qwen3.5-1-2")
    assert not re.fullmatch(scope.pods, "qwen3x5-1-2")
    assert literal("a.b-c") == r"a\.b-c"
    # The PromQL string literal keeps the backslash for the regex (Go's escapes, as JSON's).
    assert pod_matcher(scope, "pod") == 'pod=~"qwen3\\\\.5-(1)(-[0-9]+)?"'


def test_the_matcher_names_the_label_and_is_empty_without_a_scope() -> None:
    assert pod_matcher(CANARY, "pod") == MATCHER
    assert pod_matcher(CANARY, "kubernetes_pod_name").startswith("kubernetes_pod_name=~")
    assert pod_matcher(None, "pod") == ""
    assert joined('namespace="llm"', "", MATCHER) == f'namespace="llm", {MATCHER}'


def test_the_series_are_narrowed_while_a_scope_is_set() -> None:
    source = PrometheusSource("http://prometheus:9090", 'namespace="llm"')
    assert source.series("vllm:x") == 'vllm:x{namespace="llm"}'
    source.scope = CANARY
    assert source.series("vllm:x") == f'vllm:x{{namespace="llm", {MATCHER}}}'
    source.scope = None
    assert source.series("vllm:x") == 'vllm:x{namespace="llm"}'
    bare = PrometheusSource("http://prometheus:9090", pod_label="kubernetes_pod_name")
    assert bare.series("vllm:x") == "vllm:x"
    bare.scope = CANARY
    assert bare.series("vllm:x") == 'vllm:x{kubernetes_pod_name=~"vllm-(1)(-[0-9]+)?"}'


def _queries(engine: str, scope: MetricsScope | None) -> list[str]:
    """Every query one window sends (the server answers each with a plausible value)."""
    sent: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        query = request.url.params["query"]
        sent.append(query)
        if request.url.path.endswith("query_range"):
            result: list[dict[str, Any]] = [{"metric": {}, "values": [[99.0, "1"]]}]
        elif query.startswith("sum(resets"):
            result = []
        else:
            # One of each, but an SGLang verify keeps 1 to K + 1 tokens (K = 1 here): 2 kept
            # past each request's first token, or the window is refused as impossible.
            value = "3" if "sglang:generation_tokens" in query else "1"
            result = [{"metric": {"position": "0"}, "value": [100.0, value]}]
        body = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return httpx.Response(200, json=body)

    client = httpx.Client(transport=httpx.MockTransport(handle))
    source = PrometheusSource(
        "http://prometheus:9090", 'namespace="llm"', client=client, clock=lambda: 100.0
    )
    source.engine = engine
    source.scope = scope
    source.observe(10.0)
    return sent


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_every_series_of_a_window_is_narrowed_to_the_canary(engine: str) -> None:
    narrowed = _queries(engine, CANARY)
    series = [m for q in narrowed for m in re.finditer(rf"{engine}:[a-zA-Z_:]+(\{{[^}}]*\}})?", q)]
    assert len(series) > 10  # the whole window was asked for, not one refused query
    unscoped = [m.group(0) for m in series if MATCHER not in (m.group(1) or "")]
    assert unscoped == []
    assert all("pod=~" not in q for q in _queries(engine, None))


def test_the_pod_label_is_a_setting() -> None:
    settings, _ = load_settings(cli={"source": {"kind": "prometheus", "urls": ["http://p"]}})
    assert settings.source.pod_label == "pod"
    observer = PrometheusObserver(settings)
    notes, scopes = [], []
    for scope in (CANARY, None):
        notes.append(observer.narrow(scope))
        scopes.append(observer.source.scope)
    assert notes == [None, None]  # it can narrow: nothing to note
    assert scopes == [CANARY, None]
    named, _ = load_settings(cli={"source": {"pod_label": "kubernetes_pod_name"}})
    assert named.source.pod_label == "kubernetes_pod_name"
    with pytest.raises(InputError, match=r"source\.pod_label"):
        load_settings(cli={"source": {"pod_label": "pod-name"}})


def test_a_direct_scrape_says_it_reads_the_mix() -> None:
    settings, _ = load_settings(cli={"source": {"urls": ["http://vllm:8000/metrics"]}})
    observer = ScrapeObserver(settings)
    assert observer.narrow(None) is None
    note = observer.narrow(CANARY)
    assert note is not None
    assert "http://vllm:8000/metrics cannot be narrowed" in note
    assert "group 1 of k8s://llm/leaderworkerset/vllm" in note
    assert "old setup and new together" in note
