"""What the pure-policy tests share: the hybrid they decide for, its GPU, an engine without K
schedules, and grouped policy settings changed by group and field."""

from __future__ import annotations

from collections.abc import Mapping

from autotuner.core.decide.settings import PolicySettings
from autotuner.core.engine.capabilities import EngineCapabilities
from autotuner.core.model.registry import load_model
from autotuner.core.predict.hardware import datasheet

MODEL = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4")
H200 = datasheet("H200")
STATIC_K = EngineCapabilities(name="static-k", spec_schedule=False)


def policy_settings(
    base: PolicySettings | None = None, /, **groups: Mapping[str, object]
) -> PolicySettings:
    """`base` (default: the defaults) with some fields of some groups changed, validated:
    `policy_settings(OPEN, switch={"dwell_s": 0})`. A misspelt group or field is an error
    (`model_copy(update=...)` would take it silently)."""
    tree = (base or PolicySettings()).model_dump()
    for group, fields in groups.items():
        tree[group] = {**tree.get(group, {}), **fields}
    return PolicySettings.model_validate(tree)
