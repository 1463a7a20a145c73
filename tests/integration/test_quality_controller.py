"""The quality guard inside the loop, against the loopback Kubernetes API: a canary before and
after every switch, a revert with evidence when answers change, and a verdict that survives a
restart of the sidecar between the two runs. The replica's completions come from an injected
transport whose answers depend on the Deployment's live args."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from autotuner.actuators.base import STATE_ANNOTATION
from autotuner.actuators.kubeapi import K8sTarget, api_client
from autotuner.actuators.kubernetes import KubernetesActuator
from autotuner.canary.guard import QualityGuard
from autotuner.controller import Controller
from autotuner.core.model.registry import load_model
from autotuner.core.predict.hardware import datasheet
from autotuner.core.types import Action, Decision, Observation, Setup
from autotuner.engines.vllm.setup import parse_setup
from autotuner.errors import ActuatorError
from autotuner.settings import Settings, cli_overrides, load_settings
from autotuner.sim.truth import TruthEngine
from autotuner.telling.snapshot import decision_document
from autotuner.wiring import quality_guard
from tests.support.fake_apiserver import FakeApiServer, deployment, fake_apiserver
from tests.support.loop import wired
from tests.support.settings import ACT_AT_ONCE

MODEL = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4")
H200 = datasheet("H200")
TRUTH = TruthEngine(MODEL, H200)
MTP = '{"method":"mtp","num_speculative_tokens":3}'
ARGS = ["--model", MODEL.name, "--speculative-config", MTP]
SPEC3 = Setup(spec_tokens=3)


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with fake_apiserver() as fake:
        fake.put("Deployment", deployment(args=ARGS))
        yield fake


def live_setup(server: FakeApiServer) -> Setup:
    obj = server.get("Deployment", "llm", "vllm")
    return parse_setup(list(obj["spec"]["template"]["spec"]["containers"][0]["args"]))


@dataclass
class Replica:
    """Greedy completions of what the Deployment runs; replay setups answer differently when
    `replay_breaks` (a kernel bug the canary must catch)."""

    server: FakeApiServer
    replay_breaks: bool = False
    asked: list[str] = field(default_factory=list)

    def handle(self, request: httpx.Request) -> httpx.Response:
        setup = live_setup(self.server)
        self.asked.append(setup.label)
        body = json.loads(request.content)
        prompt, tokens = body["prompt"], body["max_tokens"]
        text = "".join(f" t{(len(prompt) * 7 + i) % 97}" for i in range(tokens))
        if self.replay_breaks and setup.replay_window:
            text = " garbage" + text[::-1]
        return httpx.Response(
            200, json={"model": "m", "choices": [{"text": text}], "usage": {"completion_tokens": 0}}
        )


def settings_for(*extra: str) -> Settings:
    settings, _ = load_settings(
        cli=cli_overrides(
            [
                *ACT_AT_ONCE,
                "policy.estimates.batch_half_life_s=120",
                "quality.max_tokens=8",
                "quality.max_waiting=100000",
                "source.urls=[http://replica:8000/metrics]",
                *extra,
            ]
        )
    )
    return settings


def controller(
    server: FakeApiServer, replica: Replica, clock: list[float], *extra: str
) -> Controller:
    settings = settings_for(*extra)
    api = api_client(server.url, timeout_s=2)

    def observe() -> Observation:
        return TRUTH.observation(
            now=clock[0], window_s=60, setup=live_setup(server), batch=512, rates=(0.8, 0.7, 0.6)
        )

    guard, off = quality_guard(settings)
    if guard is not None:
        assert guard.base_url == "http://replica:8000"
        guard = QualityGuard(
            settings.quality,
            guard.base_url,
            client=httpx.Client(transport=httpx.MockTransport(replica.handle)),
        )
    actuator = KubernetesActuator(K8sTarget("llm", "deployment", "vllm", "vllm"), api, identity="a")
    return wired(
        settings, (MODEL, H200), observe, actuator, lambda: clock[0], quality=guard, quality_off=off
    )


def steps(tuner: Controller, clock: list[float], count: int = 1) -> list[Decision]:
    decisions = []
    for _ in range(count):
        clock[0] += 60
        decisions.append(tuner.step())
    return decisions


def step(tuner: Controller, clock: list[float], count: int = 1) -> list[Action]:
    return [d.action for d in steps(tuner, clock, count)]


def canary_runs(tuner: Controller, phase: str, outcome: str = "ok") -> float:
    value = tuner.metrics.registry.get_sample_value(
        "autotuner_canary_runs_total", {"phase": phase, "outcome": outcome}
    )
    return value or 0.0


def step_until_switch(tuner: Controller, clock: list[float], server: FakeApiServer) -> None:
    """Step until the tuner patches; the new pods then come up (the rollout completes)."""
    for _ in range(10):
        if step(tuner, clock) == [Action.SWITCH]:
            server.complete_rollout("Deployment", "llm", "vllm")
            return
    raise AssertionError("no switch")


def test_changed_answers_revert_the_switch_with_evidence(server: FakeApiServer) -> None:
    clock = [1000.0]
    replica = Replica(server, replay_breaks=True)
    tuner = controller(server, replica, clock)
    step_until_switch(tuner, clock, server)
    switched_to = live_setup(server)
    assert switched_to.replay_window  # replay wins at batch 512
    assert canary_runs(tuner, "baseline") == 1  # taken on spec:3 while quiet, used as "before"
    assert canary_runs(tuner, "before") == 0
    assert set(replica.asked[:12]) == {SPEC3.label}
    reverts = [d for d in steps(tuner, clock, 3) if d.action is Action.REVERT]
    assert len(reverts) == 1
    assert live_setup(server) == SPEC3
    assert canary_runs(tuner, "after") == 1
    assert replica.asked[-1] == switched_to.label
    assert "quality canary got worse (worse: 0/12 outputs identical" in reverts[0].sentence
    state = tuner.metrics.current().state
    assert switched_to.label in state.quarantine
    assert state.last_quality is not None
    assert state.last_quality.status == "failed"
    assert tuner.metrics.registry.get_sample_value("autotuner_quality_regressions_total") == 1
    assert (
        tuner.metrics.registry.get_sample_value("autotuner_quality_check", {"status": "failed"})
        == 1
    )
    reasons = [e["reason"] for e in server.events]
    assert "QualityRegression" in reasons
    assert "SetupReverted" in reasons
    document = decision_document(tuner.metrics.current())
    evidence = document["state"]["quality"]["evidence"]
    assert len(evidence) == 6
    assert "garbage" in evidence[0]


def test_a_regression_is_counted_when_judged_before_and_without_the_revert(
    server: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The counter moves when the canary judges, not when the revert's patch returns: a slow
    restart (minutes) or a failed revert must not hide a regression from the operator."""
    clock = [1000.0]
    replica = Replica(server, replay_breaks=True)
    tuner = controller(server, replica, clock)
    step_until_switch(tuner, clock, server)
    actuator = tuner.actuator
    assert isinstance(actuator, KubernetesActuator)
    counted_at_apply: list[float | None] = []

    def failing_apply(*args: object, **kwargs: object) -> None:
        counted_at_apply.append(
            tuner.metrics.registry.get_sample_value("autotuner_quality_regressions_total")
        )
        raise ActuatorError("the API server is gone")

    monkeypatch.setattr(actuator, "apply", failing_apply)
    decisions = steps(tuner, clock, 3)
    assert any(d.action is Action.REVERT for d in decisions)
    assert counted_at_apply
    assert counted_at_apply[0] == 1  # already counted when the revert was about to be written
    assert tuner.metrics.registry.get_sample_value("autotuner_quality_regressions_total") == 1
    assert live_setup(server).replay_window  # the revert really failed: still the broken setup


