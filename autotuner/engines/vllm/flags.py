"""vLLM's spelling of each flag the tuner manages, overridable in settings (`engine.flags`)."""

from __future__ import annotations

from pydantic import Field

from autotuner.core.group import Group


class FlagNames(Group):
    """The spelling of each managed flag in one vLLM version range (overridable in settings)."""

    speculative_config: str = Field(
        "--speculative-config", description="Takes the drafter's JSON config (K among it)."
    )
    use_replayssm: str = Field("--use-replayssm", description="Turns ReplaySSM on.")
    replayssm_buffer_len: str = Field(
        "--replayssm-buffer-len", description="Takes the replay window L."
    )
    mamba_ssm_cache_dtype: str = Field(
        "--mamba-ssm-cache-dtype", description="Takes the SSM state's dtype."
    )

    @property
    def managed(self) -> tuple[str, ...]:
        """The flags a setup writes: where they stand in a container, vLLM's args are."""
        return (self.speculative_config, self.use_replayssm, self.replayssm_buffer_len)
