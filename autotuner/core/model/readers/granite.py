"""The Granite-4.0-H / Bamba reader: Mamba-2 and attention layers, each followed by a dense
MLP or a MoE layer with a shared expert.
"""

from __future__ import annotations

from autotuner.core.model.readers.base import (
    Blocks,
    Body,
    Config,
    Fields,
    Read,
    attention_params,
    build,
    first_architecture,
    mamba2_params,
    mamba2_shape,
    mlp_params,
    moe_block,
)
from autotuner.core.model.spec import AttentionShape, MoeShape


def _mixers(raw: Config, f: Fields, count: int) -> list[str]:
    """Each layer's mixer: * attention, M Mamba-2 (`layer_types` or `attn_layer_indices`)."""
    types = raw.get("layer_types")
    if types:
        return ["*" if t in ("attention", "full_attention") else "M" for t in types]
    attn_at = set(f.opt("attn_layer_indices", []))
    return ["*" if i in attn_at else "M" for i in range(count)]


def read_granite_hybrid(raw: Config, name: str) -> Read:
    f = Fields(raw, "GraniteMoeHybrid/Bamba")
    count = f.req("num_hidden_layers")
    hidden, vocab = f.req("hidden_size"), f.req("vocab_size")
    heads, kv_heads = f.req("num_attention_heads"), f.req("num_key_value_heads")
    m_heads, d_state = f.req("mamba_n_heads"), f.req("mamba_d_state")
    f.check()
    kinds = _mixers(raw, f, count)
    ssm = mamba2_shape(f, hidden, m_heads, d_state)
    head_dim = int(f.opt("head_dim", hidden // heads))
    experts = int(f.opt("num_local_experts", 0) or 0)
    inter = int(f.opt("intermediate_size", 0) or 0)
    shared = int(f.opt("shared_intermediate_size", 0) or 0)
    blocks: Blocks = {
        "M": {"ssm": mamba2_params(hidden, ssm)},
        "*": {"attention": attention_params(hidden, heads, kv_heads, head_dim, gated=False)},
        "-": {"mlp": mlp_params(hidden, shared or inter, gated=True)},
    }
    moe = None
    if experts:
        moe = MoeShape(
            experts=experts,
            experts_per_token=int(f.opt("num_experts_per_tok", 1)),
            expert_params=mlp_params(hidden, inter, gated=True),
        )
        blocks["E"] = moe_block(hidden, moe, shared_experts=mlp_params(hidden, shared, gated=True))
    layers = [k + ("E" if experts else "-") for k in kinds]
    tied = bool(f.opt("tie_word_embeddings", True))
    return build(
        name,
        first_architecture(raw),
        Body(hidden, vocab, tied, layers, blocks),
        ssm=ssm,
        attention=AttentionShape(heads=heads, kv_heads=kv_heads, head_dim=head_dim),
        moe=moe,
    )
