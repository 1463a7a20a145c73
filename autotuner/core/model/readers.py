"""Readers that turn a Hugging Face config.json into a ModelSpec, one function per family.

Field names are the public ones (VLLM.md, "Model config fields"). Each reader collects every
missing required field before failing, so one error names them all. A reader returns the shapes
and an `Inventory` of its parameters by module role; `from_hf_config` then decides the stored
weight formats (weights.py: override, quantization_config, hf_quant_config.json, torch_dtype) and
the SSM state dtype as vLLM will (live flag, the config's own field, vLLM's default).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from autotuner.core.model.spec import (
    AttentionShape,
    DrafterKind,
    ModelSpec,
    MoeShape,
    SsmKind,
    SsmShape,
)
from autotuner.core.model.weights import (
    UNQUANTIZED,
    Inventory,
    Scheme,
    describe,
    plan,
    scheme_of,
    uniform,
    weight_format,
)
from autotuner.errors import ModelConfigError

Config = Mapping[str, Any]
Blocks = dict[str, dict[str, int]]
Read = tuple[ModelSpec, Inventory]


class _Fields:
    """Reads fields from a config, remembering every required one that is absent."""

    def __init__(self, raw: Config, family: str) -> None:
        self.raw = raw
        self.family = family
        self.missing: list[str] = []

    def req(self, *names: str) -> Any:
        for name in names:
            if self.raw.get(name) is not None:
                return self.raw[name]
        self.missing.append(" or ".join(names))
        return 0

    def opt(self, name: str, default: Any) -> Any:
        value = self.raw.get(name)
        return default if value is None else value

    def check(self) -> None:
        if self.missing:
            raise ModelConfigError(
                f"{self.family} config.json is missing required field(s): "
                + ", ".join(self.missing)
            )


def attention_params(hidden: int, heads: int, kv_heads: int, head_dim: int, gated: bool) -> int:
    """q (twice as wide with an output gate), k, v and o projections."""
    q = hidden * heads * head_dim * (2 if gated else 1)
    return q + 2 * hidden * kv_heads * head_dim + heads * head_dim * hidden


def mamba2_params(hidden: int, ssm: SsmShape) -> int:
    inner = ssm.heads * ssm.head_dim
    in_proj = hidden * (2 * inner + 2 * ssm.groups * ssm.state_size + ssm.heads)
    return in_proj + ssm.conv_dim * ssm.conv_kernel + inner * hidden + 3 * ssm.heads + inner


def gdn_params(hidden: int, ssm: SsmShape) -> int:
    keys = ssm.groups * ssm.state_size
    values = ssm.heads * ssm.head_dim
    projections = hidden * (2 * keys + 2 * values + 2 * ssm.heads)
    return projections + ssm.conv_dim * ssm.conv_kernel + values * hidden


def mamba1_params(hidden: int, ssm: SsmShape, dt_rank: int) -> int:
    inner = ssm.heads
    return (
        hidden * 2 * inner
        + inner * ssm.conv_kernel
        + inner * (dt_rank + 2 * ssm.state_size)
        + dt_rank * inner
        + inner * ssm.state_size
        + inner * hidden
    )


def mlp_params(hidden: int, intermediate: int, gated: bool) -> int:
    return (3 if gated else 2) * hidden * intermediate


def _dense(block: Mapping[str, int]) -> int:
    """A block's parameters other than routed experts."""
    return sum(params for role, params in block.items() if role != "experts")


def _moe_block(hidden: int, moe: MoeShape, **dense: int) -> dict[str, int]:
    """A MoE layer's roles: router, routed experts and whatever dense parts it has."""
    parts = {"router": hidden * moe.experts, "experts": moe.experts * moe.expert_params}
    parts.update({role: params for role, params in dense.items() if params})
    return parts


def _inventory(layers: list[str], blocks: Blocks, head: int, table: int) -> Inventory:
    return Inventory(layers=tuple(layers), blocks=blocks, embedding=table, lm_head=head)


def _dense_params(layers: list[str], blocks: Blocks, head: int, table: int) -> int:
    return sum(_dense(blocks[c]) for chars in layers for c in chars) + head + table


def _embeddings(hidden: int, vocab: int, tied: bool) -> tuple[int, int]:
    """(parameters read every step: the LM head, input embedding table)."""
    return (0 if tied else vocab * hidden), vocab * hidden


