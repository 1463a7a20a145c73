"""The cost of one decode step for every setup, vectorised over batch sizes.

Implements COSTMODEL.md: bytes by component (weights with MoE expert coverage, KV, SSM state,
ring, checkpoints, conv, logits), flops, a roofline per kernel class, the drafter's sequential
passes, fixed overheads, and memory capacity; plus what vLLM's speculative step does beyond the
bytes (docs/costmodel.md, "Verification at large batch"): the multi-token SSM kernels of native
speculation, eager execution above the CUDA-graph capture size, and the drafter's first pass
over every verified position. All sizes are per GPU under tensor parallelism.

Kernel classes of `SetupCurve.time_s` (the keys online attribution fits on): fixed, gemm,
attention, ssm, ssm_verify, copy, draft, eager.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from autotuner.core.engine.workload import GIB, Workload
from autotuner.core.model.draft import DraftModel
from autotuner.core.model.spec import DrafterKind, ModelSpec, SsmKind
from autotuner.core.predict.acceptance import AcceptanceEstimate, tau_curve
from autotuner.core.predict.hardware import HardwareProfile
from autotuner.core.types import Prediction, Setup
from autotuner.errors import InputError

Array = npt.NDArray[np.float64]
FLOPS_PER_STATE_ELEMENT = 5.0  # decay, input outer product, add; output contraction
DRAFTER_BLOCKS = 2  # an MTP/EAGLE drafter pass: one attention block and one MLP/MoE block
TIME_CLASSES = ("fixed", "gemm", "attention", "ssm", "ssm_verify", "copy", "draft", "eager")


@dataclass(frozen=True)
class SetupCurve:
    """One setup predicted over an array of batch sizes; every field is an array over batch."""

    setup: Setup
    batch: npt.NDArray[np.int64]
    effective_batch: npt.NDArray[np.int64]
    spec_tokens: npt.NDArray[np.int64]
    tau: Array
    step_time_s: Array
    tokens_per_s: Array
    time_per_output_token_s: Array
    max_batch: int
    infeasible_reason: str | None
    bytes: dict[str, Array] = field(default_factory=dict)
    time_s: dict[str, Array] = field(default_factory=dict)
    flops: dict[str, Array] = field(default_factory=dict)

    @property
    def feasible(self) -> npt.NDArray[np.bool_]:
        return self.batch <= self.max_batch

    def at(self, index: int) -> Prediction:
        feasible = bool(self.feasible[index])
        return Prediction(
            setup=self.setup,
            batch=int(self.batch[index]),
            effective_batch=int(self.effective_batch[index]),
            spec_tokens=int(self.spec_tokens[index]),
            tau=float(self.tau[index]),
            step_time_s=float(self.step_time_s[index]),
            tokens_per_s=float(self.tokens_per_s[index]),
            time_per_output_token_s=float(self.time_per_output_token_s[index]),
            feasible=feasible,
            reason=None if feasible else self.infeasible_reason,
            bytes={k: float(v[index]) for k, v in self.bytes.items()},
            time_s={k: float(v[index]) for k, v in self.time_s.items()},
            flops={k: float(v[index]) for k, v in self.flops.items()},
        )

    def predictions(self) -> list[Prediction]:
        return [self.at(i) for i in range(len(self.batch))]


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
    kv_token = model.kv_bytes_per_token / _kv_shards(model, tp)
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
    if not setup.spec_tokens or not _has_draft_passes(model, workload):
        return 0
    return 0 if _drafter(model, workload) is DrafterKind.DRAFT_MODEL else 1


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
    return _draft_model(model, workload) if setup.spec_tokens else None


def predict(
    model: ModelSpec,
    hardware: HardwareProfile,
    setup: Setup,
    batch: npt.ArrayLike,
    acceptance: AcceptanceEstimate,
    workload: Workload | None = None,
) -> SetupCurve:
    """Predict one setup at every batch size in `batch` (integers >= 1)."""
    workload = workload or Workload()
    sizes = np.asarray(batch, dtype=np.int64).ravel()
    if sizes.size == 0 or sizes.min() < 1:
        raise InputError("batch sizes must be integers >= 1")
    k = setup.spec_tokens_at(sizes)
    if int(k.max()) > acceptance.max_spec_tokens:
        raise InputError(
            f"setup {setup.label} drafts up to K={int(k.max())} but acceptance is known only up "
            f"to K={acceptance.max_spec_tokens}: no prediction beyond what was observed"
        )
    taus = tau_curve(acceptance.conditional)[k]
    capacity = max_batch(model, hardware, setup, workload)
    reason = None
    if capacity == 0:
        reason = (
            f"weights ({model.weight_bytes / GIB:.0f} GiB) leave no room for state on "
            f"{workload.tensor_parallel} x {hardware.name}: raise tensor parallelism"
        )
    elif int(sizes.max()) > capacity and capacity == workload.max_num_seqs:
        reason = (
            f"vLLM runs at most {capacity} requests (--max-num-seqs) and queues the rest: the "
            f"throughput is that of batch {capacity}"
        )
    elif int(sizes.max()) > capacity:
        reason = (
            f"vLLM admits {capacity} requests with {setup.label} (state slots, ring and KV per "
            f"request) and queues the rest: the throughput is that of batch {capacity}"
        )
    effective = np.minimum(sizes, max(capacity, 1))
    if setup.adaptive:
        k, taus = _adaptive_verified(model, hardware, setup, effective, k, acceptance, workload)
    parts = _step(
        model,
        hardware,
        setup,
        effective.astype(np.float64),
        k,
        taus,
        workload,
        drafted=setup.spec_tokens_at(sizes),
    )
    step = sum(parts["time"].values(), np.zeros(len(sizes)))
    tokens = np.where(capacity > 0, effective * taus / step, 0.0)
    return SetupCurve(
        setup=setup,
        batch=sizes,
        effective_batch=effective,
        spec_tokens=k,
        tau=taus,
        step_time_s=step,
        tokens_per_s=tokens,
        time_per_output_token_s=step / taus,
        max_batch=capacity,
        infeasible_reason=reason,
        bytes=parts["bytes"],
        time_s=parts["time"],
        flops=parts["flops"],
    )


def _adaptive_verified(
    model: ModelSpec,
    hardware: HardwareProfile,
    setup: Setup,
    batch: npt.NDArray[np.int64],
    drafted: npt.NDArray[np.int64],
    acceptance: AcceptanceEstimate,
    workload: Workload,
) -> tuple[npt.NDArray[np.int64], Array]:
    """The drafts adaptive verification verifies at each batch, and its tau.

    The engine profiles step cost against verified tokens at start-up and verifies the drafts
    its confidence favours (VLLM.md). Modelled: at each batch the count k <= K that gives the
    most tokens/s, the drafter still running its K passes (the confidence is read from the
    drafts). The per-request selection by confidence is not credited: vLLM's counters do not
    show how acceptance varies across requests, so where it does this is a lower bound. Under a
    schedule too, the band's K (`drafted`) is the step's ceiling."""
    sizes = batch.astype(np.float64)
    options = np.arange(setup.spec_tokens + 1)
    tau_of = tau_curve(acceptance.conditional)
    rates = []
    for verified in options:
        k = np.full(batch.shape, verified, dtype=np.int64)
        taus = tau_of[k]
        parts = _step(model, hardware, setup, sizes, k, taus, workload, drafted=drafted)
        rate = sizes * taus / sum(parts["time"].values(), np.zeros(len(sizes)))
        rates.append(np.where(verified <= drafted, rate, -np.inf))
    best = options[np.argmax(np.vstack(rates), axis=0)].astype(np.int64)
    return best, tau_of[best]


def _kv_shards(model: ModelSpec, tp: int) -> int:
    """KV heads split across TP ranks; MLA's latent cache is replicated."""
    if model.attention is None or model.attention.kv_lora_rank:
        return 1
    return min(tp, model.attention.kv_heads)


