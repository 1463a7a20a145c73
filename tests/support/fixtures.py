"""Where the shared fixtures live (../shared/fixtures beside the repository, read-only), and the
model configs more than one test reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
FIXTURES = SHARED / "fixtures"
CONFIGS = FIXTURES / "configs"  # models' config.json files as their publishers ship them


def published_config(name: str) -> dict[str, Any]:
    """A model's config.json as its publisher ships it, by its file name less `.config.json`."""
    config: dict[str, Any] = json.loads((CONFIGS / f"{name}.config.json").read_text())
    return config


def mamba2_config(layers: int, hidden: int, vocab: int, heads: int, state: int) -> dict[str, Any]:
    """A plain Mamba-2 model's config.json: the fields it must have, the rest left to defaults."""
    return {
        "architectures": ["Mamba2ForCausalLM"],
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "vocab_size": vocab,
        "num_heads": heads,
        "state_size": state,
    }
