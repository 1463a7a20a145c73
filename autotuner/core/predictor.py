"""The one source of tokens/s: the cost model for this model, GPU and live workload, corrected by
what was measured. Decisions, the exported predictions and crossover, and the canary's budget
all ask the same Predictor, so they cannot disagree within one step."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from autotuner.core.acceptance import AcceptanceEstimate
from autotuner.core.costmodel import Crossover, SetupCurve, Workload, flips, predict
from autotuner.core.costmodel import max_batch as capacity
from autotuner.core.estimates import Calibration
from autotuner.core.hardware import HardwareProfile
from autotuner.core.model import ModelSpec
from autotuner.core.types import Setup

Array = npt.NDArray[np.float64]
CROSSOVER_GRID = np.arange(1, 1025)


@dataclass(frozen=True)
class Predictor:
    model: ModelSpec
    hardware: HardwareProfile
    workload: Workload
    calibration: Calibration
    now: float
    calibration_half_life_s: float

    def model_curve(
        self,
        setup: Setup,
        batches: Sequence[int] | npt.NDArray[np.int64],
        accept: AcceptanceEstimate,
    ) -> SetupCurve:
        """The cost model alone (what calibration compares the measurement with)."""
        return predict(self.model, self.hardware, setup, batches, accept, self.workload)

    def curve(
        self,
        setup: Setup,
        batches: Sequence[int] | npt.NDArray[np.int64],
        accept: AcceptanceEstimate,
    ) -> tuple[Array, Array]:
        """Calibrated tokens/s and step time per batch."""
        raw = self.model_curve(setup, batches, accept)
        factors = np.array(
            [
                self.calibration.factor(setup.label, b, self.now, self.calibration_half_life_s)
                for b in raw.batch
            ]
        )
        return raw.tokens_per_s / factors, raw.step_time_s * factors

    def peak_tokens_per_s(self, setup: Setup, accept: AcceptanceEstimate) -> float:
        """Calibrated tokens/s of one engine at the largest batch the setup fits."""
        batch = max(capacity(self.model, self.hardware, setup, self.workload), 1)
        return float(self.curve(setup, [batch], accept)[0][0])

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
