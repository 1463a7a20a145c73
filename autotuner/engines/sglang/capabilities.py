"""What each SGLang build accepts: the presets an operator names in `engine.capabilities`.

`build` (the default) follows the capability table (builds.yaml). SGLang has no per-batch K
schedule; its `--speculative-adaptive` (K tiers by batch, K = 0 among them) is the adaptive
setup."""

from __future__ import annotations

from autotuner.core.engine.capabilities import BUILD, EngineCapabilities
from autotuner.core.model.spec import SsmKind
from autotuner.engines.sglang.builds import build_in_force
from autotuner.engines.sglang.setup import ADAPTIVE_STEPS

FOLLOW_BUILD = EngineCapabilities(
    name=BUILD,
    replay_with_speculation=True,
    replay_families=(SsmKind.GATED_DELTANET,),
    spec_schedule=False,
    adaptive_verification=True,
    adaptive_spec_tokens=tuple(sorted(k for k in ADAPTIVE_STEPS if k)),
    build=build_in_force(),
)
PRESETS = {c.name: c for c in (FOLLOW_BUILD,)}
