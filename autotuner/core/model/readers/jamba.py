"""The Jamba reader: Mamba-1 and attention layers at a period, MoE layers at another."""

from __future__ import annotations

from autotuner.core.model.readers import parts
from autotuner.core.model.readers.base import Body, Config, Fields, Read, build
from autotuner.core.model.spec import AttentionShape, MoeShape, Role, SsmKind, SsmShape


def _layers(raw: Config, f: Fields, count: int, experts: int) -> list[str]:
    """Each layer as its mixer (* attention, S Mamba-1) and its feed-forward (E, -)."""
    listed = raw.get("layers_block_type")
    if listed:
        kinds = ["*" if b == "attention" else "S" for b in listed]
    else:
        period, offset = int(f.opt("attn_layer_period", 8)), int(f.opt("attn_layer_offset", 4))
        kinds = ["*" if i % period == offset else "S" for i in range(count)]
    e_period, e_offset = int(f.opt("expert_layer_period", 2)), int(f.opt("expert_layer_offset", 1))
    ffn = ["E" if experts > 1 and i % e_period == e_offset else "-" for i in range(len(kinds))]
    return [k + m for k, m in zip(kinds, ffn, strict=True)]


def read_jamba(raw: Config, name: str) -> Read:
    f = Fields(raw, "Jamba")
    count, hidden, vocab, heads, kv_heads = f.stack()
    d_state, inter = f.req("mamba_d_state"), f.req("intermediate_size")
    f.check()
    experts = int(f.opt("num_experts", 1) or 1)
    inner = int(f.opt("mamba_expand", 2)) * hidden
    dt_rank = int(f.opt("mamba_dt_rank", -(-hidden // 16)))
    ssm = SsmShape(
        kind=SsmKind.MAMBA1,
        heads=inner,
        head_dim=1,
        state_size=d_state,
        groups=1,
        conv_kernel=int(f.opt("mamba_d_conv", 4)),
    )
    head_dim = hidden // heads
    blocks = {
        "S": {Role.SSM: parts.mamba1(hidden, ssm, dt_rank)},
        "*": {Role.ATTENTION: parts.attention(hidden, heads, kv_heads, head_dim, gated=False)},
        "-": {Role.MLP: parts.mlp(hidden, inter, gated=True)},
    }
    moe = None
    if experts > 1:
        moe = MoeShape(
            experts=experts,
            experts_per_token=int(f.opt("num_experts_per_tok", 2)),
            expert_params=parts.mlp(hidden, inter, gated=True),
        )
        blocks["E"] = parts.moe_block(hidden, moe)
    tied = bool(f.opt("tie_word_embeddings", False))
    return build(
        name,
        "JambaForCausalLM",
        Body(hidden, vocab, tied, _layers(raw, f, count, experts), blocks),
        ssm=ssm,
        attention=AttentionShape(heads=heads, kv_heads=kv_heads, head_dim=head_dim),
        moe=moe,
    )
