"""How many requests fit: the device memory one running request holds (state slots, ring, KV)
and the largest batch that fits beside the weights and the CUDA graphs of a schedule's extra
K tiers, at most --max-num-seqs."""

from __future__ import annotations

import math

from autotuner.core.engine.workload import GIB, Workload
from autotuner.core.model.draft import DraftModel
from autotuner.core.model.spec import DrafterKind, ModelSpec
from autotuner.core.predict.drafting import draft_model, drafter_kind, has_draft_passes
from autotuner.core.predict.hardware import HardwareProfile
from autotuner.core.predict.roofline import kv_shards
from autotuner.core.types import Setup

# Device memory the CUDA graphs of one more K tier take: vLLM captures a set of decode sizes
# per distinct verify length a schedule runs (config/vllm.py:2496-2547; V2
# v1/worker/gpu/cudagraph_utils.py:273-298), SGLang one graph runner per adaptive tier
# (adaptive_runtime_state.py:103-120). An assumption: vLLM logs a few tenths of a GiB for a
# whole capture set of a large model; it is not measured here.
GRAPH_TIER_BYTES = 0.25 * GIB


def graph_tiers(setup: Setup) -> int:
    """CUDA graph sets the engine captures for `setup`: one per distinct verify length."""
    if not setup.schedule:
        return 1
    return len({band.spec_tokens for band in setup.schedule})


def state_slots(setup: Setup, cache_mode: str) -> int:
    """SSM state slots vLLM reserves per request per SSM layer (VLLM.md, state under spec)."""
    if setup.replay_window:
        return 1
    return 1 + setup.spec_tokens + (1 if cache_mode == "align" else 0)


def bytes_per_request(model: ModelSpec, setup: Setup, workload: Workload) -> float:
    """Device memory one running request holds on one GPU: its state slots, ring and KV.

    vLLM keeps hybrid models' state and KV in one block pool (vllm/v1/core/kv_cache_utils.py):
    each state slot is one page holding the SSM state and the conv rows (conv_kernel - 1 + K
    of them, vllm/model_executor/layers/mamba/mamba_utils.py), plus the ring under ReplaySSM;
    attention blocks are made at least one page large (a multiple of 16 tokens), so a request
    holds whole blocks of that many tokens in every attention layer."""
    tp = workload.tensor_parallel
    kv_token = model.kv_bytes_per_token / kv_shards(model, tp)
    attention_layers = model.attention_layers + _drafter_attention_layers(model, setup, workload)
    if model.attention_layers:
        kv_token *= attention_layers / model.attention_layers
    if not model.is_hybrid:
        return workload.context_tokens * kv_token
    slots = state_slots(setup, workload.mamba_cache_mode)
    page = (
        model.ssm_state_bytes
        + model.conv_state_bytes(setup.spec_tokens)
        + setup.replay_window * model.ring_entry_bytes
    ) / tp
    if model.attention_layers == 0 or kv_token <= 0:
        return model.ssm_layers * slots * page
    layer_token = kv_token / attention_layers  # one attention layer's KV per token
    block = 16 * math.ceil(page / (16 * layer_token))  # tokens per attention block
    blocks = max(1, math.ceil(workload.context_tokens / block))
    padded = block * layer_token  # state pages are padded to the attention page
    return padded * (model.ssm_layers * slots + attention_layers * blocks)


def _drafter_attention_layers(model: ModelSpec, setup: Setup, workload: Workload) -> int:
    """Attention layers the drafter adds to the KV pool while it drafts: an MTP layer or an
    EAGLE head keeps its own KV, one attention layer's worth (the MTP blocks of the modelled
    families hold one attention layer); a draft model's KV is counted with its weights."""
    if not setup.spec_tokens or not has_draft_passes(model, workload):
        return 0
    return 0 if drafter_kind(model, workload) is DrafterKind.DRAFT_MODEL else 1


def max_batch(model: ModelSpec, hardware: HardwareProfile, setup: Setup, workload: Workload) -> int:
    """Largest number of running requests: those whose state and KV fit beside the weights,
    at most --max-num-seqs."""
    memory = memory_batch(model, hardware, setup, workload)
    if workload.max_num_seqs is None:
        return memory
    return min(memory, workload.max_num_seqs)


def memory_batch(
    model: ModelSpec, hardware: HardwareProfile, setup: Setup, workload: Workload
) -> int:
    """Largest number of running requests whose state and KV fit beside the weights (and a
    draft model's weights and KV while it runs)."""
    pool = (
        hardware.memory_bytes * workload.gpu_memory_utilization
        - model.weight_bytes / workload.tensor_parallel
        - workload.activation_reserve_bytes
        - (graph_tiers(setup) - 1) * GRAPH_TIER_BYTES
    )
    per_request = bytes_per_request(model, setup, workload)
    draft = _running_draft_model(model, setup, workload)
    if draft is not None:
        tp = draft.tensor_parallel or workload.tensor_parallel
        pool -= draft.memory_bytes / tp
        per_request += workload.context_tokens * draft.kv_bytes_per_token / min(tp, draft.kv_heads)
    if pool <= 0:
        return 0
    if per_request <= 0:
        return 1 << 20
    return int(pool // per_request)


def _running_draft_model(model: ModelSpec, setup: Setup, workload: Workload) -> DraftModel | None:
    """The draft model while the setup drafts with one (it is loaded only then)."""
    return draft_model(model, workload) if setup.spec_tokens else None
