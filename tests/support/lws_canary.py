"""A two-group LeaderWorkerSet `llm/vllm` on the loopback API server during a partition
canary, as the canary tests drive it: the partition, the LWS controller's report of its
groups, an object whose partition already holds group 0 back, and the loop over it stepped
until the canary is held and until it is released."""

from __future__ import annotations

from typing import Any

from autotuner.actuators.base import STATE_ANNOTATION
from autotuner.actuators.kinds import at
from autotuner.actuators.kubeapi import K8sTarget, api_client
from autotuner.actuators.kubernetes import PARTITION_ANNOTATION, KubernetesActuator
from autotuner.controller import Controller, Observer
from autotuner.core.model.registry import load_model
from autotuner.core.predict.hardware import datasheet
from autotuner.core.types import Decision, Observation
from autotuner.engines.vllm.setup import parse_setup
from autotuner.settings import cli_overrides, load_settings
from autotuner.sim.truth import TruthEngine
from tests.support.fake_apiserver import FakeApiServer
from tests.support.loop import wired
from tests.support.serving_objects import lws
from tests.support.settings import ACT_AT_ONCE

MODEL = "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4"
MTP = '{"method":"mtp","num_speculative_tokens":3}'
ARGS = ["--model", MODEL, "--tensor-parallel-size", "8", "--speculative-config", MTP]
URI = "k8s://llm/leaderworkerset/vllm"
WORKER_ARGS = ("spec", "leaderWorkerTemplate", "workerTemplate", "spec", "containers", 0, "args")
RATES = (0.8, 0.7, 0.6)


def partition(server: FakeApiServer) -> Any:
    """The LeaderWorkerSet's partition now (None: unset)."""
    obj = server.get("LeaderWorkerSet", "llm", "vllm")
    return obj["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"].get("partition")


def groups_report(server: FakeApiServer, ready: int, updated: int) -> None:
    """The LWS controller's status of the two groups at the object's generation: `ready`
    serving, `updated` on the current template."""
    obj = server.get("LeaderWorkerSet", "llm", "vllm")
    obj["status"] = {
        "observedGeneration": obj["metadata"]["generation"],
        "replicas": 2,
        "readyReplicas": ready,
        "updatedReplicas": updated,
    }
    server.put("LeaderWorkerSet", obj)


def held_canary(args: list[str], *, state: str | None = None) -> dict[str, Any]:
    """The object with its partition (1) holding group 0 back while group 1 runs `args` (the
    operator's own partition, 0, kept to restore), with the tuner's state record if given;
    the LWS controller reports group 1 rolled."""
    obj = lws(args, worker_args=args)
    obj["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"]["partition"] = 1
    obj["metadata"]["annotations"] = {PARTITION_ANNOTATION: "0"}
    if state is not None:
        obj["metadata"]["annotations"][STATE_ANNOTATION] = state
    obj["status"]["updatedReplicas"] = 1
    return obj


def canary_loop(
    server: FakeApiServer, observe: Observer | None = None, clock: list[float] | None = None
) -> tuple[Controller, list[float]]:
    """The loop over the LeaderWorkerSet (on spec:3) with the partition canary; it observes
    `observe`, by default the simulated engine as the object's worker args set it up; the
    clock is the list's one value."""
    model, gpu = load_model(MODEL), datasheet("H200")
    truth, now = TruthEngine(model, gpu), clock or [1000.0]
    server.put("LeaderWorkerSet", lws(ARGS, worker_args=ARGS))
    overrides = [*ACT_AT_ONCE, "policy.estimates.batch_half_life_s=120"]
    settings, _ = load_settings(cli=cli_overrides(overrides))
    act = KubernetesActuator(K8sTarget.parse(URI), api_client(server.url, timeout_s=2), canary=True)

    def as_the_workers_run() -> Observation:
        args = at(server.get("LeaderWorkerSet", "llm", "vllm"), WORKER_ARGS)
        return truth.observation(
            now=now[0], window_s=60, setup=parse_setup(args), batch=512.0, rates=RATES
        )

    loop = wired(settings, (model, gpu), observe or as_the_workers_run, act, lambda: now[0])
    return loop, now


def until_held(loop: Controller, clock: list[float], server: FakeApiServer) -> None:
    """Step a minute at a time until a switch holds group 0 back."""
    while partition(server) != 1:
        assert clock[0] < 1000.0 + 3600, "the loop never switched"
        clock[0] += 60
        loop.step()


def until_released(loop: Controller, clock: list[float], server: FakeApiServer) -> Decision:
    """With group 1 reported rolled, step until verification releases the canary; the last
    step's decision."""
    groups_report(server, ready=2, updated=1)
    decision = None
    while partition(server) == 1:
        assert clock[0] < 1000.0 + 7200, "verification never released the canary"
        clock[0] += 60
        decision = loop.step()
    assert decision is not None, "the canary was not held"
    return decision
