"""Worlds whose prompts take their share of every GPU second, for the decision-quality
benchmark: Qwen3.5-122B-A10B NVFP4 on one B300 over a day, serving long prompts with short
answers (agentic and RAG traffic: 8K-token prompts, 512-token answers, few prefix-cache hits)
and, for contrast, chat (512-token prompts, 1,024-token answers). Every request's prompt is
prefilled in the decode steps whatever the setup, so speculation's and replay's gain shrinks
where the prompts are long. The truth is the cost model times the realistic error, with the
prefill priced by the world apart from the model: 1.4 times the model's prefill cost per
token (MoE prefill with few tokens per expert runs below the GEMM flops rate the model
assumes; the policy is not told)."""

from __future__ import annotations

from collections.abc import Callable

from autotuner.core.engine.workload import Workload
from autotuner.core.model.registry import load_model
from autotuner.core.predict.hardware import datasheet
from autotuner.core.types import Setup
from autotuner.sim.days import daily_load
from autotuner.sim.truth import realistic_error
from autotuner.sim.worlds import (
    QWEN,
    REFERENCE_ACCEPTANCE,
    ModelSpeed,
    Prior,
    World,
    constant_acceptance,
)

PREFILL_ERROR = 1.4  # the true prefill cost per token over the model's (assumed, not measured)

# (name, prompt tokens, output tokens, hit rate, about)
PROMPT_MIXES: tuple[tuple[str, float, float, float, str], ...] = (
    (
        "long-prompts",
        8192,
        512,
        0.1,
        "8K-token prompts, 512-token answers, 10% prefix-cache hits (agentic / RAG)",
    ),
    ("chat", 512, 1024, 0.1, "512-token prompts, 1,024-token answers (chat)"),
)


def prefill_worlds(
    prefix_caching: Callable[[Setup], bool] = lambda setup: True,
) -> dict[str, World]:
    """One world per prompt mix (`PROMPT_MIXES`); `prefix_caching` says which setups keep the
    cache on the build the benchmark runs (those without it prefill the hits again)."""
    model, gpu = load_model(QWEN, weights="nvfp4"), datasheet("B300")
    worlds = {}
    for name, prompt, output, hits, about in PROMPT_MIXES:
        workload = Workload(
            context_tokens=prompt + output / 2.0,
            prompt_tokens=prompt,
            generation_tokens=output,
            prefix_hit_rate=hits,
        )
        prior = Prior(model, gpu, workload)
        worlds[name] = World(
            name=name,
            about=f"{about}; load 4 to 450",
            prior=prior,
            speed=ModelSpeed(model, gpu, workload, realistic_error, prefix_caching, PREFILL_ERROR),
            demand=daily_load(4, 450),
            acceptance=constant_acceptance(REFERENCE_ACCEPTANCE),
            start=Setup(spec_tokens=3),
        )
    return worlds
