"""Estimates carried across windows: acceptance memory, how fast acceptance moves, and the batch
distribution (the calibration is core/predict/attribution.py).

All decay exponentially with a half-life and take time as an input; all are plain pydantic
values, so they persist in the TunerState annotation unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict

from autotuner.core.decay import decay
from autotuner.core.predict.acceptance import AcceptanceEstimate, from_trials
from autotuner.core.types import AcceptanceStats

# The batch histogram's bins (not the calibration's bands, nor a schedule's): edges at the powers
# of two and 1.5 times them up to 2048, then 4096 and 8192; a bin is represented by its
# geometric middle.
BATCH_BINS: tuple[int, ...] = (
    1,
    2,
    3,
    4,
    6,
    8,
    12,
    16,
    24,
    32,
    48,
    64,
    96,
    128,
    192,
    256,
    384,
    512,
    768,
    1024,
    1536,
    2048,
    4096,
    8192,
)

_LOWS, _HIGHS = np.asarray(BATCH_BINS[:-1]), np.asarray(BATCH_BINS[1:])
# The batch each bin stands for (its geometric middle).
BIN_MIDDLES: npt.NDArray[np.int64] = np.maximum(
    np.round(np.sqrt(_LOWS * (_HIGHS - 1))), _LOWS
).astype(np.int64)


class AcceptanceMemory(BaseModel):
    """Per-position successes and trials pooled with decay. When speculation is off nothing new
    arrives: the rates are kept, and their weight (so their confidence) shrinks with age.

    Trials are the drafts that proposed a position having accepted every one before it
    (AcceptanceStats.trials_per_position): under a K schedule a window's deep positions have
    fewer trials than its drafts, and a window in which no draft proposed a position keeps the
    remembered rate there, as positions beyond a shorter deployed K do. `lower_bound_trials`
    are the trials of windows whose proposals were not known there (their rate a lower bound):
    a position is a lower bound while they are more than 1% of its trials.
    """

    model_config = ConfigDict(frozen=True)

    drafts: float = 0.0
    accepted_per_position: tuple[float, ...] = ()
    updated_at: float | None = None
    trials_per_position: tuple[float, ...] = ()  # empty: a state written before trials
    lower_bound_trials: tuple[float, ...] = ()

    @property
    def known(self) -> bool:
        return self.drafts > 0 and bool(self.accepted_per_position)

    @property
    def max_spec_tokens(self) -> int:
        return len(self.accepted_per_position)

    def trials(self) -> list[float]:
        if len(self.trials_per_position) == self.max_spec_tokens:
            return list(self.trials_per_position)
        return [self.drafts, *self.accepted_per_position[:-1]][: self.max_spec_tokens]

    def add(self, stats: AcceptanceStats, now: float, half_life_s: float) -> AcceptanceMemory:
        keep = decay(now - self.updated_at, half_life_s) if self.updated_at is not None else 0.0
        # A longer deployed K observes more positions; positions the window lacks keep memory.
        width = max(len(stats.accepted_per_position), self.max_spec_tokens)
        old_won = _padded(self.accepted_per_position, width)
        old_tried = _padded(self.trials(), width)
        old_lower = _padded(self.lower_bound_trials, width)
        won = _padded(stats.accepted_per_position, width)
        tried = _padded(_window_trials(stats), width)
        flags = _padded(stats.lower_bound, width)
        lower = [t if flag else 0.0 for t, flag in zip(tried, flags, strict=True)]
        for i in range(width):
            if tried[i] > 0 or old_tried[i] <= 0:
                continue
            # No draft of the window proposed position i: carry the remembered rate forward.
            tried[i] = won[i - 1] if i else stats.drafts
            won[i] = tried[i] * min(old_won[i] / old_tried[i], 1.0)
            lower[i] = tried[i] * min(old_lower[i] / old_tried[i], 1.0)
        return AcceptanceMemory(
            drafts=self.drafts * keep + stats.drafts,
            accepted_per_position=_pooled(old_won, won, keep),
            updated_at=now,
            trials_per_position=_pooled(old_tried, tried, keep),
            lower_bound_trials=_pooled(old_lower, lower, keep),
        )

    def age_s(self, now: float) -> float | None:
        return None if self.updated_at is None else now - self.updated_at

    def estimate(self, now: float, memory_half_life_s: float) -> AcceptanceEstimate | None:
        """Rates from the pooled counts; their interval widens as the memory ages."""
        if not self.known:
            return None
        weight = decay(now - (self.updated_at or now), memory_half_life_s)
        weight = max(weight, 1e-6)
        tried = self.trials()
        lower = _padded(self.lower_bound_trials, self.max_spec_tokens)
        return from_trials(
            self.drafts * weight,
            [a * weight for a in self.accepted_per_position],
            [t * weight for t in tried],
            [t > 0 and low > 0.01 * t for low, t in zip(lower, tried, strict=True)],
        )


# Acceptance moved less than this (a share of drafts) has not moved: the rounding of a fit.
NOTICEABLE_MOVE = 0.01


class AcceptanceDrift(BaseModel):
    """How fast acceptance moved while it was measured: a line through each window's first
    position rate against time, least squares with every window weighted by decay. The sums
    are kept about `updated_at` (times in seconds before it), so they stay small.

    Remembered acceptance is as old as the last window that drafted; a workload whose
    acceptance moved while it was watched may have moved as far again since (a chat morning
    and a code evening draft differently), and the interval of the memory widens by that
    (`moved`). The slope counts only beyond two standard errors of its fit, so a steady
    acceptance measured noisily moves nothing."""

    model_config = ConfigDict(frozen=True)

    weight: float = 0.0
    time: float = 0.0  # sum of w t
    rate: float = 0.0  # sum of w a
    time_time: float = 0.0  # sum of w t^2
    time_rate: float = 0.0  # sum of w t a
    rate_rate: float = 0.0  # sum of w a^2
    updated_at: float | None = None

    def add(self, rate: float, now: float, half_life_s: float) -> AcceptanceDrift:
        if self.updated_at is None:
            return AcceptanceDrift(weight=1.0, rate=rate, rate_rate=rate * rate, updated_at=now)
        shift = now - self.updated_at  # every old time moves this far into the past
        keep = decay(shift, half_life_s)
        w, t, a = self.weight, self.time, self.rate
        return AcceptanceDrift(
            weight=w * keep + 1.0,
            time=(t - shift * w) * keep,
            rate=a * keep + rate,
            time_time=(self.time_time - 2 * shift * t + shift * shift * w) * keep,
            time_rate=(self.time_rate - shift * a) * keep,
            rate_rate=self.rate_rate * keep + rate * rate,
            updated_at=now,
        )

    def per_s(self) -> float:
        """How far acceptance moved per second, beyond the fit's noise (0 with fewer than
        three windows' weight or none of their spread in time)."""
        if self.weight < 3:
            return 0.0
        mean_t, mean_a = self.time / self.weight, self.rate / self.weight
        spread = self.time_time / self.weight - mean_t * mean_t
        if spread <= 0:
            return 0.0
        slope = (self.time_rate / self.weight - mean_t * mean_a) / spread
        scatter = self.rate_rate / self.weight - mean_a * mean_a - slope * slope * spread
        error = math.sqrt(max(scatter, 0.0) / ((self.weight - 2) * spread))
        return max(abs(slope) - 2 * error, 0.0)

    def moved(self, age_s: float | None) -> float:
        """How far acceptance may have moved in `age_s` at the rate it moved while measured
        (0 under NOTICEABLE_MOVE)."""
        moved = self.per_s() * max(age_s or 0.0, 0.0)
        return moved if moved >= NOTICEABLE_MOVE else 0.0