# --------------------------------------------------------------------------- NemotronH

_NEMOTRON_BLOCKS = {"mamba": "M", "moe": "E", "attention": "*", "mlp": "-"}


def _nemotron_pattern(raw: Config, f: _Fields) -> str:
    """The layer pattern: `hybrid_override_pattern`, or spelled out as `layers_block_type`."""
    pattern = raw.get("hybrid_override_pattern")
    if not pattern and raw.get("layers_block_type"):
        pattern = "".join(_NEMOTRON_BLOCKS.get(str(b), "?") for b in raw["layers_block_type"])
    if not pattern:
        f.missing.append("hybrid_override_pattern or layers_block_type")
    return str(pattern or "")


def _nemotron_mtp_pattern(raw: Config, f: _Fields) -> str:
    """The MTP drafter's blocks, by the same characters as the target's pattern."""
    mtp_pattern = str(f.opt("mtp_hybrid_override_pattern", "") or "")
    if not mtp_pattern and raw.get("mtp_layers_block_type"):
        mtp_blocks = raw["mtp_layers_block_type"]
        mtp_pattern = "".join(_NEMOTRON_BLOCKS.get(str(b), "") for b in mtp_blocks)
    mtp_layers = int(f.opt("num_nextn_predict_layers", 0) or 0)
    if mtp_layers and not mtp_pattern:
        mtp_pattern = "*E" * mtp_layers
    return mtp_pattern


def _nemotron_moe(
    f: _Fields, hidden: int, moe: MoeShape, latent: int, gated: bool
) -> dict[str, int]:
    """A NemotronH MoE layer: routed experts (in the latent width when there is one), shared
    experts and the latent down/up projections."""
    shared = int(f.opt("moe_shared_expert_intermediate_size", 0)) * int(
        f.opt("n_shared_experts", 1)
    )
    return _moe_block(
        hidden,
        moe,
        shared_experts=mlp_params(hidden, shared, gated),
        moe_dense=2 * hidden * latent,
    )


def read_nemotron_h(raw: Config, name: str) -> Read:
    f = _Fields(raw, "NemotronH")
    pattern = _nemotron_pattern(raw, f)
    hidden = f.req("hidden_size")
    vocab = f.req("vocab_size")
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
    attn = AttentionShape(heads=heads, kv_heads=kv_heads, head_dim=head_dim)
    latent = int(f.opt("moe_latent_size", 0) or 0)
    blocks: Blocks = {
        "M": {"ssm": mamba2_params(hidden, ssm)},
        "*": {"attention": attention_params(hidden, heads, kv_heads, head_dim, gated=False)},
        "-": {"mlp": mlp_params(hidden, mlp_inter, gated)},
    }
    moe = None
    if has_moe:
        moe = MoeShape(
            experts=experts,
            experts_per_token=top_k,
            expert_params=mlp_params(latent or hidden, moe_inter, gated),
        )
        blocks["E"] = _nemotron_moe(f, hidden, moe, latent, gated)
    head, table = _embeddings(hidden, vocab, bool(f.opt("tie_word_embeddings", False)))
    layers = list(pattern)
    mtp_pattern = _nemotron_mtp_pattern(raw, f)
    spec = ModelSpec(
        name=name,
        architecture="NemotronHForCausalLM",
        layer_pattern=pattern,
        hidden_size=hidden,
        vocab_size=vocab,
        ssm_layers=pattern.count("M"),
        attention_layers=pattern.count("*"),
        moe_layers=pattern.count("E"),
        ssm=ssm,
        attention=attn,
        moe=moe,
        dense_params=_dense_params(layers, blocks, head, table),
        embedding_params=table,
        drafter=DrafterKind.MTP if mtp_pattern else DrafterKind.NONE,
        drafter_dense_params=sum(_dense(blocks[c]) for c in mtp_pattern if c in blocks),
        drafter_moe_layers=mtp_pattern.count("E"),
    )
    return spec, _inventory(layers, blocks, head, table)


# --------------------------------------------------------------------------- Qwen3-Next / 3.5


def _qwen_layers(text: Config, f: _Fields, count: int, experts: int) -> list[str]:
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


