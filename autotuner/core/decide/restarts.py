"""What a restart into a setup costs: learned per setup from the rollouts the tuner watches
(patch to ready), with the first start of a configuration vLLM has not compiled charged apart.

vLLM's compile cache key (`VllmConfig.compute_hash`) holds `use_replayssm` and the window L,
through the default CUDA-graph capture sizes (multiples of the uniform decode query length
1 + K) the draft length K, and on a hybrid whether prefix caching is on (through the derived
`mamba_cache_mode` and `mamba_block_size`; docs/engine-rules.md): a restart into a
(replay, L, K, prefix caching) the engine has run before reuses the cache, the first one
compiles and captures anew. A K schedule captures for its largest K, so schedules with one
ceiling share a key. Persisted in the TunerState.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from autotuner.core.decide.settings import RestartSettings
from autotuner.core.types import Setup

LEARNING_RATE_FLOOR = 0.3  # after a few restarts each new one moves the mean by this share
MAX_KEYS = 64  # compile keys remembered (each is a few bytes; a long life sees few)


def compile_key(setup: Setup, *, prefix_caching: bool) -> str:
    """What vLLM's compile cache is keyed on among the flags the tuner writes (`prefix_caching`:
    whether the engine keeps prefix caching under `setup`, as the build's companions say)."""
    cache = "prefix" if prefix_caching else "no-prefix"
    return f"replay{setup.replay_window}/q{1 + setup.spec_tokens}/{cache}"


class Duration(BaseModel):
    """A running mean of measured seconds (the latest weigh at least LEARNING_RATE_FLOOR)."""

    model_config = ConfigDict(frozen=True)

    seconds: float
    count: int = 1

    def adding(self, seconds: float) -> Duration:
        rate = max(1.0 / (self.count + 1), LEARNING_RATE_FLOOR)
        return Duration(
            seconds=self.seconds + rate * (seconds - self.seconds), count=self.count + 1
        )

    def capped(self, seconds: float) -> Duration:
        """A restart shorter than one loop step: known only to be at most `seconds`."""
        return self if self.seconds <= seconds else Duration(seconds=seconds, count=self.count)


class RestartCosts(BaseModel):
    """Restart durations learned per setup (restarts into a compiled configuration), what a
    first compile adds, and the compile keys the engine has run."""

    model_config = ConfigDict(frozen=True)

    cached: dict[str, Duration] = {}  # setup label -> patch-to-ready seconds
    first_compile: Duration | None = None  # seconds a first start adds to a cached one
    compiled: tuple[str, ...] = ()

    def expected_s(self, setup: Setup, settings: RestartSettings, *, prefix_caching: bool) -> float:
        """Seconds from patch to ready for a restart into `setup` now."""
        first = self.compile_s(setup, settings, prefix_caching=prefix_caching)
        return self.cached_s(setup, settings) + first

    def cached_s(self, setup: Setup, settings: RestartSettings) -> float:
        known = self.cached.get(setup.label)
        if known is not None:
            return known.seconds
        if self.cached:  # another setup's restarts say more than the default
            return sum(d.seconds for d in self.cached.values()) / len(self.cached)
        return settings.downtime_s

    def compile_s(self, setup: Setup, settings: RestartSettings, *, prefix_caching: bool) -> float:
        if compile_key(setup, prefix_caching=prefix_caching) in self.compiled:
            return 0.0
        return self.first_compile.seconds if self.first_compile else settings.first_compile_s

    def seen_running(self, setup: Setup, *, prefix_caching: bool) -> RestartCosts:
        key = compile_key(setup, prefix_caching=prefix_caching)
        if key in self.compiled:
            return self
        return self.model_copy(update={"compiled": (*self.compiled, key)[-MAX_KEYS:]})

    def measured(
        self,
        setup: Setup,
        seconds: float,
        first_start: bool,
        settings: RestartSettings,
        *,
        prefix_caching: bool,
    ) -> RestartCosts:
        """A restart into `setup` took `seconds` from patch to ready."""
        if first_start:
            extra = max(seconds - self.cached_s(setup, settings), 0.0)
            learned = (
                self.first_compile.adding(extra) if self.first_compile else Duration(seconds=extra)
            )
            learnt = self.model_copy(update={"first_compile": learned})
            return learnt.seen_running(setup, prefix_caching=prefix_caching)
        known = self.cached.get(setup.label)
        duration = known.adding(seconds) if known else Duration(seconds=seconds)
        return self.model_copy(update={"cached": {**self.cached, setup.label: duration}})

    def at_most(self, setup: Setup, seconds: float, *, prefix_caching: bool) -> RestartCosts:
        """A restart into `setup` was ready within `seconds` (the first step after it already
        saw it serving): a learned duration longer than that is brought down to it."""
        known = self.cached.get(setup.label)
        if known is None or known.seconds <= seconds:
            return self.seen_running(setup, prefix_caching=prefix_caching)
        cached = {**self.cached, setup.label: known.capped(seconds)}
        capped = self.model_copy(update={"cached": cached})
        return capped.seen_running(setup, prefix_caching=prefix_caching)
