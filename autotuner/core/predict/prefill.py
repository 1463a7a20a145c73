"""What prefill takes from decoding: every request's prompt is prefilled once, on the same GPU,
inside the same steps (chunked prefill), whatever the setup; a setup that turns prefix caching
off prefills the tokens the cache served again.

A request brings P prompt tokens, of which the prefix cache served a share h (the hit rate;
0 when unknown), and lasts G output tokens. Each output token therefore carries
r = (1 - h) P / G fresh prompt tokens, plus h P / G recomputed ones without prefix caching, at
c seconds each (`prefill_seconds_per_token`). One GPU does both: at a decode rate X (tokens/s
if it only decoded) it serves X / (1 + X r c) tokens/s, and the share X r c / (1 + X r c) of
each second goes to prefill. Speculation and replay speed up only the decode part: a setup
that doubles X gains far less than 2x where X r c is large (long prompts, short answers). The
request rate follows the served rate (a request finishes every G tokens). Prefill rides in the
decode steps, which stream the weights anyway: a prefilled token costs its flops
(compute-bound). Whether a setup keeps prefix caching is the caller's input (the engine's
rules, not the core's).

The time to first token: a prompt is prefilled in chunks of what the step's token budget
(vLLM's max_num_batched_tokens, SGLang's --chunked-prefill-size) leaves beside the decode
tokens, one chunk a step; the first token comes with the last chunk. Queueing before
admission is not in it (the batch the prediction is asked at is the admitted batch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

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
    """The default rule: every setup keeps prefix caching (nothing is recomputed)."""
    return True


@dataclass(frozen=True)
class PrefillCost:
    """The prefill a setup pays, per request and per output token."""

    hit_rate: float  # share of the prompt the live prefix cache served (0: unknown or none)
    prompt_tokens: float  # P, per request
    generation_tokens: float  # G, per request
    seconds_per_token: float  # mean GPU time to prefill one of the tokens this setup prefills
    fresh_tokens: float = 0.0  # per request: (1 - h) P, prefilled whatever the setup
    recomputed_tokens: float = 0.0  # per request: h P more, without prefix caching
    recomputed_seconds_per_token: float = 0.0  # GPU time of one recomputed token

    @property
    def prefilled_tokens(self) -> float:
        """Prompt tokens prefilled per request under this setup."""
        return self.fresh_tokens + self.recomputed_tokens

    @property
    def prefilled_per_output_token(self) -> float:
        """r: prompt tokens prefilled per token generated."""
        return self.prefilled_tokens / self.generation_tokens

    @property
    def recomputed_per_output_token(self) -> float:
        """h P / G: prompt tokens prefilled again per token generated (0 with the cache)."""
        return self.recomputed_tokens / self.generation_tokens

    @property
    def seconds_per_output_token(self) -> float:
        return self.prefilled_per_output_token * self.seconds_per_token

    def recomputed(self) -> PrefillCost | None:
        """The recomputed part alone (None: the setup keeps prefix caching, or nothing was
        hit): what turning prefix caching off adds, for the notes that weigh it."""
        if self.recomputed_tokens <= 0:
            return None
        return replace(self, fresh_tokens=0.0, seconds_per_token=self.recomputed_seconds_per_token)

    def tokens_per_s(self, decode_tokens_per_s: Array) -> Array:
        """What is served when decoding alone would serve `decode_tokens_per_s`."""
        return decode_tokens_per_s / (1.0 + decode_tokens_per_s * self.seconds_per_output_token)

    def decode_tokens_per_s(self, tokens_per_s: Array) -> Array:
        """The inverse of `tokens_per_s`: the decode rate behind a served rate."""
        return tokens_per_s / (1.0 - tokens_per_s * self.seconds_per_output_token)

    def share(self, tokens_per_s: Array) -> Array:
        """The share of each GPU second spent on this prefill at a served rate."""
        return tokens_per_s * self.seconds_per_output_token

    def recomputed_tokens_per_s(self, tokens_per_s: Array) -> Array:
        """Prompt tokens prefilled again each second (0 with prefix caching)."""
        return tokens_per_s * self.recomputed_per_output_token

    def prefilled_tokens_per_s(self, tokens_per_s: Array) -> Array:
        return tokens_per_s * self.prefilled_per_output_token

    def weighed(self, label: str, tokens_per_s: float) -> str:
        """What was weighed, for a decision's notes: the share `label` loses at its served
        rate to recomputed prefill, and why (call it on `recomputed()`)."""
        share = float(self.share(np.array([tokens_per_s]))[0])
        recomputed = float(self.recomputed_tokens_per_s(np.array([tokens_per_s]))[0])
        return (
            f"weighed: {label} without prefix caching loses {share:.0%} to recomputed prefill "
            f"at hit rate {self.hit_rate:.0%} ({recomputed:,.0f} prompt tokens/s of "
            f"{self.prompt_tokens:,.0f}-token prompts, {self.seconds_per_token * 1e6:.1f} us each)"
        )

    def decode_step_s(self, measured_step_s: float, tokens_per_step: float) -> float:
        """The decode part of a step the engine timed (its inter-token latency): the prefill
        rides in the same steps (chunked prefill), `tokens_per_step` x r x c of it. What
        calibration compares with the model's decode step, so that the prefill is not charged
        twice."""
        return measured_step_s - tokens_per_step * self.seconds_per_output_token

    def time_to_first_token_s(
        self,
        decode_step_s: float,
        decode_tokens_per_step: float,
        chunk_tokens: int | None,
        *,
        mixed: bool = True,
        forward_floor_s: float = 0.0,
    ) -> float:
        """A request's prompt, prefilled in chunks of `chunk_tokens` (None: the engine does
        not chunk, the prompt is one chunk). Mixed (vLLM): each chunk is what the budget
        leaves beside the `decode_tokens_per_step` (the batch's tokens, drafts included), one
        per step of `decode_step_s` plus the chunk's own prefill. Not mixed (SGLang without
        --enable-mixed-chunk): the chunks run as forwards of their own, back to back while
        decoding waits, each at least `forward_floor_s` (one pass over the weights)."""
        prompt = self.prefilled_tokens
        if not mixed:
            return self._separate_chunks_s(prompt, chunk_tokens, forward_floor_s)
        if chunk_tokens is None or prompt <= 0:
            return decode_step_s + prompt * self.seconds_per_token
        room = max(chunk_tokens - decode_tokens_per_step, 1.0)
        return math.ceil(prompt / room) * decode_step_s + prompt * self.seconds_per_token

    def _separate_chunks_s(self, prompt: float, chunk: int | None, floor_s: float) -> float:
        """Chunks run as forwards of their own: full ones, then the rest."""
        if prompt <= 0:
            return floor_s
        size = float(chunk) if chunk is not None else prompt
        full = math.floor(prompt / size)
        rest = prompt - full * size
        each = max(size * self.seconds_per_token, floor_s)
        last = max(rest * self.seconds_per_token, floor_s) if rest > 0 else 0.0
        return full * each + last


def prefill_cost(
    model: ModelSpec, hardware: HardwareProfile, workload: Workload, *, prefix_caching: bool
) -> PrefillCost | None:
    """The prefill the setup pays: every request's fresh (1 - h) P tokens, and h P more
    without prefix caching. None when the prompt or generation length is unknown (nothing is
    charged). An unknown hit rate counts as none: every prompt token is fresh."""
    prompt, generated = workload.prompt_tokens, workload.generation_tokens
    if prompt is None or generated is None:
        return None
    hit_rate = workload.prefix_hit_rate or 0.0
    cached = hit_rate * prompt
    fresh = prompt - cached
    recomputed = 0.0 if prefix_caching else cached
    # The fresh tokens follow the cached prefix (attending over it and half of themselves);
    # the recomputed ones are each prompt's first h P: causal attention over half of them.
    fresh_s = prefill_seconds_per_token(
        model, hardware, workload, attended_tokens=cached + fresh / 2.0
    )
    recomputed_s = prefill_seconds_per_token(
        model, hardware, workload, attended_tokens=cached / 2.0
    )
    total = fresh + recomputed
    mean_s = (fresh * fresh_s + recomputed * recomputed_s) / total if total > 0 else fresh_s
    return PrefillCost(
        hit_rate=hit_rate,
        prompt_tokens=prompt,
        generation_tokens=generated,
        seconds_per_token=mean_s,
        fresh_tokens=fresh,
        recomputed_tokens=recomputed,
        recomputed_seconds_per_token=recomputed_s,
    )


def recomputed_cost(
    model: ModelSpec, hardware: HardwareProfile, workload: Workload, *, prefix_caching: bool
) -> PrefillCost | None:
    """What turning prefix caching off adds alone (None: kept, or nothing was hit)."""
    whole = prefill_cost(model, hardware, workload, prefix_caching=prefix_caching)
    return None if whole is None else whole.recomputed()


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


# Below this share of each second, the prompts' prefill is not worth a sentence.
SAID_FROM_SHARE = 0.05


def prompt_share_weighed(
    best: tuple[str, float, PrefillCost | None],
    current: tuple[str, float, PrefillCost | None],
) -> str | None:
    """The decision's note for the prompts' prefill, from (label, served tokens/s, the setup's
    whole prefill) of the best and the current setup: the share of each second each loses to
    prefill, and the decode gain next to what it serves. None where neither loses
    `SAID_FROM_SHARE` or where either prefill is unknown."""
    (label, served, cost), (rival, rival_served, rival_cost) = best, current
    if cost is None or rival_cost is None or served <= 0 or rival_served <= 0:
        return None
    share = float(cost.share(np.array([served]))[0])
    rival_share = float(rival_cost.share(np.array([rival_served]))[0])
    if max(share, rival_share) < SAID_FROM_SHARE:
        return None
    decode_gain = (served / (1.0 - share)) / (rival_served / (1.0 - rival_share))
    ratio = cost.prompt_tokens / cost.generation_tokens
    return (
        f"weighed: {cost.prompt_tokens:,.0f}-token prompts per {cost.generation_tokens:,.0f} "
        f"output tokens (P/G {ratio:.1f}, {cost.hit_rate:.0%} cached) take {share:.0%} of "
        f"each second under {label} and {rival_share:.0%} under {rival}; decoding alone "
        f"{label} would be {decode_gain:.2f}x {rival}, with the prefill "
        f"{served / rival_served:.2f}x"
    )
