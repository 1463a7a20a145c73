"""The NemotronH reader (Nemotron-H, Nemotron-3 Nano/Super): Mamba-2, attention, MLP and
latent MoE layers spelled out by a layer pattern, and the MTP drafter's own pattern.
"""

from __future__ import annotations

from autotuner.core.model.readers import parts
from autotuner.core.model.readers.base import Body, Config, Fields, Read, build
from autotuner.core.model.spec import AttentionShape, MoeShape, Role, SsmKind, SsmShape
from autotuner.errors import ModelConfigError

# Block types by both spellings: transformers 5 writes a Mamba-2 mixer as linear_attention and
# attention as full_attention.
_BLOCKS = {
    "mamba": "M",
    "linear_attention": "M",
    "moe": "E",
    "attention": "*",
    "full_attention": "*",
    "mlp": "-",
}


def _pattern(raw: Config, f: Fields) -> str:
    """The layer pattern: `hybrid_override_pattern`, or spelled out as `layers_block_type`."""
    pattern = raw.get("hybrid_override_pattern")
    if not pattern and raw.get("layers_block_type"):
        pattern = "".join(_BLOCKS.get(str(b), "?") for b in raw["layers_block_type"])
    if not pattern:
        f.missing.append("hybrid_override_pattern or layers_block_type")
    return str(pattern or "")


def _mtp_pattern(raw: Config, f: Fields) -> str:
    """The MTP drafter's blocks, by the same characters as the target's pattern."""
    mtp_pattern = str(f.opt("mtp_hybrid_override_pattern", "") or "")
    if not mtp_pattern and raw.get("mtp_layers_block_type"):
        mtp_blocks = raw["mtp_layers_block_type"]
        mtp_pattern = "".join(_BLOCKS.get(str(b), "") for b in mtp_blocks)
    mtp_layers = int(f.opt("num_nextn_predict_layers", 0) or 0)
    if mtp_layers and not mtp_pattern:
        mtp_pattern = "*E" * mtp_layers
    return mtp_pattern


def _moe(
    f: Fields, hidden: int, experts: tuple[int, int, int], gated: bool
) -> tuple[MoeShape, dict[Role, int]]:
    """A NemotronH MoE layer from (routed experts, experts per token, expert width): routed
    experts (in the latent width when there is one), shared experts and the latent down/up
    projections."""
    count, top_k, width = experts
    latent = int(f.opt("moe_latent_size", 0) or 0)
    expert = parts.mlp(latent or hidden, width, gated)
    moe = MoeShape(experts=count, experts_per_token=top_k, expert_params=expert)
    shared = int(f.opt("moe_shared_expert_intermediate_size", 0)) * int(
        f.opt("n_shared_experts", 1)
    )
    block = parts.moe_block(
        hidden,
        moe,
        shared=parts.mlp(hidden, shared, gated),
        latent=2 * hidden * latent,
    )
    return moe, block


def read_nemotron_h(raw: Config, name: str) -> Read:
    f = Fields(raw, "NemotronH")
    pattern = _pattern(raw, f)
    hidden, vocab = f.req("hidden_size"), f.req("vocab_size")
    heads, kv_heads = f.req("num_attention_heads"), f.req("num_key_value_heads")
    m_heads, m_dim = f.req("mamba_num_heads"), f.req("mamba_head_dim")
    d_state, groups = f.req("ssm_state_size"), f.req("n_groups")
    has_moe = "E" in pattern
    experts = f.req("n_routed_experts") if has_moe else 0
    top_k = f.req("num_experts_per_tok") if has_moe else 0
    moe_inter = f.req("moe_intermediate_size") if has_moe else 0
    mlp_inter = f.req("intermediate_size") if "-" in pattern else 0
    f.check()
    if set(pattern) - set("ME*-"):
        raise ModelConfigError(f"NemotronH pattern {pattern!r} has characters other than M E * -")
    head_dim = int(f.opt("head_dim", hidden // heads))
    gated = f.opt("mlp_hidden_act", "relu2") != "relu2"
    ssm = SsmShape(
        kind=SsmKind.MAMBA2,
        heads=m_heads,
        head_dim=m_dim,
        state_size=d_state,
        groups=groups,
        conv_kernel=int(f.opt("conv_kernel", 4)),
    )
    blocks = {
        "M": {Role.SSM: parts.mamba2(hidden, ssm)},
        "*": {Role.ATTENTION: parts.attention(hidden, heads, kv_heads, head_dim, gated=False)},
        "-": {Role.MLP: parts.mlp(hidden, mlp_inter, gated)},
    }
    moe = None
    if has_moe:
        moe, blocks["E"] = _moe(f, hidden, (experts, top_k, moe_inter), gated)
    tied = bool(f.opt("tie_word_embeddings", False))
    return build(
        name,
        "NemotronHForCausalLM",
        Body(hidden, vocab, tied, list(pattern), blocks),
        ssm=ssm,
        attention=AttentionShape(heads=heads, kv_heads=kv_heads, head_dim=head_dim),
        moe=moe,
        mtp=_mtp_pattern(raw, f),
    )
