"""What the pure-policy tests share: the hybrid they decide for, its GPU, an engine without K
schedules, grouped policy settings changed by group and field, and a simulated world on the
cost model's own speeds."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from autotuner.core.decide.settings import PolicySettings
from autotuner.core.engine.capabilities import EngineCapabilities
from autotuner.core.model.registry import load_model
from autotuner.core.predict.hardware import datasheet
from autotuner.core.types import Setup
from autotuner.sim.worlds import Prior, Rates, World, constant_acceptance, model_speed

MODEL = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4")
H200 = datasheet("H200")
STATIC_K = EngineCapabilities(name="static-k", spec_schedule=False)
SPEC3 = Setup(spec_tokens=3)


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


def cost_model_world(
    prior: Prior, demand: Callable[[float], float], rates: Rates, start: Setup = SPEC3
) -> World:
    """A world for `prior` whose step times are the cost model's own (no hidden error), with
    `demand` (requests per engine at time t) and the same acceptance `rates` all along,
    deployed on `start`."""
    return World(
        name="cost-model",
        about="the cost model's own speeds",
        prior=prior,
        speed=model_speed(prior),
        demand=demand,
        acceptance=constant_acceptance(rates),
        start=start,
    )