def _experts_touched(model: ModelSpec, tokens: Array) -> Array:
    """Expected routed experts a step touches per MoE layer: E(1 - (1 - k/E)^t)."""
    if model.moe is None:
        return np.zeros_like(tokens)
    experts, top_k = model.moe.experts, model.moe.experts_per_token
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def _step(
    model: ModelSpec,
    hw: HardwareProfile,
    setup: Setup,
    batch: Array,
    k: npt.NDArray[np.int64],
    taus: Array,
    workload: Workload,
    *,
    drafted: npt.NDArray[np.int64],
) -> dict[str, dict[str, Array]]:
    """One step's bytes, times and flops by kernel class: `k` drafts verified per request,
    `drafted` proposed (more than `k` only under adaptive verification)."""
    n: Array = k.astype(np.float64) + 1.0
    tokens = batch * n
    gemm = _gemm(model, hw, batch, k, workload)
    attention = _attention(model, hw, batch, tokens, workload)
    ssm = _ssm_traffic(model, setup, batch, k, n, taus, workload.tensor_parallel)
    state_time, verify_time = _ssm_times(model, hw, setup, k, ssm)
    logits = 2.0 * tokens * model.vocab_size * 4.0 / workload.tensor_parallel  # fp32, sampled
    draft_time, draft_flops = _draft(model, hw, batch, drafted, workload)
    time: dict[str, Array] = {
        "fixed": np.full_like(batch, hw.step_overhead_s)
        + (hw.replay_overhead_s_per_layer * model.ssm_layers if setup.replay_window else 0.0),
        "gemm": gemm["time"],
        "attention": attention["time"],
        "ssm": state_time,
        "ssm_verify": verify_time,
        "copy": (ssm["checkpoint"] + logits) / hw.bandwidth("copies"),
        "draft": draft_time,
        "eager": _eager_time(model, hw, batch, k, workload),
    }
    return {
        "bytes": {
            "weights_dense": gemm["dense"],
            "weights_experts": gemm["experts"],
            "kv_read": attention["read"],
            "kv_write": attention["write"],
            "ssm_state": ssm["state"],
            "ssm_ring": ssm["ring"],
            "ssm_checkpoint": ssm["checkpoint"],
            "ssm_conv": ssm["conv"],
            "logits": logits,
        },
        "time": time,
        "flops": {
            "gemm": gemm["flops"],
            "attention": attention["flops"],
            "ssm": ssm["vector_flops"] + ssm["rebuild_mma_flops"],
            "draft": draft_flops,
        },
    }


