"""What each SGLang build accepts: the presets an operator names in `engine.capabilities`.

`build` (the default) follows the capability table (builds.yaml). SGLang has no per-batch K
schedule; its `--speculative-adaptive` (K tiers by batch, K = 0 among them) is the adaptive
setup, priced as those tiers."""

from __future__ import annotations

from autotuner.core.engine.capabilities import BUILD, AdaptiveTier, EngineCapabilities
from autotuner.core.model.spec import SsmKind
from autotuner.engines.sglang.builds import TABLE
from autotuner.engines.sglang.setup import ADAPTIVE_STEPS, ADAPTIVE_TIERS

FOLLOW_BUILD = EngineCapabilities(
    name=BUILD,
    replay_with_speculation=True,
    replay_families=(SsmKind.GATED_DELTANET,),
    spec_schedule=False,
    adaptive_verification=True,
    adaptive_spec_tokens=tuple(sorted(k for k in ADAPTIVE_STEPS if k)),
    adaptive_tiers=tuple(
        AdaptiveTier(start_batch=b, candidates=k) for b, k in ADAPTIVE_TIERS.items()
    ),
    # Under speculation Gated DeltaNet verifies through a ring of the draft maximum
    # (layers/attention/linear/gdn_backend.py; exec_.py:586-591), KDA keeps the written one.
    draft_window_families=(SsmKind.GATED_DELTANET,),
    replay_with_kv_connector=True,  # ENGINES.md: allowed (a PD prefill server refuses the flag)
    build=TABLE.build_in_force(),
)
PRESETS = {c.name: c for c in (FOLLOW_BUILD,)}
