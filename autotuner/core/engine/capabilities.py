"""What a vLLM build accepts (VLLM.md, "Flags the autotuner manages"): the model predicts every
setup, the policy proposes only the ones the running engine can run.

Capabilities start from settings (a preset with fields changed) and are narrowed or widened by
what the engine itself shows: the served model's SSM family (`--use-replayssm` means ReplaySSM
only for the families the build has kernels for), the labels of `vllm:cache_config_info` (a build
without a `use_replayssm` label predates ReplaySSM), the setup it runs (it started with it) and
the restarts it refused."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field, field_validator

from autotuner.core.model.spec import ModelSpec, SsmKind
from autotuner.core.types import LiveSetup, Setup, SetupKind


class EngineCapabilities(BaseModel):
    """The setup combinations one vLLM build accepts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(
        description="The build's name (in settings: the preset the fields start from)."
    )
    speculation: bool = Field(True, description="--speculative-config is accepted.")
    replay: bool = Field(True, description="--use-replayssm exists (PR #48018).")
    replay_families: tuple[str, ...] = Field(
        (SsmKind.MAMBA2.value,),
        description="SSM families whose ReplaySSM kernels the build has: upstream, Mamba-2 "
        "standard decode (PR #48018); gated_deltanet (Qwen3.5 / Qwen3-Next) needs a build with "
        "its kernels (PRs #48792, #49887, forks).",
    )
    served_family: str | None = Field(
        None,
        description="The served model's SSM family, set from the model (not a setting): replay "
        "is refused where the build's kernels do not cover it.",
    )
    replay_with_speculation: bool = Field(
        False, description="ReplaySSM together with speculation (PR #49847/#49887 builds)."
    )
    spec_schedule: bool = Field(
        True, description="num_speculative_tokens_per_batch_size (Dynamic SD, PR #32374)."
    )
    adaptive_verification: bool = Field(
        False,
        description="enable_adaptive_verification in --speculative-config (PR #47808, builds "
        "from 2026-08): the engine verifies per step the drafts its cost profile and "
        "confidence favour, K being the ceiling.",
    )
    max_spec_tokens: int = Field(8, ge=0, le=16, description="Largest K the drafter allows.")

    @field_validator("replay_families")
    @classmethod
    def _known_families(cls, families: tuple[str, ...]) -> tuple[str, ...]:
        known = [k.value for k in SsmKind]
        unknown = [f for f in families if f not in known]
        if unknown:
            raise ValueError(f"unknown SSM families {unknown}; known: {', '.join(known)}")
        return families

    def refusal(self, setup: Setup) -> str | None:
        """Why this engine would refuse the setup, or None when it accepts it."""
        kind = setup.kind
        if setup.spec_tokens and not self.speculation:
            return f"{self.name}: speculative decoding is not available"
        if setup.spec_tokens > self.max_spec_tokens:
            return (
                f"{self.name}: K={setup.spec_tokens} exceeds the drafter's {self.max_spec_tokens}"
            )
        if setup.replay_window and not self.replay:
            return f"{self.name}: this build has no --use-replayssm"
        if setup.replay_window and self.served_family not in (None, *self.replay_families):
            return (
                f"{self.name}: --use-replayssm has {', '.join(self.replay_families)} kernels "
                f"here, not {self.served_family} (a build with them: engine.capabilities."
                "replay_families)"
            )
        if kind is SetupKind.REPLAY_SPEC and not self.replay_with_speculation:
            return f"{self.name}: --use-replayssm does not support speculative decoding"
        if setup.schedule and not self.spec_schedule:
            return f"{self.name}: no num_speculative_tokens_per_batch_size"
        if setup.adaptive and not self.adaptive_verification:
            return f"{self.name}: no enable_adaptive_verification (PR #47808)"
        return None

    def accepts(self, setup: Setup) -> bool:
        return self.refusal(setup) is None

    def serving(self, model: ModelSpec) -> EngineCapabilities:
        """These capabilities for this model (its SSM family decides what replay means)."""
        return self.model_copy(
            update={"served_family": model.ssm.kind.value if model.ssm else None}
        )

    def shown_by(self, live: LiveSetup | None) -> EngineCapabilities:
        """Narrowed by what the engine's own metrics say: a `vllm:cache_config_info` without a
        `use_replayssm` label (its labels are the build's CacheConfig fields) is a build that
        predates ReplaySSM."""
        if live and live.cache_config_read and live.replay is None and self.replay:
            return self.model_copy(update={"replay": False, "replay_with_speculation": False})
        return self

    def proven_by(self, running: Setup | None) -> EngineCapabilities:
        """These capabilities with what the running setup shows the build accepts (the engine
        started with it): its schedule, adaptive verification, replay with speculation."""
        if running is None:
            return self
        shown = {
            "speculation": bool(running.spec_tokens),
            "replay": bool(running.replay_window),
            "replay_with_speculation": running.kind is SetupKind.REPLAY_SPEC,
            "spec_schedule": bool(running.schedule),
            "adaptive_verification": running.adaptive,
        }
        update: dict[str, object] = {name: True for name, shown_on in shown.items() if shown_on}
        if running.spec_tokens > self.max_spec_tokens:
            update["max_spec_tokens"] = running.spec_tokens
        if running.replay_window and self.served_family not in (None, *self.replay_families):
            update["replay_families"] = (*self.replay_families, self.served_family)
        return self.model_copy(update=update) if update else self

    def without(self, refused: Iterable[str]) -> EngineCapabilities:
        """These capabilities turned off (the running engine refused them)."""
        return self.model_copy(update={name: False for name in refused if name in FEATURES})


FEATURES = (
    "speculation",
    "replay",
    "replay_with_speculation",
    "spec_schedule",
    "adaptive_verification",
)


def needed(target: Setup, previous: Setup) -> str | None:
    """The capability `target` uses that `previous` did not: what a failed change to it says
    the engine may not have."""
    if target.schedule and not previous.schedule:
        return "spec_schedule"
    if target.adaptive and not previous.adaptive:
        return "adaptive_verification"
    if target.kind is SetupKind.REPLAY_SPEC and previous.kind is not SetupKind.REPLAY_SPEC:
        return "replay_with_speculation"
    if target.replay_window and not previous.replay_window:
        return "replay"
    if target.spec_tokens and not previous.spec_tokens:
        return "speculation"
    return None


UPSTREAM = EngineCapabilities(name="upstream")
# Upstream plus the Gated DeltaNet ReplaySSM kernels (PR #48792): replay or speculation, not
# both; for a Mamba-2 model the same as upstream.
GDN_REPLAY = EngineCapabilities(
    name="gdn-replay", replay_families=(SsmKind.MAMBA2.value, SsmKind.GATED_DELTANET.value)
)
# The builds with speculative ReplaySSM (PR #49847 for Mamba-2, #49887 for Gated DeltaNet).
REPLAY_SPEC = EngineCapabilities(
    name="replay-spec",
    replay_with_speculation=True,
    replay_families=(SsmKind.MAMBA2.value, SsmKind.GATED_DELTANET.value),
)
PRESETS = {c.name: c for c in (UPSTREAM, GDN_REPLAY, REPLAY_SPEC)}
