"""The workload as served, from the engine's own histograms: prompt and generation tokens per
finished request (vLLM's request_prompt_tokens / request_generation_tokens, SGLang's
prompt_tokens_histogram / generation_tokens_histogram), the prefix cache's hit rate, and the
request rate (the generation rate over the tokens a request generates)."""

from __future__ import annotations

from dataclasses import dataclass

from autotuner.core.engine.workload import PrefixCacheReading
from autotuner.core.types import Observation


@dataclass(frozen=True)
class ServedWorkload:
    prompt_tokens: float
    generation_tokens: float
    hit_rate: float | None  # None: the engine looked nothing up (or does not say)
    requests_per_s: float | None

    @property
    def prompt_per_output_token(self) -> float:
        """P / G: prompt tokens per token generated."""
        return self.prompt_tokens / self.generation_tokens

    def describe(self) -> str:
        cached = "hit rate unknown" if self.hit_rate is None else f"{self.hit_rate:.0%} cached"
        rate = "" if self.requests_per_s is None else f", {self.requests_per_s:,.2f} requests/s"
        return (
            f"workload: {self.prompt_tokens:,.0f} prompt and {self.generation_tokens:,.0f} "
            f"output tokens per request (P/G {self.prompt_per_output_token:.1f}, {cached}){rate}"
        )


def served_workload(observation: Observation) -> ServedWorkload | None:
    """The window's workload, or None when it finished no request (no lengths to read)."""
    prompt, generated = observation.mean_prompt_tokens, observation.mean_generation_tokens
    if not observation.usable or not prompt or not generated:
        return None
    produced = observation.generation_tokens_per_s
    return ServedWorkload(
        prompt_tokens=prompt,
        generation_tokens=generated,
        hit_rate=observation.prefix_cache_hit_rate,
        requests_per_s=None if produced is None else produced / generated,
    )


def workload_reading(
    observation: Observation, previous: PrefixCacheReading | None
) -> PrefixCacheReading | None:
    """What the live loop prices prefill with: the window's request lengths, and its hit rate,
    else the last hit rate read (a setup without prefix caching looks nothing up), else none
    (0: every prompt token counted fresh, nothing charged for turning the cache off)."""
    served = served_workload(observation)
    if served is None:
        return previous
    if served.hit_rate is not None:
        looked_up = observation.prefix_cache_queried_tokens or 0.0
        hit_rate = served.hit_rate
    elif previous is not None:
        hit_rate, looked_up = previous.hit_rate, previous.looked_up_tokens
    else:
        hit_rate, looked_up = 0.0, 0.0
    return PrefixCacheReading(
        hit_rate=hit_rate,
        prompt_tokens=served.prompt_tokens,
        generation_tokens=served.generation_tokens,
        looked_up_tokens=looked_up,
    )
