"""The one source of tokens/s: the cost model for this model, GPU and live workload, corrected by
what was measured. Decisions, the exported predictions and crossover, and the canary's budget
all ask the same Predictor, so they cannot disagree within one step."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from autotuner.core.engine.workload import Workload
from autotuner.core.model.spec import ModelSpec
from autotuner.core.predict.acceptance import AcceptanceEstimate, from_conditional
from autotuner.core.predict.attribution import Attribution, Fit
from autotuner.core.predict.capacity import max_batch as capacity
from autotuner.core.predict.comparisons import Crossover, flips
from autotuner.core.predict.costmodel import SetupCurve, predict, predict_as_run
from autotuner.core.predict.hardware import HardwareProfile
from autotuner.core.predict.prefill import (
    PrefillCost,
    keeps_prefix_caching,
    prefill_cost,
    recomputed_cost,
)
from autotuner.core.types import PLAIN, Setup, SetupKind

Array = npt.NDArray[np.float64]
CROSSOVER_GRID = np.arange(1, 1025)


@dataclass(frozen=True)
class Predictor:
    model: ModelSpec
    hardware: HardwareProfile
    workload: Workload
    calibration: Attribution
    now: float
    calibration_half_life_s: float
    calibration_bounds: tuple[float, float] = (0.5, 2.0)
    # Whether the engine keeps prefix caching under a setup (the build's rules: the caller's
    # input); a setup without it pays the workload's prefix-cache hits in recomputed prefill.
    prefix_caching: Callable[[Setup], bool] = keeps_prefix_caching
    # The setup whose speed the engine runs when a setup is written (the engine's own adaptive
    # tiers, a replay window it sizes itself): the caller's input, as the engine's rules say.
    as_run: Callable[[Setup], Setup] = lambda setup: setup
    # Whether the engine runs a setup (as run) with piecewise CUDA graphs where full ones
    # would be replayed (vLLM's K schedule on Model Runner V1): the engine's rules, as above.
    piecewise: Callable[[Setup], bool] = lambda setup: False

    @cached_property
    def fit(self) -> Fit:
        """The calibration's factors now (fitted on first use: the model's own class times,
        which the calibration learns from, need none)."""
        return self.calibration.fit(self.now, self.calibration_half_life_s, self.calibration_bounds)

    def model_curve(
        self,
        setup: Setup,
        batches: Sequence[int] | npt.NDArray[np.int64],
        accept: AcceptanceEstimate,
    ) -> SetupCurve:
        """The cost model alone (what calibration compares the measurement with), for the
        setup as the engine runs it."""
        return predict_as_run(
            self.model,
            self.hardware,
            setup,
            batches,
            accept,
            self.workload,
            self.as_run,
            self.prefix_caching(setup),
            self.piecewise,
        )

    def prefill_cost(self, setup: Setup) -> PrefillCost | None:
        """What `setup` pays in recomputed prefill (None: it keeps prefix caching, or the hit
        rate is unknown or zero): its `share(tokens_per_s)` is the part of each second lost."""
        return recomputed_cost(
            self.model, self.hardware, self.workload, prefix_caching=self.prefix_caching(setup)
        )

    def workload_prefill(self, setup: Setup) -> PrefillCost | None:
        """The whole prefill `setup` pays: every prompt's fresh tokens, and the recomputed ones
        without prefix caching (None: prompt or generation length unknown). What rides in
        the measured step beside decoding."""
        return prefill_cost(
            self.model, self.hardware, self.workload, prefix_caching=self.prefix_caching(setup)
        )

    def time_to_first_token_s(
        self,
        setup: Setup,
        batches: Sequence[int] | npt.NDArray[np.int64],
        accept: AcceptanceEstimate,
    ) -> Array:
        """Predicted TTFT per batch (NaN where the prompt length is unknown): the prompt in
        chunks of what the step budget leaves beside the batch's decode tokens, one chunk per
        calibrated decode step; where the engine does not mix prefill into decode steps, the
        chunks as forwards of their own, each at least plain's step at batch 1 (one pass over
        the weights) (core/predict/prefill.py)."""
        cost = self.workload_prefill(setup)
        if cost is None:
            return np.full(len(batches), np.nan)
        raw = self.model_curve(setup, batches, accept)
        step = self.curve(setup, batches, accept)[1]
        chunk = self.workload.chunk_budget(self.hardware.name, self.hardware.memory_bytes)
        floor = float(self._plain(np.array([1])).step_time_s[0])
        return np.array(
            [
                cost.time_to_first_token_s(
                    float(step[i]),
                    float(raw.effective_batch[i] * (1 + raw.spec_tokens[i])),
                    chunk,
                    mixed=self.workload.prefill_mixed,
                    forward_floor_s=floor,
                )
                for i in range(len(step))
            ]
        )

    def class_times(
        self, setup: Setup, batch: int, accept: AcceptanceEstimate
    ) -> tuple[dict[str, float], dict[str, float]]:
        """(plain's, the setup's) predicted time per kernel class at one batch: what the
        attribution is fitted on."""
        raw = self.model_curve(setup, [batch], accept)
        plain = self._plain(raw.effective_batch)
        return (
            {c: float(v[0]) for c, v in plain.time_s.items()},
            {c: float(v[0]) for c, v in raw.time_s.items()},
        )

    def curve(
        self,
        setup: Setup,
        batches: Sequence[int] | npt.NDArray[np.int64],
        accept: AcceptanceEstimate,
    ) -> tuple[Array, Array]:
        """Calibrated tokens/s and step time per batch: each kernel class's time scaled by
        what was learned about it (shared terms, and the terms the setup's family adds), and
        the recomputed prefill of a setup without prefix caching taken from the calibrated
        decode rate (the step stays the decode step)."""
        raw = self.model_curve(setup, batches, accept)
        plain = self._plain(raw.effective_batch)
        # The model's step is the sum of its class times, so the fitted sum is the step.
        step = self.fit.steps(setup, raw.effective_batch, plain.time_s, raw.time_s)
        decode = raw.decode_tokens_per_s * raw.step_time_s / step
        return (decode if raw.prefill is None else raw.prefill.tokens_per_s(decode)), step

    def sigma(self, setup: Setup, batch: float, running: Setup | None = None) -> float:
        """Log-space uncertainty of the calibrated prediction of `setup` at `batch` (wider
        where the model was far off on the `running` setup's family)."""
        return self.fit.at(batch).sigma(setup.kind.value, running.kind.value if running else None)

    def added_shares(
        self, setup: Setup, batch: int, accept: AcceptanceEstimate
    ) -> dict[str, float]:
        """What `setup` adds to plain's step at `batch` per kernel class, as shares of its own
        predicted step (negative where it saves)."""
        base, own = self.class_times(setup, batch, accept)
        step = max(sum(own.values()), 1e-12)
        return {c: (own.get(c, 0.0) - base.get(c, 0.0)) / step for c in set(base) | set(own)}

    def saturated(
        self, setup: Setup, batch: int, accept: AcceptanceEstimate, least_share: float
    ) -> frozenset[str]:
        """The kernel classes where what `setup`'s family adds was fitted at the upper bound
        near `batch` (one over 1: a bound of 1 is the model kept), by its own windows there,
        among those it adds at least `least_share` of its step on: the model prices them too
        cheap by more than calibration can say."""
        fit = self.fit.at(batch)
        upper = fit.upper  # the bound its factors were fitted under
        family = setup.kind.value
        if setup.kind is SetupKind.PLAIN or upper <= 1.0 or not fit.checked(family):
            return frozenset()
        shares = self.added_shares(setup, batch, accept)
        return frozenset(
            c
            for c, f in fit.own.get(family, {}).items()
            if f >= upper and shares.get(c, 0.0) >= least_share
        )

    def checked(self, setup: Setup, batch: float) -> bool:
        """Whether `setup`'s family has been measured in (or next to) `batch`'s band."""
        return self.fit.at(batch).checked(setup.kind.value)

    def _plain(self, batches: npt.NDArray[np.int64]) -> SetupCurve:
        return predict(
            self.model, self.hardware, PLAIN, batches, from_conditional([]), self.workload
        )

    def tokens_per_s_at(self, setup: Setup, demand: float, accept: AcceptanceEstimate) -> float:
        """Calibrated tokens/s of one engine at one demand (requests per engine, rounded; at
        least one)."""
        return float(self.curve(setup, [max(round(demand), 1)], accept)[0][0])

    def model_tokens_per_s_at(
        self, setup: Setup, demand: float, accept: AcceptanceEstimate
    ) -> float:
        """The cost model's tokens/s of one engine at one demand, before any calibration."""
        return float(self.model_curve(setup, [max(round(demand), 1)], accept).tokens_per_s[0])

    def peak_tokens_per_s(self, setup: Setup, accept: AcceptanceEstimate) -> float:
        """Calibrated tokens/s of one engine at the largest batch the setup fits."""
        batch = max(capacity(self.model, self.hardware, setup, self.workload), 1)
        return self.tokens_per_s_at(setup, batch, accept)

    def crossover(
        self, current: Setup, rivals: Iterable[Setup], accept: AcceptanceEstimate
    ) -> Crossover | None:
        """The first batch at which `current` and the first rival (in the order given) of
        another kind swap places, on the calibrated curves."""
        mine: Array | None = None
        for rival in rivals:
            if rival.kind is current.kind:
                continue
            if max(current.spec_tokens, rival.spec_tokens) > accept.max_spec_tokens:
                continue
            mine = self.curve(current, CROSSOVER_GRID, accept)[0] if mine is None else mine
            theirs = self.curve(rival, CROSSOVER_GRID, accept)[0]
            found = flips(CROSSOVER_GRID, (current.label, mine), (rival.label, theirs))
            if found:
                return found[0]
        return None
