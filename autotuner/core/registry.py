"""Built-in models (data files keyed by Hugging Face id) and the one loader the CLI uses.

`load_model` accepts a registry id (with or without a precision suffix such as -FP8), a path
to a config.json, or a model directory that holds one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from autotuner.core.hf_config import from_hf_config
from autotuner.core.model import ModelSpec
from autotuner.errors import ModelConfigError


@dataclass(frozen=True)
class RegistryEntry:
    id: str
    default_variant: str
    variants: dict[str, dict[str, str]]
    notes: tuple[str, ...]
    config: dict[str, Any]

    def spec(self, variant: str | None = None) -> ModelSpec:
        chosen = variant or self.default_variant
        details = self.variants[chosen]
        spec = from_hf_config(
            self.config, name=details.get("hf_id", self.id), weight_dtype=details["weight_dtype"]
        )
        return spec.model_copy(update={"notes": self.notes})

    def names(self) -> dict[str, str | None]:
        """Every accepted spelling (lower case) -> the variant it selects (None: default)."""
        names: dict[str, str | None] = {self.id.lower(): None}
        for variant, details in self.variants.items():
            names[f"{self.id}-{variant}".lower()] = variant
            names[details.get("hf_id", self.id).lower()] = names.get(
                details.get("hf_id", self.id).lower(), variant
            )
        return names


@cache
def registry() -> dict[str, RegistryEntry]:
    entries: dict[str, RegistryEntry] = {}
    folder = resources.files("autotuner.core") / "data" / "models"
    for item in sorted(folder.iterdir(), key=lambda p: p.name):
        if not item.name.endswith(".json"):
            continue
        raw = json.loads(item.read_text(encoding="utf-8"))
        entries[raw["id"]] = RegistryEntry(
            id=raw["id"],
            default_variant=raw["default_variant"],
            variants=raw["variants"],
            notes=tuple(raw.get("notes", ())),
            config=raw["config"],
        )
    return entries


def known_models() -> list[str]:
    """Every registry id with its variants, for help texts and errors."""
    names: list[str] = []
    for entry in registry().values():
        names.append(entry.id)
        names.extend(f"{entry.id}-{variant}" for variant in entry.variants)
    return names


def load_model(id_or_path: str, *, ssm_state_dtype: str | None = None) -> ModelSpec:
    """Resolve a registry id, a config.json path or a model directory into a ModelSpec."""
    path = Path(id_or_path)
    if path.is_dir():
        path = path / "config.json"
        if not path.is_file():
            raise ModelConfigError(f"{id_or_path}: directory has no config.json")
    if path.is_file():
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ModelConfigError(f"{path}: not a readable JSON file ({exc})") from None
        return from_hf_config(raw, name=str(id_or_path), ssm_state_dtype=ssm_state_dtype)
    wanted = id_or_path.strip().lower()
    for entry in registry().values():
        names = entry.names()
        bare = {n.split("/", 1)[-1]: v for n, v in names.items()}
        for table in (names, bare):
            if wanted in table:
                spec = entry.spec(table[wanted])
                if ssm_state_dtype:
                    spec = spec.model_copy(update={"ssm_state_dtype": ssm_state_dtype})
                return spec
    raise ModelConfigError(
        f"unknown model {id_or_path!r}: not a file, not a directory with config.json, and not "
        f"a built-in id. Built-in: {', '.join(known_models())}"
    )
