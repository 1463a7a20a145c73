"""A two-group LeaderWorkerSet `llm/vllm` on the loopback API server during a partition
canary, as the canary tests drive it: the partition, the LWS controller's report of its
groups, and an object whose partition already holds group 0 back."""

from __future__ import annotations

from typing import Any

from autotuner.actuators.base import STATE_ANNOTATION
from autotuner.actuators.kubernetes import PARTITION_ANNOTATION
from tests.support.fake_apiserver import FakeApiServer
from tests.support.serving_objects import lws


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
