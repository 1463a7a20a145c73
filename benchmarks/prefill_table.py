"""The model against a published prefill-heavy throughput table: NVIDIA's Deep Learning
Performance "Max Throughput" scenario for Llama 3.3 70B on one B200 (TP 1, FP4, TensorRT-LLM
1.0), output tokens/s at each input/output length, as tabulated at
https://the-dsvolk.github.io/ai-perf/ai-infra/inference_performance.html. Each point is
predicted at the batch that serves most (the scenario's own choice), with and without the
prompts' prefill. `python -m benchmarks.prefill_table` prints the comparison."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotuner.core.engine.workload import Workload
from autotuner.core.model.registry import load_model
from autotuner.core.model.spec import ModelSpec
from autotuner.core.predict.acceptance import from_conditional
from autotuner.core.predict.costmodel import predict
from autotuner.core.predict.hardware import HardwareProfile, datasheet
from autotuner.core.types import PLAIN

SOURCE = (
    "NVIDIA Deep Learning Performance, Max Throughput: Llama 3.3 70B, 1x B200, FP4, "
    "TensorRT-LLM 1.0 (https://the-dsvolk.github.io/ai-perf/ai-infra/inference_performance.html)"
)
# (input tokens, output tokens, measured output tokens/s)
PUBLISHED: tuple[tuple[int, int, float], ...] = (
    (128, 2048, 9922),
    (128, 4096, 6831),
    (500, 2000, 7762),
    (1000, 1000, 7007),
    (1000, 2000, 6737),
    (2048, 128, 1339),
    (2048, 2048, 4783),
    (5000, 500, 1459),
    (20000, 2000, 665),
)
BATCHES = np.arange(1, 4097)


@dataclass(frozen=True)
class Point:
    prompt: int
    output: int
    measured: float
    predicted: float  # with the prompts' prefill
    without_prefill: float
    prefill_share: float
    batch: int

    def error(self, predicted: float) -> float:
        return predicted / self.measured - 1.0


def _best(model: ModelSpec, gpu: HardwareProfile, workload: Workload) -> tuple[float, float, int]:
    curve = predict(model, gpu, PLAIN, BATCHES, from_conditional([]), workload)
    served = np.where(curve.feasible, curve.tokens_per_s, 0.0)
    i = int(np.argmax(served))
    return float(served[i]), float(curve.prefill_share[i]), int(curve.batch[i])


def points() -> list[Point]:
    model = load_model("meta-llama/Llama-3.1-70B-Instruct", weights="nvfp4")  # 3.3's shape
    gpu = datasheet("B200")
    found = []
    for prompt, output, measured in PUBLISHED:
        context = prompt + output / 2.0
        lengths = Workload(context_tokens=context, prompt_tokens=prompt, generation_tokens=output)
        served, share, batch = _best(model, gpu, lengths)
        bare, _, _ = _best(model, gpu, Workload(context_tokens=context))
        found.append(Point(prompt, output, measured, served, bare, share, batch))
    return found


def main() -> None:
    print(SOURCE)
    print("input/output | measured | predicted (err) | without prefill (err) | prefill share")
    for p in points():
        print(
            f"{p.prompt:>6}/{p.output:<6} | {p.measured:>8,.0f} | {p.predicted:>8,.0f} "
            f"({p.error(p.predicted):+.0%}) | {p.without_prefill:>8,.0f} "
            f"({p.error(p.without_prefill):+.0%}) | {p.prefill_share:.0%} at batch {p.batch}"
        )


if __name__ == "__main__":
    main()
