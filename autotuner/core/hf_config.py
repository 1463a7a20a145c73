"""Readers that turn a Hugging Face config.json into a ModelSpec, one function per family.

Field names are the public ones (VLLM.md, "Model config fields"). Each reader collects every
missing required field before failing, so one error names them all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from autotuner.core.model import (
    AttentionShape,
    DrafterKind,
    ModelSpec,
    MoeShape,
    SsmKind,
    SsmShape,
)
from autotuner.errors import ModelConfigError

Config = Mapping[str, Any]


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


def weight_dtype_of(raw: Config) -> str:
    """The stored weight format: quantization config first, then torch_dtype / dtype."""
    quant = raw.get("quantization_config") or {}
    method = str(quant.get("quant_method", "")).lower()
    algo = str(quant.get("quant_algo", "")).lower()
    if "nvfp4" in (method, algo) or algo.startswith("nvfp4"):
        return "nvfp4"
    if "mxfp4" in (method, algo):
        return "mxfp4"
    if "fp8" in (method, algo) or algo.startswith("fp8"):
        return "fp8"
    dtype = str(raw.get("torch_dtype") or raw.get("dtype") or "bfloat16").lower()
    return dtype if dtype in ("float32", "float16", "bfloat16") else "bfloat16"


def ssm_state_dtype_of(raw: Config) -> str:
    """fp32 unless the config says otherwise (COSTMODEL.md: the state must stay fp32)."""
    for name in ("mamba_ssm_cache_dtype", "mamba_ssm_dtype"):
        value = raw.get(name)
        if value and value != "auto":
            return str(value).replace("torch.", "")
    return "float32"


def _embeddings(hidden: int, vocab: int, tied: bool) -> tuple[int, int]:
    """(parameters read every step: the LM head, input embedding table)."""
    return (0 if tied else vocab * hidden), vocab * hidden


# --------------------------------------------------------------------------- NemotronH

_NEMOTRON_BLOCKS = {"mamba": "M", "moe": "E", "attention": "*", "mlp": "-"}


def read_nemotron_h(raw: Config, name: str) -> ModelSpec:
    f = _Fields(raw, "NemotronH")
    pattern = raw.get("hybrid_override_pattern")
    if not pattern and raw.get("layers_block_type"):
        pattern = "".join(_NEMOTRON_BLOCKS.get(str(b), "?") for b in raw["layers_block_type"])
    if not pattern:
        f.missing.append("hybrid_override_pattern or layers_block_type")
        pattern = ""
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
    expert_width = latent or hidden
    moe_dense = 0
    moe = None
    if has_moe:
        moe = MoeShape(
            experts=experts,
            experts_per_token=top_k,
            expert_params=mlp_params(expert_width, moe_inter, gated),
        )
        shared = int(f.opt("moe_shared_expert_intermediate_size", 0)) * int(
            f.opt("n_shared_experts", 1)
        )
        moe_dense = hidden * experts + mlp_params(hidden, shared, gated)
        if latent:
            moe_dense += 2 * hidden * latent
    per_char = {
        "M": mamba2_params(hidden, ssm),
        "*": attention_params(hidden, heads, kv_heads, head_dim, gated=False),
        "E": moe_dense,
        "-": mlp_params(hidden, mlp_inter, gated),
    }
    head, table = _embeddings(hidden, vocab, bool(f.opt("tie_word_embeddings", False)))
    dense = sum(per_char[c] for c in pattern) + head + table
    mtp_pattern = str(f.opt("mtp_hybrid_override_pattern", "") or "")
    if not mtp_pattern and raw.get("mtp_layers_block_type"):
        blocks = raw["mtp_layers_block_type"]
        mtp_pattern = "".join(_NEMOTRON_BLOCKS.get(str(b), "") for b in blocks)
    mtp_layers = int(f.opt("num_nextn_predict_layers", 0) or 0)
    if mtp_layers and not mtp_pattern:
        mtp_pattern = "*E" * mtp_layers
    return ModelSpec(
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
        dense_params=dense,
        embedding_params=table,
        weight_dtype=weight_dtype_of(raw),
        ssm_state_dtype=ssm_state_dtype_of(raw),
        drafter=DrafterKind.MTP if mtp_pattern else DrafterKind.NONE,
        drafter_dense_params=sum(per_char[c] for c in mtp_pattern if c in per_char),
        drafter_moe_layers=mtp_pattern.count("E"),
    )


# --------------------------------------------------------------------------- Qwen3-Next / 3.5


def read_qwen_gdn(raw: Config, name: str) -> ModelSpec:
    text = raw.get("text_config") or raw
    f = _Fields(text, "Qwen3-Next/Qwen3.5")
    layers = f.req("num_hidden_layers")
    hidden, vocab = f.req("hidden_size"), f.req("vocab_size")
    heads, kv_heads = f.req("num_attention_heads"), f.req("num_key_value_heads")
    k_heads, v_heads = f.req("linear_num_key_heads"), f.req("linear_num_value_heads")
    k_dim, v_dim = f.req("linear_key_head_dim"), f.req("linear_value_head_dim")
    experts = int(f.opt("num_experts", 0) or 0)
    top_k = f.req("num_experts_per_tok") if experts else 0
    moe_inter = f.req("moe_intermediate_size") if experts else 0
    f.check()
    types = text.get("layer_types")
    if types:
        kinds = ["*" if t == "full_attention" else "G" for t in types]
    else:
        interval = int(f.opt("full_attention_interval", 4))
        kinds = ["*" if (i + 1) % interval == 0 else "G" for i in range(layers)]
    mlp_only = set(f.opt("mlp_only_layers", []))
    sparse_step = int(f.opt("decoder_sparse_step", 1) or 1)
    ffn = [
        "E" if experts and i not in mlp_only and (i + 1) % sparse_step == 0 else "-"
        for i in range(len(kinds))
    ]
    pattern = "".join(k + m for k, m in zip(kinds, ffn, strict=True))
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
    moe = None
    moe_dense = 0
    if experts:
        moe = MoeShape(
            experts=experts,
            experts_per_token=top_k,
            expert_params=mlp_params(hidden, moe_inter, gated=True),
        )
        shared = int(f.opt("shared_expert_intermediate_size", 0) or 0)
        moe_dense = (
            hidden * experts + mlp_params(hidden, shared, gated=True) + (hidden if shared else 0)
        )
    per_char = {
        "G": gdn_params(hidden, ssm),
        "*": attention_params(hidden, heads, kv_heads, head_dim, gated=gated_attn),
        "E": moe_dense,
        "-": mlp_params(hidden, int(f.opt("intermediate_size", 0) or 0), gated=True),
    }
    tied = bool(f.opt("tie_word_embeddings", raw.get("tie_word_embeddings", False)))
    head, table = _embeddings(hidden, vocab, tied)
    dense = sum(per_char[c] for c in pattern) + head + table
    mtp = int(f.opt("mtp_num_hidden_layers", f.opt("num_nextn_predict_layers", 0)) or 0)
    ssm_dtype = ssm_state_dtype_of(text)
    return ModelSpec(
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
        dense_params=dense,
        embedding_params=table,
        weight_dtype=weight_dtype_of(raw if raw.get("quantization_config") else text),
        ssm_state_dtype=ssm_dtype,
        drafter=DrafterKind.MTP if mtp else DrafterKind.NONE,
        drafter_dense_params=mtp * (per_char["*"] + (moe_dense if experts else per_char["-"])),
        drafter_moe_layers=mtp if experts else 0,
    )


# --------------------------------------------------------------------------- Granite-4.0-H / Bamba


def read_granite_hybrid(raw: Config, name: str) -> ModelSpec:
    f = _Fields(raw, "GraniteMoeHybrid/Bamba")
    layers = f.req("num_hidden_layers")
    hidden, vocab = f.req("hidden_size"), f.req("vocab_size")
    heads, kv_heads = f.req("num_attention_heads"), f.req("num_key_value_heads")
    m_heads, d_state = f.req("mamba_n_heads"), f.req("mamba_d_state")
    f.check()
    types = raw.get("layer_types")
    if types:
        kinds = ["*" if t in ("attention", "full_attention") else "M" for t in types]
    else:
        attn_at = set(f.opt("attn_layer_indices", []))
        kinds = ["*" if i in attn_at else "M" for i in range(layers)]
    inner = int(f.opt("mamba_d_ssm", 0) or f.opt("mamba_expand", 2) * hidden)
    m_dim = int(f.opt("mamba_d_head", inner // m_heads))
    ssm = SsmShape(
        kind=SsmKind.MAMBA2,
        heads=m_heads,
        head_dim=m_dim,
        state_size=d_state,
        groups=int(f.opt("mamba_n_groups", 1)),
        conv_kernel=int(f.opt("mamba_d_conv", 4)),
    )
    head_dim = int(f.opt("head_dim", hidden // heads))
    attn = AttentionShape(heads=heads, kv_heads=kv_heads, head_dim=head_dim)
    experts = int(f.opt("num_local_experts", 0) or 0)
    inter = int(f.opt("intermediate_size", 0) or 0)
    shared = int(f.opt("shared_intermediate_size", 0) or 0)
    moe = None
    if experts:
        moe = MoeShape(
            experts=experts,
            experts_per_token=int(f.opt("num_experts_per_tok", 1)),
            expert_params=mlp_params(hidden, inter, gated=True),
        )
        ffn_dense = hidden * experts + mlp_params(hidden, shared, gated=True)
    else:
        ffn_dense = mlp_params(hidden, shared or inter, gated=True)
    ffn_char = "E" if experts else "-"
    pattern = "".join(k + ffn_char for k in kinds)
    mixer = {
        "M": mamba2_params(hidden, ssm),
        "*": attention_params(hidden, heads, kv_heads, head_dim, gated=False),
    }
    head, table = _embeddings(hidden, vocab, bool(f.opt("tie_word_embeddings", True)))
    dense = sum(mixer[k] + ffn_dense for k in kinds) + head + table
    return ModelSpec(
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
        dense_params=dense,
        embedding_params=table,
        weight_dtype=weight_dtype_of(raw),
        ssm_state_dtype=ssm_state_dtype_of(raw),
    )


# --------------------------------------------------------------------------- Falcon-H1


def read_falcon_h1(raw: Config, name: str) -> ModelSpec:
    f = _Fields(raw, "FalconH1")
    layers = f.req("num_hidden_layers")
    hidden, vocab = f.req("hidden_size"), f.req("vocab_size")
    heads, kv_heads = f.req("num_attention_heads"), f.req("num_key_value_heads")
    m_heads, d_state = f.req("mamba_n_heads"), f.req("mamba_d_state")
    inter = f.req("intermediate_size")
    f.check()
    inner = int(f.opt("mamba_d_ssm", 0) or f.opt("mamba_expand", 2) * hidden)
    ssm = SsmShape(
        kind=SsmKind.MAMBA2,
        heads=m_heads,
        head_dim=int(f.opt("mamba_d_head", inner // m_heads)),
        state_size=d_state,
        groups=int(f.opt("mamba_n_groups", 1)),
        conv_kernel=int(f.opt("mamba_d_conv", 4)),
    )
    head_dim = int(f.opt("head_dim", hidden // heads))
    attn = AttentionShape(heads=heads, kv_heads=kv_heads, head_dim=head_dim)
    per_layer = (
        mamba2_params(hidden, ssm)
        + attention_params(hidden, heads, kv_heads, head_dim, gated=False)
        + mlp_params(hidden, inter, gated=True)
    )
    head, table = _embeddings(hidden, vocab, bool(f.opt("tie_word_embeddings", False)))
    return ModelSpec(
        name=name,
        architecture="FalconH1ForCausalLM",
        layer_pattern="P" * layers,
        hidden_size=hidden,
        vocab_size=vocab,
        ssm_layers=layers,
        attention_layers=layers,
        moe_layers=0,
        ssm=ssm,
        attention=attn,
        dense_params=layers * per_layer + head + table,
        embedding_params=table,
        weight_dtype=weight_dtype_of(raw),
        ssm_state_dtype=ssm_state_dtype_of(raw),
    )


# --------------------------------------------------------------------------- Jamba (Mamba-1)


def read_jamba(raw: Config, name: str) -> ModelSpec:
    f = _Fields(raw, "Jamba")
    layers = f.req("num_hidden_layers")
    hidden, vocab = f.req("hidden_size"), f.req("vocab_size")
    heads, kv_heads = f.req("num_attention_heads"), f.req("num_key_value_heads")
    d_state, inter = f.req("mamba_d_state"), f.req("intermediate_size")
    f.check()
    blocks = raw.get("layers_block_type")
    if blocks:
        kinds = ["*" if b == "attention" else "S" for b in blocks]
    else:
        period, offset = int(f.opt("attn_layer_period", 8)), int(f.opt("attn_layer_offset", 4))
        kinds = ["*" if i % period == offset else "S" for i in range(layers)]
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
    moe = None
    if experts > 1:
        moe = MoeShape(
            experts=experts,
            experts_per_token=int(f.opt("num_experts_per_tok", 2)),
            expert_params=mlp_params(hidden, inter, gated=True),
        )
    per_char = {
        "S": mamba1_params(hidden, ssm, dt_rank),
        "*": attention_params(hidden, heads, kv_heads, head_dim, gated=False),
        "E": hidden * experts,
        "-": mlp_params(hidden, inter, gated=True),
    }
    pattern = "".join(k + m for k, m in zip(kinds, ffn, strict=True))
    head, table = _embeddings(hidden, vocab, bool(f.opt("tie_word_embeddings", False)))
    return ModelSpec(
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
        dense_params=sum(per_char[c] for c in pattern) + head + table,
        embedding_params=table,
        weight_dtype=weight_dtype_of(raw),
        ssm_state_dtype=ssm_state_dtype_of(raw),
    )


# --------------------------------------------------------------------------- plain Mamba-2


def read_mamba2(raw: Config, name: str) -> ModelSpec:
    f = _Fields(raw, "Mamba2")
    layers = f.req("num_hidden_layers", "n_layer")
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
    return ModelSpec(
        name=name,
        architecture="Mamba2ForCausalLM",
        layer_pattern="M" * layers,
        hidden_size=hidden,
        vocab_size=vocab,
        ssm_layers=layers,
        attention_layers=0,
        moe_layers=0,
        ssm=ssm,
        dense_params=layers * mamba2_params(hidden, ssm) + head + table,
        embedding_params=table,
        weight_dtype=weight_dtype_of(raw),
        ssm_state_dtype=ssm_state_dtype_of(raw),
    )


# --------------------------------------------------------------------------- attention-only


def read_attention(raw: Config, name: str) -> ModelSpec:
    """Dense and MoE transformers: Llama/Mistral, Qwen3, Qwen3-MoE, Mixtral, DeepSeek-V3 (MLA).

    No recurrent state: the only lever is the draft schedule (issue #12)."""
    architecture = _first_architecture(raw)
    f = _Fields(raw, architecture)
    layers = f.req("num_hidden_layers")
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
        rope, nope = int(f.opt("qk_rope_head_dim", 64)), int(f.opt("qk_nope_head_dim", 128))
        v_dim = int(f.opt("v_head_dim", 128))
        q_rank = int(f.opt("q_lora_rank", 0) or 0)
        q_params = (
            (hidden * q_rank + q_rank * heads * (nope + rope))
            if q_rank
            else (hidden * heads * (nope + rope))
        )
        attn_params = (
            q_params + hidden * (mla + rope) + mla * heads * (nope + v_dim) + heads * v_dim * hidden
        )
        attention = AttentionShape(
            heads=heads, kv_heads=1, head_dim=nope + rope, kv_lora_rank=mla, rope_head_dim=rope
        )
    else:
        attn_params = attention_params(hidden, heads, kv_heads, head_dim, gated=False)
        attention = AttentionShape(heads=heads, kv_heads=kv_heads, head_dim=head_dim)
    inter = int(f.opt("intermediate_size", 4 * hidden))
    moe_inter = int(f.opt("moe_intermediate_size", inter) or inter)
    dense_from = int(f.opt("first_k_dense_replace", 0) or 0)
    mlp_only = set(f.opt("mlp_only_layers", []))
    step = int(f.opt("decoder_sparse_step", 1) or 1)
    moe_at = [
        bool(experts) and i >= dense_from and i not in mlp_only and (i + 1) % step == 0
        for i in range(layers)
    ]
    moe = None
    moe_dense = 0
    if experts:
        moe = MoeShape(
            experts=experts,
            experts_per_token=top_k,
            expert_params=mlp_params(hidden, moe_inter, gated=True),
        )
        shared = int(f.opt("n_shared_experts", 0) or 0) * moe_inter + int(
            f.opt("shared_expert_intermediate_size", 0) or 0
        )
        moe_dense = hidden * experts + mlp_params(hidden, shared, gated=True)
    pattern = "".join("*" + ("E" if sparse else "-") for sparse in moe_at)
    per_layer_dense = sum(
        moe_dense if sparse else mlp_params(hidden, inter, gated=True) for sparse in moe_at
    )
    head, table = _embeddings(hidden, vocab, bool(f.opt("tie_word_embeddings", False)))
    mtp = int(f.opt("num_nextn_predict_layers", 0) or 0)
    return ModelSpec(
        name=name,
        architecture=architecture,
        layer_pattern=pattern,
        hidden_size=hidden,
        vocab_size=vocab,
        ssm_layers=0,
        attention_layers=layers,
        moe_layers=sum(moe_at),
        attention=attention,
        moe=moe,
        dense_params=layers * attn_params + per_layer_dense + head + table,
        embedding_params=table,
        weight_dtype=weight_dtype_of(raw),
        drafter=DrafterKind.MTP if mtp else DrafterKind.NONE,
        drafter_dense_params=mtp
        * (attn_params + (moe_dense if experts else mlp_params(hidden, inter, gated=True))),
        drafter_moe_layers=mtp if experts else 0,
    )


READERS: dict[str, Callable[[Config, str], ModelSpec]] = {
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


def from_hf_config(
    raw: Config,
    *,
    name: str = "model",
    weight_dtype: str | None = None,
    ssm_state_dtype: str | None = None,
) -> ModelSpec:
    """Build a ModelSpec from a parsed config.json; dtype overrides win over the config."""
    if not isinstance(raw, Mapping):
        raise ModelConfigError("config.json must hold a JSON object")
    architecture = _first_architecture(raw)
    reader = READERS.get(architecture) or READERS.get(
        MODEL_TYPES.get(str(raw.get("model_type")), "")
    )
    if reader is None:
        known = ", ".join(sorted(READERS))
        raise ModelConfigError(
            f"unsupported architecture {architecture!r} (model_type "
            f"{raw.get('model_type')!r}); missing field(s): 'architectures' naming one of: "
            f"{known} (or a matching 'model_type')"
        )
    spec = reader(raw, name)
    overrides: dict[str, str] = {}
    if weight_dtype:
        overrides["weight_dtype"] = weight_dtype
    if ssm_state_dtype:
        overrides["ssm_state_dtype"] = ssm_state_dtype
    return spec.model_copy(update=overrides) if overrides else spec
