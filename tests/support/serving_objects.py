"""The multi-GPU serving objects of the fleet targets, shaped as their projects' examples
publish them (LeaderWorkerSet, DynamoGraphDeployment v1beta1 and v1alpha1, KServe
LLMInferenceService and InferenceService), for the loopback API server."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]
IMAGE = "vllm/vllm-openai:v0.33.0"
GPU = {"limits": {"nvidia.com/gpu": "1"}}


def _meta(name: str, namespace: str) -> Obj:
    return {"name": name, "namespace": namespace, "generation": 1, "uid": f"uid-{name}"}


def lws(
    args: list[str],
    *,
    name: str = "vllm",
    namespace: str = "llm",
    worker_args: list[str] | None = None,
    replicas: int = 2,
    max_surge: int | str = 0,
) -> Obj:
    """A multi-host vLLM LeaderWorkerSet as LWS's own example has it: the leader's `sh -c`
    script starts Ray, then the engine; the workers only join Ray, unless `worker_args` gives
    them the engine's args too (as SGLang's workers take them)."""
    ray = "bash /vllm-workspace/examples/online_serving/multi-node-serving.sh"
    script = f"{ray} leader --ray_cluster_size=$(LWS_GROUP_SIZE); " + " ".join(
        ["vllm", "serve", *(_quoted(a) for a in args)]
    )
    leader = {
        "name": "vllm-leader",
        "image": IMAGE,
        "command": ["sh", "-c", script],
        "resources": GPU,
    }
    worker: Obj = {"name": "vllm-worker", "image": IMAGE, "resources": GPU}
    if worker_args is None:
        worker["command"] = ["sh", "-c", f"{ray} worker --ray_address=$(LWS_LEADER_ADDRESS)"]
    else:
        worker["args"] = list(worker_args)
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": _meta(name, namespace),
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {
                "size": 2,
                "leaderTemplate": {
                    "metadata": {"labels": {"role": "leader"}},
                    "spec": {"containers": [leader]},
                },
                "workerTemplate": {"spec": {"containers": [worker]}},
            },
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": max_surge},
            },
            "startupPolicy": "LeaderCreated",
        },
        "status": {
            "observedGeneration": 1,
            "replicas": replicas,
            "readyReplicas": replicas,
            "updatedReplicas": replicas,
        },
    }


def _quoted(arg: str) -> str:
    return f"'{arg}'" if any(c in arg for c in ' {}"') else arg


def dynamo_v1beta1(args: list[str], *, name: str = "disagg", namespace: str = "llm") -> Obj:
    """A disaggregated DynamoGraphDeployment: a frontend and a decode worker (container main)."""
    main = {
        "name": "main",
        "image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.6.0",
        "command": ["python3", "-m", "dynamo.vllm"],
        "args": list(args),
        "resources": GPU,
    }
    return {
        "apiVersion": "nvidia.com/v1beta1",
        "kind": "DynamoGraphDeployment",
        "metadata": _meta(name, namespace),
        "spec": {
            "backendFramework": "vllm",
            "components": [
                {"name": "Frontend", "type": "frontend", "replicas": 1},
                {
                    "name": "VllmDecodeWorker",
                    "type": "decode",
                    "replicas": 1,
                    "annotations": {"nvidia.com/deployment-rolling-update-max-surge": "0"},
                    "podTemplate": {"spec": {"containers": [main]}},
                },
            ],
        },
        "status": {
            "observedGeneration": 1,
            "state": "successful",
            "conditions": [{"type": "Ready", "status": "True"}],
            "rollingUpdate": {"phase": "Completed"},
        },
    }


def dynamo_v1alpha1(args: list[str], *, name: str = "disagg", namespace: str = "llm") -> Obj:
    return {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "DynamoGraphDeployment",
        "metadata": _meta(name, namespace),
        "spec": {
            "services": {
                "Frontend": {"componentType": "frontend", "replicas": 1},
                "VllmDecodeWorker": {
                    "componentType": "worker",
                    "replicas": 1,
                    "annotations": {"nvidia.com/deployment-rolling-update-max-surge": "0"},
                    "extraPodSpec": {
                        "mainContainer": {
                            "image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.6.0",
                            "command": ["python3", "-m", "dynamo.vllm"],
                            "args": list(args),
                        }
                    },
                },
            }
        },
        "status": {"observedGeneration": 1, "state": "successful"},
    }


def llm_inference_service(
    env_args: str, *, name: str = "qwen", namespace: str = "llm", max_surge: int = 0
) -> Obj:
    """KServe's LLMInferenceService: its vLLM template expands VLLM_ADDITIONAL_ARGS."""
    main = {
        "name": "main",
        "env": [
            {"name": "HF_HUB_OFFLINE", "value": "1"},
            {"name": "VLLM_ADDITIONAL_ARGS", "value": env_args},
        ],
        "resources": GPU,
    }
    return {
        "apiVersion": "serving.kserve.io/v1alpha2",
        "kind": "LLMInferenceService",
        "metadata": _meta(name, namespace),
        "spec": {
            "model": {"uri": "hf://Qwen/Qwen3-Next-80B-A3B-Instruct", "name": "qwen"},
            "replicas": 1,
            "template": {"containers": [main]},
            "rolloutStrategy": {"maxSurge": max_surge, "maxUnavailable": 1},
        },
        "status": {"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def inference_service(
    args: list[str], *, name: str = "qwen", namespace: str = "llm", mode: str = "RawDeployment"
) -> Obj:
    annotations = {"serving.kserve.io/deploymentMode": mode}
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {**_meta(name, namespace), "annotations": annotations},
        "spec": {
            "predictor": {
                "minReplicas": 1,
                "deploymentStrategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
                },
                "model": {
                    "modelFormat": {"name": "huggingface"},
                    "args": list(args),
                    "resources": GPU,
                },
            }
        },
        "status": {"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def unschedulable_pod(name: str, labels: dict[str, str], namespace: str = "llm") -> Obj:
    """A pod no node can take since long ago (no free nvidia.com/gpu)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"containers": [{"name": "vllm-leader"}]},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
                    "lastTransitionTime": "2020-01-01T00:00:00Z",
                }
            ],
        },
    }
