"""Models as they are shipped: every real config.json in ../shared/fixtures/configs, read alone or
with an NVIDIA ModelOpt hf_quant_config.json beside it, sized against a hand computation here.

The hand computations count the tensors each module holds, from the fixture's own fields, with
the same terms the readers model (projections, conv1d, the Mamba-2 A/D/dt_bias/norm vectors;
norms and biases are left out). Bytes per parameter: BF16 2, FP8 1, NVFP4 0.5625 (4 bits plus an
fp8 scale per 16 values).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from autotuner.core.engine.workload import Workload
from autotuner.core.model.hf_config import from_hf_config
from autotuner.core.model.registry import load_model
from autotuner.core.model.weights import LAYER_ROLES, selector
from autotuner.core.predict.capacity import max_batch
from autotuner.core.predict.hardware import datasheet
from autotuner.core.types import Setup
from autotuner.errors import ModelConfigError
from tests.support.fixtures import CONFIGS

DSV4_QUANT = CONFIGS / "deepseek-v4-flash-nvfp4.hf_quant_config.json"
GIB = 2**30
BYTES = {"bfloat16": 2.0, "fp8": 1.0, "nvfp4": 0.5625}
Roles = dict[str, int]


def config(name: str) -> dict[str, Any]:
    path = CONFIGS / name
    if not path.is_file():
        pytest.fail(f"the shared fixture is missing: {path}")
    raw: dict[str, Any] = json.loads(path.read_text())
    return raw


def add(total: Roles, part: Roles, times: int = 1) -> None:
    for role, params in part.items():
        total[role] = total.get(role, 0) + times * params


# --------------------------------------------------------------------------- hand computations


def attention(h: int, heads: int, kv: int, d: int, *, gated: bool = False) -> int:
    """q (twice as wide with Qwen3.5's output gate), k, v, o."""
    return h * heads * d * (2 if gated else 1) + 2 * h * kv * d + heads * d * h


def mamba2(h: int, heads: int, head_dim: int, groups: int, state: int, kernel: int = 4) -> int:
    """in_proj (x, z, B, C, dt), conv1d over x/B/C, out_proj, A/D/dt_bias, gated norm."""
    inner = heads * head_dim
    conv = inner + 2 * groups * state
    in_proj = h * (2 * inner + 2 * groups * state + heads)
    return in_proj + conv * kernel + inner * h + 3 * heads + inner


def embeddings(c: dict[str, Any]) -> Roles:
    table = c["vocab_size"] * c["hidden_size"]
    return {"embedding": table, "lm_head": 0 if c.get("tie_word_embeddings") else table}


def llama(c: dict[str, Any]) -> Roles:
    h, layers, heads = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]
    d = c.get("head_dim") or h // heads
    roles = embeddings(c)
    add(roles, {"attention": attention(h, heads, c["num_key_value_heads"], d)}, layers)
    add(roles, {"mlp": 3 * h * c["intermediate_size"]}, layers)
    return roles


def routed(c: dict[str, Any], experts: int, width: int) -> Roles:
    """A MoE layer's router and SwiGLU experts of `width`."""
    h = c["hidden_size"]
    return {"router": h * experts, "experts": experts * 3 * h * width}


def qwen3_moe(c: dict[str, Any]) -> Roles:
    h, layers, heads = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]
    roles = embeddings(c)
    add(roles, {"attention": attention(h, heads, c["num_key_value_heads"], c["head_dim"])}, layers)
    add(roles, routed(c, c["num_experts"], c["moe_intermediate_size"]), layers)
    return roles


