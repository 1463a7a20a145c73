import json
from pathlib import Path
from typing import Any

import pytest

from autotuner.core.model.hf_config import from_hf_config
from autotuner.core.model.registry import known_models, load_model
from autotuner.core.model.spec import DrafterKind, SsmKind
from autotuner.errors import ModelConfigError
from tests.support.fixtures import mamba2_config, published_config

MIB = 2**20


def stack(layers: int, hidden: int, vocab: int, heads: int, kv_heads: int) -> dict[str, Any]:
    """The config fields every family with attention layers spells alike."""
    return {
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "vocab_size": vocab,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
    }


def prefixed_mamba2(heads: int, head_dim: int, state: int) -> dict[str, Any]:
    """A one-group Mamba-2 mixer as Granite-4.0-H and Bamba spell it (`mamba_*`)."""
    return {
        "mamba_n_heads": heads,
        "mamba_d_head": head_dim,
        "mamba_d_state": state,
        "mamba_n_groups": 1,
    }


NANO = published_config("nemotron-3-nano-30b-a3b-bf16")


def test_nemotron_super_state_sizes_match_costmodel_md() -> None:
    spec = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B")
    assert spec.ssm_state_bytes == 4 * MIB
    assert spec.ssm_state_bytes_per_request == 160 * MIB
    assert spec.kv_bytes_per_token == 8 * 1024
    # (128*64 + 8*128) bf16 + 128 fp32 dt: the ~18 KiB of COSTMODEL.md section 6.
    assert spec.ring_entry_bytes == (128 * 64 + 8 * 128) * 2 + 128 * 4
    assert (spec.ssm_layers, spec.moe_layers, spec.attention_layers) == (40, 40, 8)
    assert 118e9 < spec.total_params < 124e9
    assert 11.5e9 < spec.active_params < 13.5e9
    assert spec.drafter is DrafterKind.MTP
    assert spec.conv_state_bytes(0) == 3 * (128 * 64 + 2 * 8 * 128) * 2
    assert spec.conv_state_bytes(3) == 6 * (128 * 64 + 2 * 8 * 128) * 2


def test_precision_variants_change_weight_bytes_only() -> None:
    bf16 = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16")
    fp4 = load_model("NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4")
    assert fp4.weight_bytes < bf16.weight_bytes / 3
    assert fp4.ssm_state_bytes == bf16.ssm_state_bytes
    assert fp4.total_params == bf16.total_params


@pytest.mark.parametrize("model_id", known_models())
def test_every_registry_entry_loads(model_id: str) -> None:
    spec = load_model(model_id)
    assert spec.total_params >= spec.active_params > 0
    assert spec.is_hybrid == (spec.ssm_state_bytes > 0)
    assert spec.kv_bytes_per_token > 0


def test_qwen35_published_totals() -> None:
    spec = load_model("Qwen/Qwen3.5-122B-A10B")
    assert spec.ssm is not None
    assert spec.ssm.kind is SsmKind.GATED_DELTANET
    assert (spec.ssm_layers, spec.attention_layers) == (36, 12)
    assert 118e9 < spec.total_params < 126e9
    assert 9e9 < spec.active_params < 11e9
    assert spec.ssm_state_bytes == 64 * 128 * 128 * 4


def test_nemotron_h_reader_counts_blocks() -> None:
    spec = from_hf_config(NANO, name="nano")
    pattern = NANO["hybrid_override_pattern"]
    assert spec.ssm_layers == pattern.count("M") == 23
    assert spec.attention_layers == pattern.count("*") == 6
    assert spec.moe_layers == pattern.count("E") == 23
    assert spec.ssm_state_bytes == 64 * 64 * 128 * 4
    assert spec.drafter is DrafterKind.NONE
    assert 30e9 < spec.total_params < 33e9


@pytest.mark.parametrize(
    ("mamba", "attention"),
    [("mamba", "attention"), ("linear_attention", "full_attention")],  # transformers 5's
)
def test_nemotron_layers_block_type_equals_pattern(mamba: str, attention: str) -> None:
    blocks = {"M": mamba, "E": "moe", "*": attention}
    listed = {k: v for k, v in NANO.items() if k != "hybrid_override_pattern"}
    listed["layers_block_type"] = [blocks[c] for c in NANO["hybrid_override_pattern"]]
    assert from_hf_config(listed).total_params == from_hf_config(NANO).total_params


def test_qwen3_next_reader_uses_full_attention_interval() -> None:
    # The published config.json names no MTP layer count: one is added to read the drafter.
    config = {**published_config("qwen3-next-80b-a3b-thinking"), "num_nextn_predict_layers": 1}
    spec = from_hf_config(config)
    assert (spec.ssm_layers, spec.attention_layers, spec.moe_layers) == (36, 12, 48)
    # No SSM dtype field and no vLLM hook for Qwen3-Next: auto follows the model dtype (bf16).
    assert spec.ssm_state_bytes == 32 * 128 * 128 * 2
    # Gated DeltaNet logs u (value heads x dim) and k (key heads x dim), plus two fp32 gates.
    assert spec.ring_entry_bytes == (32 * 128 + 16 * 128) * 2 + 2 * 32 * 4
    assert spec.drafter is DrafterKind.MTP
    assert 75e9 < spec.total_params < 85e9