def _role_dtype(model: ModelSpec, experts: bool) -> str:
    """The stored format of most of the routed experts' (or the other streamed weights')
    parameters: it decides which tensor cores their GEMMs run on."""
    shares = [
        s
        for s in model.weight_shares
        if s.params and s.role != "embedding" and (s.role == "experts") == experts
    ]
    if not shares:
        return model.weight_dtype
    return max(shares, key=lambda s: s.params).dtype


def _roofline(bytes_moved: Array, flops: Array, bandwidth: float, rate: float) -> Array:
    return np.maximum(bytes_moved / bandwidth, flops / rate)


def _gemm(
    model: ModelSpec,
    hw: HardwareProfile,
    batch: Array,
    k: npt.NDArray[np.int64],
    workload: Workload,
) -> dict[str, Array]:
    """Weight GEMMs of the target pass over B x (1 + K) tokens, as two rooflines summed (they
    are separate kernels): the dense weights (read once; their flops grow with every verified
    token, and compute binds first there), and the routed experts the step's tokens touch
    (draft tokens route partly alike), each in its stored format on its own tensor cores."""
    tp = workload.tensor_parallel
    tokens = batch * (k + 1.0)
    dense_params = (model.dense_params - model.embedding_params) / tp
    dense = np.full_like(batch, dense_params * model.dense_weight_bytes_per_param)
    dense_flops = 2.0 * tokens * dense_params
    experts = np.zeros_like(batch)
    expert_flops = np.zeros_like(batch)
    if model.moe is not None:
        routed = batch * (1.0 + k * (1.0 - workload.draft_expert_overlap))
        touched = model.moe_layers * _experts_touched(model, routed) * model.moe.expert_params
        experts = touched * model.expert_weight_bytes_per_param / tp
        active = model.moe_layers * model.moe.experts_per_token * model.moe.expert_params
        expert_flops = 2.0 * tokens * active / tp
    mma = hw.efficiency.mma
    bandwidth = hw.bandwidth("gemm")
    time = _roofline(
        dense, dense_flops, bandwidth, hw.tensor_flops(_role_dtype(model, False)) * mma
    ) + _roofline(experts, expert_flops, bandwidth, hw.tensor_flops(_role_dtype(model, True)) * mma)
    return {"dense": dense, "experts": experts, "flops": dense_flops + expert_flops, "time": time}