def mixtral(c: dict[str, Any]) -> Roles:
    h, layers, heads = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]
    roles = embeddings(c)
    add(roles, {"attention": attention(h, heads, c["num_key_value_heads"], h // heads)}, layers)
    add(roles, routed(c, c["num_local_experts"], c["intermediate_size"]), layers)
    return roles


def deepseek_v3(c: dict[str, Any]) -> Roles:
    h, heads, layers = c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"]
    nope, rope, v = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    q_rank, kv_rank = c["q_lora_rank"], c["kv_lora_rank"]
    mla = (
        h * q_rank  # q_a_proj
        + q_rank * heads * (nope + rope)  # q_b_proj
        + h * (kv_rank + rope)  # kv_a_proj_with_mqa
        + kv_rank * heads * (nope + v)  # kv_b_proj
        + heads * v * h  # o_proj
    )
    dense, moe = c["first_k_dense_replace"], layers - c["first_k_dense_replace"]
    roles = embeddings(c)
    add(roles, {"attention": mla}, layers)
    add(roles, {"mlp": 3 * h * c["intermediate_size"]}, dense)
    width = c["moe_intermediate_size"]
    add(roles, routed(c, c["n_routed_experts"], width), moe)
    add(roles, {"shared_experts": 3 * h * c["n_shared_experts"] * width}, moe)
    return roles


NEMOTRON_BLOCKS = {"mamba": "M", "moe": "E", "attention": "*", "mlp": "-"}


def nemotron_pattern(c: dict[str, Any]) -> str:
    if c.get("hybrid_override_pattern"):
        return str(c["hybrid_override_pattern"])
    return "".join(NEMOTRON_BLOCKS[b] for b in c["layers_block_type"])


def nemotron_h(c: dict[str, Any]) -> Roles:
    """Squared-ReLU MLPs (up, down); LatentMoE experts work in the latent width."""
    h, pattern = c["hidden_size"], nemotron_pattern(c)
    ssm = mamba2(h, c["mamba_num_heads"], c["mamba_head_dim"], c["n_groups"], c["ssm_state_size"])
    heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
    roles = embeddings(c)
    add(roles, {"ssm": ssm}, pattern.count("M"))
    attn = attention(h, heads, kv, c.get("head_dim") or h // heads)
    add(roles, {"attention": attn}, pattern.count("*"))
    add(roles, {"mlp": 2 * h * c["intermediate_size"]}, pattern.count("-"))
    if "E" in pattern:
        latent, experts = c.get("moe_latent_size") or 0, c["n_routed_experts"]
        moe = {
            "router": h * experts,
            "shared_experts": 2 * h * c["moe_shared_expert_intermediate_size"],
            "experts": experts * 2 * (latent or h) * c["moe_intermediate_size"],
        }
        if latent:
            moe["moe_dense"] = 2 * h * latent  # fc1/fc2_latent_proj
        add(roles, moe, pattern.count("E"))
    return roles


def gated_deltanet(t: dict[str, Any]) -> int:
    """in_proj_qkv, in_proj_z, in_proj_b/a, conv1d over q/k/v, out_proj."""
    h: int = t["hidden_size"]
    keys: int = t["linear_num_key_heads"] * t["linear_key_head_dim"]
    values: int = t["linear_num_value_heads"] * t["linear_value_head_dim"]
    heads: int = t["linear_num_value_heads"]
    conv: int = (2 * keys + values) * t["linear_conv_kernel_dim"]
    return h * (2 * keys + values) + h * values + 2 * h * heads + conv + values * h


def qwen_gdn(c: dict[str, Any]) -> Roles:
    t = c.get("text_config") or c
    h, layers = t["hidden_size"], t["num_hidden_layers"]
    full = layers // t["full_attention_interval"]
    heads, kv, d = t["num_attention_heads"], t["num_key_value_heads"], t["head_dim"]
    gated = t.get("attn_output_gate", True)
    roles = embeddings({**t, "tie_word_embeddings": c.get("tie_word_embeddings", False)})
    add(roles, {"ssm": gated_deltanet(t)}, layers - full)
    add(roles, {"attention": attention(h, heads, kv, d, gated=gated)}, full)
    if t.get("num_experts"):
        add(roles, routed(t, t["num_experts"], t["moe_intermediate_size"]), layers)
        shared = 3 * h * t["shared_expert_intermediate_size"] + h  # + its scalar gate
        add(roles, {"shared_experts": shared}, layers)
    else:
        add(roles, {"mlp": 3 * h * t["intermediate_size"]}, layers)
    return roles


def falcon_h1(c: dict[str, Any]) -> Roles:
    h, layers = c["hidden_size"], c["num_hidden_layers"]
    ssm = mamba2(h, c["mamba_n_heads"], c["mamba_d_head"], c["mamba_n_groups"], c["mamba_d_state"])
    roles = embeddings(c)
    add(roles, {"ssm": ssm}, layers)
    attn = attention(h, c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"])
    add(roles, {"attention": attn}, layers)
    add(roles, {"mlp": 3 * h * c["intermediate_size"]}, layers)
    return roles


def jamba(c: dict[str, Any]) -> Roles:
    """Mamba-1: in_proj (x, z), conv1d, x_proj (dt, B, C), dt_proj, A_log, out_proj."""
    h, layers, n = c["hidden_size"], c["num_hidden_layers"], c["mamba_d_state"]
    inner, rank, kernel = c["mamba_expand"] * h, c["mamba_dt_rank"], c["mamba_d_conv"]
    mamba1 = (
        2 * h * inner
        + inner * kernel
        + inner * (rank + 2 * n)
        + rank * inner
        + inner * n
        + inner * h
    )
    attn_at = [i % c["attn_layer_period"] == c["attn_layer_offset"] for i in range(layers)]
    moe_at = [i % c["expert_layer_period"] == c["expert_layer_offset"] for i in range(layers)]
    heads = c["num_attention_heads"]
    roles = embeddings(c)
    add(
        roles,
        {"attention": attention(h, heads, c["num_key_value_heads"], h // heads)},
        sum(attn_at),
    )
    add(roles, {"ssm": mamba1}, layers - sum(attn_at))
    add(roles, routed(c, c["num_experts"], c["intermediate_size"]), sum(moe_at))
    add(roles, {"mlp": 3 * h * c["intermediate_size"]}, layers - sum(moe_at))
    return roles


# --------------------------------------------------------------------------- every fixture

BF16 = {"*": "bfloat16"}
# What each config.json says read alone: the hand computation, the format of each role ("*":
# every other), and the weights in GiB (where a single-format reading differs, its figure in
# the comment).
READ: dict[str, tuple[Callable[[dict[str, Any]], Roles], dict[str, str], float]] = {
    # fp8 quantization_config; the embedding table is a lookup no quantizer converts (624.94
    # with it fp8)
    "deepseek-v3.config.json": (deepseek_v3, {"*": "fp8", "embedding": "bfloat16"}, 625.80),
    "falcon-h1-0.5b.transcribed.config.json": (falcon_h1, BF16, 0.97),
    "jamba-1.5-mini.transcribed.config.json": (jamba, BF16, 96.06),
    # NVIDIA's FP8 checkpoint keeps its format in hf_quant_config.json: alone, the files say BF16
    "llama-3.1-70b-instruct-fp8.config.json": (llama, BF16, 131.41),
    "llama-3.1-70b.config.json": (llama, BF16, 131.41),
    "mixtral-8x7b-v0.1.config.json": (mixtral, BF16, 86.99),
    "nemotron-3-nano-30b-a3b-bf16.config.json": (nemotron_h, BF16, 58.82),
    "nemotron-3-nano-30b-a3b-nvfp4.config.json": (nemotron_h, BF16, 58.82),  # ditto
    "nemotron-3-super-120b-a12b-fp8.config.json": (nemotron_h, BF16, 224.76),  # ditto
    "nemotron-3-ultra-550b-a55b-bf16.config.json": (nemotron_h, BF16, 1023.16),
    "nemotron-h-56b-base-8k.config.json": (nemotron_h, BF16, 104.91),
    # fp8 with modules_to_not_convert: lm_head and the routers (mlp.gate) stay BF16 (218.95
    # with them fp8)
    "qwen3-235b-a22b-fp8.config.json": (
        qwen3_moe,
        {"*": "fp8", "lm_head": "bfloat16", "router": "bfloat16", "embedding": "bfloat16"},
        220.15,
    ),
    "qwen3-235b-a22b.config.json": (qwen3_moe, BF16, 437.89),
    "qwen3-30b-a3b.config.json": (qwen3_moe, BF16, 56.87),
    "qwen3-32b.config.json": (llama, BF16, 61.02),
    "qwen3-next-80b-a3b-thinking.config.json": (qwen_gdn, BF16, 148.40),
    # modelopt NVFP4 with an ignore list: GDN, full attention, shared experts, lm_head BF16
    # (63.97 with everything NVFP4)
    "qwen3.5-122b-a10b-nvfp4.config.json": (
        qwen_gdn,
        {"*": "bfloat16", "experts": "nvfp4", "router": "nvfp4"},
        72.15,
    ),
    "qwen3.5-122b-a10b.config.json": (qwen_gdn, BF16, 227.45),
    "qwen3.5-27b.config.json": (qwen_gdn, BF16, 50.10),
    "qwen3.5-35b-a3b.config.json": (qwen_gdn, BF16, 64.56),
    # MIXED_PRECISION: GDN and attention FP8, MLP and lm_head NVFP4 (W4A16) (50.10 as BF16)
    "qwen3.6-27b-nvfp4.config.json": (
        qwen_gdn,
        {"*": "fp8", "mlp": "nvfp4", "lm_head": "nvfp4", "embedding": "bfloat16"},
        18.74,
    ),
}
REFUSED = {
    "falcon-mamba-7b.transcribed.config.json": "FalconMambaForCausalLM",
    "gpt-oss-120b.config.json": "GptOssForCausalLM",
    "llama-3.3-nemotron-super-49b-v1.config.json": "DeciLMForCausalLM",
}
QUANT_FILES = {"deepseek-v4-flash-nvfp4.hf_quant_config.json"}


def hand_bytes(roles: Roles, formats: dict[str, str]) -> float:
    return sum(params * BYTES[formats.get(role, formats["*"])] for role, params in roles.items())


def test_every_fixture_is_covered() -> None:
    present = {p.name for p in CONFIGS.glob("*.json")}
    assert present == set(READ) | set(REFUSED) | QUANT_FILES


@pytest.mark.parametrize("name", sorted(READ))
def test_weight_bytes_match_the_hand_computation(name: str) -> None:
    hand, formats, gib = READ[name]
    roles = hand(config(name))
    spec = load_model(str(CONFIGS / name))
    assert spec.weight_bytes == pytest.approx(hand_bytes(roles, formats), rel=1e-12)
    assert round(spec.weight_bytes / GIB, 2) == gib
    assert spec.total_params == sum(roles.values())
    assert sum(s.params for s in spec.weight_shares) == spec.total_params
    assert {s.role: s.dtype for s in spec.weight_shares} == {
        role: formats.get(role, formats["*"]) for role, params in roles.items() if params
    }


@pytest.mark.parametrize(("name", "architecture"), sorted(REFUSED.items()))
def test_unmodelled_architectures_are_refused_by_name(name: str, architecture: str) -> None:
    with pytest.raises(ModelConfigError) as info:
        load_model(str(CONFIGS / name))
    message = str(info.value)
    assert message.startswith(f"architecture {architecture} is not modelled; modelled: ")
    assert "NemotronHForCausalLM" in message
    assert "missing" not in message


def test_deepseek_v32_is_refused_though_its_fields_read_as_v3() -> None:
    raw = config("deepseek-v3.config.json") | {
        "architectures": ["DeepseekV32ForCausalLM"],
        "model_type": "deepseek_v32",
    }
    with pytest.raises(ModelConfigError, match="architecture DeepseekV32ForCausalLM is not"):
        from_hf_config(raw)


def test_a_config_naming_no_architecture_says_so() -> None:
    with pytest.raises(ModelConfigError, match="names no modelled architecture"):
        from_hf_config({"model_type": "gpt_oss", "hidden_size": 8})


# --------------------------------------------------------------------------- hf_quant_config.json


def model_dir(tmp_path: Path, name: str, quant: dict[str, Any] | str | None = None) -> Path:
    """A model directory: the fixture as config.json, and an hf_quant_config.json beside it in
    the shape ModelOpt writes ({"producer": ..., "quantization": {...}}; the fixtures' README),
    or, given as text, the file as written (a real one, or a broken one)."""
    folder = tmp_path / name.removesuffix(".config.json")
    folder.mkdir()
    shutil.copy(CONFIGS / name, folder / "config.json")
    if isinstance(quant, str):
        (folder / "hf_quant_config.json").write_text(quant)
    elif quant is not None:
        body = {"producer": {"name": "modelopt"}, "quantization": quant}
        (folder / "hf_quant_config.json").write_text(json.dumps(body))
    return folder


SUPER = "nemotron-3-super-120b-a12b-fp8.config.json"


def test_nemotron_super_nvfp4_directory_reads_nvfp4(tmp_path: Path) -> None:
    quant = {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"]}
    spec = load_model(str(model_dir(tmp_path, SUPER, quant)))
    roles = nemotron_h(config(SUPER))
    formats = {"*": "nvfp4", "lm_head": "bfloat16", "embedding": "bfloat16"}
    assert spec.weight_bytes == pytest.approx(hand_bytes(roles, formats), rel=1e-12)
    assert round(spec.weight_bytes / GIB, 2) == 64.65  # was 224.76 (read as BF16)
    assert spec.weight_dtype == "nvfp4"
    assert spec.weight_source == "hf_quant_config.json (NVFP4)"
    # The built-in id counts every weight at NVFP4; the checkpoint keeps its table and head BF16.
    built_in = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4")
    table = 131072 * 4096
    assert spec.weight_bytes - built_in.weight_bytes == pytest.approx(2 * table * (2 - 0.5625))
    fits = max_batch(spec, datasheet("H200"), Setup(), Workload())
    assert fits > 0  # BF16 (224.8 GiB) does not fit on one H200 at all


def test_nemotron_super_fp8_directory_reads_fp8(tmp_path: Path) -> None:
    spec = load_model(str(model_dir(tmp_path, SUPER, {"quant_algo": "FP8"})))
    formats = {"*": "fp8", "embedding": "bfloat16"}
    assert spec.weight_bytes == pytest.approx(hand_bytes(nemotron_h(config(SUPER)), formats))
    assert round(spec.weight_bytes / GIB, 2) == 112.88  # was 224.76


def test_llama_fp8_directory_reads_fp8(tmp_path: Path) -> None:
    name = "llama-3.1-70b-instruct-fp8.config.json"
    quant = {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]}
    spec = load_model(str(model_dir(tmp_path, name, quant) / "config.json"))
    formats = {"*": "fp8", "lm_head": "bfloat16", "embedding": "bfloat16"}
    assert spec.weight_bytes == pytest.approx(hand_bytes(llama(config(name)), formats))
    assert round(spec.weight_bytes / GIB, 2) == 67.66  # was 131.41


def test_mixed_precision_in_nemotron_module_names(tmp_path: Path) -> None:
    """NemotronH names every block `mixer`: what it holds depends on the layer."""
    pattern = nemotron_pattern(config(SUPER))
    layers: dict[str, Any] = {}
    for i, block in enumerate(pattern):
        if block == "E":
            layers[f"backbone.layers.{i}.mixer.experts"] = {"quant_algo": "NVFP4"}
        if block == "M":
            for part in ("in_proj", "out_proj"):
                layers[f"backbone.layers.{i}.mixer.{part}"] = {"quant_algo": "FP8"}
    quant = {
        "quant_algo": "MIXED_PRECISION",
        "quantized_layers": layers,
        "exclude_modules": ["lm_head", "*.mixer.shared_experts.*", "mtp.*"],
    }
    spec = load_model(str(model_dir(tmp_path, SUPER, quant)))
    formats = {"*": "bfloat16", "experts": "nvfp4", "ssm": "fp8"}
    assert spec.weight_bytes == pytest.approx(hand_bytes(nemotron_h(config(SUPER)), formats))
    assert spec.weight_dtype == "mixed"
    assert not [n for n in spec.notes if "match no weight" in n or "not recognised" in n]


def test_deepseek_v4_module_names_on_the_v3_shapes(tmp_path: Path) -> None:
    """The real DeepSeek-V4 hf_quant_config.json (MIXED_PRECISION: routed experts of layers
    0-42 NVFP4; attention, shared experts, head, MTP excluded) beside the V3 config.json we model
    (without its own quantization_config, which vLLM would read first): V3's MoE layers 3-42 get
    NVFP4 experts, 43-60 stay BF16, and V3's dense layers 0-2 have no experts to match."""
    raw = config("deepseek-v3.config.json")
    del raw["quantization_config"]
    folder = tmp_path / "v3"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(raw))
    shutil.copy(DSV4_QUANT, folder / "hf_quant_config.json")
    spec = load_model(str(folder))
    roles = deepseek_v3(raw)
    per_layer = roles["experts"] // 58
    hand = (roles["experts"] - 40 * per_layer) * 2 + 40 * per_layer * 0.5625
    hand += sum(params for role, params in roles.items() if role != "experts") * 2
    assert spec.weight_bytes == pytest.approx(hand)
    assert [n for n in spec.notes if "3 listed module(s) match no weight" in n]
    assert "'layers.0.ffn.experts'" in " ".join(spec.notes)


def test_config_quantization_wins_over_hf_quant_config(tmp_path: Path) -> None:
    spec = load_model(str(model_dir(tmp_path, "deepseek-v3.config.json", DSV4_QUANT.read_text())))
    assert spec.weight_dtype == "fp8"
    assert [n for n in spec.notes if "hf_quant_config.json not read" in n]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{not json", "not a readable JSON file"),
        ('{"producer": {"name": "modelopt"}}', "no 'quantization' object"),
        ('{"quantization": {"quant_algo": "MIXED_PRECISION"}}', "needs 'quantized_layers'"),
        ('{"quantization": {"quant_algo": "W3A16_FOO"}}', "'W3A16_FOO' is not a weight format"),
        ('{"quantization": {"quant_algo": "NVFP4", "exclude_modules": "lm_head"}}', "JSON list"),
    ],
)
def test_a_broken_hf_quant_config_is_refused(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(ModelConfigError, match=message):
        load_model(str(model_dir(tmp_path, SUPER, body)))


def test_an_unknown_quant_method_is_refused_with_the_way_out() -> None:
    raw = config("qwen3-32b.config.json") | {"quantization_config": {"quant_method": "hqq"}}
    with pytest.raises(ModelConfigError, match=r"quant_method 'hqq' is not read.*weights="):
        from_hf_config(raw)


def test_compressed_tensors_groups_read_like_modelopt_lists() -> None:
    """Qwen3.6's quantization_config carries both spellings: config_groups (compressed-tensors
    targets) and quantized_layers (ModelOpt). Either alone gives the same bytes."""
    raw = config("qwen3.6-27b-nvfp4.config.json")
    quant = raw["quantization_config"]
    groups = {k: quant[k] for k in ("config_groups", "ignore")} | {
        "quant_method": "compressed-tensors"
    }
    as_groups = from_hf_config(raw | {"quantization_config": groups})
    assert (
        as_groups.weight_bytes
        == load_model(str(CONFIGS / "qwen3.6-27b-nvfp4.config.json")).weight_bytes
    )
    assert as_groups.weight_dtype == "mixed"


# --------------------------------------------------------------------------- weights override


def test_an_override_replaces_what_the_files_say_and_says_so() -> None:
    path = str(CONFIGS / "qwen3.6-27b-nvfp4.config.json")
    spec = load_model(path, weights="bf16")
    # Same shapes as Qwen3.5-27B: as BF16 it is that model's size.
    assert spec.weight_bytes == load_model(str(CONFIGS / "qwen3.5-27b.config.json")).weight_bytes
    assert (spec.weight_dtype, spec.weight_source) == ("bfloat16", "override")
    assert spec.summary()["weight_source"] == "override"
    note = next(n for n in spec.notes if "given as an override" in n)
    assert "bfloat16 given as an override" in note
    assert "mixed (config.json quantization_config (MIXED_PRECISION))" in note


def test_an_override_on_a_built_in_id() -> None:
    spec = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4", weights="FP8")
    fp8 = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8")
    assert spec.weight_bytes == fp8.weight_bytes == fp8.total_params * 1.0
    assert any("before it, nvfp4 (built-in variant NVFP4)" in n for n in spec.notes)
    assert fp8.weight_source == "built-in variant FP8"
    assert not any("override" in n for n in fp8.notes)


def test_an_override_still_works_when_the_files_cannot_be_read(tmp_path: Path) -> None:
    folder = model_dir(tmp_path, SUPER, {"quant_algo": "W3A16_FOO"})
    spec = load_model(str(folder), weights="nvfp4")
    assert spec.weight_dtype == "nvfp4"
    assert any("before it, nothing readable" in n for n in spec.notes)


def test_an_unknown_override_is_refused() -> None:
    with pytest.raises(ModelConfigError, match=r"unknown weight format 'int3'; known: bfloat16"):
        load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B", weights="int3")


# --------------------------------------------------------------------------- SSM state dtype

MIB = 2**20
# Hybrid fixture -> (state dtype as vLLM resolves it with --mamba-ssm-cache-dtype auto, where
# from, one layer's state elements).
STATES: dict[str, tuple[str, str, int]] = {
    "falcon-h1-0.5b.transcribed.config.json": ("bfloat16", "auto follows", 24 * 64 * 128),
    "jamba-1.5-mini.transcribed.config.json": ("bfloat16", "auto follows", 8192 * 16),
    "nemotron-3-nano-30b-a3b-bf16.config.json": ("float32", "mamba_ssm_cache_dtype", 64 * 64 * 128),
    "nemotron-3-nano-30b-a3b-nvfp4.config.json": (
        "float32",
        "mamba_ssm_cache_dtype",
        64 * 64 * 128,
    ),
    SUPER: ("float32", "mamba_ssm_cache_dtype", 128 * 64 * 128),
    "nemotron-3-ultra-550b-a55b-bf16.config.json": (
        "float32",
        "mamba_ssm_cache_dtype",
        256 * 64 * 128,
    ),
    # no field: vLLM's NemotronH hook defaults to float32
    "nemotron-h-56b-base-8k.config.json": (
        "float32",
        "NemotronHForCausalLM default",
        256 * 64 * 256,
    ),
    # no field and no vLLM hook for Qwen3-Next: the model dtype
    "qwen3-next-80b-a3b-thinking.config.json": ("bfloat16", "auto follows", 32 * 128 * 128),
    "qwen3.5-122b-a10b-nvfp4.config.json": ("float32", "mamba_ssm_dtype", 64 * 128 * 128),
    "qwen3.5-122b-a10b.config.json": ("float32", "mamba_ssm_dtype", 64 * 128 * 128),
    "qwen3.5-27b.config.json": ("float32", "mamba_ssm_dtype", 48 * 128 * 128),
    "qwen3.5-35b-a3b.config.json": ("float32", "mamba_ssm_dtype", 32 * 128 * 128),
    "qwen3.6-27b-nvfp4.config.json": ("float32", "mamba_ssm_dtype", 48 * 128 * 128),
}


def test_every_hybrid_fixture_has_a_state_entry() -> None:
    hybrids = {n for n in READ if load_model(str(CONFIGS / n)).is_hybrid}
    assert hybrids == set(STATES)


@pytest.mark.parametrize("name", sorted(STATES))
def test_state_dtype_follows_vllm(name: str) -> None:
    dtype, source, elements = STATES[name]
    spec = load_model(str(CONFIGS / name))
    assert spec.ssm_state_dtype == dtype
    assert source in spec.ssm_state_dtype_source
    assert spec.ssm_state_bytes == elements * BYTES.get(dtype, 4.0)
    warned = any("not float32" in n for n in spec.notes)
    assert warned == (dtype != "float32")


@pytest.mark.parametrize("name", sorted(STATES))
def test_the_live_flag_wins_and_halves_or_doubles_the_state(name: str) -> None:
    path = str(CONFIGS / name)
    fp32 = load_model(path, ssm_state_dtype="float32")
    bf16 = load_model(path, ssm_state_dtype="bf16")
    assert fp32.ssm_state_bytes_per_request == 2 * bf16.ssm_state_bytes_per_request
    assert bf16.ssm_state_dtype_source == "--mamba-ssm-cache-dtype bf16"
    assert any("not float32" in n for n in bf16.notes)
    assert not any("not float32" in n for n in fp32.notes)
    auto = load_model(path, ssm_state_dtype="auto")
    assert auto.ssm_state_dtype == STATES[name][0]


def test_state_dtype_changes_capacity_about_twofold() -> None:
    path = str(CONFIGS / "qwen3-next-80b-a3b-thinking.config.json")
    workload, h200, spec3 = Workload(context_tokens=256), datasheet("H200"), Setup(spec_tokens=3)
    bf16 = max_batch(load_model(path, weights="fp8"), h200, spec3, workload)
    fp32 = max_batch(
        load_model(path, weights="fp8", ssm_state_dtype="float32"), h200, spec3, workload
    )
    assert 1.8 < bf16 / fp32 <= 2.0  # conv state and KV do not change with it


def test_mamba_cache_dtype_sets_the_state_when_ssm_dtype_is_auto() -> None:
    path = str(CONFIGS / "qwen3-next-80b-a3b-thinking.config.json")
    spec = load_model(path, mamba_cache_dtype="float32")
    assert (spec.ssm_state_dtype, spec.conv_state_dtype) == ("float32", "float32")
    nemotron = load_model(str(CONFIGS / SUPER), mamba_cache_dtype="bfloat16")
    assert nemotron.ssm_state_dtype == "float32"  # the NemotronH hook runs first
    assert nemotron.conv_state_dtype == "bfloat16"


def test_qwen35_without_its_field_falls_back_to_the_model_dtype() -> None:
    raw = config("qwen3.5-27b.config.json")
    del raw["text_config"]["mamba_ssm_dtype"]
    assert from_hf_config(raw).ssm_state_dtype == "bfloat16"


@pytest.mark.parametrize("value", ["float64", "fp8", "int4"])
def test_a_bad_state_dtype_is_refused(value: str) -> None:
    with pytest.raises(ModelConfigError, match="known: auto, float32, bfloat16, float16"):
        load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B", ssm_state_dtype=value)


# --------------------------------------------------------------------------- module names

ALL: set[str] = set(LAYER_ROLES)
NAMES: list[tuple[str, str | None, set[str]]] = [
    ("model.language_model.layers.0.linear_attn.in_proj_qkv", "0", {"ssm"}),
    ("model.language_model.layers.3.self_attn.q_proj", "3", {"attention"}),
    ("model.language_model.layers.0.mlp.gate_proj", "0", {"mlp"}),
    ("model.language_model.layers.12.linear_attn*", "12", {"ssm"}),
    ("model.language_model.layers.5.mlp.shared_expert*", "5", {"shared_experts"}),
    ("model.language_model.layers.5.mlp.shared_expert_gate", "5", {"shared_experts"}),
    ("model.layers.7.mlp.gate", "7", {"router"}),
    ("model.layers.7.input_layernorm", "7", set()),
    ("model.layers.*.self_attn", None, {"attention"}),
    ("model.layers.*.mlp.router", None, {"router"}),
    ("layers.10.ffn.experts", "10", {"experts"}),
    ("*.attn.*", None, {"attention"}),
    ("*.ffn.shared_experts.*", None, {"shared_experts"}),
    ("backbone.layers.1.mixer.experts.0.up_proj", "1", {"experts"}),
    ("backbone.layers.1.mixer.fc1_latent_proj", "1", {"moe_dense"}),
    ("backbone.layers.0.mixer.in_proj", "0", {"ssm", "attention", "mlp"}),
    ("backbone.layers.2*", "2*", ALL),
    ("model.layers.3.block_sparse_moe.experts.1.w1", "3", {"experts"}),
    ("model.layers.3.block_sparse_moe.input_linear", "3", {"experts"}),
    ("model.layers.3.shared_mlp.input_linear", "3", {"shared_experts", "mlp"}),
    ("lm_head", None, {"lm_head"}),
    ("head", None, {"lm_head"}),
    ("model.embed_tokens", None, {"embedding"}),
    ("mtp.layers.0*", None, set()),
    ("model.visual*", None, set()),
]


@pytest.mark.parametrize(("name", "layer", "roles"), NAMES)
def test_module_names_select_by_what_they_name(
    name: str, layer: str | None, roles: set[str]
) -> None:
    parsed = selector(name)
    assert parsed is not None
    assert (parsed.layer, set(parsed.roles)) == (layer, roles)


def test_a_layer_glob_matches_as_a_glob() -> None:
    parsed = selector("model.layers.1*")
    assert parsed is not None
    assert [i for i in range(30) if parsed.matches(i, "attention")] == [1, *range(10, 20)]
    assert selector("model.rotary_emb.inv_freq") is None
