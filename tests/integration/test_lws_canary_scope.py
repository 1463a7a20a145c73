"""While a LeaderWorkerSet canary is held, verification reads the canary group's metrics alone:
the loop over the loopback API server, its observer told the canary's pods by the target's read;
and the same through a real Prometheus scraping two groups that serve at different rates."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from autotuner.actuators.kinds import at, lws_partition
from autotuner.actuators.kubeapi import K8sTarget, api_client
from autotuner.actuators.kubernetes import KubernetesActuator
from autotuner.controller import Controller
from autotuner.core.decide.state import TunerState, Verification
from autotuner.core.model.registry import load_model
from autotuner.core.predict.hardware import datasheet
from autotuner.core.types import Action, Decision, Observation, Setup
from autotuner.engines.vllm.setup import parse_setup
from autotuner.settings import cli_overrides, load_settings
from autotuner.sim.engine import SimSetup, SimulatedVllm
from autotuner.sim.server import SimServer
from autotuner.sim.truth import TruthEngine
from autotuner.sources.observers import PrometheusObserver
from autotuner.sources.scope import MetricsScope
from tests.integration.conftest import (
    StartPrometheus,
    scraped_without_a_failure,
    wait_for_samples,
)
from tests.support.fake_apiserver import FakeApiServer, fake_apiserver
from tests.support.loop import wired
from tests.support.lws_canary import (
    ARGS,
    MODEL,
    RATES,
    URI,
    WORKER_ARGS,
    canary_loop,
    groups_report,
    held_canary,
    partition,
    until_held,
    until_released,
)
from tests.support.settings import ACT_AT_ONCE

SPEC3, REPLAY = Setup(spec_tokens=3), Setup(replay_window=16)
VERIFIED = re.compile(r"^verified \S+: ([\d,]+) tokens/s per engine")


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with fake_apiserver() as fake:
        yield fake


def tuner(server: FakeApiServer) -> KubernetesActuator:
    return KubernetesActuator(
        K8sTarget.parse(URI), api_client(server.url, timeout_s=2), canary=True
    )


def measured(decision: Decision) -> float:
    """The tokens/s per engine a verified decision judged the change by."""
    found = VERIFIED.match(decision.sentence)
    assert found, decision.sentence
    return float(found.group(1).replace(",", ""))


# --------------------------------------------------------------------------- the loop's plumbing


class TwoGroups:
    """Two LWS groups' engines as the object's template runs them: group 1 (the canary) on the
    worker args as written, group 0 on the args it started with until the partition lets it
    roll. Read together (their tokens/s summed over two engine series, as Prometheus sums
    them) unless narrowed to a scope, which the loop does from the target's read."""

    def __init__(self, server: FakeApiServer, truth: TruthEngine, clock: list[float]) -> None:
        self.server, self.truth, self.clock = server, truth, clock
        self.scope: MetricsScope | None = None
        self.scopes: list[MetricsScope | None] = []  # what each window was narrowed to

    def narrow(self, scope: MetricsScope | None) -> str | None:
        self.scope = scope
        self.scopes.append(scope)
        return None

    def group(self, index: int) -> Observation:
        obj = self.server.get("LeaderWorkerSet", "llm", "vllm")
        held = lws_partition(obj)
        return self.running(parse_setup(at(obj, WORKER_ARGS)) if index >= held else SPEC3)

    def running(self, setup: Setup) -> Observation:
        """One group's window on `setup`."""
        return self.truth.observation(
            now=self.clock[0], window_s=60, setup=setup, batch=512.0, rates=RATES
        )

    def __call__(self) -> Observation:
        if self.scope is not None:
            (index,) = self.scope.groups
            return self.group(index)
        old, canary = self.group(0), self.group(1)
        assert old.generation_tokens_per_s is not None
        assert canary.generation_tokens_per_s is not None
        total = old.generation_tokens_per_s + canary.generation_tokens_per_s
        return canary.model_copy(update={"generation_tokens_per_s": total, "series": 2})


def test_the_loop_verifies_an_lws_canary_by_the_canary_group_alone(
    server: FakeApiServer,
) -> None:
    """The switch holds group 0 back; while it is held the loop narrows the observer to group 1
    and verification's tokens/s per engine is group 1's (not the two groups' mean); once the
    partition is released, every group is read again."""
    clock = [1000.0]
    groups = TwoGroups(server, TruthEngine(load_model(MODEL), datasheet("H200")), clock)
    loop, _ = canary_loop(server, groups, clock)
    until_held(loop, clock, server)
    assert set(groups.scopes) == {None}  # nothing held before the switch
    decision = until_released(loop, clock, server)
    assert decision.action is Action.KEEP
    canary, old = groups.group(1), groups.running(SPEC3)  # group 0 was held on spec:3
    assert canary.generation_tokens_per_s is not None
    assert old.generation_tokens_per_s is not None
    mean = (canary.generation_tokens_per_s + old.generation_tokens_per_s) / 2
    assert abs(canary.generation_tokens_per_s - mean) > 0.05 * mean  # the mix says otherwise
    assert measured(decision) == pytest.approx(canary.generation_tokens_per_s, abs=1)
    canary_pods = MetricsScope(URI, (1,), "vllm-(1)(-[0-9]+)?")
    assert groups.scopes[-1] == canary_pods
    groups_report(server, ready=2, updated=2)
    clock[0] += 60
    loop.step()
    assert groups.scopes[-2:] == [canary_pods, None]  # released: every group is read again
    snapshot = loop.metrics.current()
    assert snapshot.observation is not None
    assert snapshot.observation.series == 2


