"""The cost of one decode step for every setup, vectorised over batch sizes.

Implements COSTMODEL.md: bytes by component (weights with MoE expert coverage, KV, SSM state,
ring, checkpoints, conv, logits), flops, a roofline per kernel class, the drafter's sequential
passes (drafting.py), fixed overheads, and the batch that fits in memory (capacity.py); plus
what vLLM's speculative step does beyond the bytes (docs/costmodel.md, "Verification at large
batch"): the multi-token SSM kernels of native speculation, eager execution above the
CUDA-graph capture size, and the drafter's first pass over every verified position. All sizes
are per GPU under tensor parallelism. The step's time is split by `KernelClass`, the classes
online attribution fits on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from autotuner.core.engine.workload import GIB, Workload
from autotuner.core.model.spec import ModelSpec, SsmKind
from autotuner.core.predict.acceptance import AcceptanceEstimate, tau_curve
from autotuner.core.predict.capacity import max_batch
from autotuner.core.predict.drafting import (
    DRAFTER_BLOCKS,
    draft_model,
    draft_time,
    has_draft_passes,
)
from autotuner.core.predict.hardware import HardwareProfile
from autotuner.core.predict.prefill import PrefillCost, keeps_prefix_caching, prefill_cost
from autotuner.core.predict.roofline import (
    Array,
    experts_touched,
    kv_shards,
    role_dtype,
    roofline,
)
from autotuner.core.types import Prediction, Setup
from autotuner.core.vocabulary import Word
from autotuner.errors import InputError

FLOPS_PER_STATE_ELEMENT = 5.0  # decay, input outer product, add; output contraction


class KernelClass(Word):
    """The kernel classes a step's time is split into: the keys of `SetupCurve.time_s`, which
    online attribution fits on and persists."""

    FIXED = "fixed"
    GEMM = "gemm"
    ATTENTION = "attention"
    SSM = "ssm"
    SSM_VERIFY = "ssm_verify"
    COPY = "copy"
    DRAFT = "draft"
    EAGER = "eager"


@dataclass(frozen=True)
class SetupCurve:
    """One setup predicted over an array of batch sizes; every field is an array over batch.

    `step_time_s` is the decode step; with `prefill` (the setup turns off the prefix caching the
    live engine had), `tokens_per_s` and `time_per_output_token_s` also pay the recomputed
    prefill (core/predict/prefill.py)."""

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
    prefill: PrefillCost | None = None

    @property
    def feasible(self) -> npt.NDArray[np.bool_]:
        return self.batch <= self.max_batch

    @property
    def decode_tokens_per_s(self) -> Array:
        """What decoding alone would serve (`tokens_per_s` before the recomputed prefill)."""
        if self.prefill is None:
            return self.tokens_per_s
        return self.prefill.decode_tokens_per_s(self.tokens_per_s)

    @property
    def prefill_share(self) -> Array:
        """Share of each GPU second spent on recomputed prefill (0 with prefix caching)."""
        if self.prefill is None:
            return np.zeros_like(self.tokens_per_s)
        return self.prefill.share(self.tokens_per_s)

    @property
    def recomputed_tokens_per_s(self) -> Array:
        """Prompt tokens prefilled again each second (0 with prefix caching)."""
        if self.prefill is None:
            return np.zeros_like(self.tokens_per_s)
        return self.prefill.recomputed_tokens_per_s(self.tokens_per_s)

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
            prefill_share=float(self.prefill_share[index]),
            recomputed_prompt_tokens_per_s=float(self.recomputed_tokens_per_s[index]),
        )

    def predictions(self) -> list[Prediction]:
        return [self.at(i) for i in range(len(self.batch))]


def predict(
    model: ModelSpec,
    hardware: HardwareProfile,
    setup: Setup,
    batch: npt.ArrayLike,
    acceptance: AcceptanceEstimate,
    workload: Workload | None = None,
    *,
    prefix_caching: bool = True,
    piecewise: bool = False,
) -> SetupCurve:
    """Predict one setup at every batch size in `batch` (integers >= 1). `prefix_caching`:
    whether the engine keeps prefix caching under this setup (the engine's rules say; off, the
    workload's prefix-cache hits are prefilled again). `piecewise`: whether it runs the setup
    with piecewise CUDA graphs instead of full ones (vLLM's K schedule on Model Runner V1)."""
    workload = workload or Workload()
    sizes = np.asarray(batch, dtype=np.int64).ravel()
    if sizes.size == 0 or sizes.min() < 1:
        raise InputError("batch sizes must be integers >= 1")
    capacity = max_batch(model, hardware, setup, workload)
    reason = _capped(model, hardware, setup, workload, capacity, int(sizes.max()))
    effective = np.minimum(sizes, max(capacity, 1))
    # A schedule's K is looked up from the requests the engine runs (vLLM: the scheduled ones,
    # v1/core/sched/scheduler.py), not from the demand queued beyond capacity.
    drafted = setup.spec_tokens_at(effective)
    k = drafted
    if int(k.max()) > acceptance.max_spec_tokens:
        raise InputError(
            f"setup {setup.label} drafts up to K={int(k.max())} but acceptance is known only up "
            f"to K={acceptance.max_spec_tokens}: no prediction beyond what was observed"
        )
    taus = tau_curve(acceptance.conditional)[k]
    if setup.adaptive:
        k, taus = _adaptive_verified(
            model, hardware, setup, effective, k, acceptance, workload, piecewise
        )
    parts = _step(
        model,
        hardware,
        setup,
        effective.astype(np.float64),
        k,
        taus,
        workload,
        drafted=drafted,
        piecewise=piecewise,
    )
    step = sum(parts["time"].values(), np.zeros(len(sizes)))
    tokens = np.where(capacity > 0, effective * taus / step, 0.0)
    per_token = step / taus
    prefill = prefill_cost(model, hardware, workload, prefix_caching=prefix_caching)
    if prefill is not None:
        per_token = per_token * (1.0 + tokens * prefill.seconds_per_output_token)
        tokens = prefill.tokens_per_s(tokens)
    return SetupCurve(
        setup=setup,
        batch=sizes,
        effective_batch=effective,
        spec_tokens=k,
        tau=taus,
        step_time_s=step,
        tokens_per_s=tokens,
        time_per_output_token_s=per_token,
        max_batch=capacity,
        infeasible_reason=reason,
        bytes=parts["bytes"],
        time_s=parts["time"],
        flops=parts["flops"],
        prefill=prefill,
    )


def _capped(
    model: ModelSpec,
    hardware: HardwareProfile,
    setup: Setup,
    workload: Workload,
    capacity: int,
    largest: int,
) -> str | None:
    """Why the largest batch asked for does not run as asked (None: it does)."""
    if capacity == 0:
        return (
            f"weights ({model.weight_bytes / GIB:.0f} GiB) leave no room for state on "
            f"{workload.tensor_parallel} x {hardware.name}: raise tensor parallelism"
        )
    if largest > capacity and capacity == workload.max_num_seqs:
        return (
            f"{workload.engine_name} runs at most {capacity} requests "
            f"({workload.request_cap_flag}) and queues the rest: the throughput is that of "
            f"batch {capacity}"
        )
    if largest > capacity:
        return (
            f"{workload.engine_name} admits {capacity} requests with {setup.label} (state "
            f"slots, ring and KV per request) and queues the rest: the throughput is that of "
            f"batch {capacity}"
        )
    return None


def predict_all(
    model: ModelSpec,
    hardware: HardwareProfile,
    setups: Sequence[Setup],
    batch: npt.ArrayLike,
    acceptance: AcceptanceEstimate,
    workload: Workload | None = None,
    *,
    prefix_caching: Callable[[Setup], bool] = keeps_prefix_caching,
    as_run: Callable[[Setup], Setup] = lambda setup: setup,
    piecewise: Callable[[Setup], bool] = lambda setup: False,
) -> dict[str, SetupCurve]:
    """`prefix_caching(setup)`: whether the engine keeps prefix caching under that setup;
    `as_run(setup)`: the setup whose speed the engine runs when `setup` is written;
    `piecewise(run)`: whether it runs that with piecewise CUDA graphs."""
    return {
        s.label: predict_as_run(
            model, hardware, s, batch, acceptance, workload, as_run, prefix_caching(s), piecewise
        )
        for s in setups
    }


def predict_as_run(
    model: ModelSpec,
    hardware: HardwareProfile,
    setup: Setup,
    batch: npt.ArrayLike,
    acceptance: AcceptanceEstimate,
    workload: Workload | None,
    as_run: Callable[[Setup], Setup],
    prefix_caching: bool,
    piecewise: Callable[[Setup], bool] = lambda setup: False,
) -> SetupCurve:
    """`setup`'s curve priced as the engine runs it (`as_run(setup)`, with the CUDA graphs
    `piecewise(run)` says), labelled as written."""
    run = as_run(setup)
    curve = predict(
        model,
        hardware,
        run,
        batch,
        acceptance,
        workload,
        prefix_caching=prefix_caching,
        piecewise=piecewise(run),
    )
    return curve if run == setup else replace(curve, setup=setup)


def _adaptive_verified(
    model: ModelSpec,
    hardware: HardwareProfile,
    setup: Setup,
    batch: npt.NDArray[np.int64],
    drafted: npt.NDArray[np.int64],
    acceptance: AcceptanceEstimate,
    workload: Workload,
    piecewise: bool,
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
        parts = _step(
            model, hardware, setup, sizes, k, taus, workload, drafted=drafted, piecewise=piecewise
        )
        rate = sizes * taus / sum(parts["time"].values(), np.zeros(len(sizes)))
        rates.append(np.where(verified <= drafted, rate, -np.inf))
    best = options[np.argmax(np.vstack(rates), axis=0)].astype(np.int64)
    return best, tau_of[best]


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
    piecewise: bool = False,
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
    drafting, draft_flops = draft_time(model, hw, batch, drafted, workload)
    time: dict[str, Array] = {
        KernelClass.FIXED: np.full_like(batch, hw.step_overhead_s)
        + (hw.replay_overhead_s_per_layer * model.ssm_layers if setup.replay_window else 0.0),
        KernelClass.GEMM: gemm["time"],
        KernelClass.ATTENTION: attention["time"],
        KernelClass.SSM: state_time,
        KernelClass.SSM_VERIFY: verify_time,
        KernelClass.COPY: (ssm["checkpoint"] + logits) / hw.bandwidth("copies"),
        KernelClass.DRAFT: drafting,
        KernelClass.EAGER: _eager_time(model, hw, batch, k, workload)
        + (_piecewise_time(model, hw, batch, drafted, workload) if piecewise else 0.0),
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
            KernelClass.GEMM: gemm["flops"],
            KernelClass.ATTENTION: attention["flops"],
            KernelClass.SSM: ssm["vector_flops"] + ssm["rebuild_mma_flops"],
            KernelClass.DRAFT: draft_flops,
        },
    }


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
        touched = model.moe_layers * experts_touched(model, routed) * model.moe.expert_params
        experts = touched * model.expert_weight_bytes_per_param / tp
        active = model.moe_layers * model.moe.experts_per_token * model.moe.expert_params
        expert_flops = 2.0 * tokens * active / tp
    mma = hw.efficiency.mma
    bandwidth = hw.bandwidth("gemm")
    time = roofline(
        dense, dense_flops, bandwidth, hw.tensor_flops(role_dtype(model, False)) * mma
    ) + roofline(experts, expert_flops, bandwidth, hw.tensor_flops(role_dtype(model, True)) * mma)
    return {"dense": dense, "experts": experts, "flops": dense_flops + expert_flops, "time": time}


def _attention(
    model: ModelSpec, hw: HardwareProfile, batch: Array, tokens: Array, workload: Workload
) -> dict[str, Array]:
    """Decode attention: each request's context read once (its n verify queries share it), n
    entries written; flops for every query over the context."""
    tp = workload.tensor_parallel
    kv_per_token = model.kv_bytes_per_token / kv_shards(model, tp)
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
    time = roofline(read + write, flops, hw.bandwidth("attention"), rate)
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
    tensor cores (twice BF16 for FP8 checkpoints)."""
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
    if has_draft_passes(model, workload):
        draft = draft_model(model, workload)
        per_pass = float(draft.layers) if draft is not None else float(DRAFTER_BLOCKS)
        first = np.where((k > 0) & (tokens > cap), per_pass, 0.0)
        later = np.where(batch > cap, per_pass * np.maximum(k - 1, 0), 0.0)
        blocks = blocks + first + later
    return blocks * hw.eager_launch_s_per_block


def _piecewise_time(
    model: ModelSpec,
    hw: HardwareProfile,
    batch: Array,
    drafted: npt.NDArray[np.int64],
    workload: Workload,
) -> Array:
    """Host time of piecewise CUDA graphs where full ones would be replayed: every mixer
    (attention or SSM layer: vLLM's splitting ops) of each pass that runs from a graph leaves
    it and launches its kernels from the host. Passes above the capture size run eager and
    are charged in `_eager_time` already."""
    cap = workload.cudagraph_capture_tokens
    tokens = batch * (drafted + 1.0)
    mixers = float(model.attention_layers + model.ssm_layers)
    splits = np.where(tokens <= cap, mixers, 0.0)
    if has_draft_passes(model, workload):
        draft = draft_model(model, workload)
        per_pass = float(draft.layers) if draft is not None else 1.0  # MTP/EAGLE: one mixer
        first = np.where((drafted > 0) & (tokens <= cap), per_pass, 0.0)
        later = np.where(batch <= cap, per_pass * np.maximum(drafted - 1, 0), 0.0)
        splits = splits + first + later
    return splits * hw.piecewise_s_per_split


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