def test_qwen35_reader_reads_text_config_and_layer_types() -> None:
    qwen35 = published_config("qwen3.5-27b")
    # Four layers listed in an order the full_attention_interval (4) would not give.
    layers = ["linear_attention", "linear_attention", "full_attention", "full_attention"]
    text = {**qwen35["text_config"], "num_hidden_layers": 4, "layer_types": layers}
    spec = from_hf_config({**qwen35, "text_config": text})
    assert (spec.ssm_layers, spec.attention_layers, spec.moe_layers) == (2, 2, 0)
    assert spec.ssm_state_dtype == "float32"  # its mamba_ssm_dtype, not the bf16 weights'
    assert spec.ssm_state_bytes == 48 * 128 * 128 * 4


def test_granite_and_bamba_readers() -> None:
    granite = {
        "architectures": ["GraniteMoeHybridForCausalLM"],
        **stack(4, 1536, 100352, 12, 4),
        "layer_types": ["mamba", "attention", "mamba", "mamba"],
        **prefixed_mamba2(48, 64, 128),
        "mamba_d_conv": 4,
        "mamba_expand": 2,
        "num_local_experts": 64,
        "num_experts_per_tok": 6,
        "intermediate_size": 512,
        "shared_intermediate_size": 1024,
    }
    spec = from_hf_config(granite)
    assert (spec.ssm_layers, spec.attention_layers, spec.moe_layers) == (3, 1, 4)
    assert spec.ssm_state_bytes == 48 * 64 * 128 * 2  # vLLM's default: the model dtype
    bamba = {
        "architectures": ["BambaForCausalLM"],
        **stack(32, 4096, 128256, 32, 8),
        "attn_layer_indices": [9, 18, 27],
        **prefixed_mamba2(128, 64, 128),
        "intermediate_size": 14336,
    }
    spec = from_hf_config(bamba)
    assert (spec.ssm_layers, spec.attention_layers, spec.moe_layers) == (29, 3, 0)
    assert spec.moe is None


def test_falcon_h1_has_attention_and_mamba_in_every_layer() -> None:
    spec = from_hf_config(published_config("falcon-h1-0.5b.transcribed"))
    assert spec.ssm_layers == spec.attention_layers == 36
    assert spec.ssm_state_bytes == 24 * 64 * 128 * 2  # vLLM's default: the model dtype


def test_jamba_is_mamba1() -> None:
    config = published_config("jamba-1.5-mini.transcribed")
    spec = from_hf_config(config)
    assert spec.ssm is not None
    assert spec.ssm.kind is SsmKind.MAMBA1
    assert (spec.ssm_layers, spec.attention_layers, spec.moe_layers) == (28, 4, 16)
    assert spec.ssm_state_bytes == 8192 * 16 * 2  # vLLM's default: the model dtype
    assert 48e9 < spec.total_params < 56e9  # Jamba-1.5-Mini: 52B


def test_plain_mamba2() -> None:
    config = {**mamba2_config(64, 2560, 50288, 80, 128), "head_dim": 64, "n_groups": 1, "expand": 2}
    spec = from_hf_config(config)
    assert (spec.ssm_layers, spec.attention_layers) == (64, 0)
    assert spec.kv_bytes_per_token == 0
    assert 2.4e9 < spec.total_params < 3.0e9  # mamba2-2.7b


def test_missing_fields_are_all_named() -> None:
    broken = {k: v for k, v in NANO.items() if k not in ("mamba_num_heads", "ssm_state_size")}
    with pytest.raises(ModelConfigError) as info:
        from_hf_config(broken)
    assert "mamba_num_heads" in str(info.value)
    assert "ssm_state_size" in str(info.value)


def test_unknown_architecture_says_what_is_needed() -> None:
    with pytest.raises(ModelConfigError, match="architecture FooForCausalLM is not modelled"):
        from_hf_config({"architectures": ["FooForCausalLM"], "hidden_size": 8})


def test_ssm_state_dtype_override() -> None:
    spec = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B", ssm_state_dtype="bfloat16")
    assert spec.ssm_state_bytes == 2 * MIB


def test_load_model_from_file_and_directory(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(NANO))
    assert load_model(str(tmp_path)).ssm_layers == 23
    assert load_model(str(tmp_path / "config.json")).ssm_layers == 23
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ModelConfigError, match="not a readable JSON"):
        load_model(str(tmp_path / "bad.json"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelConfigError, match=r"no config\.json"):
        load_model(str(empty))
    with pytest.raises(ModelConfigError, match="unknown model"):
        load_model("no/such-model")