def test_identical_answers_verify_and_refresh_the_baseline(server: FakeApiServer) -> None:
    clock = [1000.0]
    replica = Replica(server)
    tuner = controller(server, replica, clock)
    step_until_switch(tuner, clock, server)
    switched_to = live_setup(server)
    decisions = steps(tuner, clock, 4)
    assert all(d.action is not Action.REVERT for d in decisions)
    verified = [d for d in decisions if d.sentence.startswith(f"verified {switched_to.label}")]
    assert len(verified) == 1
    assert verified[0].notes[0].startswith("quality: passed: identical: 12/12 outputs identical")
    assert live_setup(server) == switched_to
    state = tuner.state
    assert state is not None
    assert state.verification is None
    assert state.last_quality is not None
    assert state.last_quality.status == "passed"
    assert state.canary_baseline is not None
    assert state.canary_baseline["setup"] == switched_to.label
    assert canary_runs(tuner, "after") == 1
    assert replica.asked == [SPEC3.label] * 12 + [switched_to.label] * 12


def test_the_verdict_survives_a_sidecar_restart_between_before_and_after(
    server: FakeApiServer,
) -> None:
    clock = [1000.0]
    replica = Replica(server, replay_breaks=True)
    first = controller(server, replica, clock)
    step_until_switch(first, clock, server)
    asked_before = len(replica.asked)
    # The sidecar dies right after the patch; a new one reads the state from the annotation.
    second = controller(server, replica, clock)
    actions = step(second, clock, 3)
    assert Action.REVERT in actions
    assert live_setup(server) == SPEC3
    assert canary_runs(second, "baseline") == 0
    assert canary_runs(second, "before") == 0
    assert canary_runs(second, "after") == 1
    assert len(replica.asked) == asked_before + 12  # only the after-run, nothing re-taken