def _attention(
    model: ModelSpec, hw: HardwareProfile, batch: Array, tokens: Array, workload: Workload
) -> dict[str, Array]:
    """Decode attention: each request's context read once (its n verify queries share it), n
    entries written; flops for every query over the context."""
    tp = workload.tensor_parallel
    kv_per_token = model.kv_bytes_per_token / _kv_shards(model, tp)
    read = batch * workload.context_tokens * kv_per_token
    write = tokens * kv_per_token
    flops = np.zeros_like(batch)
    if model.attention is not None:
        shape = model.attention
        # MLA decode attends in the latent space (absorbed weights): latent + rope per head.
        width = shape.heads * (
            shape.kv_lora_rank + shape.rope_head_dim if shape.kv_lora_rank else shape.head_dim
        )
        flops = 4.0 * tokens * workload.context_tokens * width * model.attention_layers / tp
    rate = hw.bf16_flops * hw.efficiency.mma
    time = _roofline(read + write, flops, hw.bandwidth("attention"), rate)
    return {"read": read, "write": write, "flops": flops, "time": time}


def _ssm_times(
    model: ModelSpec,
    hw: HardwareProfile,
    setup: Setup,
    k: npt.NDArray[np.int64],
    ssm: dict[str, Array],
) -> tuple[Array, Array]:
    """(ssm, ssm_verify): the state kernels' time at the decode kernels' efficiency, and what
    native speculation's multi-token kernels take beyond it. Those (GDN's
    fused_sigmoid_gating_delta_rule_update, Mamba-2's selective_state_update with per-token
    destination slots) store a full state per verified position from inside a sequential
    token loop, and reach a smaller share of HBM peak than the one-token decode kernels."""
    moved = ssm["state"] + ssm["ring"] + ssm["conv"]
    vector = ssm["vector_flops"] / (hw.fp32_flops * hw.efficiency.vector)
    mma = hw.bf16_flops * hw.efficiency.mma * _fp8_speedup(model)
    state = np.maximum(moved / hw.bandwidth("ssm"), vector) + ssm["rebuild_mma_flops"] / mma
    if setup.replay_window or not model.is_hybrid:
        return state, np.zeros_like(state)
    verify = np.maximum(moved / hw.bandwidth("ssm_verify"), vector)
    return state, np.where(k > 0, np.maximum(verify - state, 0.0), 0.0)


def _fp8_speedup(model: ModelSpec) -> float:
    """The replay rebuild's small matmuls run at the rate the model's own GEMMs get on FP8
    tensor cores (as before: twice BF16 for FP8 checkpoints)."""
    return 2.0 if model.weight_dtype.lower() in ("fp8", "float8") else 1.0


def _eager_time(
    model: ModelSpec,
    hw: HardwareProfile,
    batch: Array,
    k: npt.NDArray[np.int64],
    workload: Workload,
) -> Array:
    """Host launch time of passes that run without CUDA graphs. vLLM replays a captured graph
    only for steps of at most `cudagraph_capture_tokens` tokens (vllm/v1/cudagraph_dispatcher.py
    returns NONE above it); the target pass carries B x (1 + K) tokens, the drafter's first pass
    the same, its later passes B. Without graphs every kernel is launched from the host; at
    large batch the short ones (norms, gating, routing, casts) finish before the next launch
    arrives, so each block of the pass adds its launch time to the step."""
    cap = workload.cudagraph_capture_tokens
    tokens = batch * (k + 1.0)
    blocks = np.where(tokens > cap, float(len(model.layer_pattern)), 0.0)
    if _has_draft_passes(model, workload):
        draft = _draft_model(model, workload)
        per_pass = float(draft.layers) if draft is not None else float(DRAFTER_BLOCKS)
        first = np.where((k > 0) & (tokens > cap), per_pass, 0.0)
        later = np.where(batch > cap, per_pass * np.maximum(k - 1, 0), 0.0)
        blocks = blocks + first + later
    return blocks * hw.eager_launch_s_per_block


