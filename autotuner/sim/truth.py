"""A simulated engine whose true step times differ from the cost model by a hidden error, and
Observations built from it exactly as a scrape window would be. Used by the policy tests, the
decision-quality benchmark and the demo."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from autotuner.core.engine.workload import Workload
from autotuner.core.model.spec import ModelSpec
from autotuner.core.observe.limits import ObservationLimits
from autotuner.core.observe.observation import Ratio, WindowTotals, build_observation
from autotuner.core.predict.acceptance import from_conditional
from autotuner.core.predict.costmodel import predict
from autotuner.core.predict.hardware import HardwareProfile
from autotuner.core.predict.prefill import keeps_prefix_caching, prefill_cost
from autotuner.core.types import Observation, Setup
from autotuner.sim.engine import BUILD_LABELS

StepError = Callable[[Setup, float], float]


def no_error(setup: Setup, batch: float) -> float:
    return 1.0


def realistic_error(setup: Setup, batch: float) -> float:
    """A plausible model error: state copies run slower than the SSM kernel estimate at large
    batch, replay kernels a little faster, everything a bit slower at tiny batch. Only where
    the setup drafts at this batch: a K schedule's band at K = 0 makes no copies."""
    factor = 1.0 + 0.08 * np.exp(-batch / 8)
    if spec_tokens_at(setup, batch) and not setup.replay_window:
        factor *= 1.0 + 0.10 * min(batch / 256, 1.0)
    if setup.replay_window:
        factor *= 0.95
    return float(factor)


def wrong_prior_error(setup: Setup, batch: float) -> float:
    """A world where the prior's ranking is wrong: speculation steps 30% slower than modelled
    (its draft and verify passes cost more than the model's estimate) and replay 30% faster,
    everything else as realistic_error. For Nemotron-3-Super on an H200 at batch 4-64 the prior
    puts spec:3 20-35% above replay:16 and the truth puts replay:16 40-57% above spec:3.
    Running speculation shows its own error, which brings its calibrated prediction down to
    about replay's (still a little below) and widens replay's interval (the model is far off
    here); replay's 30% shows only when replay runs. The demo holds its load where that happens
    (demo.PLATEAUS): the tuner explores replay there, and keeps it."""
    factor = realistic_error(setup, batch)
    if setup.replay_window:
        return float(factor * 0.70 / 0.95)  # instead of realistic_error's 5%
    if spec_tokens_at(setup, batch):
        factor *= 1.30
    return float(factor)


def spec_tokens_at(setup: Setup, batch: float) -> int:
    """The K `setup` drafts at this batch (a K schedule's band may draft none)."""
    return int(setup.spec_tokens_at([max(round(batch), 1)])[0])


WORLDS: dict[str, StepError] = {"realistic": realistic_error, "wrong-prior": wrong_prior_error}