def test_a_saturated_server_gets_no_canary_and_the_switch_says_so(
    server: FakeApiServer,
) -> None:
    clock = [1000.0]
    replica = Replica(server, replay_breaks=True)
    tuner = controller(server, replica, clock, "quality.max_waiting=0.5")
    step_until_switch(tuner, clock, server)
    assert replica.asked == []
    switch = tuner.metrics.current().decision
    assert switch is not None
    assert any(
        "quality: no canary before the switch: the server is saturated" in n for n in switch.notes
    )
    state = tuner.state
    assert state is not None
    assert state.verification is not None
    assert state.verification.quality is not None
    assert state.verification.quality.status == "skipped"
    assert canary_runs(tuner, "before", "skipped") == 1
    skipped = [e["message"] for e in server.events if e["reason"] == "CanarySkipped"]
    assert len(skipped) == 1
    assert "no canary before the switch: the server is saturated" in skipped[0]
    # Verification goes on on throughput alone (replay is faster here: it stays).
    step(tuner, clock, 4)
    assert live_setup(server).replay_window


def test_disabled_guard_says_it_skipped(server: FakeApiServer) -> None:
    clock = [1000.0]
    replica = Replica(server, replay_breaks=True)
    tuner = controller(server, replica, clock, "quality.enabled=false")
    step_until_switch(tuner, clock, server)
    switch = tuner.metrics.current().decision
    assert switch is not None
    assert "quality: the quality guard is disabled (quality.enabled=false)" in switch.notes
    assert replica.asked == []


@pytest.mark.parametrize(
    ("persisted", "resumed"),
    [
        ("{not json", False),
        ((Path(__file__).parent.parent / "unit/data/tuner_state_v1.json"), True),
    ],
    ids=["unreadable", "first wave's schema"],
)
def test_a_persisted_state_is_migrated_or_kept_aside_never_dropped(
    server: FakeApiServer, persisted: str | Path, resumed: bool
) -> None:
    text = persisted.read_text() if isinstance(persisted, Path) else persisted
    obj = server.get("Deployment", "llm", "vllm")
    obj["metadata"]["annotations"] = {STATE_ANNOTATION: text}
    server.put("Deployment", obj)
    clock = [1000.0]
    tuner = controller(server, Replica(server), clock)
    steps(tuner, clock, 2)
    state = tuner.state
    assert state is not None
    errors = tuner.metrics.registry.get_sample_value("autotuner_errors_total", {"kind": "state"})
    told = [e for e in server.events if e["reason"] == "StateSetAside"]
    if resumed:
        assert state.last_decision_id == 42 + 2  # the old state's decisions, continued
        assert state.quarantine.get("spec:1") == 9000.0
        assert state.set_aside is None
        assert told == []
    else:
        assert state.set_aside == text  # kept for the operator, and persisted with the state
        assert errors == 1  # said once, not at every step
        assert len(told) == 1
        assert "cannot be read (not JSON" in told[0]["message"]
