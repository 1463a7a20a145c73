"""The controller against the loopback Kubernetes API: leadership, drift, pause, stuck
rollouts. Observations come from the truth engine for whatever the Deployment runs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from autotuner.actuators.kubeapi import K8sTarget, api_client
from autotuner.actuators.kubernetes import KubernetesActuator
from autotuner.actuators.lease import LeaseElector
from autotuner.controller import Controller
from autotuner.core.model.registry import load_model
from autotuner.core.predict.hardware import datasheet
from autotuner.core.types import Action, BlockReason, Observation, Setup
from autotuner.engines.vllm.setup import parse_setup, render
from autotuner.settings import cli_overrides, load_settings
from autotuner.sim.truth import TruthEngine
from tests.support.fake_apiserver import FakeApiServer, deployment, fake_apiserver
from tests.support.loop import wired
from tests.support.settings import ACT_AT_ONCE

MODEL = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4")
H200 = datasheet("H200")
TRUTH = TruthEngine(MODEL, H200)
MTP = '{"method":"mtp","num_speculative_tokens":3}'
ARGS = ["--model", MODEL.name, "--speculative-config", MTP]


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with fake_apiserver() as fake:
        fake.put("Deployment", deployment(args=ARGS))
        yield fake


def args_of(server: FakeApiServer) -> list[str]:
    return list(
        server.get("Deployment", "llm", "vllm")["spec"]["template"]["spec"]["containers"][0]["args"]
    )


def controller(
    server: FakeApiServer, identity: str, clock: list[float], demand: list[float], *extra: str
) -> Controller:
    settings, _ = load_settings(
        cli=cli_overrides(
            [
                *ACT_AT_ONCE,
                "policy.estimates.batch_half_life_s=120",
                "target.rollout_deadline_s=300",
                *extra,
            ]
        )
    )
    api = api_client(server.url, timeout_s=2)
    target = K8sTarget("llm", "deployment", "vllm", "vllm")

    def observe() -> Observation:
        setup = parse_setup(args_of(server))
        return TRUTH.observation(
            now=clock[0], window_s=60, setup=setup, batch=demand[0], rates=(0.8, 0.7, 0.6)
        )

    elector = LeaseElector(
        api, namespace="llm", name="tuner", identity=identity, clock=lambda: clock[0]
    )
    actuator = KubernetesActuator(target, api, identity=identity)
    return wired(settings, (MODEL, H200), observe, actuator, lambda: clock[0], elector=elector)


def run(controllers: list[Controller], clock: list[float], steps: int) -> None:
    for _ in range(steps):
        clock[0] += 60
        for c in controllers:
            c.step()


def test_two_sidecars_exactly_one_patches(server: FakeApiServer) -> None:
    clock, demand = [1000.0], [512.0]
    a = controller(server, "a", clock, demand)
    b = controller(server, "b", clock, demand)
    run([a, b], clock, 6)
    assert parse_setup(args_of(server)).replay_window  # the switch happened once
    identities = {e["reportingInstance"] for e in server.events if e["reason"] == "SetupSwitched"}
    assert identities == {"a"}
    # The pod template changed exactly once (periodic state saves leave it alone).
    assert server.get("Deployment", "llm", "vllm")["metadata"]["generation"] == 2
    assert b.metrics.current().leader is False


def test_drift_is_adopted_not_fought(server: FakeApiServer) -> None:
    clock, demand = [1000.0], [512.0]
    tuner = controller(server, "a", clock, demand, "policy.restart.cooldown_s=3600")
    run([tuner], clock, 4)
    switched_to = parse_setup(args_of(server))
    assert switched_to.replay_window
    # A human sets K=2 by hand.
    obj = server.get("Deployment", "llm", "vllm")
    human = render(
        args_of(server), Setup(spec_tokens=2), saved_speculative_config={"method": "mtp"}
    )
    obj["spec"]["template"]["spec"]["containers"][0]["args"] = human
    server.put("Deployment", obj)
    generation = server.get("Deployment", "llm", "vllm")["metadata"]["generation"]
    run([tuner], clock, 5)
    assert args_of(server) == human
    assert server.get("Deployment", "llm", "vllm")["metadata"]["generation"] == generation
    assert any(e["reason"] == "DriftDetected" for e in server.events)
    assert tuner.state is not None
    assert tuner.state.current == Setup(spec_tokens=2)


def test_pause_annotation_and_setting_stop_patching(server: FakeApiServer) -> None:
    clock, demand = [1000.0], [512.0]
    obj = server.get("Deployment", "llm", "vllm")
    obj["metadata"]["annotations"]["spec-autotuner.io/paused"] = "true"
    server.put("Deployment", obj)
    tuner = controller(server, "a", clock, demand)
    run([tuner], clock, 5)
    assert args_of(server) == ARGS
    decision = tuner.metrics.current().decision
    assert decision is not None
    assert decision.blocked_by is BlockReason.PAUSED
    clock2, fresh = [1000.0], None
    with fake_apiserver() as other:
        other.put("Deployment", deployment(args=ARGS))
        fresh = controller(other, "a", clock2, demand, "target.paused=true")
        run([fresh], clock2, 5)
        assert args_of(other) == ARGS


def test_stuck_rollout_is_reverted(server: FakeApiServer) -> None:
    clock, demand = [1000.0], [512.0]
    tuner = controller(server, "a", clock, demand)
    run([tuner], clock, 4)
    assert parse_setup(args_of(server)).replay_window
    server.stall_rollout(
        "Deployment", "llm", "vllm", "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    )
    run([tuner], clock, 1)
    assert parse_setup(args_of(server)) == Setup(spec_tokens=3)
    decision = tuner.metrics.current().decision
    assert decision is not None
    assert decision.action is Action.REVERT
    assert "stuck" in decision.sentence
    assert any(e["reason"] == "SetupReverted" for e in server.events)
    assert tuner.metrics.current().state.quarantine
