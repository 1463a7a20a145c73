"""What a per-batch K schedule costs as vLLM runs it (docs/costmodel.md, "What a K schedule
costs"), printed by `python -m benchmarks.schedule_cost`:

- the piecewise CUDA graphs Model Runner V1 forces on a schedule, for the setup of
  vllm-project/vllm#49548 (Qwen3.5-122B-A10B, MTP K=2, schedule [[1,4,2],[5,512,0]]), as the
  loss against the same schedule on full graphs at each batch; the report measured -16%
  single-stream on hardware it does not name;
- the best schedule's expected gain over the best static K on V2 and on V1, for
  Nemotron-3-Super on two H200s with half the load at batch 2 and half at ~313.

Every figure is the cost model's (no GPU measures them here): the piecewise cost per split op
and the graph memory per verify length are assumptions (HardwareProfile.piecewise_s_per_split,
capacity.GRAPH_TIER_BYTES)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from autotuner.core.decide.estimates import BIN_MIDDLES
from autotuner.core.decide.search import schedules
from autotuner.core.engine.capabilities import EngineCapabilities, ModelRunner
from autotuner.core.engine.workload import Workload
from autotuner.core.model.registry import load_model
from autotuner.core.predict.acceptance import AcceptanceEstimate, from_conditional
from autotuner.core.predict.attribution import Attribution
from autotuner.core.predict.costmodel import predict
from autotuner.core.predict.hardware import datasheet
from autotuner.core.predict.predictor import Predictor
from autotuner.core.types import Setup
from autotuner.engines.vllm.capabilities import UPSTREAM

REPORTED = Setup.parse("spec:2@1-4:2,5-512:0")
REPORT_BATCHES = (1, 4, 8, 64)
REPORT_MACHINES = (
    ("Qwen/Qwen3.5-122B-A10B", "H200", 4),
    ("Qwen/Qwen3.5-122B-A10B", "B200", 2),
    ("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4", "H200", 4),
)
NEMOTRON = "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4"


def piecewise_losses(model: str, gpu: str, tp: int) -> list[float]:
    """The report's schedule on piecewise graphs against full ones, at each REPORT_BATCHES."""
    spec, hardware, workload = load_model(model), datasheet(gpu), Workload(tensor_parallel=tp)
    accept = from_conditional([0.85, 0.7])
    full = predict(spec, hardware, REPORTED, REPORT_BATCHES, accept, workload)
    pieces = predict(spec, hardware, REPORTED, REPORT_BATCHES, accept, workload, piecewise=True)
    return [float(x) for x in pieces.tokens_per_s / full.tokens_per_s - 1]


def schedule_gain(engine: EngineCapabilities, accept: AcceptanceEstimate) -> tuple[str, float]:
    """The best schedule for two loads and its expected gain over the best static K."""
    model = load_model(NEMOTRON)
    predictor = Predictor(
        model,
        datasheet("H200"),
        Workload(tensor_parallel=2),
        Attribution(),
        0.0,
        3600.0,
        as_run=engine.as_run,
        piecewise=engine.piecewise_graphs,
    )
    mass: npt.NDArray[np.float64] = np.zeros(len(BIN_MIDDLES))
    mass[1] = mass[15] = 0.5  # batch 2 and batch ~313

    def expected(setup: Setup) -> float:
        return float(mass @ predictor.curve(setup, BIN_MIDDLES, accept)[0])

    static = [Setup(spec_tokens=k) for k in range(1, 5)]
    best = max(schedules(predictor, static, accept, mass), key=expected)
    return best.label, expected(best) / max(map(expected, static)) - 1


def main() -> None:
    print("piecewise graphs (Model Runner V1) against full graphs, vllm#49548's schedule")
    print("model, GPUs".ljust(56) + "".join(f"batch {b}".rjust(10) for b in REPORT_BATCHES))
    for model, gpu, tp in REPORT_MACHINES:
        losses = piecewise_losses(model, gpu, tp)
        row = f"{model.split('/')[-1]}, {tp} x {gpu}".ljust(56)
        print(row + "".join(f"{x:+10.1%}" for x in losses))
    print("\nbest schedule over the best static K (Nemotron-3-Super, 2 x H200, batch 2 and ~313)")
    accept = from_conditional([0.8, 0.7, 0.6, 0.5])
    v2 = UPSTREAM.serving(load_model(NEMOTRON)).model_copy(update={"drafter_method": "mtp"})
    for name, engine in (
        ("V2", v2),
        ("V1", v2.model_copy(update={"model_runner": ModelRunner.V1})),
    ):
        label, gain = schedule_gain(engine, accept)
        print(f"  Model Runner {name}: {label} {gain:+.2%}")


if __name__ == "__main__":
    main()
