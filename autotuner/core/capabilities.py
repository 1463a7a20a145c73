"""What a vLLM build accepts (VLLM.md, "Flags the autotuner manages"): the model predicts every
setup, the policy proposes only the ones the running engine can run."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

from autotuner.core.types import Setup, SetupKind


class EngineCapabilities(BaseModel):
    """The setup combinations one vLLM build accepts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(
        description="The build's name (in settings: the preset the fields start from)."
    )
    speculation: bool = Field(True, description="--speculative-config is accepted.")
    replay: bool = Field(True, description="--use-replayssm exists (PR #48018).")
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
        if kind is SetupKind.REPLAY_SPEC and not self.replay_with_speculation:
            return f"{self.name}: --use-replayssm does not support speculative decoding"
        if setup.schedule and not self.spec_schedule:
            return f"{self.name}: no num_speculative_tokens_per_batch_size"
        if setup.adaptive and not self.adaptive_verification:
            return f"{self.name}: no enable_adaptive_verification (PR #47808)"
        return None

    def accepts(self, setup: Setup) -> bool:
        return self.refusal(setup) is None

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
REPLAY_SPEC = EngineCapabilities(name="replay-spec", replay_with_speculation=True)
PRESETS = {c.name: c for c in (UPSTREAM, REPLAY_SPEC)}
