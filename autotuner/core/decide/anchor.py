"""The running setup's family priced through what the running setup measures now.

Calibration corrects the model with one factor per family and batch band, and a band is two
octaves wide (core/predict/attribution.py). Where the model's error changes across a band, the
band's factor is right on average and wrong at its ends: on the published held-out days, with
replay running on a falling evening, its calibrated rate at the load then came out under what
it was serving, and the plan moved off it an hour early into a setup that measured 13% worse and
was reverted. What the running setup serves at the load now is not a prediction: its family's
rates are moved to pass through it, fully at the measured demand and fading either way over
`policy.calibration.anchor_octaves` (half an octave, the neighbourhood verification judges a
change in; a Gaussian in log2 batch), so the plan values holding it by the measurement and the
hours ahead, where the load goes elsewhere, by the calibrated model.

Not done where the model's scale is not this machine's (the measurement more than
TRUSTED_SCALE off the model: an unprofiled machine, a CPU under a GPU's profile): there the
model's ratios rank setups and a factor of twenty on one family would decide alone.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from autotuner.core.decide.context import Situation
from autotuner.core.decide.estimates import BIN_MIDDLES
from autotuner.core.predict.acceptance import AcceptanceEstimate
from autotuner.core.types import Setup

# Beyond this factor between the running setup's measurement and the calibrated model, the
# model's tokens/s are not set against measurements (its ranking still decides).
TRUSTED_SCALE = 2.0
# An anchor this wide moves the running family's rates alike at every batch.
EVERY_BATCH = 64.0


def running_miss(sit: Situation, accept: AcceptanceEstimate) -> float | None:
    """log(measured / calibrated) for the running setup at the demand of its last usable
    window; None without one, or beyond TRUSTED_SCALE."""
    current, rate, batch = sit.state.current, sit.state.last_rate, sit.state.last_batch
    if current is None or rate is None or batch is None or rate <= 0:
        return None
    if current.spec_tokens > accept.max_spec_tokens:
        return None
    modelled = sit.predictor.tokens_per_s_at(current, batch, accept)
    if not modelled > 0:
        return None
    miss = math.log(rate / modelled)
    return miss if abs(miss) <= math.log(TRUSTED_SCALE) else None


def anchor_factors(
    sit: Situation, setup: Setup, accept: AcceptanceEstimate
) -> npt.NDArray[np.float64]:
    """What multiplies `setup`'s calibrated tokens/s at each batch bin: the running setup's
    miss where `setup` is of its family, fading with octaves from the measured demand; 1
    elsewhere."""
    ones = np.ones(len(BIN_MIDDLES))
    current, batch = sit.state.current, sit.state.last_batch
    width = sit.settings.calibration.anchor_octaves
    if current is None or batch is None or setup.kind is not current.kind or width <= 0:
        return ones
    miss = running_miss(sit, accept)
    if miss is None:
        return ones
    octaves = np.log2(BIN_MIDDLES / max(batch, 1.0)) / width
    return np.asarray(np.exp(miss * np.exp(-0.5 * octaves**2)), dtype=np.float64)
