"""Acceptance math: from vLLM's draft counters to tokens kept per verify step.

Notation follows COSTMODEL.md section 1. vLLM exports the number of drafts D and, per draft
position i, the unconditional count a_i of drafts whose first i tokens were all accepted.
The conditional rate is p_i = a_i / a_(i-1) (a_0 = D), and the expected tokens kept per verify
step with K drafts is tau(K) = 1 + sum_{i<=K} prod_{j<=i} p_j.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict

from autotuner.errors import InputError

Z_95 = 1.959963984540054


class AcceptanceEstimate(BaseModel):
    """Per-position conditional acceptance with a confidence interval from the counts.

    `drafts` and `accepted_per_position` may be fractional once counts are pooled with decay.
    Positions whose previous position was never accepted carry no information: their rate is 0
    and their interval is [0, 1].
    """

    model_config = ConfigDict(frozen=True)

    drafts: float
    accepted_per_position: tuple[float, ...]
    conditional: tuple[float, ...]
    conditional_low: tuple[float, ...]
    conditional_high: tuple[float, ...]
    confidence: float = 0.95

    @property
    def max_spec_tokens(self) -> int:
        """The deployed K the counts came from: no prediction is made beyond it."""
        return len(self.conditional)

    def tau(self, spec_tokens: int) -> float:
        """Expected tokens kept per verify step with K drafts (K <= the observed K)."""
        return tau(self.conditional, self._checked(spec_tokens))

    def tau_interval(self, spec_tokens: int) -> tuple[float, float]:
        """tau(K) evaluated at the lower and upper ends of every per-position interval."""
        k = self._checked(spec_tokens)
        return tau(self.conditional_low, k), tau(self.conditional_high, k)

    def _checked(self, spec_tokens: int) -> int:
        if not 0 <= spec_tokens <= self.max_spec_tokens:
            raise InputError(
                f"acceptance was observed up to K={self.max_spec_tokens}; K={spec_tokens} would "
                "be extrapolation"
            )
        return spec_tokens


def from_counts(
    drafts: float, accepted_per_position: Sequence[float], *, confidence: float = 0.95
) -> AcceptanceEstimate:
    """Build an estimate from vLLM's counters (or their deltas over a window).

    Raises InputError for negative or non-finite counts, and for counts that rise with position
    (acceptance is prefix-only, so a_i can never exceed a_(i-1)).
    """
    counts = [float(drafts), *(float(a) for a in accepted_per_position)]
    if not all(math.isfinite(c) and c >= 0 for c in counts):
        raise InputError(f"acceptance counts must be finite and >= 0, got {counts}")
    for position, (before, after) in enumerate(itertools.pairwise(counts)):
        if after > before * (1 + 1e-9) + 1e-9:
            raise InputError(
                f"accepted count at position {position} ({after:g}) exceeds the count before it "
                f"({before:g}): acceptance is prefix-only, so the counters are inconsistent"
            )
    z = _z_for(confidence)
    rates, lows, highs = [], [], []
    for before, after in itertools.pairwise(counts):
        trials = before
        successes = min(after, trials)
        rates.append(successes / trials if trials > 0 else 0.0)
        low, high = wilson_interval(successes, trials, z)
        lows.append(low)
        highs.append(high)
    return AcceptanceEstimate(
        drafts=float(drafts),
        accepted_per_position=tuple(counts[1:]),
        conditional=tuple(rates),
        conditional_low=tuple(lows),
        conditional_high=tuple(highs),
        confidence=confidence,
    )


def geometric(rate: float, spec_tokens: int) -> AcceptanceEstimate:
    """An exact (zero-width) estimate with the same conditional rate at every position."""
    return from_conditional([rate] * spec_tokens)


def from_conditional(rates: Sequence[float]) -> AcceptanceEstimate:
    """An exact estimate from given per-position conditional rates (no counts behind it)."""
    values = tuple(float(r) for r in rates)
    if not all(0.0 <= r <= 1.0 for r in values):
        raise InputError(f"acceptance rates must lie in [0, 1], got {list(values)}")
    return AcceptanceEstimate(
        drafts=math.inf,
        accepted_per_position=tuple(np.cumprod(values).tolist()) if values else (),
        conditional=values,
        conditional_low=values,
        conditional_high=values,
    )


def wilson_interval(successes: float, trials: float, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval for a binomial rate; [0, 1] when there were no trials."""
    if trials <= 0:
        return 0.0, 1.0
    rate = successes / trials
    denominator = 1 + z * z / trials
    centre = (rate + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(rate * (1 - rate) / trials + z * z / (4 * trials * trials)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def tau(conditional: Sequence[float], spec_tokens: int) -> float:
    """tau(K) = 1 + sum_{i=1..K} prod_{j<=i} p_j."""
    rates = np.asarray(conditional[:spec_tokens], dtype=np.float64)
    return float(1.0 + np.cumprod(rates).sum())


def tau_curve(conditional: Sequence[float]) -> npt.NDArray[np.float64]:
    """tau(K) for K = 0..len(conditional), as one array."""
    rates = np.asarray(conditional, dtype=np.float64)
    return np.concatenate(([1.0], 1.0 + np.cumsum(np.cumprod(rates))))


def tokens_kept(rate: float, drafts: int) -> float:
    """The article's tokens kept per step with T drafts at a constant rate: sum_{i=0..T} p^i."""
    return float(sum(rate**i for i in range(drafts + 1)))


def copy_rule(rate: float, drafts: int) -> float:
    """The operators' quick rule (COSTMODEL.md section 2): > 1 means speculation still wins
    when SSM state copies dominate the step.

    copy_rule(p, T) = tokens_kept(p, T) / ((1 + T) / 2).
    """
    if drafts < 1:
        raise InputError("the quick rule needs at least one draft token")
    return tokens_kept(rate, drafts) / ((1 + drafts) / 2)


def copy_rule_break_even(drafts: int) -> float:
    """The acceptance rate at which copy_rule(p, T) = 1 (bisection; copy_rule rises with p).

    For T = 1 the rule is (1 + p) / 1 >= 1 for every p: speculation with one draft never loses
    by this rule, and the break-even is 0.
    """
    low, high = 0.0, 1.0
    if copy_rule(low, drafts) >= 1.0:
        return 0.0
    for _ in range(60):
        middle = (low + high) / 2
        if copy_rule(middle, drafts) < 1.0:
            low = middle
        else:
            high = middle
    return high


def _z_for(confidence: float) -> float:
    if not 0.5 <= confidence < 1.0:
        raise InputError(f"confidence must lie in [0.5, 1), got {confidence}")
    if math.isclose(confidence, 0.95):
        return Z_95
    # Inverse normal CDF by bisection on erf: no scipy dependency for one number.
    target = (1 + confidence) / 2
    low, high = 0.0, 10.0
    for _ in range(80):
        middle = (low + high) / 2
        if 0.5 * (1 + math.erf(middle / math.sqrt(2))) < target:
            low = middle
        else:
            high = middle
    return high
