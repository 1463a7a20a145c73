"""What the drafter adds to a step: which drafter runs, whether it runs on the GPU, and the time
of its sequential passes (an MTP layer or EAGLE head, or a separate draft model)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from autotuner.core.engine.workload import Workload
from autotuner.core.model.draft import DraftModel
from autotuner.core.model.spec import DrafterKind, ModelSpec
from autotuner.core.predict.hardware import HardwareProfile
from autotuner.core.predict.roofline import Array, experts_touched, kv_shards, role_dtype, roofline

DRAFTER_BLOCKS = 2  # an MTP/EAGLE drafter pass: one attention block and one MLP/MoE block


def drafter_kind(model: ModelSpec, workload: Workload) -> DrafterKind:
    return workload.drafter or model.drafter


def draft_model(model: ModelSpec, workload: Workload) -> DraftModel | None:
    """The separate draft model the drafter runs, if it is one and its size is known."""
    if drafter_kind(model, workload) is not DrafterKind.DRAFT_MODEL:
        return None
    return workload.draft_model


def has_draft_passes(model: ModelSpec, workload: Workload) -> bool:
    """Whether drafting runs on the GPU: ngram and suffix look tokens up on the CPU; a draft
    model of unknown size is not charged (it is never proposed: see core/engine/drafter.py)."""
    drafter = drafter_kind(model, workload)
    if drafter is DrafterKind.DRAFT_MODEL:
        return workload.draft_model is not None
    return drafter not in (DrafterKind.NGRAM, DrafterKind.SUFFIX, DrafterKind.NONE)


def draft_time(
    model: ModelSpec,
    hw: HardwareProfile,
    batch: Array,
    k: npt.NDArray[np.int64],
    workload: Workload,
) -> tuple[Array, Array]:
    """(time, flops) of K sequential drafter passes of an MTP/EAGLE drafter (about one layer
    plus the LM head). vLLM's proposer (vllm/v1/spec_decode/llm_base_proposer.py) runs the
    first pass over every verified position, B x (1 + K) tokens, with the LM head only on the B
    sampled positions; the other K - 1 passes carry B tokens."""
    if not has_draft_passes(model, workload):
        return np.zeros_like(batch), np.zeros_like(batch)
    one_pass = _draft_pass
    if drafter_kind(model, workload) is DrafterKind.DRAFT_MODEL:
        one_pass = _draft_model_pass
    first = one_pass(model, hw, batch * (k + 1.0), batch, workload)
    later = one_pass(model, hw, batch, batch, workload)
    count = np.maximum(k - 1, 0)
    time: Array = np.where(k > 0, first[0] + count * later[0], 0.0)
    flops: Array = np.where(k > 0, first[1] + count * later[1], 0.0)
    return time + k.astype(np.float64) * hw.draft_pass_overhead_s, flops


def _draft_pass(
    model: ModelSpec, hw: HardwareProfile, tokens: Array, batch: Array, workload: Workload
) -> tuple[Array, Array]:
    """(time, flops) of one drafter pass over `tokens` tokens, `batch` of them sampled
    through the LM head."""
    tp = workload.tensor_parallel
    lm_head = model.vocab_size * model.hidden_size
    mtp = drafter_kind(model, workload) is DrafterKind.MTP
    # The model's own MTP layers when it drafts with them; an EAGLE head is one dense layer.
    dense = (model.drafter_dense_params if mtp else 0) or (
        4 * model.hidden_size * model.hidden_size + 3 * model.hidden_size * 4 * model.hidden_size
    )
    expert_params = model.moe.expert_params if model.moe else 0
    moe_layers = model.drafter_moe_layers if mtp else 0
    experts = moe_layers * experts_touched(model, tokens) * expert_params
    weights = (dense + lm_head) * model.dense_weight_bytes_per_param + experts * (
        model.expert_weight_bytes_per_param
    )
    per_layer_kv = model.kv_bytes_per_token / max(model.attention_layers, 1)
    kv = batch * workload.context_tokens * per_layer_kv / kv_shards(model, tp)
    flops = 2.0 * (tokens * dense + batch * lm_head) / tp
    rate = hw.tensor_flops(role_dtype(model, False)) * hw.efficiency.mma
    return roofline(weights / tp + kv, flops, hw.bandwidth("gemm"), rate), flops


def _draft_model_pass(
    model: ModelSpec, hw: HardwareProfile, tokens: Array, batch: Array, workload: Workload
) -> tuple[Array, Array]:
    """(time, flops) of one pass of a separate draft model over `tokens` tokens: all its
    streamed weights, and every running request's context in its own KV cache."""
    draft = workload.draft_model
    assert draft is not None
    tp = draft.tensor_parallel or workload.tensor_parallel
    kv = batch * workload.context_tokens * draft.kv_bytes_per_token / min(tp, draft.kv_heads)
    flops = 2.0 * tokens * draft.active_params / tp
    rate = hw.tensor_flops(draft.weight_dtype) * hw.efficiency.mma
    return roofline(draft.weight_bytes / tp + kv, flops, hw.bandwidth("gemm"), rate), flops