def test_a_target_that_cannot_be_read_keeps_the_canary_scope(server: FakeApiServer) -> None:
    """A read that fails mid-canary does not widen the window to the groups on the old setup."""
    server.put("LeaderWorkerSet", held_canary(ARGS, state=None))
    model, gpu = load_model(MODEL), datasheet("H200")
    settings, _ = load_settings(cli=cli_overrides(list(ACT_AT_ONCE)))
    groups = TwoGroups(server, TruthEngine(model, gpu), [1000.0])
    loop = wired(settings, (model, gpu), groups, tuner(server), lambda: 1000.0)
    loop.step()
    scope = groups.scopes[-1]
    assert scope is not None
    assert scope.groups == (1,)
    server.forbidden.add(("get", "leaderworkersets"))
    loop.step()
    failed = loop.metrics.registry.get_sample_value("autotuner_errors_total", {"kind": "read"})
    assert failed == 1  # this step's read failed, and the step went on without the target
    assert groups.scopes[-1] == scope


# --------------------------------------------------------------------------- a real Prometheus


def test_prometheus_verifies_the_canary_group_then_reads_every_group(
    server: FakeApiServer, start_prometheus: StartPrometheus
) -> None:
    """Group 0 (spec:3, slow steps) and group 1 (the canary, replay:16) serve at rates far
    apart. The loop's verification, through a real Prometheus, measures group 1's tokens/s per
    engine; after it releases the partition the next window sums both groups."""
    old = SimulatedVllm(
        setup=SimSetup(spec_tokens=3), load=lambda t: 24.0, step_time=lambda b, s: 0.2
    )
    canary = SimulatedVllm(
        setup=SimSetup(spec_tokens=0, replay=True, replay_window=16),
        load=lambda t: 24.0,
        step_time=lambda b, s: 0.02,
    )
    old_rate = 24 * (1 + 0.8 + 0.8 * 0.7 + 0.8 * 0.7 * 0.6) / 0.2  # the simulator's counts
    canary_rate = 24 / 0.02
    with SimServer(old) as group0, SimServer(canary) as group1:
        hosts = {"vllm-0": group0.url, "vllm-1": group1.url}
        pods = {url.removeprefix("http://"): pod for pod, url in hosts.items()}
        prometheus = start_prometheus(list(pods), "200ms", pods)
        for pod in hosts:
            wait_for_samples(prometheus, f'vllm:num_requests_running{{pod="{pod}"}}', 30)
        overrides = cli_overrides([*ACT_AT_ONCE, "loop.window_s=4"])
        overrides["source"] = {
            "kind": "prometheus",
            "urls": [prometheus],
            "selector": 'namespace="llm"',
            "scrape_interval_s": 0.2,
        }
        settings, _ = load_settings(cli=overrides)
        verification = Verification(
            target=REPLAY,
            previous=SPEC3,
            switched_at=time.time() - 3600,
            predicted_gain=0.5,
            baseline_rate=old_rate,
            baseline_batch=24,
            # An earlier run of the loop saw the canary group serve replay long ago: settled.
            ready_s=600,
            ready_at=time.time() - 3000,
        )
        state = TunerState(current=SPEC3).verifying(verification).model_dump_json()
        server.put("LeaderWorkerSet", held_canary([*ARGS[:4], "--use-replayssm"], state=state))
        observer = PrometheusObserver(settings)
        served = (load_model(MODEL), datasheet("H200"))
        # Both windows are read at a time whose last seconds no failed scrape touches: one marks
        # the group's series stale, and a window read at "now" then finds nothing.
        at = scraped_without_a_failure(prometheus, 4.0 + 1.0)
        observer.source.clock = lambda: at
        loop: Controller = wired(settings, served, observer, tuner(server), lambda: at)
        decision = loop.step()
        assert decision.action is Action.KEEP, decision.sentence
        assert measured(decision) == pytest.approx(canary_rate, rel=0.1)
        assert partition(server) == 0  # verified: the rest may roll
        loop.step()
    assert observer.source.scope is None
    snapshot = loop.metrics.current()
    assert snapshot.observation is not None
    assert snapshot.observation.series == 2
    assert snapshot.observation.generation_tokens_per_s == pytest.approx(
        canary_rate + old_rate, rel=0.1
    )