def first_position_rate(stats: AcceptanceStats) -> float | None:
    """The window's acceptance at the first position (every draft proposes it), or None
    where nothing was drafted."""
    trials = _window_trials(stats)
    if not trials or trials[0] <= 0:
        return None
    return min(max(stats.accepted_per_position[0] / trials[0], 0.0), 1.0)


def _window_trials(stats: AcceptanceStats) -> list[float]:
    if len(stats.trials_per_position) == len(stats.accepted_per_position):
        return list(stats.trials_per_position)
    return [stats.drafts, *stats.accepted_per_position[:-1]][: len(stats.accepted_per_position)]


def _padded(values: Sequence[float] | Sequence[bool], width: int) -> list[float]:
    return [float(v) for v in values] + [0.0] * (width - len(values))


def _pooled(old: Sequence[float], new: Sequence[float], keep: float) -> tuple[float, ...]:
    return tuple(o * keep + n for o, n in zip(old, new, strict=True))


class BatchHistogram(BaseModel):
    """A decayed histogram of running requests per engine over hours."""

    model_config = ConfigDict(frozen=True)

    weights: tuple[float, ...] = (0.0,) * (len(BATCH_BINS) - 1)
    updated_at: float | None = None

    def add(self, samples: Sequence[float], now: float, half_life_s: float) -> BatchHistogram:
        keep = decay(now - self.updated_at, half_life_s) if self.updated_at is not None else 1.0
        weights = np.asarray(self.weights) * keep
        values = np.clip(np.asarray(samples, dtype=np.float64), 1, BATCH_BINS[-1] - 1)
        index = np.searchsorted(BATCH_BINS, values, side="right") - 1
        np.add.at(weights, index, 1.0)
        return BatchHistogram(weights=tuple(float(w) for w in weights), updated_at=now)

    @property
    def total(self) -> float:
        return float(sum(self.weights))

    def distribution(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """(representative batch of each non-empty bin, its probability)."""
        weights = np.asarray(self.weights)
        keep = weights > 0
        probabilities = weights[keep] / weights[keep].sum() if keep.any() else weights[keep]
        return BIN_MIDDLES[keep], probabilities

    def probabilities(self) -> npt.NDArray[np.float64]:
        """Every bin's probability (zeros when empty)."""
        weights = np.asarray(self.weights, dtype=np.float64)
        total = weights.sum()
        return weights / total if total > 0 else weights

    def quantile(self, q: float) -> float:
        middles, probabilities = self.distribution()
        if len(middles) == 0:
            return 0.0
        cumulative = np.cumsum(probabilities)
        return float(middles[min(int(np.searchsorted(cumulative, q)), len(middles) - 1)])
