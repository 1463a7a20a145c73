"""The small hybrid sizes in the registry (Qwen3.5 0.8B-9B, Granite-4.0-H Micro/Tiny/1B/350M)
hold the configs and parameters their sources state.

Every entry carries a published config.json as a public repository copied it verbatim (for
Granite-4.0-H-Micro, its base checkpoint's: no copy of the instruct checkpoint's own was found);
PUBLISHED below transcribes, from those copies, every field the cost model reads, so an entry
that drifts from its published file fails here.

The Qwen3.5 parameter figures are the element counts of each checkpoint's text tensors as its
GGUF listing gives them (Thireus/GGUF-Tool-Suite@384c1f85, models/Qwen3.5-*/group0/
tensors.bf16.map, summed); the reader leaves out only the norms, well under 0.1%. The Granite
figures are IBM's model-card table ("# Parameters", "# Active parameters"), each read as the
interval that rounds to the printed figure.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from autotuner.core.model.hf_config import from_hf_config
from autotuner.core.model.registry import load_model, registry
from autotuner.core.model.spec import ModelSpec
from tests.support.published_configs import assert_cites_verbatim_copy, assert_holds_published

CITATION = re.compile(r"\b[\w.-]+/[\w.-]+@[0-9a-f]{8,40}\b")
QWEN_TEXT_ELEMENTS = {
    "Qwen/Qwen3.5-0.8B": 752_393_024,
    "Qwen/Qwen3.5-2B": 1_881_825_088,
    "Qwen/Qwen3.5-4B": 4_205_751_296,
    "Qwen/Qwen3.5-9B": 8_953_803_264,
}
NORMS_LEFT_OUT = 0.001

# (lowest, highest) total and active parameters that print as the card's figure.
GRANITE_TABLE = {
    "ibm-granite/granite-4.0-h-micro": ((2.5e9, 3.5e9), (2.5e9, 3.5e9)),  # 3B / 3B
    "ibm-granite/granite-4.0-h-tiny": ((6.5e9, 7.5e9), (0.5e9, 1.5e9)),  # 7B / 1B
    "ibm-granite/granite-4.0-h-1b": ((1.45e9, 1.55e9), (1.45e9, 1.55e9)),  # 1.5B
    "ibm-granite/granite-4.0-h-350m": ((335e6, 345e6), (335e6, 345e6)),  # 340M
}

# (recurrent layers, attention layers) as each source states them: every 4th Qwen3.5 layer
# is full attention; IBM's table says "4 attention / 36 Mamba2" (28 for H-350M).
LAYER_KINDS = {
    "Qwen/Qwen3.5-0.8B": (18, 6),
    "Qwen/Qwen3.5-2B": (18, 6),
    "Qwen/Qwen3.5-4B": (24, 8),
    "Qwen/Qwen3.5-9B": (24, 8),
    "ibm-granite/granite-4.0-h-micro": (36, 4),
    "ibm-granite/granite-4.0-h-tiny": (36, 4),
    "ibm-granite/granite-4.0-h-1b": (36, 4),
    "ibm-granite/granite-4.0-h-350m": (28, 4),
}

# Where each published config.json was read: "owner/name@full-commit path".
_VIEWER = "KinChow/model-structure-viewer@728e0b0834a8b0fd382d312c27ed755ffe29b8c3"
_DINOML = (
    "hlky/dinoml_v2@6b8c0acb3a19f77188401b57db6e403aa92534f3 "
    "agents/plans/transformers/granitemoehybrid/_sources/"
)
SOURCES = {
    "Qwen/Qwen3.5-0.8B": f"{_VIEWER} models/Qwen/Qwen3.5-0.8B/config.json",
    "Qwen/Qwen3.5-2B": f"{_VIEWER} models/Qwen/Qwen3.5-2B/config.json",
    "Qwen/Qwen3.5-4B": f"{_VIEWER} models/Qwen/Qwen3.5-4B/config.json",
    "Qwen/Qwen3.5-9B": f"{_VIEWER} models/Qwen/Qwen3.5-9B/config.json",
    "ibm-granite/granite-4.0-h-tiny": (
        "SujeethJinesh/LatentWire@45631fb35941fbe7a7227bd62468349847b598e2 "
        "experimental/hybridkernel/phase0/configs/ibm-granite-4.0-h-tiny.config.json"
    ),
    # No copy of the instruct checkpoint's own was found: its base's, the same architecture.
    "ibm-granite/granite-4.0-h-micro": (
        f"{_DINOML}ibm-granite__granite-4.0-h-micro-base.config.json"
    ),
    "ibm-granite/granite-4.0-h-1b": f"{_DINOML}ibm-granite__granite-4.0-h-1b.config.json",
    "ibm-granite/granite-4.0-h-350m": f"{_DINOML}ibm-granite__granite-4.0-h-350m.config.json",
}


def _qwen(
    hidden: int, ffn: int, layers: int, heads: tuple[int, int], linear: tuple[int, int], tied: bool
) -> dict[str, Any]:
    """A Qwen3.5 text config's cost-model fields (the family shares the rest)."""
    return {
        "hidden_size": hidden,
        "intermediate_size": ffn,
        "num_hidden_layers": layers,
        "attention_at": tuple(range(3, layers, 4)),
        "num_attention_heads": heads[0],
        "num_key_value_heads": heads[1],
        "head_dim": 256,
        "linear_num_key_heads": linear[0],
        "linear_num_value_heads": linear[1],
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "attn_output_gate": True,
        "mamba_ssm_dtype": "float32",
        "mtp_num_hidden_layers": 1,
        "vocab_size": 248320,
        "tie_word_embeddings": tied,
    }