def read_qwen_gdn(raw: Config, name: str) -> Read:
    text = raw.get("text_config") or raw
    f = _Fields(text, "Qwen3-Next/Qwen3.5")
    count = f.req("num_hidden_layers")
    hidden, vocab = f.req("hidden_size"), f.req("vocab_size")
    heads, kv_heads = f.req("num_attention_heads"), f.req("num_key_value_heads")
    k_heads, v_heads = f.req("linear_num_key_heads"), f.req("linear_num_value_heads")
    k_dim, v_dim = f.req("linear_key_head_dim"), f.req("linear_value_head_dim")
    experts = int(f.opt("num_experts", 0) or 0)
    top_k = f.req("num_experts_per_tok") if experts else 0
    moe_inter = f.req("moe_intermediate_size") if experts else 0
    f.check()
    layers = _qwen_layers(text, f, count, experts)
    pattern = "".join(layers)
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
    attn = AttentionShape(heads=heads, kv_heads=kv_heads, head_dim=head_dim)
    blocks: Blocks = {
        "G": {"ssm": gdn_params(hidden, ssm)},
        "*": {"attention": attention_params(hidden, heads, kv_heads, head_dim, gated=gated_attn)},
        "-": {"mlp": mlp_params(hidden, int(f.opt("intermediate_size", 0) or 0), gated=True)},
    }
    moe = None
    if experts:
        moe = MoeShape(
            experts=experts,
            experts_per_token=top_k,
            expert_params=mlp_params(hidden, moe_inter, gated=True),
        )
        shared = int(f.opt("shared_expert_intermediate_size", 0) or 0)
        gate = hidden if shared else 0  # the shared expert's own scalar gate
        blocks["E"] = _moe_block(
            hidden, moe, shared_experts=mlp_params(hidden, shared, gated=True) + gate
        )
    tied = bool(f.opt("tie_word_embeddings", raw.get("tie_word_embeddings", False)))
    head, table = _embeddings(hidden, vocab, tied)
    mtp = int(f.opt("mtp_num_hidden_layers", f.opt("num_nextn_predict_layers", 0)) or 0)
    mtp_block = _dense(blocks["*"]) + _dense(blocks["E" if experts else "-"])
    spec = ModelSpec(
        name=name,
        architecture=_first_architecture(raw),
        layer_pattern=pattern,
        hidden_size=hidden,
        vocab_size=vocab,
        ssm_layers=pattern.count("G"),
        attention_layers=pattern.count("*"),
        moe_layers=pattern.count("E"),
        ssm=ssm,
        attention=attn,
        moe=moe,
        dense_params=_dense_params(layers, blocks, head, table),
        embedding_params=table,
        drafter=DrafterKind.MTP if mtp else DrafterKind.NONE,
        drafter_dense_params=mtp * mtp_block,
        drafter_moe_layers=mtp if experts else 0,
    )
    return spec, _inventory(layers, blocks, head, table)


# --------------------------------------------------------------------------- Granite-4.0-H / Bamba