def _drafter(model: ModelSpec, workload: Workload) -> DrafterKind:
    return workload.drafter or model.drafter


def _draft_model(model: ModelSpec, workload: Workload) -> DraftModel | None:
    """The separate draft model the drafter runs, if it is one and its size is known."""
    if _drafter(model, workload) is not DrafterKind.DRAFT_MODEL:
        return None
    return workload.draft_model


def _has_draft_passes(model: ModelSpec, workload: Workload) -> bool:
    """Whether drafting runs on the GPU: ngram and suffix look tokens up on the CPU; a draft
    model of unknown size is not charged (it is never proposed: see core/drafter.py)."""
    drafter = _drafter(model, workload)
    if drafter is DrafterKind.DRAFT_MODEL:
        return workload.draft_model is not None
    return drafter not in (DrafterKind.NGRAM, DrafterKind.SUFFIX, DrafterKind.NONE)


def _ssm_traffic(
    model: ModelSpec,
    setup: Setup,
    batch: Array,
    k: npt.NDArray[np.int64],
    n: Array,
    taus: Array,
    tp: int,
) -> dict[str, Array]:
    """SSM bytes per step by the table in COSTMODEL.md section 3, for all SSM layers."""
    zeros = np.zeros_like(batch)
    if not model.is_hybrid or model.ssm is None:
        return dict.fromkeys(
            ("state", "ring", "checkpoint", "conv", "vector_flops", "rebuild_mma_flops"), zeros
        )
    layers = model.ssm_layers * batch / tp  # request-layers per GPU
    state, ring = model.ssm_state_bytes, model.ring_entry_bytes
    conv_row = model.conv_state_bytes(0) / max(model.ssm.conv_kernel - 1, 1)
    conv_rows = model.ssm.conv_kernel - 1
    window = setup.replay_window
    if window:
        # The ring must hold a whole verify window: flush when occupancy + 1 + K > L.
        usable = np.maximum(window - k, 1).astype(np.float64)
        occupancy = (usable - 1.0) / 2.0
        flushes = np.minimum(1.0, taus / usable)
        state_bytes = layers * state  # read the checkpoint
        ring_bytes = layers * (occupancy * ring + n * ring)  # read the ring, log n entries
        checkpoint = layers * state * flushes
        conv = layers * conv_row * (conv_rows + k + n)
        rebuilt = occupancy
    else:
        state_bytes = layers * state * (1.0 + n)  # read one state, write one per position
        ring_bytes = zeros
        checkpoint = zeros
        conv = layers * conv_row * (conv_rows + k + n * conv_rows)
        rebuilt = zeros
    elements = model.ssm.state_elements
    vector = layers * n * elements * FLOPS_PER_STATE_ELEMENT
    rebuild = layers * rebuilt * elements * 2.0
    if model.ssm.kind is SsmKind.MAMBA2:
        # Mamba-2 rebuilds the state from checkpoint + ring as one small matmul per head.
        return {
            "state": state_bytes,
            "ring": ring_bytes,
            "checkpoint": checkpoint,
            "conv": conv,
            "vector_flops": vector,
            "rebuild_mma_flops": rebuild,
        }
    # vLLM's GDN ring holds the update vectors d = beta (v - S k) with k and the gate, so the
    # rebuild S = decay S_0 + D K^T is linear, but its kernels (fused_recurrent_replayssm.py,
    # gdn_replayssm_spec_decode.py) run it over the whole ring tile, BC = max(16, L rounded up
    # to a power of two) entries, masked, in small tl.dot tiles per head and value block: 2 BC
    # flops per state element every step, latency-bound, so charged on fp32 vector units (at
    # L = 16 this is PR #48792's kernel-level 1.49x at batch 512 on B300, fp32 state: 1.45x).
    # The tile, not the occupancy, is why L below 16 buys nothing and 16 is GDN's best window.
    tile = float(max(16, 1 << max(window - 1, 0).bit_length())) if window else 0.0
    return {
        "state": state_bytes,
        "ring": ring_bytes,
        "checkpoint": checkpoint,
        "conv": conv,
        "vector_flops": vector + layers * elements * 2.0 * tile,
        "rebuild_mma_flops": zeros,
    }


