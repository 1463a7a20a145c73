"""The hybrid models people serve, built in from their published config.json; any other model
by the path of its config.json or model directory, named in the error."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autotuner.core.model.registry import load_model, registry
from autotuner.errors import ModelConfigError

CONFIGS = Path("/work/shared/fixtures/configs")
BUILT_IN_FROM_FIXTURES = {
    "Qwen/Qwen3.5-27B": "qwen3.5-27b.config.json",
    "Qwen/Qwen3.5-35B-A3B": "qwen3.5-35b-a3b.config.json",
    "Qwen/Qwen3.5-122B-A10B": "qwen3.5-122b-a10b.config.json",
    "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B": "nemotron-3-ultra-550b-a55b-bf16.config.json",
}
HYBRIDS = (
    "Qwen/Qwen3.5-27B",
    "Qwen/Qwen3.5-35B-A3B",
    "Qwen/Qwen3.5-122B-A10B",
    "Qwen/Qwen3.5-397B-A17B",
    "Qwen/Qwen3-Next-80B-A3B-Instruct",
    "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B",
    "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B",
    "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B",
    "ibm-granite/granite-4.0-h-small",
    "tiiuae/Falcon-H1-0.5B-Instruct",
)


@pytest.mark.parametrize("model_id", HYBRIDS)
def test_the_served_hybrids_are_built_in_and_cite_their_source(model_id: str) -> None:
    spec = load_model(model_id)
    assert spec.is_hybrid
    assert spec.weight_bytes > 0
    entry = registry()[model_id]
    assert any("config" in note for note in entry.notes)


@pytest.mark.parametrize(("model_id", "fixture"), BUILT_IN_FROM_FIXTURES.items())
def test_a_built_in_entry_is_its_published_config(model_id: str, fixture: str) -> None:
    if not (CONFIGS / fixture).is_file():
        pytest.skip("the shared fixtures are not mounted")
    built_in, published = load_model(model_id), load_model(str(CONFIGS / fixture))
    assert built_in.weight_bytes == published.weight_bytes
    assert built_in.kv_bytes_per_token == published.kv_bytes_per_token
    assert built_in.ssm_layers == published.ssm_layers


def test_the_quantized_variants_shrink_the_weights() -> None:
    bf16 = load_model("Qwen/Qwen3.5-397B-A17B").weight_bytes
    assert load_model("Qwen/Qwen3.5-397B-A17B-FP8").weight_bytes < bf16
    assert load_model("Qwen/Qwen3.5-397B-A17B-NVFP4").weight_bytes < 0.5 * bf16


def test_any_other_model_is_asked_for_by_path() -> None:
    with pytest.raises(
        ModelConfigError, match=re.escape("path of its config.json or of its model directory")
    ):
        load_model("someone/Unknown-Hybrid-7B")
    with pytest.raises(ModelConfigError, match=re.escape("/models/Unknown-Hybrid-7B/config.json")):
        load_model("someone/Unknown-Hybrid-7B")
    with pytest.raises(ModelConfigError, match=re.escape("/nowhere/model: no such config.json")):
        load_model("/nowhere/model")