def _mamba2_shape(f: _Fields, hidden: int, heads: int, state_size: int) -> SsmShape:
    """Mamba-2 mixer shapes as Granite-4.0-H, Bamba and Falcon-H1 spell them (`mamba_*`)."""
    inner = int(f.opt("mamba_d_ssm", 0) or f.opt("mamba_expand", 2) * hidden)
    return SsmShape(
        kind=SsmKind.MAMBA2,
        heads=heads,
        head_dim=int(f.opt("mamba_d_head", inner // heads)),
        state_size=state_size,
        groups=int(f.opt("mamba_n_groups", 1)),
        conv_kernel=int(f.opt("mamba_d_conv", 4)),
    )


def read_granite_hybrid(raw: Config, name: str) -> Read:
    f = _Fields(raw, "GraniteMoeHybrid/Bamba")
    count = f.req("num_hidden_layers")
    hidden, vocab = f.req("hidden_size"), f.req("vocab_size")
    heads, kv_heads = f.req("num_attention_heads"), f.req("num_key_value_heads")
    m_heads, d_state = f.req("mamba_n_heads"), f.req("mamba_d_state")
    f.check()
    types = raw.get("layer_types")
    if types:
        kinds = ["*" if t in ("attention", "full_attention") else "M" for t in types]
    else:
        attn_at = set(f.opt("attn_layer_indices", []))
        kinds = ["*" if i in attn_at else "M" for i in range(count)]
    ssm = _mamba2_shape(f, hidden, m_heads, d_state)
    head_dim = int(f.opt("head_dim", hidden // heads))
    attn = AttentionShape(heads=heads, kv_heads=kv_heads, head_dim=head_dim)
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
        blocks["E"] = _moe_block(hidden, moe, shared_experts=mlp_params(hidden, shared, gated=True))
    layers = [k + ("E" if experts else "-") for k in kinds]
    pattern = "".join(layers)
    head, table = _embeddings(hidden, vocab, bool(f.opt("tie_word_embeddings", True)))
    spec = ModelSpec(
        name=name,
        architecture=_first_architecture(raw),
        layer_pattern=pattern,
        hidden_size=hidden,
        vocab_size=vocab,
        ssm_layers=kinds.count("M"),
        attention_layers=kinds.count("*"),
        moe_layers=len(kinds) if experts else 0,
        ssm=ssm,
        attention=attn,
        moe=moe,
        dense_params=_dense_params(layers, blocks, head, table),
        embedding_params=table,
    )
    return spec, _inventory(layers, blocks, head, table)


# --------------------------------------------------------------------------- Falcon-H1


def read_falcon_h1(raw: Config, name: str) -> Read:
    f = _Fields(raw, "FalconH1")
    count = f.req("num_hidden_layers")
    hidden, vocab = f.req("hidden_size"), f.req("vocab_size")
    heads, kv_heads = f.req("num_attention_heads"), f.req("num_key_value_heads")
    m_heads, d_state = f.req("mamba_n_heads"), f.req("mamba_d_state")
    inter = f.req("intermediate_size")
    f.check()
    ssm = _mamba2_shape(f, hidden, m_heads, d_state)
    head_dim = int(f.opt("head_dim", hidden // heads))
    attn = AttentionShape(heads=heads, kv_heads=kv_heads, head_dim=head_dim)
    blocks: Blocks = {
        "P": {
            "ssm": mamba2_params(hidden, ssm),
            "attention": attention_params(hidden, heads, kv_heads, head_dim, gated=False),
            "mlp": mlp_params(hidden, inter, gated=True),
        }
    }
    layers = ["P"] * count
    head, table = _embeddings(hidden, vocab, bool(f.opt("tie_word_embeddings", False)))
    spec = ModelSpec(
        name=name,
        architecture="FalconH1ForCausalLM",
        layer_pattern="".join(layers),
        hidden_size=hidden,
        vocab_size=vocab,
        ssm_layers=len(layers),
        attention_layers=len(layers),
        moe_layers=0,
        ssm=ssm,
        attention=attn,
        dense_params=_dense_params(layers, blocks, head, table),
        embedding_params=table,
    )
    return spec, _inventory(layers, blocks, head, table)


# --------------------------------------------------------------------------- Jamba (Mamba-1)


def read_jamba(raw: Config, name: str) -> Read:
    f = _Fields(raw, "Jamba")
    count = f.req("num_hidden_layers")
    hidden, vocab = f.req("hidden_size"), f.req("vocab_size")
    heads, kv_heads = f.req("num_attention_heads"), f.req("num_key_value_heads")
    d_state, inter = f.req("mamba_d_state"), f.req("intermediate_size")
    f.check()
    listed = raw.get("layers_block_type")
    if listed:
        kinds = ["*" if b == "attention" else "S" for b in listed]
    else:
        period, offset = int(f.opt("attn_layer_period", 8)), int(f.opt("attn_layer_offset", 4))
        kinds = ["*" if i % period == offset else "S" for i in range(count)]
    experts = int(f.opt("num_experts", 1) or 1)
    e_period, e_offset = int(f.opt("expert_layer_period", 2)), int(f.opt("expert_layer_offset", 1))
    ffn = ["E" if experts > 1 and i % e_period == e_offset else "-" for i in range(len(kinds))]
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
    attn = AttentionShape(heads=heads, kv_heads=kv_heads, head_dim=head_dim)
    blocks: Blocks = {
        "S": {"ssm": mamba1_params(hidden, ssm, dt_rank)},
        "*": {"attention": attention_params(hidden, heads, kv_heads, head_dim, gated=False)},
        "-": {"mlp": mlp_params(hidden, inter, gated=True)},
    }
    moe = None
    if experts > 1:
        moe = MoeShape(
            experts=experts,
            experts_per_token=int(f.opt("num_experts_per_tok", 2)),
            expert_params=mlp_params(hidden, inter, gated=True),
        )
        blocks["E"] = _moe_block(hidden, moe)
    layers = [k + m for k, m in zip(kinds, ffn, strict=True)]
    pattern = "".join(layers)
    head, table = _embeddings(hidden, vocab, bool(f.opt("tie_word_embeddings", False)))
    spec = ModelSpec(
        name=name,
        architecture="JambaForCausalLM",
        layer_pattern=pattern,
        hidden_size=hidden,
        vocab_size=vocab,
        ssm_layers=kinds.count("S"),
        attention_layers=kinds.count("*"),
        moe_layers=ffn.count("E"),
        ssm=ssm,
        attention=attn,
        moe=moe,
        dense_params=_dense_params(layers, blocks, head, table),
        embedding_params=table,
    )
    return spec, _inventory(layers, blocks, head, table)


# --------------------------------------------------------------------------- plain Mamba-2


def read_mamba2(raw: Config, name: str) -> Read:
    f = _Fields(raw, "Mamba2")
    count = f.req("num_hidden_layers", "n_layer")
    hidden, vocab = f.req("hidden_size", "d_model"), f.req("vocab_size")
    heads, d_state = f.req("num_heads"), f.req("state_size", "d_state")
    f.check()
    inner = int(f.opt("expand", 2)) * hidden
    ssm = SsmShape(
        kind=SsmKind.MAMBA2,
        heads=heads,
        head_dim=int(f.opt("head_dim", inner // heads)),
        state_size=d_state,
        groups=int(f.opt("n_groups", 1)),
        conv_kernel=int(f.opt("conv_kernel", 4)),
    )
    head, table = _embeddings(hidden, vocab, bool(f.opt("tie_word_embeddings", True)))
    blocks: Blocks = {"M": {"ssm": mamba2_params(hidden, ssm)}}
    layers = ["M"] * count
    spec = ModelSpec(
        name=name,
        architecture="Mamba2ForCausalLM",
        layer_pattern="".join(layers),
        hidden_size=hidden,
        vocab_size=vocab,
        ssm_layers=count,
        attention_layers=0,
        moe_layers=0,
        ssm=ssm,
        dense_params=_dense_params(layers, blocks, head, table),
        embedding_params=table,
    )
    return spec, _inventory(layers, blocks, head, table)


# --------------------------------------------------------------------------- attention-only


def _mla_attention(f: _Fields, hidden: int, heads: int, rank: int) -> tuple[int, AttentionShape]:
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


def _routed_layers(f: _Fields, count: int) -> list[bool]:
    """Which layers of a MoE transformer route to experts (DeepSeek's first dense layers,
    Qwen3-MoE's `mlp_only_layers` and sparse step)."""
    dense_from = int(f.opt("first_k_dense_replace", 0) or 0)
    mlp_only = set(f.opt("mlp_only_layers", []))
    step = int(f.opt("decoder_sparse_step", 1) or 1)
    return [i >= dense_from and i not in mlp_only and (i + 1) % step == 0 for i in range(count)]


def read_attention(raw: Config, name: str) -> Read:
    """Dense and MoE transformers: Llama/Mistral, Qwen3, Qwen3-MoE, Mixtral, DeepSeek-V3 (MLA).

    No recurrent state: the only lever is the draft schedule (issue #12)."""
    architecture = _first_architecture(raw)
    f = _Fields(raw, architecture)
    count = f.req("num_hidden_layers")
    hidden, vocab = f.req("hidden_size"), f.req("vocab_size")
    heads = f.req("num_attention_heads")
    f.check()
    kv_heads = int(f.opt("num_key_value_heads", heads))
    head_dim = int(f.opt("head_dim", hidden // heads) or hidden // heads)
    experts = int(
        f.opt("n_routed_experts", f.opt("num_local_experts", f.opt("num_experts", 0))) or 0
    )
    top_k = int(f.opt("num_experts_per_tok", 0) or 0)
    mla = int(f.opt("kv_lora_rank", 0) or 0)
    if mla:
        attn_params, attention = _mla_attention(f, hidden, heads, mla)
    else:
        attn_params = attention_params(hidden, heads, kv_heads, head_dim, gated=False)
        attention = AttentionShape(heads=heads, kv_heads=kv_heads, head_dim=head_dim)
    inter = int(f.opt("intermediate_size", 4 * hidden))
    moe_inter = int(f.opt("moe_intermediate_size", inter) or inter)
    moe_at = _routed_layers(f, count) if experts else [False] * count
    blocks: Blocks = {
        "*": {"attention": attn_params},
        "-": {"mlp": mlp_params(hidden, inter, gated=True)},
    }
    moe = None
    if experts:
        moe = MoeShape(
            experts=experts,
            experts_per_token=top_k,
            expert_params=mlp_params(hidden, moe_inter, gated=True),
        )
        shared = int(f.opt("n_shared_experts", 0) or 0) * moe_inter + int(
            f.opt("shared_expert_intermediate_size", 0) or 0
        )
        blocks["E"] = _moe_block(hidden, moe, shared_experts=mlp_params(hidden, shared, gated=True))
    layers = ["*" + ("E" if sparse else "-") for sparse in moe_at]
    pattern = "".join(layers)
    head, table = _embeddings(hidden, vocab, bool(f.opt("tie_word_embeddings", False)))
    mtp = int(f.opt("num_nextn_predict_layers", 0) or 0)
    spec = ModelSpec(
        name=name,
        architecture=architecture,
        layer_pattern=pattern,
        hidden_size=hidden,
        vocab_size=vocab,
        ssm_layers=0,
        attention_layers=count,
        moe_layers=sum(moe_at),
        attention=attention,
        moe=moe,
        dense_params=_dense_params(layers, blocks, head, table),
        embedding_params=table,
        drafter=DrafterKind.MTP if mtp else DrafterKind.NONE,
        drafter_dense_params=mtp * (attn_params + _dense(blocks["E" if experts else "-"])),
        drafter_moe_layers=mtp if experts else 0,
    )
    return spec, _inventory(layers, blocks, head, table)


READERS: dict[str, Callable[[Config, str], Read]] = {
    "LlamaForCausalLM": read_attention,
    "MistralForCausalLM": read_attention,
    "Qwen2ForCausalLM": read_attention,
    "Qwen3ForCausalLM": read_attention,
    "Qwen3MoeForCausalLM": read_attention,
    "MixtralForCausalLM": read_attention,
    "DeepseekV3ForCausalLM": read_attention,
    "NemotronHForCausalLM": read_nemotron_h,
    "Qwen3NextForCausalLM": read_qwen_gdn,
    "Qwen3_5ForCausalLM": read_qwen_gdn,
    "Qwen3_5MoeForCausalLM": read_qwen_gdn,
    "Qwen3_5ForConditionalGeneration": read_qwen_gdn,
    "Qwen3_5MoeForConditionalGeneration": read_qwen_gdn,
    "GraniteMoeHybridForCausalLM": read_granite_hybrid,
    "BambaForCausalLM": read_granite_hybrid,
    "FalconH1ForCausalLM": read_falcon_h1,
    "JambaForCausalLM": read_jamba,
    "Mamba2ForCausalLM": read_mamba2,
}
MODEL_TYPES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "deepseek_v3": "DeepseekV3ForCausalLM",
    "nemotron_h": "NemotronHForCausalLM",
    "qwen3_next": "Qwen3NextForCausalLM",
    "qwen3_5": "Qwen3_5ForConditionalGeneration",
    "qwen3_5_moe": "Qwen3_5MoeForConditionalGeneration",
    "qwen3_5_text": "Qwen3_5ForCausalLM",
    "qwen3_5_moe_text": "Qwen3_5MoeForCausalLM",
    "granitemoehybrid": "GraniteMoeHybridForCausalLM",
    "bamba": "BambaForCausalLM",
    "falcon_h1": "FalconH1ForCausalLM",
    "jamba": "JambaForCausalLM",
    "mamba2": "Mamba2ForCausalLM",
}


def _first_architecture(raw: Config) -> str:
    architectures = raw.get("architectures") or []
    if architectures:
        return str(architectures[0])
    return MODEL_TYPES.get(str(raw.get("model_type", "")), "unknown")


def _reader(raw: Config) -> Callable[[Config, str], Read]:
    """The reader for a config, or a refusal naming the architecture and what is modelled."""
    modelled = ", ".join(sorted(READERS))
    architectures = raw.get("architectures") or []
    if architectures:
        named = str(architectures[0])
        if named not in READERS:
            raise ModelConfigError(f"architecture {named} is not modelled; modelled: {modelled}")
        return READERS[named]
    model_type = raw.get("model_type")
    if str(model_type) in MODEL_TYPES:
        return READERS[MODEL_TYPES[str(model_type)]]
    raise ModelConfigError(
        f"config.json names no modelled architecture: 'architectures' is missing and model_type "
        f"{model_type!r} is not one of {', '.join(MODEL_TYPES)}; modelled: {modelled}"
    )


def _stored_dtype(raw: Config) -> str:
    """The checkpoint's unquantized dtype (torch_dtype / dtype, also inside text_config)."""
    text = raw.get("text_config") or {}
    for config in (text, raw):
        value = str(config.get("torch_dtype") or config.get("dtype") or "").lower()
        value = value.removeprefix("torch.")
        if value in UNQUANTIZED:
            return value
    return "bfloat16"


def _served_dtype(stored: str) -> str:
    """The dtype vLLM computes in under `--dtype auto`: float32 checkpoints are cast to bf16."""
    return "float16" if stored == "float16" else "bfloat16"


def _file_scheme(
    raw: Config, quantization: Mapping[str, Any] | None, source: str, stored: str
) -> tuple[Scheme, list[str]]:
    """What the files say: config.json's quantization_config first (as vLLM reads it), then the
    quantization beside it (hf_quant_config.json, or a built-in variant), then torch_dtype."""
    text = raw.get("text_config") or {}
    embedded = raw.get("quantization_config") or text.get("quantization_config")
    if embedded:
        notes = []
        if quantization is not None:
            notes.append(
                f"weights: {source} not read: config.json has its own quantization_config, "
                "which vLLM reads first"
            )
        return scheme_of(embedded, "config.json quantization_config", stored), notes
    if quantization is not None:
        return scheme_of(quantization, source, stored), []
    return uniform(stored, "config.json torch_dtype"), []


def _given(
    raw: Config, quantization: Mapping[str, Any] | None, source: str, built_in: str | None
) -> tuple[Scheme, list[str]]:
    """What the files (or the built-in variant standing for them) say."""
    if built_in:
        return uniform(weight_format(built_in), source), []
    return _file_scheme(raw, quantization, source, _stored_dtype(raw))


def _weights(
    raw: Config,
    weights: str | None,
    quantization: Mapping[str, Any] | None,
    source: str,
    built_in: str | None,
) -> tuple[Scheme, list[str]]:
    """(scheme, notes): an override wins over the files and the variant, and says so."""
    if not weights:
        return _given(raw, quantization, source, built_in)
    fmt = weight_format(weights)
    try:
        files, _ = _given(raw, quantization, source, built_in)
        said = f"{files.label} ({files.source})"
    except ModelConfigError as exc:
        said = f"nothing readable ({exc})"
    return uniform(fmt, "override"), [f"weights: {fmt} given as an override; before it, {said}"]


# vLLM's per-architecture hooks (vllm/model_executor/models/config.py): with
# --mamba-ssm-cache-dtype auto, NemotronH takes the config's mamba_ssm_cache_dtype or float32;
# Qwen3.5 takes its text config's mamba_ssm_dtype when given. Other models follow
# --mamba-cache-dtype, whose auto is the model dtype.
_SSM_HOOKS: dict[str, tuple[str, str | None]] = {
    "NemotronHForCausalLM": ("mamba_ssm_cache_dtype", "float32"),
    "Qwen3_5ForConditionalGeneration": ("mamba_ssm_dtype", None),
    "Qwen3_5MoeForConditionalGeneration": ("mamba_ssm_dtype", None),
}
STATE_DTYPES = ("auto", "float32", "bfloat16", "float16")


def state_dtype(value: str, what: str = "SSM state dtype") -> str:
    """`fp32`, `torch.bfloat16`, `auto`, ... -> float32 / bfloat16 / float16 / auto."""
    text = str(value).strip().lower()
    if text == "auto":
        return text
    try:
        dtype = weight_format(text)
    except ModelConfigError:
        dtype = ""
    if dtype not in UNQUANTIZED:
        raise ModelConfigError(f"unknown {what} {value!r}; known: {', '.join(STATE_DTYPES)}")
    return dtype


def _ssm_dtype(
    raw: Config, architecture: str, live: str | None, cache: str | None
) -> tuple[str, str]:
    """(dtype, where it came from) as vLLM resolves the SSM state dtype."""
    if live and state_dtype(live) != "auto":
        return state_dtype(live), f"--mamba-ssm-cache-dtype {live}"
    if architecture in _SSM_HOOKS:
        field, default = _SSM_HOOKS[architecture]
        value = (raw.get("text_config") or raw).get(field)
        if value and state_dtype(str(value)) != "auto":
            return state_dtype(str(value)), f"config.json {field}"
        if default:
            return default, f"vLLM's {architecture} default (no {field} in config.json)"
    if cache and state_dtype(cache, "mamba cache dtype") != "auto":
        return state_dtype(cache), f"--mamba-cache-dtype {cache} (--mamba-ssm-cache-dtype auto)"
    served = _served_dtype(_stored_dtype(raw))
    return served, f"vLLM's default: auto follows the model dtype ({served})"


def _conv_dtype(raw: Config, cache: str | None) -> str:
    if cache and state_dtype(cache, "mamba cache dtype") != "auto":
        return state_dtype(cache)
    return _served_dtype(_stored_dtype(raw))


def _state_note(spec: ModelSpec) -> list[str]:
    if not spec.is_hybrid or spec.ssm_state_dtype == "float32":
        return []
    return [
        f"SSM state is {spec.ssm_state_dtype}, not float32 ({spec.ssm_state_dtype_source}): a "
        "low-precision state accumulates error, most under replay; vLLM's "
        "--mamba-ssm-cache-dtype float32 keeps it exact at twice the state memory"
    ]


def from_hf_config(
    raw: Config,
    *,
    name: str = "model",
    weights: str | None = None,
    quantization: Mapping[str, Any] | None = None,
    quantization_source: str = "hf_quant_config.json",
    built_in: str | None = None,
    ssm_state_dtype: str | None = None,
    mamba_cache_dtype: str | None = None,
) -> ModelSpec:
    """Build a ModelSpec from a parsed config.json.

    The stored weight format comes from `weights` (an override), else `built_in` (a registry
    variant's format, every weight in it), else config.json's `quantization_config`, else
    `quantization` (the `quantization` object of an hf_quant_config.json beside config.json),
    else torch_dtype. `ssm_state_dtype` and `mamba_cache_dtype` are vLLM's live
    `--mamba-ssm-cache-dtype` and `--mamba-cache-dtype` (None or `auto`: resolved as vLLM
    does)."""
    if not isinstance(raw, Mapping):
        raise ModelConfigError("config.json must hold a JSON object")
    for what, value in (
        ("SSM state dtype", ssm_state_dtype),
        ("mamba cache dtype", mamba_cache_dtype),
    ):
        if value:
            state_dtype(value, what)
    spec, inventory = _reader(raw)(raw, name)
    scheme, notes = _weights(raw, weights, quantization, quantization_source, built_in)
    shares, name_notes = plan(inventory, scheme, _stored_dtype(raw))
    update: dict[str, Any] = {
        "weight_dtype": scheme.label,
        "weight_shares": shares,
        "weight_source": scheme.source,
    }
    if spec.ssm is not None:
        dtype, source = _ssm_dtype(raw, spec.architecture, ssm_state_dtype, mamba_cache_dtype)
        update |= {
            "ssm_state_dtype": dtype,
            "ssm_state_dtype_source": source,
            "conv_state_dtype": _conv_dtype(raw, mamba_cache_dtype),
        }
    spec = spec.model_copy(update=update)
    if scheme.label not in UNQUANTIZED or weights:
        notes.insert(0, f"weights from {scheme.source}: {describe(shares)}")
    notes += name_notes + _state_note(spec)
    return spec.model_copy(update={"notes": (*spec.notes, *notes)})