def _draft(
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
    if not _has_draft_passes(model, workload):
        return np.zeros_like(batch), np.zeros_like(batch)
    one_pass = _draft_pass
    if _drafter(model, workload) is DrafterKind.DRAFT_MODEL:
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
    mtp = _drafter(model, workload) is DrafterKind.MTP
    # The model's own MTP layers when it drafts with them; an EAGLE head is one dense layer.
    dense = (model.drafter_dense_params if mtp else 0) or (
        4 * model.hidden_size * model.hidden_size + 3 * model.hidden_size * 4 * model.hidden_size
    )
    expert_params = model.moe.expert_params if model.moe else 0
    moe_layers = model.drafter_moe_layers if mtp else 0
    experts = moe_layers * _experts_touched(model, tokens) * expert_params
    weights = (dense + lm_head) * model.dense_weight_bytes_per_param + experts * (
        model.expert_weight_bytes_per_param
    )
    per_layer_kv = model.kv_bytes_per_token / max(model.attention_layers, 1)
    kv = batch * workload.context_tokens * per_layer_kv / _kv_shards(model, tp)
    flops = 2.0 * (tokens * dense + batch * lm_head) / tp
    rate = hw.tensor_flops(_role_dtype(model, False)) * hw.efficiency.mma
    return _roofline(weights / tp + kv, flops, hw.bandwidth("gemm"), rate), flops


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
    return _roofline(draft.weight_bytes / tp + kv, flops, hw.bandwidth("gemm"), rate), flops


# --------------------------------------------------------------------------- comparisons


@dataclass(frozen=True)
class Crossover:
    """Where the faster of two setups changes: from `batch` on, `winner` is faster."""

    batch: int
    loser: str
    winner: str


def winners(curves: Sequence[SetupCurve]) -> list[str]:
    """The fastest setup's label at each batch (all curves share one batch grid)."""
    table = np.vstack([c.tokens_per_s for c in curves])
    return [curves[i].setup.label for i in np.argmax(table, axis=0)]


def winner_changes(curves: Sequence[SetupCurve]) -> list[Crossover]:
    """Every batch at which the best setup changes, in batch order."""
    best = winners(curves)
    batch = curves[0].batch
    return [
        Crossover(batch=int(batch[i]), loser=best[i - 1], winner=best[i])
        for i in range(1, len(best))
        if best[i] != best[i - 1]
    ]


def crossover_batches(first: SetupCurve, second: SetupCurve) -> list[Crossover]:
    """Batches at which the faster of two setups flips (first batch of the new winner)."""
    return flips(
        first.batch,
        (first.setup.label, first.tokens_per_s),
        (second.setup.label, second.tokens_per_s),
    )


def flips(
    batch: npt.NDArray[np.int64], first: tuple[str, Array], second: tuple[str, Array]
) -> list[Crossover]:
    """Batches at which the faster of two (label, tokens/s) curves on one grid flips."""
    sign = np.sign(first[1] - second[1])
    result = []
    for i in range(1, len(sign)):
        if sign[i] != 0 and sign[i] != sign[i - 1]:
            winner, loser = (first, second) if sign[i] > 0 else (second, first)
            result.append(Crossover(int(batch[i]), loser[0], winner[0]))
    return result


def predict_all(
    model: ModelSpec,
    hardware: HardwareProfile,
    setups: Sequence[Setup],
    batch: npt.ArrayLike,
    acceptance: AcceptanceEstimate,
    workload: Workload | None = None,
) -> dict[str, SetupCurve]:
    return {s.label: predict(model, hardware, s, batch, acceptance, workload) for s in setups}


def ratio_to(curves: Mapping[str, SetupCurve], baseline: str) -> dict[str, Array]:
    base = curves[baseline].tokens_per_s
    return {
        label: np.divide(c.tokens_per_s, base, where=base > 0, out=np.zeros_like(base))
        for label, c in curves.items()
    }
