"""The Qwen3-Next / Qwen3.5 reader: Gated DeltaNet and full-attention layers, dense or MoE
feed-forward, and the MTP layers (its text config, when nested, holds the shapes).
"""

from __future__ import annotations

from autotuner.core.model.readers import parts
from autotuner.core.model.readers.base import Body, Config, Fields, Read, build, first_architecture
from autotuner.core.model.spec import AttentionShape, MoeShape, Role, SsmKind, SsmShape


def _layers(text: Config, f: Fields, count: int, experts: int) -> list[str]:
    """Each layer as two characters: its mixer (G: Gated DeltaNet, *: full attention) and its
    feed-forward (E: routed experts, -: dense MLP)."""
    types = text.get("layer_types")
    if types:
        kinds = ["*" if t == "full_attention" else "G" for t in types]
    else:
        interval = int(f.opt("full_attention_interval", 4))
        kinds = ["*" if (i + 1) % interval == 0 else "G" for i in range(count)]
    mlp_only = set(f.opt("mlp_only_layers", []))
    sparse_step = int(f.opt("decoder_sparse_step", 1) or 1)
    ffn = [
        "E" if experts and i not in mlp_only and (i + 1) % sparse_step == 0 else "-"
        for i in range(len(kinds))
    ]
    return [k + m for k, m in zip(kinds, ffn, strict=True)]


def _moe(f: Fields, hidden: int, experts: tuple[int, int, int]) -> tuple[MoeShape, dict[Role, int]]:
    """The routed experts from (experts, experts per token, expert width), and the MoE block
    with its shared expert."""
    count, top_k, width = experts
    moe = MoeShape(
        experts=count,
        experts_per_token=top_k,
        expert_params=parts.mlp(hidden, width, gated=True),
    )
    shared = int(f.opt("shared_expert_intermediate_size", 0) or 0)
    gate = hidden if shared else 0  # the shared expert's own scalar gate
    return moe, parts.moe_block(hidden, moe, shared=parts.mlp(hidden, shared, gated=True) + gate)


def read_qwen_gdn(raw: Config, name: str) -> Read:
    text = raw.get("text_config") or raw
    f = Fields(text, "Qwen3-Next/Qwen3.5")
    count, hidden, vocab, heads, kv_heads = f.stack()
    k_heads, v_heads = f.req("linear_num_key_heads"), f.req("linear_num_value_heads")
    k_dim, v_dim = f.req("linear_key_head_dim"), f.req("linear_value_head_dim")
    experts = int(f.opt("num_experts", 0) or 0)
    top_k = f.req("num_experts_per_tok") if experts else 0
    moe_inter = f.req("moe_intermediate_size") if experts else 0
    f.check()
    ssm = SsmShape(
        kind=SsmKind.GATED_DELTANET,
        heads=v_heads,
        head_dim=v_dim,
        state_size=k_dim,
        groups=k_heads,
        conv_kernel=int(f.opt("linear_conv_kernel_dim", 4)),
    )
    head_dim = int(f.opt("head_dim", hidden // heads))
    gated_attn = bool(f.opt("attn_output_gate", True))
    blocks = {
        "G": {Role.SSM: parts.gdn(hidden, ssm)},
        "*": {Role.ATTENTION: parts.attention(hidden, heads, kv_heads, head_dim, gated=gated_attn)},
        "-": {Role.MLP: parts.mlp(hidden, int(f.opt("intermediate_size", 0) or 0), gated=True)},
    }
    moe = None
    if experts:
        moe, blocks["E"] = _moe(f, hidden, (experts, top_k, moe_inter))
    tied = bool(f.opt("tie_word_embeddings", raw.get("tie_word_embeddings", False)))
    # Qwen3-Next's published configs do not state their one MTP layer: vLLM takes the count
    # as 1 when absent (model_executor/models/qwen3_next_mtp.py:63), and so does this reader.
    unstated = 1 if text.get("model_type") == "qwen3_next" else 0
    mtp = int(f.opt("mtp_num_hidden_layers", f.opt("num_nextn_predict_layers", unstated)) or 0)
    return build(
        name,
        first_architecture(raw),
        Body(hidden, vocab, tied, _layers(text, f, count, experts), blocks),
        ssm=ssm,
        attention=AttentionShape(heads=heads, kv_heads=kv_heads, head_dim=head_dim),
        moe=moe,
        mtp=("*E" if experts else "*-") * mtp,  # each MTP layer: full attention and the FFN
    )
