"""The batch each setup admits, against the caps vLLM PR #47576 publishes ("Max concurrency
(16,4)": max decode concurrency at max-model-len 2048 on one B300, B = L = 16, T = 1 + K = 4):
native speculation keeps 1 + K state slots per request, ReplaySSM one (plus its ring).

The PR does not give gpu_memory_utilization or the weight format, so the absolute caps depend
on an input it does not state (docs/capacity.md); the ratio of the two caps does not, and it is
what the state slots decide."""

from __future__ import annotations

import pytest

from autotuner.core.engine.workload import Workload
from autotuner.core.model.registry import load_model
from autotuner.core.predict.capacity import max_batch
from autotuner.core.predict.hardware import datasheet
from autotuner.core.types import Setup

# model -> (native-spec cap, ReplaySSM cap), as published
PUBLISHED = {
    "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4": (213, 694),
    "Qwen/Qwen3.5-122B-A10B-NVFP4": (233, 702),
}
NATIVE, REPLAY = Setup.parse("spec:3"), Setup.parse("replay+spec:3:16")


def caps(model_id: str, utilization: float) -> tuple[int, int]:
    model, gpu = load_model(model_id), datasheet("B300")
    workload = Workload(context_tokens=2048, gpu_memory_utilization=utilization)
    return max_batch(model, gpu, NATIVE, workload), max_batch(model, gpu, REPLAY, workload)


@pytest.mark.parametrize("model_id", sorted(PUBLISHED))
@pytest.mark.parametrize("utilization", [0.8, 0.9])
def test_replay_admits_as_many_times_more_requests_as_published(
    model_id: str, utilization: float
) -> None:
    native, replay = caps(model_id, utilization)
    published_native, published_replay = PUBLISHED[model_id]
    assert replay / native == pytest.approx(published_replay / published_native, rel=0.10)


@pytest.mark.parametrize("model_id", sorted(PUBLISHED))
def test_at_a_0_8_memory_share_the_caps_are_the_published_ones(model_id: str) -> None:
    """The utilization the PR's numbers fit (not stated there: an assumption, said so)."""
    native, replay = caps(model_id, 0.8)
    published_native, published_replay = PUBLISHED[model_id]
    assert native == pytest.approx(published_native, rel=0.10)
    assert replay == pytest.approx(published_replay, rel=0.10)
