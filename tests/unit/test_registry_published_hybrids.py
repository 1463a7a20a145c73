"""The larger hybrid entries first written out by hand (Nemotron-3 Nano and Super, Qwen3-Next)
hold the published config.json they cite.

Each entry carries a published config.json as a public repository copied it verbatim (the
Nemotrons' from ai-dynamo/aiconfigurator's model database, for Super the FP8 checkpoint's: no
copy of the BF16 checkpoint's own was found). PUBLISHED below transcribes, from those copies,
every field the cost model reads, so an entry that drifts from its published file fails here.
The shared fixtures hold the same files (for Qwen3-Next the Thinking checkpoint's, field for
field the Instruct's): where they are mounted the whole entry config is held to them, the
declared additions aside.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autotuner.core.model.hf_config import from_hf_config
from autotuner.core.model.registry import registry
from autotuner.core.model.spec import DrafterKind
from tests.support.published_configs import assert_cites_verbatim_copy, assert_holds_published

NANO = "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B"
SUPER = "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B"
NEXT = "Qwen/Qwen3-Next-80B-A3B-Instruct"

# Where each published config.json was read: "owner/name@full-commit path".
_AIC = (
    "ai-dynamo/aiconfigurator@095f58a51c4ca8e61b66ec108d86f223f8d559ce "
    "aic-core/src/aiconfigurator_core/model_configs/"
)
SOURCES = {
    NANO: f"{_AIC}nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16_config.json",
    SUPER: f"{_AIC}nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8_config.json",
    NEXT: (
        "SujeethJinesh/LatentWire@45631fb35941fbe7a7227bd62468349847b598e2 "
        "experimental/hybridkernel/phase0/configs/qwen3-next-80b-a3b-instruct.config.json"
    ),
}

CONFIGS = Path("/work/shared/fixtures/configs")
FIXTURES = {
    NANO: "nemotron-3-nano-30b-a3b-bf16.config.json",
    SUPER: "nemotron-3-super-120b-a12b-fp8.config.json",
    NEXT: "qwen3-next-80b-a3b-thinking.config.json",
}
# Fields an entry adds to its published file, each said in its notes (none today: Qwen3-Next's
# file does not state its one MTP layer, which vLLM and the reader both assume).
ADDED: dict[str, dict[str, object]] = {}


def _nemotron(
    hidden: int,
    ffn: int,
    pattern: str,
    mamba_heads: int,
    experts: tuple[int, int],
    shared: int,
    latent: int | None,
    mtp: tuple[int | None, str | None],
) -> dict[str, Any]:
    """A Nemotron-3 config's cost-model fields (the family shares the rest)."""
    return {
        "hidden_size": hidden,
        "intermediate_size": ffn,
        "num_hidden_layers": len(pattern),
        "hybrid_override_pattern": pattern,
        "num_attention_heads": 32,
        "num_key_value_heads": 2,
        "head_dim": 128,
        "mamba_num_heads": mamba_heads,
        "mamba_head_dim": 64,
        "ssm_state_size": 128,
        "n_groups": 8,
        "conv_kernel": 4,
        "expand": 2,
        "mamba_ssm_cache_dtype": "float32",
        "n_routed_experts": experts[0],
        "num_experts_per_tok": experts[1],
        "moe_intermediate_size": ffn,
        "moe_shared_expert_intermediate_size": shared,
        "n_shared_experts": 1,
        "moe_latent_size": latent,
        "num_nextn_predict_layers": mtp[0],
        "mtp_hybrid_override_pattern": mtp[1],
        "vocab_size": 131072,
        "tie_word_embeddings": False,
    }


# Transcribed from the files SOURCES names, not from the registry entries.
PUBLISHED = {
    NANO: _nemotron(
        2688,
        1856,
        "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
        64,
        (128, 6),
        3712,
        latent=None,
        mtp=(None, None),
    ),
    SUPER: _nemotron(
        4096,
        2688,
        "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME",
        128,
        (512, 22),
        5376,
        latent=1024,
        mtp=(1, "*E"),
    ),
    NEXT: {
        "hidden_size": 2048,
        "intermediate_size": 5120,
        "num_hidden_layers": 48,
        "full_attention_interval": 4,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "num_experts": 512,
        "num_experts_per_tok": 10,
        "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "vocab_size": 151936,
        "tie_word_embeddings": False,
    },
}


@pytest.mark.parametrize(("model_id", "published"), PUBLISHED.items())
def test_an_entry_holds_its_published_config(model_id: str, published: dict[str, Any]) -> None:
    assert_holds_published(model_id, published)


@pytest.mark.parametrize(("model_id", "source"), SOURCES.items())
def test_a_published_config_cites_the_verbatim_copy_it_was_read_from(
    model_id: str, source: str
) -> None:
    assert_cites_verbatim_copy(model_id, source)


@pytest.mark.parametrize(("model_id", "fixture"), FIXTURES.items())
def test_an_entry_is_the_whole_published_file_but_its_declared_additions(
    model_id: str, fixture: str
) -> None:
    if not (CONFIGS / fixture).is_file():
        pytest.skip("the shared fixtures are not mounted")
    published = json.loads((CONFIGS / fixture).read_text(encoding="utf-8"))
    added = ADDED.get(model_id, {})
    assert registry()[model_id].config == {**published, **added}
    notes = " ".join(registry()[model_id].notes)
    assert all(f"{name} {value}" in notes for name, value in added.items())


def test_qwen3_next_keeps_the_mtp_layer_its_checkpoint_ships() -> None:
    spec = from_hf_config(registry()[NEXT].config, name=NEXT, built_in="bfloat16")
    assert spec.drafter == DrafterKind.MTP