def _granite(
    hidden: int,
    ffn: tuple[int, int],
    layers: int,
    attention_at: tuple[int, ...],
    heads: tuple[int, int],
    mamba: tuple[int, int],
    experts: tuple[int, int] = (0, 0),
) -> dict[str, Any]:
    """A Granite-4.0-H config's cost-model fields (the family shares the rest)."""
    return {
        "hidden_size": hidden,
        "intermediate_size": ffn[0],
        "shared_intermediate_size": ffn[1],
        "num_hidden_layers": layers,
        "attention_at": attention_at,
        "num_attention_heads": heads[0],
        "num_key_value_heads": heads[1],
        "mamba_n_heads": mamba[0],
        "mamba_d_head": mamba[1],
        "mamba_d_state": 128,
        "mamba_n_groups": 1,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
        "num_local_experts": experts[0],
        "num_experts_per_tok": experts[1],
        "vocab_size": 100352,
        "tie_word_embeddings": True,
    }


# Transcribed from the files SOURCES names, not from the registry entries.
PUBLISHED = {
    "Qwen/Qwen3.5-0.8B": _qwen(1024, 3584, 24, (8, 2), (16, 16), tied=True),
    "Qwen/Qwen3.5-2B": _qwen(2048, 6144, 24, (8, 2), (16, 16), tied=True),
    "Qwen/Qwen3.5-4B": _qwen(2560, 9216, 32, (16, 4), (16, 32), tied=True),
    "Qwen/Qwen3.5-9B": _qwen(4096, 12288, 32, (16, 4), (16, 32), tied=False),
    "ibm-granite/granite-4.0-h-tiny": _granite(
        1536, (512, 1024), 40, (5, 15, 25, 35), (12, 4), (48, 64), experts=(64, 6)
    ),
    "ibm-granite/granite-4.0-h-micro": _granite(
        2048, (8192, 8192), 40, (5, 15, 25, 35), (32, 8), (64, 64)
    ),
    "ibm-granite/granite-4.0-h-1b": _granite(
        1536, (4096, 4096), 40, (5, 15, 25, 35), (12, 4), (48, 64)
    ),
    "ibm-granite/granite-4.0-h-350m": _granite(
        768, (2048, 2048), 32, (10, 13, 17, 27), (12, 4), (48, 32)
    ),
}


def _cost_model_fields(config: dict[str, Any]) -> dict[str, Any]:
    """The fields PUBLISHED names, read as the readers do: text_config first, then the top."""
    text = config.get("text_config", config)
    fields = {**config, **text}
    kinds = fields["layer_types"]
    fields["attention_at"] = tuple(
        i for i, kind in enumerate(kinds) if kind in ("attention", "full_attention")
    )
    return fields


def _with_hidden_size(model_id: str, factor: float) -> ModelSpec:
    """The entry's spec with its hidden size scaled: what a wrong transcription would give."""
    config = copy.deepcopy(registry()[model_id].config)
    text = config.get("text_config", config)
    text["hidden_size"] = int(text["hidden_size"] * factor)
    return from_hf_config(config, name=model_id, built_in="bfloat16")


@pytest.mark.parametrize(("model_id", "published"), PUBLISHED.items())
def test_an_entry_holds_its_published_config(model_id: str, published: dict[str, Any]) -> None:
    assert_holds_published(model_id, published, _cost_model_fields)


@pytest.mark.parametrize(("model_id", "source"), SOURCES.items())
def test_a_published_config_cites_the_verbatim_copy_it_was_read_from(
    model_id: str, source: str
) -> None:
    assert_cites_verbatim_copy(model_id, source)


@pytest.mark.parametrize(("model_id", "elements"), QWEN_TEXT_ELEMENTS.items())
def test_a_qwen_entry_holds_its_checkpoints_text_parameters(model_id: str, elements: int) -> None:
    spec = load_model(model_id)
    assert spec.total_params == pytest.approx(elements, rel=NORMS_LEFT_OUT)
    assert _with_hidden_size(model_id, 1.25).total_params != pytest.approx(
        elements, rel=NORMS_LEFT_OUT
    )


@pytest.mark.parametrize(("model_id", "ranges"), GRANITE_TABLE.items())
def test_a_granite_entry_holds_the_parameters_of_ibms_table(
    model_id: str, ranges: tuple[tuple[float, float], tuple[float, float]]
) -> None:
    (total_low, total_high), (active_low, active_high) = ranges
    spec = load_model(model_id)
    assert total_low <= spec.total_params < total_high
    assert active_low <= spec.active_params < active_high
    wrong = _with_hidden_size(model_id, 1.25).total_params
    assert not total_low <= wrong < total_high


@pytest.mark.parametrize(("model_id", "kinds"), LAYER_KINDS.items())
def test_an_entry_has_the_layer_kinds_its_source_states(
    model_id: str, kinds: tuple[int, int]
) -> None:
    spec = load_model(model_id)
    assert (spec.ssm_layers, spec.attention_layers) == kinds
    assert spec.is_hybrid


@pytest.mark.parametrize("model_id", [*QWEN_TEXT_ELEMENTS, *GRANITE_TABLE])
def test_an_entry_cites_the_repository_and_commit_its_figures_come_from(model_id: str) -> None:
    notes = " ".join(registry()[model_id].notes)
    assert CITATION.search(notes), notes
