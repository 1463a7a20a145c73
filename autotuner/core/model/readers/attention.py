"""The attention-only reader: dense and MoE transformers (Llama/Mistral, Qwen3, Qwen3-MoE,
Mixtral, DeepSeek-V3 with multi-head latent attention).

No recurrent state: the only lever is the draft schedule (issue #12).
"""

from __future__ import annotations

from autotuner.core.model.readers import parts
from autotuner.core.model.readers.base import Body, Config, Fields, Read, build, first_architecture
from autotuner.core.model.spec import AttentionShape, MoeShape, Role


def _mla_attention(f: Fields, hidden: int, heads: int, rank: int) -> tuple[int, AttentionShape]:
    """DeepSeek's multi-head latent attention: (parameters, shape with one latent KV head)."""
    rope, nope = int(f.opt("qk_rope_head_dim", 64)), int(f.opt("qk_nope_head_dim", 128))
    v_dim = int(f.opt("v_head_dim", 128))
    q_rank = int(f.opt("q_lora_rank", 0) or 0)
    q_params = (
        (hidden * q_rank + q_rank * heads * (nope + rope))
        if q_rank
        else (hidden * heads * (nope + rope))
    )
    params = (
        q_params + hidden * (rank + rope) + rank * heads * (nope + v_dim) + heads * v_dim * hidden
    )
    shape = AttentionShape(
        heads=heads, kv_heads=1, head_dim=nope + rope, kv_lora_rank=rank, rope_head_dim=rope
    )
    return params, shape


def _attention(f: Fields, hidden: int, heads: int) -> tuple[int, AttentionShape]:
    """(parameters, shape) of one attention layer: latent (MLA) or grouped-query."""
    mla = int(f.opt("kv_lora_rank", 0) or 0)
    if mla:
        return _mla_attention(f, hidden, heads, mla)
    kv_heads = int(f.opt("num_key_value_heads", heads))
    head_dim = int(f.opt("head_dim", hidden // heads) or hidden // heads)
    params = parts.attention(hidden, heads, kv_heads, head_dim, gated=False)
    return params, AttentionShape(heads=heads, kv_heads=kv_heads, head_dim=head_dim)


def _routed_layers(f: Fields, count: int) -> list[bool]:
    """Which layers of a MoE transformer route to experts (DeepSeek's first dense layers,
    Qwen3-MoE's `mlp_only_layers` and sparse step)."""
    dense_from = int(f.opt("first_k_dense_replace", 0) or 0)
    mlp_only = set(f.opt("mlp_only_layers", []))
    step = int(f.opt("decoder_sparse_step", 1) or 1)
    return [i >= dense_from and i not in mlp_only and (i + 1) % step == 0 for i in range(count)]


def _moe(f: Fields, hidden: int, experts: int, inter: int) -> tuple[MoeShape, dict[Role, int]]:
    """The routed experts and the MoE block with its shared experts."""
    moe_inter = int(f.opt("moe_intermediate_size", inter) or inter)
    moe = MoeShape(
        experts=experts,
        experts_per_token=int(f.opt("num_experts_per_tok", 0) or 0),
        expert_params=parts.mlp(hidden, moe_inter, gated=True),
    )
    shared = int(f.opt("n_shared_experts", 0) or 0) * moe_inter + int(
        f.opt("shared_expert_intermediate_size", 0) or 0
    )
    return moe, parts.moe_block(hidden, moe, shared=parts.mlp(hidden, shared, gated=True))


def read_attention(raw: Config, name: str) -> Read:
    """Dense and MoE transformers: Llama/Mistral, Qwen3, Qwen3-MoE, Mixtral, DeepSeek-V3 (MLA)."""
    architecture = first_architecture(raw)
    f = Fields(raw, architecture)
    count = f.req("num_hidden_layers")
    hidden, vocab = f.req("hidden_size"), f.req("vocab_size")
    heads = f.req("num_attention_heads")
    f.check()
    experts = int(
        f.opt("n_routed_experts", f.opt("num_local_experts", f.opt("num_experts", 0))) or 0
    )
    attn_params, attention = _attention(f, hidden, heads)
    inter = int(f.opt("intermediate_size", 4 * hidden))
    blocks = {
        "*": {Role.ATTENTION: attn_params},
        "-": {Role.MLP: parts.mlp(hidden, inter, gated=True)},
    }
    moe = None
    moe_at = [False] * count
    if experts:
        moe, blocks["E"] = _moe(f, hidden, experts, inter)
        moe_at = _routed_layers(f, count)
    layers = ["*" + ("E" if sparse else "-") for sparse in moe_at]
    tied = bool(f.opt("tie_word_embeddings", False))
    mtp = int(f.opt("num_nextn_predict_layers", 0) or 0)
    return build(
        name,
        architecture,
        Body(hidden, vocab, tied, layers, blocks),
        attention=attention,
        moe=moe,
        mtp=("*E" if experts else "*-") * mtp,  # each MTP layer: one attention layer and FFN
    )