@dataclass
class TruthEngine:
    model: ModelSpec
    hardware: HardwareProfile
    workload: Workload = field(default_factory=Workload)
    error: StepError = no_error
    # Whether the world's engine keeps prefix caching under a setup; one without it prefills
    # the workload's prefix-cache hits again (core/predict/prefill.py).
    prefix_caching: Callable[[Setup], bool] = keeps_prefix_caching
    # The true recomputed prefill against the model's price of it (a world's hidden error).
    prefill_error: float = 1.0

    def step_time(self, setup: Setup, batch: float, rates: Sequence[float]) -> float:
        k = spec_tokens_at(setup, batch)
        curve = predict(
            self.model,
            self.hardware,
            setup,
            [max(round(batch), 1)],
            from_conditional(list(rates)[: max(setup.spec_tokens, k)] or []),
            self.workload,
        )
        step = float(curve.step_time_s[0]) * self.error(setup, batch)
        # A step as vLLM times it: with the recomputed prefill it carries (see observation).
        decode = float(curve.effective_batch[0] * curve.tau[0]) / step
        return step / self._kept(setup, decode)

    def tokens_per_s(self, setup: Setup, batch: float, rates: Sequence[float]) -> float:
        """What one engine really serves at this batch (queueing past capacity)."""
        size = max(round(batch), 1)
        accept = from_conditional(list(rates)[: setup.spec_tokens])
        curve = predict(self.model, self.hardware, setup, [size], accept, self.workload)
        # The decode rate alone, then the prefill this engine really pays once (the curve's own
        # tokens/s already carries the model's price of the prompts' prefill).
        step = float(curve.step_time_s[0]) * self.error(setup, batch)
        fits = curve.max_batch > 0 and step > 0
        decode = float(curve.effective_batch[0] * curve.tau[0]) / step if fits else 0.0
        return self._served(setup, decode)

    def _kept(self, setup: Setup, decode_tokens_per_s: float) -> float:
        """The share of each second left to decoding (1.0 exactly with prefix caching)."""
        if decode_tokens_per_s <= 0:
            return 1.0
        return self._served(setup, decode_tokens_per_s) / decode_tokens_per_s

    def _served(self, setup: Setup, decode_tokens_per_s: float) -> float:
        """What is served at a true decode rate, after the setup's recomputed prefill."""
        cost = prefill_cost(
            self.model,
            self.hardware,
            self.workload,
            prefix_caching=self.prefix_caching(setup),
        )
        if cost is None:
            return decode_tokens_per_s
        cost = replace(cost, seconds_per_token=cost.seconds_per_token * self.prefill_error)
        return float(cost.tokens_per_s(np.array([decode_tokens_per_s]))[0])

    def observation(
        self,
        *,
        now: float,
        window_s: float,
        setup: Setup,
        batch: float | Sequence[float],
        rates: Sequence[float],
        engines: int = 1,
        ssm_dtype: str = "float32",
        limits: ObservationLimits | None = None,
    ) -> Observation:
        samples = list(batch) if isinstance(batch, Sequence) else [float(batch)] * 5
        mean = float(np.mean(samples))
        size = max(round(mean), 1)
        curve = predict(
            self.model,
            self.hardware,
            setup,
            [size],
            from_conditional(list(rates)[: setup.spec_tokens]),
            self.workload,
        )
        k = int(curve.spec_tokens[0])  # verified: below the ceiling under adaptive verification
        used = list(rates)[:k]
        reach = np.cumprod(used) if used else np.zeros(0)
        tau = 1.0 + float(reach.sum())
        step = float(curve.step_time_s[0]) * self.error(setup, mean)  # = self.step_time(...)
        capacity = curve.max_batch
        running = min(mean, max(capacity, 1))
        decode = running * tau / step
        # The recomputed prefill of a setup without prefix caching rides in the decode steps
        # (chunked prefill): each step vLLM times is longer by it (exactly as long without).
        step = step / self._kept(setup, decode)
        steps = window_s / step
        request_steps = running * steps * engines
        prompt = self.workload.prompt_tokens or 1024.0
        generated = self.workload.generation_tokens or 512.0
        totals = WindowTotals(
            start=now - window_s,
            end=now,
            last_sample_at=now,
            series=engines,
            batch_samples=[min(s, running) for s in samples] * engines,
            waiting_samples=[max(s - running, 0.0) for s in samples] * engines,
            generation_tokens_per_s=engines * running * tau / step,
            step_time=Ratio(request_steps * step, request_steps),
            time_per_output_token=Ratio(step / tau, 1.0),
            # The lengths only where the world names them: its steps prefill those prompts,
            # and a length reported but never prefilled would mislead the model the tuner fits.
            prompt_length=Ratio(prompt, 1.0) if self.workload.prompt_tokens else Ratio(),
            generation_length=(
                Ratio(generated, 1.0) if self.workload.generation_tokens else Ratio()
            ),
            cache_config=cache_config_labels(setup, ssm_dtype),
        )
        if self.workload.prefix_hit_rate is not None:
            # vLLM looks prompts up (and counts) only while prefix caching is on.
            looked_up = engines * running * tau / step * window_s / generated * prompt
            looked_up *= float(self.prefix_caching(setup))
            totals.prefix_cache_queries = looked_up
            totals.prefix_cache_hits = looked_up * self.workload.prefix_hit_rate
        if setup.spec_tokens:
            totals.speculation = True
            drafts = request_steps if k else 0.0
            totals.drafts = drafts
            totals.draft_tokens = drafts * k
            per_position = [drafts * float(r) for r in reach]
            per_position += [0.0] * (setup.spec_tokens - len(per_position))
            totals.accepted_per_position = per_position
            totals.accepted = float(sum(per_position))
        return build_observation("truth", totals, now=now, limits=limits or ObservationLimits())


def cache_config_labels(setup: Setup, ssm_dtype: str = "float32") -> dict[str, str]:
    """The labels of `vllm:cache_config_info` an engine running `setup` shows."""
    return {
        "use_replayssm": str(bool(setup.replay_window)),
        "replayssm_buffer_len": str(setup.replay_window or 16),
        "mamba_ssm_cache_dtype": ssm_dtype,
        "mamba_cache_mode": "none",
        **BUILD_LABELS,
    }
