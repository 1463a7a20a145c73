"""Rooflines and the per-GPU shares they are taken over: the primitives every kernel class's
time is built from (bytes over bandwidth against flops over rate, KV heads split across tensor
parallelism, the experts a step's tokens touch, the format a GEMM's weights are stored in).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from autotuner.core.model.spec import ModelSpec, Role

Array = npt.NDArray[np.float64]


def roofline(bytes_moved: Array, flops: Array, bandwidth: float, rate: float) -> Array:
    return np.maximum(bytes_moved / bandwidth, flops / rate)


def kv_shards(model: ModelSpec, tp: int) -> int:
    """KV heads split across TP ranks; MLA's latent cache is replicated."""
    if model.attention is None or model.attention.kv_lora_rank:
        return 1
    return min(tp, model.attention.kv_heads)


def experts_touched(model: ModelSpec, tokens: Array) -> Array:
    """Expected routed experts a step touches per MoE layer: E(1 - (1 - k/E)^t)."""
    if model.moe is None:
        return np.zeros_like(tokens)
    experts, top_k = model.moe.experts, model.moe.experts_per_token
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def role_dtype(model: ModelSpec, experts: bool) -> str:
    """The stored format of most of the routed experts' (or the other streamed weights')
    parameters: it decides which tensor cores their GEMMs run on."""
    shares = [
        s
        for s in model.weight_shares
        if s.params and s.role != Role.EMBEDDING and (s.role == Role.EXPERTS) == experts
    ]
    if not shares:
        return model.weight_dtype
    return max(shares, key=lambda s: s.params).dtype
