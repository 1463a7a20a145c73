"""What each vLLM build accepts: the presets an operator names in `engine.capabilities`.

`build` (the default) follows the capability table (builds.yaml): the row of the build the
engine runs decides replay, with the table's default version until the engine's is read. The
others are declarations that override the table (a fork with other kernels)."""

from __future__ import annotations

from autotuner.core.engine.capabilities import BUILD, EngineCapabilities
from autotuner.core.model.spec import SsmKind
from autotuner.engines.vllm.builds import TABLE

FOLLOW_BUILD = EngineCapabilities(
    name=BUILD,
    replay_with_speculation=True,
    replay_families=(SsmKind.MAMBA2,),
    schedule_runner_rules=True,
    build=TABLE.build_in_force(),
)
UPSTREAM = EngineCapabilities(name="upstream", schedule_runner_rules=True)
# Upstream plus the Gated DeltaNet ReplaySSM kernels (PR #48792): replay or speculation, not
# both; for a Mamba-2 model the same as upstream.
GDN_REPLAY = EngineCapabilities(
    name="gdn-replay",
    replay_families=(SsmKind.MAMBA2, SsmKind.GATED_DELTANET),
    schedule_runner_rules=True,
)
# The builds with speculative ReplaySSM (PR #49847 for Mamba-2, #49887 for Gated DeltaNet).
REPLAY_SPEC = EngineCapabilities(
    name="replay-spec",
    replay_with_speculation=True,
    replay_families=(SsmKind.MAMBA2, SsmKind.GATED_DELTANET),
    schedule_runner_rules=True,
)
PRESETS = {c.name: c for c in (FOLLOW_BUILD, UPSTREAM, GDN_REPLAY, REPLAY_SPEC)}
