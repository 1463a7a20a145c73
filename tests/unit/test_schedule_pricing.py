"""A K schedule priced as the engine runs it (docs/costmodel.md, "What a K schedule costs"):
on Model Runner V1 vLLM forces its full CUDA graphs down to piecewise ones
(vllm/config/vllm.py:1069-1086), so every mixer leaves the captured graph each step; on either
runner the engine captures graphs for each distinct verify length (:2496-2547), which takes
memory from the requests. A schedule is worth proposing only when it beats the best static K
after that."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from autotuner.core.decide.estimates import BIN_MIDDLES
from autotuner.core.decide.search import schedules
from autotuner.core.engine.capabilities import EngineCapabilities, ModelRunner
from autotuner.core.engine.workload import Workload
from autotuner.core.predict.acceptance import from_conditional
from autotuner.core.predict.attribution import Attribution
from autotuner.core.predict.capacity import GRAPH_TIER_BYTES, bytes_per_request, max_batch
from autotuner.core.predict.predictor import Predictor
from autotuner.core.types import Setup
from autotuner.engines.vllm.capabilities import UPSTREAM
from tests.support.policy import H200, MODEL

ACCEPTANCE = from_conditional([0.8, 0.7, 0.6, 0.5])
WORKLOAD = Workload(tensor_parallel=2)
V2 = UPSTREAM.serving(MODEL).model_copy(update={"drafter_method": "mtp"})
V1 = V2.model_copy(update={"model_runner": ModelRunner.V1})
STATIC = [Setup(spec_tokens=k) for k in range(1, 5)]


def predictor(engine: EngineCapabilities) -> Predictor:
    return Predictor(
        MODEL,
        H200,
        WORKLOAD,
        Attribution(),
        0.0,
        3600.0,
        as_run=engine.as_run,
        piecewise=engine.piecewise_graphs,
    )


def two_loads() -> npt.NDArray[np.float64]:
    """Half the time at batch 2, half at ~313 (two histogram bins)."""
    mass = np.zeros(len(BIN_MIDDLES))
    mass[1] = mass[15] = 0.5
    return mass


def expected(p: Predictor, setup: Setup) -> float:
    return float(two_loads() @ p.curve(setup, BIN_MIDDLES, ACCEPTANCE)[0])


def best_gain_of_a_schedule(engine: EngineCapabilities) -> float:
    """The best schedule's expected tokens/s over the best static K's, minus one."""
    p = predictor(engine)
    found = schedules(p, STATIC, ACCEPTANCE, two_loads())
    assert found, "a schedule is searched for: the best K differs between the two loads"
    static = max(expected(p, s) for s in STATIC)
    return max(expected(p, s) for s in found) / static - 1


def test_on_v2_a_schedule_beats_the_best_static_k() -> None:
    assert best_gain_of_a_schedule(V2) > 0.03


def test_on_v1_piecewise_graphs_take_what_the_schedule_gains() -> None:
    assert best_gain_of_a_schedule(V1) < 0.01
    assert best_gain_of_a_schedule(V1) < best_gain_of_a_schedule(V2) - 0.03


def test_piecewise_graphs_cost_most_where_the_step_is_short() -> None:
    """The mixers' host launches are a fixed time per step: a large share of a batch-1 step,
    a small one of a batch-300 step."""
    schedule = Setup.parse("spec:2@1-2:2,3-8191:0")
    sizes = np.array([1, 313])
    on_v1 = predictor(V1).curve(schedule, sizes, ACCEPTANCE)[0]
    on_v2 = predictor(V2).curve(schedule, sizes, ACCEPTANCE)[0]
    loss = 1 - on_v1 / on_v2
    assert loss[0] > 0.1
    assert 0 < loss[1] < loss[0] / 2


def test_each_more_verify_length_takes_graph_memory_from_the_requests() -> None:
    one = Setup.parse("spec:2@1-8191:2")
    two = Setup.parse("spec:2@1-2:2,3-8191:0")
    per_request = bytes_per_request(MODEL, two, WORKLOAD)
    fewer = max_batch(MODEL, H200, one, WORKLOAD) - max_batch(MODEL, H200, two, WORKLOAD)
    assert abs(fewer - GRAPH_TIER_BYTES / per_request) <= 1
