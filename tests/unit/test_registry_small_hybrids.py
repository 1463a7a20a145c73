"""The small hybrid sizes in the registry (Qwen3.5 0.8B-9B, Granite-4.0-H Micro/Tiny/1B/350M)
hold the parameters and layer kinds their sources state.

The Qwen3.5 figures are the element counts of each checkpoint's text tensors as its GGUF
listing gives them (Thireus/GGUF-Tool-Suite@384c1f85, models/Qwen3.5-*/group0/tensors.bf16.map,
summed); the reader leaves out only the norms, well under 0.1%. The Granite figures are IBM's
model-card table ("# Parameters", "# Active parameters"), each read as the interval that
rounds to the printed figure.
"""

from __future__ import annotations

import copy
import re

import pytest

from autotuner.core.model.hf_config import from_hf_config
from autotuner.core.model.registry import load_model, registry
from autotuner.core.model.spec import ModelSpec

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


def _with_hidden_size(model_id: str, factor: float) -> ModelSpec:
    """The entry's spec with its hidden size scaled: what a wrong transcription would give."""
    config = copy.deepcopy(registry()[model_id].config)
    text = config.get("text_config", config)
    text["hidden_size"] = int(text["hidden_size"] * factor)
    return from_hf_config(config, name=model_id, built_in="bfloat16")


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
