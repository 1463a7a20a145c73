"""What a setup that turns prefix caching off pays: the prompt tokens the cache served are
prefilled again, and that prefill takes its share of every GPU second from decoding.

The live engine's prefix cache served a share h (the hit rate) of each request's P prompt
tokens; a request lasts G output tokens. Without the cache every request recomputes h x P
tokens, so each output token carries r = h P / G recomputed prompt tokens, at c seconds each
(`prefill_seconds_per_token`). One GPU does both: at a decode rate X (tokens/s if it only
decoded) it serves X / (1 + X r c) tokens/s, and the share X r c / (1 + X r c) of each second
goes to prefill. The request rate follows the served rate (a request finishes every G tokens),
so a faster setup recomputes more prompts per second. Prefill rides in the decode steps
(chunked prefill), which stream the weights anyway: a recomputed token costs its flops
(compute-bound). Whether a setup keeps prefix caching is the caller's input (the engine's
rules, not the core's).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotuner.core.engine.workload import Workload
from autotuner.core.model.spec import ModelSpec
from autotuner.core.predict.hardware import HardwareProfile
from autotuner.core.predict.roofline import Array, kv_shards, role_dtype, roofline
from autotuner.core.types import Setup

# Mamba-2's chunked scan (SSD) per token and layer: the chunk state in and the output out, one
# multiply-add per state element each, on tensor cores (the in-chunk quadratic part is left
# out: with 128-256 token chunks it is of the same order and both are small beside the GEMMs).
SCAN_FLOPS_PER_STATE_ELEMENT = 4.0


def keeps_prefix_caching(setup: Setup) -> bool:
    """The default rule: every setup keeps prefix caching (nothing is charged)."""
    return True


@dataclass(frozen=True)
class PrefillCost:
    """The recomputed prefill of a setup without prefix caching, per output token."""

    hit_rate: float
    prompt_tokens: float
    generation_tokens: float
    seconds_per_token: float  # GPU time to prefill one recomputed prompt token

    @property
    def recomputed_per_output_token(self) -> float:
        """r = h P / G: prompt tokens prefilled again per token generated."""
        return self.hit_rate * self.prompt_tokens / self.generation_tokens

    @property
    def seconds_per_output_token(self) -> float:
        return self.recomputed_per_output_token * self.seconds_per_token

    def tokens_per_s(self, decode_tokens_per_s: Array) -> Array:
        """What is served when decoding alone would serve `decode_tokens_per_s`."""
        return decode_tokens_per_s / (1.0 + decode_tokens_per_s * self.seconds_per_output_token)

    def decode_tokens_per_s(self, tokens_per_s: Array) -> Array:
        """The inverse of `tokens_per_s`: the decode rate behind a served rate."""
        return tokens_per_s / (1.0 - tokens_per_s * self.seconds_per_output_token)

    def share(self, tokens_per_s: Array) -> Array:
        """The share of each GPU second spent on recomputed prefill at a served rate."""
        return tokens_per_s * self.seconds_per_output_token

    def recomputed_tokens_per_s(self, tokens_per_s: Array) -> Array:
        return tokens_per_s * self.recomputed_per_output_token

    def weighed(self, label: str, tokens_per_s: float) -> str:
        """What was weighed, for a decision's notes: the share `label` loses at its served
        rate, and why."""
        share = float(self.share(np.array([tokens_per_s]))[0])
        recomputed = float(self.recomputed_tokens_per_s(np.array([tokens_per_s]))[0])
        return (
            f"weighed: {label} without prefix caching loses {share:.0%} to recomputed prefill "
            f"at hit rate {self.hit_rate:.0%} ({recomputed:,.0f} prompt tokens/s of "
            f"{self.prompt_tokens:,.0f}-token prompts, {self.seconds_per_token * 1e6:.1f} us each)"
        )

    def decode_step_s(self, measured_step_s: float, tokens_per_step: float) -> float:
        """The decode part of a step vLLM timed (its inter-token latency): the recomputed
        prefill rides in the same steps (chunked prefill), `tokens_per_step` x r x c of it.
        What calibration compares with the model's decode step while the live setup runs
        without prefix caching, so that the prefill is not charged twice."""
        return measured_step_s - tokens_per_step * self.seconds_per_output_token


def prefill_cost(
    model: ModelSpec, hardware: HardwareProfile, workload: Workload, *, prefix_caching: bool
) -> PrefillCost | None:
    """The setup's recomputed prefill: None when it keeps prefix caching, when the hit rate is
    unknown or zero (nothing to lose)."""
    hit_rate, prompt, generated = (
        workload.prefix_hit_rate,
        workload.prompt_tokens,
        workload.generation_tokens,
    )
    if prefix_caching or hit_rate is None or hit_rate <= 0 or prompt is None or generated is None:
        return None
    recomputed = hit_rate * prompt
    return PrefillCost(
        hit_rate=hit_rate,
        prompt_tokens=prompt,
        generation_tokens=generated,
        # The recomputed tokens are each prompt's first h P: causal attention over half of them.
        seconds_per_token=prefill_seconds_per_token(
            model, hardware, workload, attended_tokens=recomputed / 2.0
        ),
    )


def prefill_seconds_per_token(
    model: ModelSpec, hardware: HardwareProfile, workload: Workload, *, attended_tokens: float
) -> float:
    """GPU seconds to prefill one prompt token that attends over `attended_tokens` positions:
    the weight GEMMs (2 x active parameters, each part on the tensor cores of its stored
    format), the attention over the prefix, the SSM scan; per GPU under tensor parallelism."""
    tp = workload.tensor_parallel
    mma = hardware.efficiency.mma
    dense = 2.0 * (model.dense_params - model.embedding_params) / tp
    gemm = dense / (_rate(hardware, model, False) * mma)
    if model.moe is not None:
        routed = model.moe_layers * model.moe.experts_per_token * model.moe.expert_params
        gemm += 2.0 * routed / tp / (_rate(hardware, model, True) * mma)
    attention = 0.0
    if model.attention is not None:
        shape = model.attention
        width = shape.heads * (
            shape.kv_lora_rank + shape.rope_head_dim if shape.kv_lora_rank else shape.head_dim
        )
        flops = 4.0 * attended_tokens * width * model.attention_layers / tp
        written = model.kv_bytes_per_token / kv_shards(model, tp)
        # Written KV against the attention's flops: the one part with bytes of its own.
        attention = float(
            roofline(
                np.array([written]),
                np.array([flops]),
                hardware.bandwidth("attention"),
                hardware.bf16_flops * mma,
            )[0]
        )
    scan = 0.0
    if model.ssm is not None and model.ssm_layers:
        flops = SCAN_FLOPS_PER_STATE_ELEMENT * model.ssm.state_elements * model.ssm_layers / tp
        scan = flops / (hardware.bf16_flops * mma)
    return gemm + attention + scan


def _rate(hardware: HardwareProfile, model: ModelSpec, experts: bool) -> float:
    return hardware.tensor_flops(role_dtype(model, experts))
