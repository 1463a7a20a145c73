"""The multi-GPU serving objects as targets: the official client over real HTTP against the
loopback API server, each kind under its real API group and version."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from autotuner.actuators.base import OPERATOR_ANNOTATION, STATE_ANNOTATION
from autotuner.actuators.kinds import Path, at
from autotuner.actuators.kubeapi import K8sTarget, api_client, discover_target
from autotuner.actuators.kubernetes import PARTITION_ANNOTATION, KubernetesActuator
from autotuner.core.model.registry import load_model
from autotuner.core.predict.hardware import datasheet
from autotuner.core.types import Action, Observation, Setup
from autotuner.engines.vllm.setup import parse_setup
from autotuner.errors import ActuatorError, AdviceOnlyError, ConflictError, ForbiddenError
from autotuner.settings import cli_overrides, load_settings
from autotuner.sim.truth import TruthEngine
from tests.support.fake_apiserver import FakeApiServer, deployment, fake_apiserver
from tests.support.loop import wired
from tests.support.lws_canary import (
    ARGS,
    MODEL,
    MTP,
    canary_loop,
    groups_report,
    held_canary,
    until_held,
    until_released,
)
from tests.support.serving_objects import (
    dynamo_v1alpha1,
    dynamo_v1beta1,
    inference_service,
    llm_inference_service,
    lws,
    unschedulable_pod,
)

REPLAY = Setup(replay_window=16)
WORKER: Path = ("spec", "leaderWorkerTemplate", "workerTemplate", "spec", "containers", 0)
LEADER: Path = ("spec", "leaderWorkerTemplate", "leaderTemplate", "spec", "containers", 0)
DECODE: Path = ("spec", "components", 1, "podTemplate", "spec", "containers", 0)


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with fake_apiserver() as fake:
        yield fake


def tuner(server: FakeApiServer, uri: str, **options: Any) -> KubernetesActuator:
    return KubernetesActuator(K8sTarget.parse(uri), api_client(server.url, timeout_s=2), **options)


def patches(server: FakeApiServer) -> list[tuple[str, str, str]]:
    return [r for r in server.requests if r[0] == "PATCH"]


def assert_only(before: dict[str, Any], after: dict[str, Any], changed: list[Path]) -> None:
    """`after` is `before` but for the values at `changed` and our annotations."""
    expected, seen = copy.deepcopy(before), copy.deepcopy(after)
    for path in changed:
        parent = at(seen, path[:-1])
        parent[path[-1]] = at(expected, path)
    for obj in (expected, seen):
        meta = obj["metadata"]
        for key in ("resourceVersion", "generation"):
            meta.pop(key, None)
        # The tuner's own records: its state, the canary's partition, the operator's drafter
        # and companion flags kept to put back.
        for key in (STATE_ANNOTATION, PARTITION_ANNOTATION, OPERATOR_ANNOTATION):
            meta.get("annotations", {}).pop(key, None)
    assert seen == expected


# --------------------------------------------------------------------------- LeaderWorkerSet


def test_lws_leader_and_workers_get_only_the_managed_flags(server: FakeApiServer) -> None:
    server.put("LeaderWorkerSet", lws(ARGS, worker_args=ARGS))
    before = server.get("LeaderWorkerSet", "llm", "vllm")
    act = tuner(server, "k8s://llm/leaderworkerset/vllm")
    live = act.read()
    assert live.setup == Setup(spec_tokens=3)
    act.apply(REPLAY, state='{"v":1}', expected_version=live.version)
    after = server.get("LeaderWorkerSet", "llm", "vllm")
    leader = at(after, (*LEADER, "command", 2))
    ray = at(before, (*LEADER, "command", 2)).split(";")[0]
    assert leader == (
        f"{ray}; vllm serve --model {MODEL} --tensor-parallel-size 8 --use-replayssm "
        "--replayssm-buffer-len 16"
    )
    assert parse_setup(at(after, (*WORKER, "args"))) == REPLAY
    assert after["metadata"]["annotations"][STATE_ANNOTATION] == '{"v":1}'
    assert_only(before, after, [(*LEADER, "command"), (*WORKER, "args")])
    assert all("json-patch" in r[2] and "leaderworkersets/vllm" in r[1] for r in patches(server))


def test_lws_templates_that_disagree_are_refused(server: FakeApiServer) -> None:
    server.put("LeaderWorkerSet", lws(ARGS, worker_args=ARGS[:4]))
    with pytest.raises(ActuatorError, match="disagree on the managed flags"):
        tuner(server, "k8s://llm/leaderworkerset/vllm").read()
    assert patches(server) == []


def test_lws_partition_canary_rolls_the_last_group_then_the_rest(server: FakeApiServer) -> None:
    server.put("LeaderWorkerSet", lws(ARGS, replicas=3))  # Ray workers: the leader has the args
    act = tuner(server, "k8s://llm/leaderworkerset/vllm/vllm-leader", canary=True)
    act.apply(REPLAY, state=None, expected_version=None)
    obj = server.get("LeaderWorkerSet", "llm", "vllm")
    assert obj["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"]["partition"] == 2
    assert obj["metadata"]["annotations"][PARTITION_ANNOTATION] == "0"
    obj["status"] = {"observedGeneration": 2, "replicas": 3, "readyReplicas": 3}
    server.put("LeaderWorkerSet", obj)
    assert not act.read().rollout.done  # the canary group has not rolled yet
    obj = server.get("LeaderWorkerSet", "llm", "vllm")
    obj["status"]["updatedReplicas"] = 1  # the last group runs the new args
    server.put("LeaderWorkerSet", obj)
    live = act.read()
    assert live.rollout.done
    assert "2 held by the partition" in live.rollout.detail
    assert live.scope is not None  # the canary's pods, for the metrics that verify it
    assert (live.scope.groups, live.scope.pods) == ((2,), "vllm-(2)(-[0-9]+)?")
    act.event("CanaryHeld", "only the last group rolls")
    involved = server.events[-1]["involvedObject"]
    assert (involved["apiVersion"], involved["kind"]) == (
        "leaderworkerset.x-k8s.io/v1",
        "LeaderWorkerSet",
    )
    assert act.release_canary()
    released = server.get("LeaderWorkerSet", "llm", "vllm")
    assert released["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"]["partition"] == 0
    assert PARTITION_ANNOTATION not in released["metadata"]["annotations"]
    assert act.read().scope is None  # every group's metrics again
    assert not act.release_canary()  # nothing held any more


def test_lws_stuck_on_unschedulable_pods_and_surge_refused(server: FakeApiServer) -> None:
    obj = lws(ARGS, max_surge=1)
    obj["status"]["updatedReplicas"] = 0
    server.put("LeaderWorkerSet", obj)
    server.put("Pod", unschedulable_pod("vllm-1", {"leaderworkerset.sigs.k8s.io/name": "vllm"}))
    act = tuner(server, "k8s://llm/leaderworkerset/vllm")
    rollout = act.read().rollout
    assert not rollout.done
    assert rollout.stuck is not None
    assert "Insufficient nvidia.com/gpu" in rollout.stuck
    with pytest.raises(ActuatorError, match="maxSurge 1"):
        act.apply(REPLAY, state=None, expected_version=None)
    assert patches(server) == []


def test_discovery_walks_from_a_worker_pod_to_its_lws(server: FakeApiServer) -> None:
    server.put("LeaderWorkerSet", lws(ARGS))
    owner = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet"}
    sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "name": "vllm-0",
        "uid": "u-2",
        "controller": True,
    }
    server.put(
        "StatefulSet",
        {
            "metadata": {
                "name": "vllm-0",
                "namespace": "llm",
                "ownerReferences": [{**owner, "name": "vllm", "uid": "u-1", "controller": True}],
            },
            "spec": {},
        },
    )
    server.put(
        "Pod",
        {
            "metadata": {"name": "vllm-0-1", "namespace": "llm", "ownerReferences": [sts]},
            "spec": {"containers": []},
        },
    )
    found = discover_target(api_client(server.url), "llm", "vllm-0-1", "vllm-worker")
    assert str(found) == "k8s://llm/leaderworkerset/vllm/vllm-worker"


# --------------------------------------------------------------------------- Dynamo


def test_dynamo_v1beta1_component_args_and_its_rollout(server: FakeApiServer) -> None:
    server.put("DynamoGraphDeployment", dynamo_v1beta1(ARGS))
    before = server.get("DynamoGraphDeployment", "llm", "disagg")
    act = tuner(server, "k8s://llm/dynamographdeployment/disagg/VllmDecodeWorker")
    live = act.read()
    assert live.rollout.done
    act.apply(REPLAY, state="s", expected_version=live.version)
    after = server.get("DynamoGraphDeployment", "llm", "disagg")
    assert parse_setup(at(after, (*DECODE, "args"))) == REPLAY
    assert_only(before, after, [(*DECODE, "args")])
    assert all("/apis/nvidia.com/v1beta1/" in r[1] for r in patches(server))
    after["status"]["rollingUpdate"] = {"phase": "InProgress"}
    server.put("DynamoGraphDeployment", after)
    assert not act.read().rollout.done
    after["status"]["rollingUpdate"] = {"phase": "Failed"}
    after["status"]["state"] = "failed"
    server.put("DynamoGraphDeployment", after)
    stuck = act.read().rollout.stuck
    assert stuck is not None
    assert "failed" in stuck


def test_dynamo_custom_object_conflict_and_forbidden(server: FakeApiServer) -> None:
    server.put("DynamoGraphDeployment", dynamo_v1beta1(ARGS))
    act = tuner(server, "k8s://llm/dynamographdeployment/disagg/VllmDecodeWorker")
    stale = act.read().version
    other = server.get("DynamoGraphDeployment", "llm", "disagg")
    other["spec"]["components"][1]["podTemplate"]["spec"]["containers"][0]["args"] = ARGS[:4]
    server.put("DynamoGraphDeployment", other)  # another writer changed the setup
    with pytest.raises(ConflictError, match="setup"):
        act.apply(REPLAY, state=None, expected_version=stale)
    server.forbidden.add(("patch", "dynamographdeployments"))
    with pytest.raises(ForbiddenError):
        act.apply(REPLAY, state=None, expected_version=None)
    assert server.get("DynamoGraphDeployment", "llm", "disagg") == other


def test_dynamo_v1alpha1_service_main_container(server: FakeApiServer) -> None:
    server.put("DynamoGraphDeployment", dynamo_v1alpha1(ARGS))
    before = server.get("DynamoGraphDeployment", "llm", "disagg")
    uri = "k8s://llm/dynamographdeployment.v1alpha1/disagg/VllmDecodeWorker"
    tuner(server, uri).apply(REPLAY, state=None, expected_version=None)
    after = server.get("DynamoGraphDeployment", "llm", "disagg")
    main: Path = ("spec", "services", "VllmDecodeWorker", "extraPodSpec", "mainContainer")
    assert parse_setup(at(after, (*main, "args"))) == REPLAY
    assert_only(before, after, [(*main, "args")])
    assert all("/apis/nvidia.com/v1alpha1/" in r[1] for r in patches(server))


# --------------------------------------------------------------------------- KServe


def test_llm_inference_service_env_args_are_rewritten_in_place(server: FakeApiServer) -> None:
    line = f"--max-model-len  32768 --speculative-config '{MTP}' --enable-prefix-caching"
    server.put("LLMInferenceService", llm_inference_service(line))
    before = server.get("LLMInferenceService", "llm", "qwen")
    act = tuner(server, "k8s://llm/llminferenceservice/qwen")
    assert act.read().setup == Setup(spec_tokens=3)
    act.apply(REPLAY, state=None, expected_version=None)
    after = server.get("LLMInferenceService", "llm", "qwen")
    value: Path = ("spec", "template", "containers", 0, "env", 1, "value")
    # The double blank and the other flags keep their bytes; only the managed flags change.
    assert at(after, value) == (
        "--max-model-len  32768 --enable-prefix-caching --use-replayssm --replayssm-buffer-len 16"
    )
    assert_only(before, after, [value])
    after["status"] = {
        "observedGeneration": 2,
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "MinimumReplicasUnavailable",
                "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
            }
        ],
    }
    server.put("LLMInferenceService", after)
    assert act.read().rollout.stuck is not None


def test_inference_service_predictor_args_and_serverless_surge(server: FakeApiServer) -> None:
    server.put("InferenceService", inference_service(ARGS))
    before = server.get("InferenceService", "llm", "qwen")
    act = tuner(server, "k8s://llm/inferenceservice/qwen")
    act.apply(REPLAY, state=None, expected_version=None)
    after = server.get("InferenceService", "llm", "qwen")
    args: Path = ("spec", "predictor", "model", "args")
    assert parse_setup(at(after, args)) == REPLAY
    assert_only(before, after, [args])
    server.put("InferenceService", inference_service(ARGS, name="knative", mode="Serverless"))
    with pytest.raises(ActuatorError, match="revision beside the old one"):
        tuner(server, "k8s://llm/inferenceservice/knative").apply(
            REPLAY, state=None, expected_version=None
        )


@pytest.mark.parametrize(
    ("kind", "obj", "uri"),
    [
        (
            "LLMInferenceService",
            llm_inference_service("--max-model-len 4096"),
            "llminferenceservice",
        ),
        ("InferenceService", inference_service(ARGS), "inferenceservice"),
    ],
)
def test_kserve_rollout_progress_and_stuck(
    server: FakeApiServer, kind: str, obj: dict[str, Any], uri: str
) -> None:
    server.put(kind, obj)
    act = tuner(server, f"k8s://llm/{uri}/qwen")
    assert act.read().rollout.done
    obj = server.get(kind, "llm", "qwen")
    obj["metadata"]["generation"] = 2  # a new spec the controller has not reconciled yet
    server.put(kind, obj)
    rollout = act.read().rollout
    assert (rollout.done, rollout.stuck) == (False, None)
    obj["status"] = {
        "observedGeneration": 2,
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "RevisionFailed",
                "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
            }
        ],
    }
    server.put(kind, obj)
    stuck = act.read().rollout.stuck
    assert stuck is not None
    assert stuck.startswith("RevisionFailed")


# --------------------------------------------------------------------------- who else writes


def test_a_controlled_child_is_refused_with_its_owner_named(server: FakeApiServer) -> None:
    child = deployment(name="qwen-kserve", args=ARGS)
    child["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "serving.kserve.io/v1alpha1",
            "kind": "LLMInferenceService",
            "name": "qwen",
            "uid": "u",
            "controller": True,
        }
    ]
    server.put("Deployment", child)
    act = tuner(server, "k8s://llm/deployment/qwen-kserve/vllm")
    assert act.read().advice is not None
    # The owner as its reference serves it: v1alpha1, not the kind's default v1alpha2.
    with pytest.raises(AdviceOnlyError, match=r"k8s://llm/llminferenceservice\.v1alpha1/qwen"):
        act.apply(REPLAY, state=None, expected_version=None)
    assert patches(server) == []


def test_helm_managed_objects_are_advised_unless_told(server: FakeApiServer) -> None:
    managed = deployment(args=ARGS)
    managed["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "Helm"}
    managed["metadata"]["annotations"] = {"meta.helm.sh/release-name": "vllm"}
    server.put("Deployment", managed)
    with pytest.raises(AdviceOnlyError, match=r"(?s)Helm.*--use-replayssm"):
        tuner(server, "k8s://llm/deployment/vllm/vllm").apply(
            REPLAY, state=None, expected_version=None
        )
    assert patches(server) == []
    told = tuner(server, "k8s://llm/deployment/vllm/vllm", write_managed=True)
    assert told.apply(REPLAY, state=None, expected_version=None).changed


def test_args_from_a_configmap_are_read_and_advised(server: FakeApiServer) -> None:
    obj = deployment(args=["--model", MODEL, "$(ENGINE_ARGS)"])
    main = obj["spec"]["template"]["spec"]["containers"][0]
    main["env"] = [
        {"name": "ENGINE_ARGS", "valueFrom": {"configMapKeyRef": {"name": "engine", "key": "args"}}}
    ]
    server.put("Deployment", obj)
    server.put(
        "ConfigMap",
        {
            "metadata": {"name": "engine", "namespace": "llm"},
            "data": {"args": f"--speculative-config '{MTP}'"},
        },
    )
    act = tuner(server, "k8s://llm/deployment/vllm/vllm")
    assert act.read().setup == Setup(spec_tokens=3)
    with pytest.raises(AdviceOnlyError, match="ConfigMap engine key args"):
        act.apply(REPLAY, state=None, expected_version=None)
    assert patches(server) == []


def test_a_config_file_from_a_configmap_is_read_and_advised(server: FakeApiServer) -> None:
    obj = deployment(args=["--model", MODEL, "--config", "/etc/vllm/engine.yaml"])
    pod = obj["spec"]["template"]["spec"]
    pod["containers"][0]["volumeMounts"] = [{"name": "conf", "mountPath": "/etc/vllm"}]
    pod["volumes"] = [{"name": "conf", "configMap": {"name": "vllm-conf"}}]
    server.put("Deployment", obj)
    config = {"speculative-config": json.loads(MTP), "max-num-seqs": 128}
    server.put(
        "ConfigMap",
        {
            "metadata": {"name": "vllm-conf", "namespace": "llm"},
            "data": {"engine.yaml": json.dumps(config)},
        },
    )
    act = tuner(server, "k8s://llm/deployment/vllm/vllm")
    assert act.read().setup == Setup(spec_tokens=3)
    with pytest.raises(AdviceOnlyError, match=r"ConfigMap vllm-conf key engine\.yaml"):
        act.apply(REPLAY, state=None, expected_version=None)
    server.forbidden.add(("get", "configmaps"))
    with pytest.raises(ForbiddenError):
        act.read()


# --------------------------------------------------------------------------- the loop


def test_the_loop_reverts_an_lws_canary_stuck_on_gpus(server: FakeApiServer) -> None:
    """The loop switches a LeaderWorkerSet through a partition canary; the canary group cannot
    be scheduled (no free GPU): the rollout is stuck and the loop reverts it."""
    loop, clock = canary_loop(server)
    for _ in range(4):
        clock[0] += 60
        loop.step()
    obj = server.get("LeaderWorkerSet", "llm", "vllm")
    assert parse_setup(at(obj, (*WORKER, "args"))).replay_window  # switched
    assert obj["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"]["partition"] == 1
    groups_report(server, ready=1, updated=0)
    server.put("Pod", unschedulable_pod("vllm-1", {"leaderworkerset.sigs.k8s.io/name": "vllm"}))
    clock[0] += 60
    loop.step()
    reverted = server.get("LeaderWorkerSet", "llm", "vllm")
    assert parse_setup(at(reverted, (*WORKER, "args"))) == Setup(spec_tokens=3)
    decision = loop.metrics.current().decision
    assert decision is not None
    assert decision.action is Action.REVERT
    assert "Insufficient nvidia.com/gpu" in decision.sentence
    server.delete("Pod", "llm", "vllm-1")  # a GPU is free again
    while PARTITION_ANNOTATION in server.get("LeaderWorkerSet", "llm", "vllm")["metadata"].get(
        "annotations", {}
    ):  # the partition is not left held: a step with nothing to verify or write releases it
        assert clock[0] < 1000.0 + 7200, "the canary was never released after the revert"
        groups_report(server, ready=2, updated=1)
        clock[0] += 60
        loop.step()
    released = server.get("LeaderWorkerSet", "llm", "vllm")
    assert released["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"]["partition"] == 0


def test_the_loop_releases_an_lws_canary_once_verified(server: FakeApiServer) -> None:
    """The canary group rolls and holds up: once verification keeps the setup, the loop lets
    the remaining groups roll (the operator's partition is back)."""
    loop, clock = canary_loop(server)
    until_held(loop, clock, server)
    decision = until_released(loop, clock, server)
    assert decision.action is Action.KEEP
    assert decision.sentence.startswith("verified")
    assert (
        PARTITION_ANNOTATION
        not in server.get("LeaderWorkerSet", "llm", "vllm")["metadata"]["annotations"]
    )


def test_a_canary_left_held_is_released_at_the_next_quiet_step(server: FakeApiServer) -> None:
    """A partition a canary holds while nothing is being verified (a release that failed, a
    tuner restarted): the next step that verifies and writes nothing lets the rest roll."""
    model, gpu = load_model(MODEL), datasheet("H200")
    server.put("LeaderWorkerSet", held_canary(ARGS))
    settings, _ = load_settings(cli=cli_overrides(["mode=act", "engine.build=0.33.0"]))
    truth = TruthEngine(model, gpu)

    def observe() -> Observation:
        return truth.observation(
            now=1060.0, window_s=60, setup=Setup(spec_tokens=3), batch=8.0, rates=(0.8, 0.7, 0.6)
        )

    act = tuner(server, "k8s://llm/leaderworkerset/vllm", canary=True)
    loop = wired(settings, (model, gpu), observe, act, lambda: 1060.0)
    loop.step()
    assert loop.metrics.current().decision is not None
    released = server.get("LeaderWorkerSet", "llm", "vllm")
    assert released["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"]["partition"] == 0
    assert PARTITION_ANNOTATION not in released["metadata"]["annotations"]


def test_llm_d_modelserver_args_rollout_and_stuck(server: FakeApiServer) -> None:
    """llm-d serves from a Deployment whose engine container is `modelserver`, beside its
    routing proxy: only the engine's managed flags change; the Deployment's rollout says how far
    it got and when it cannot finish."""
    obj = deployment(args=ARGS, container="modelserver")
    proxy = {"name": "routing-proxy", "image": "ghcr.io/llm-d/llm-d-routing-sidecar:v0.2.0"}
    obj["spec"]["template"]["spec"]["containers"].insert(0, proxy)
    server.put("Deployment", obj)
    before = server.get("Deployment", "llm", "vllm")
    act = tuner(server, "k8s://llm/deployment/vllm")  # the engine's container found by name
    live = act.read()
    assert live.setup == Setup(spec_tokens=3)
    act.apply(REPLAY, state="s", expected_version=live.version)
    after = server.get("Deployment", "llm", "vllm")
    engine = ("spec", "template", "spec", "containers", 1, "args")
    assert parse_setup(at(after, engine)) == REPLAY
    assert_only(before, after, [engine])
    assert not act.read().rollout.done
    server.complete_rollout("Deployment", "llm", "vllm")
    assert act.read().rollout.done
    server.stall_rollout("Deployment", "llm", "vllm", "0/4 nodes: Insufficient nvidia.com/gpu")
    stuck = act.read().rollout.stuck
    assert stuck is not None
    assert "Insufficient nvidia.com/gpu" in stuck
