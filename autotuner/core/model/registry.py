"""Built-in models (data files keyed by Hugging Face id) and the one loader the CLI uses.

`load_model` accepts a registry id (with or without a precision suffix such as -FP8), a path
to a config.json, or a model directory that holds one. An NVIDIA ModelOpt checkpoint keeps its
weight format in an `hf_quant_config.json` beside config.json: it is read as well.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, TypedDict

from autotuner.core.model.draft import DraftModel
from autotuner.core.model.hf_config import from_hf_config
from autotuner.core.model.spec import ModelSpec
from autotuner.errors import ModelConfigError


class Options(TypedDict, total=False):
    """What a caller may say beyond the files: from_hf_config's keyword arguments."""

    weights: str | None
    ssm_state_dtype: str | None
    mamba_cache_dtype: str | None


@dataclass(frozen=True)
class RegistryEntry:
    id: str
    default_variant: str
    variants: dict[str, dict[str, str]]
    notes: tuple[str, ...]
    config: dict[str, Any]

    def spec(self, variant: str | None = None, options: Options | None = None) -> ModelSpec:
        """The variant's spec; `options` are load_model's weights / dtype arguments."""
        chosen = variant or self.default_variant
        details = self.variants[chosen]
        spec = from_hf_config(
            self.config,
            name=details.get("hf_id", self.id),
            built_in=details["weight_dtype"],
            quantization_source=f"built-in variant {chosen}",
            **(options or Options()),
        )
        return spec.model_copy(update={"notes": (*self.notes, *spec.notes)})

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
    folder = resources.files("autotuner.core.model") / "data" / "models"
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


def load_model(
    id_or_path: str,
    *,
    weights: str | None = None,
    ssm_state_dtype: str | None = None,
    mamba_cache_dtype: str | None = None,
) -> ModelSpec:
    """Resolve a registry id, a config.json path or a model directory into a ModelSpec.

    `weights` (bf16, fp8, nvfp4, ...) overrides the format the files or the variant give, and the
    spec's notes say so. `ssm_state_dtype` / `mamba_cache_dtype` are the deployment's
    `--mamba-ssm-cache-dtype` / `--mamba-cache-dtype` when known (None or `auto`: vLLM's default).
    """
    options = Options(
        weights=weights, ssm_state_dtype=ssm_state_dtype, mamba_cache_dtype=mamba_cache_dtype
    )
    path = Path(id_or_path)
    if path.is_dir():
        path = path / "config.json"
        if not path.is_file():
            raise ModelConfigError(f"{id_or_path}: directory has no config.json")
    if path.is_file():
        raw = _read_json(path)
        quant = _hf_quant_config(path.parent / HF_QUANT_CONFIG)
        return from_hf_config(raw, name=str(id_or_path), quantization=quant, **options)
    wanted = id_or_path.strip().lower()
    for entry in registry().values():
        names = entry.names()
        bare = {n.split("/", 1)[-1]: v for n, v in names.items()}
        for table in (names, bare):
            if wanted in table:
                return entry.spec(table[wanted], options)
    if path.is_absolute() or id_or_path.startswith((".", "~")):
        raise ModelConfigError(f"{id_or_path}: no such config.json or model directory")
    raise ModelConfigError(
        f"unknown model {id_or_path!r}: not a file, not a directory with config.json, and not "
        f"a built-in id. For any other model give the path of its config.json or of its model "
        f"directory (e.g. /models/{id_or_path.rsplit('/', 1)[-1]}/config.json, or the mounted "
        f"directory itself). Built-in: {', '.join(known_models())}"
    )


def load_draft_model(id_or_path: str) -> DraftModel:
    """A separate draft model (`method: draft_model`) sized from its own config.json: a path, a
    model directory or a built-in id, as `load_model` takes; ModelConfigError otherwise."""
    return DraftModel.of(load_model(id_or_path))


HF_QUANT_CONFIG = "hf_quant_config.json"


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelConfigError(f"{path}: not a readable JSON file ({exc})") from None


def _hf_quant_config(path: Path) -> dict[str, Any] | None:
    """The `quantization` object of a ModelOpt hf_quant_config.json, None when there is none."""
    if not path.is_file():
        return None
    raw = _read_json(path)
    quant = raw.get("quantization") if isinstance(raw, dict) else None
    if not isinstance(quant, dict):
        raise ModelConfigError(
            f"{path}: no 'quantization' object (ModelOpt writes "
            '{"producer": {...}, "quantization": {"quant_algo": ...}})'
        )
    return quant
