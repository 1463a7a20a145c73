"""The Granite-4.0-H / Bamba reader: Mamba-2 and attention layers, each followed by a dense
MLP or a MoE layer with a shared expert.
"""

from __future__ import annotations

from autotuner.core.model.readers import parts
from autotuner.core.model.readers.base import Body, Config, Fields, Read, build, first_architecture
from autotuner.core.model.spec import AttentionShape, MoeShape, Role


def _mixers(raw: Config, f: Fields, count: int) -> list[str]:
    """Each layer's mixer: * attention, M Mamba-2 (`layer_types` or `attn_layer_indices`)."""
    types = raw.get("layer_types")
    if types:
        return ["*" if t in ("attention", "full_attention") else "M" for t in types]
    attn_at = set(f.opt("attn_layer_indices", []))
    return ["*" if i in attn_at else "M" for i in range(count)]


def read_granite_hybrid(raw: Config, name: str) -> Read:
    f = Fields(raw, "GraniteMoeHybrid/Bamba")
    count, hidden, vocab, heads, kv_heads = f.stack()
    m_heads, d_state = f.req("mamba_n_heads"), f.req("mamba_d_state")
    f.check()
    kinds = _mixers(raw, f, count)
    ssm = parts.mamba2_shape(f, parts.PREFIXED_MAMBA2, hidden, m_heads, d_state)
    head_dim = int(f.opt("head_dim", hidden // heads))
    experts = int(f.opt("num_local_experts", 0) or 0)
    inter = int(f.opt("intermediate_size", 0) or 0)
    shared = int(f.opt("shared_intermediate_size", 0) or 0)
    blocks = {
        "M": {Role.SSM: parts.mamba2(hidden, ssm)},
        "*": {Role.ATTENTION: parts.attention(hidden, heads, kv_heads, head_dim, gated=False)},
        "-": {Role.MLP: parts.mlp(hidden, shared or inter, gated=True)},
    }
    moe = None
    if experts:
        moe = MoeShape(
            experts=experts,
            experts_per_token=int(f.opt("num_experts_per_tok", 1)),
            expert_params=parts.mlp(hidden, inter, gated=True),
        )
        blocks["E"] = parts.moe_block(hidden, moe, shared=parts.mlp(hidden, shared, gated=True))
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
