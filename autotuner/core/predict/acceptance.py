"""Acceptance math: from vLLM's draft counters to tokens kept per verify step.

Notation follows COSTMODEL.md section 1. vLLM exports the number of drafts D and, per draft
position i, the count a_i of drafts whose first i+1 tokens were all accepted. With a static K
that every draft proposes in full, the conditional rate is p_i = a_i / a_(i-1) (a_-1 = D), and
the expected tokens kept per verify step with K drafts is tau(K) = 1 + sum_{i<=K} prod_{j<=i} p_j.

How vLLM counts (vllm-project/vllm, V1 engine): `Scheduler.update_from_output`
(vllm/v1/core/sched/scheduler.py) calls `make_spec_decoding_stats` once per request of a step
that carried drafts, with num_draft_tokens = len(scheduled_spec_decode_tokens[req]) and
num_accepted = len(generated_token_ids) - 1; a request with no draft tokens that step returns
early (`if not self.log_stats or not num_draft_tokens: return None`) and counts nowhere.
`SpecDecodingStats.observe_draft` (vllm/v1/spec_decode/metrics.py) then does
`num_drafts += 1; num_draft_tokens += num_draft_tokens; num_accepted_tokens_per_pos[i] += 1 for
i < num_accepted`. So a draft that proposed k < K tokens is a trial at positions < k only, yet
it is in D: when the proposed length varies (a per-batch K schedule, adaptive verification,
n-gram or suffix drafting), a_i / a_(i-1) is P(accepted and proposed | reached), biased low at
deep positions. `from_counts(..., proposed=...)` divides by the drafts that proposed each
position instead (their share from `proposed_lengths`); where the proposed lengths are not known
the naive rate is kept and flagged as a lower bound.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict

from autotuner.core.types import Setup
from autotuner.errors import InputError

Z_95 = 1.959963984540054


class AcceptanceEstimate(BaseModel):
    """Per-position conditional acceptance with a confidence interval from the counts.

    `drafts` and `accepted_per_position` may be fractional once counts are pooled with decay.
    `trials[i]` is the number of drafts that proposed position i having accepted every position
    before it (the Wilson interval's trials); positions without trials carry no information:
    their rate is 0 and their interval is [0, 1]. `lower_bound[i]` marks a position whose
    proposals are not known (adaptive verification, n-gram drafting): its rate is the naive
    a_i / a_(i-1), a lower bound of the rate given proposed, and exactly the per-draft rate this
    drafter realises at the observed K; nothing is extrapolated from it (`exact_spec_tokens`).
    """

    model_config = ConfigDict(frozen=True)

    drafts: float
    accepted_per_position: tuple[float, ...]
    conditional: tuple[float, ...]
    conditional_low: tuple[float, ...]
    conditional_high: tuple[float, ...]
    confidence: float = 0.95
    trials: tuple[float, ...] = ()
    lower_bound: tuple[bool, ...] = ()

    @property
    def max_spec_tokens(self) -> int:
        """The deployed K the counts came from: no prediction is made beyond it."""
        return len(self.conditional)

    @property
    def exact_spec_tokens(self) -> int:
        """Leading positions whose rate is an estimate, not a lower bound: a K up to this has
        an unbiased tau; past it tau is the drafter's realised one (a lower bound of what a
        drafter proposing every position would keep), and no larger K may be read from it."""
        flags = self.lower_bound or (False,) * self.max_spec_tokens
        return next((i for i, flag in enumerate(flags) if flag), len(flags))

    def tau(self, spec_tokens: int) -> float:
        """Expected tokens kept per verify step with K drafts (K <= the observed K)."""
        return tau(self.conditional, self._checked(spec_tokens))

    def tau_interval(self, spec_tokens: int) -> tuple[float, float]:
        """tau(K) evaluated at the lower and upper ends of every per-position interval."""
        k = self._checked(spec_tokens)
        return tau(self.conditional_low, k), tau(self.conditional_high, k)

    def widened(self, by: float) -> AcceptanceEstimate:
        """The same rates with every position's interval `by` wider on each side (within
        0-1): what the counts do not know, such as how far the workload moved since."""
        if by <= 0:
            return self
        return self.model_copy(
            update={
                "conditional_low": tuple(max(low - by, 0.0) for low in self.conditional_low),
                "conditional_high": tuple(min(high + by, 1.0) for high in self.conditional_high),
            }
        )

    def _checked(self, spec_tokens: int) -> int:
        if not 0 <= spec_tokens <= self.max_spec_tokens:
            raise InputError(
                f"acceptance was observed up to K={self.max_spec_tokens}; K={spec_tokens} would "
                "be extrapolation"
            )
        return spec_tokens


def first_position(estimate: AcceptanceEstimate | None) -> float | None:
    """The first draft position's conditional rate, the one every K drafts (None: nothing
    drafted yet)."""
    return estimate.conditional[0] if estimate and estimate.conditional else None


def from_counts(
    drafts: float,
    accepted_per_position: Sequence[float],
    *,
    proposed: Sequence[float] | None = None,
    confidence: float = 0.95,
) -> AcceptanceEstimate:
    """Build an estimate from vLLM's counters (or their deltas over a window).

    `proposed[i]` is the share of the drafts that proposed position i (non-increasing, at most
    1; `ProposedLengths.share`); None means every draft proposed every position (a static K).
    Position i's trials are then a_(i-1) * proposed[i] / proposed[i-1]: the drafts that reached
    it and proposed it, assuming a draft's acceptance does not depend on how many tokens it
    proposed (true of a schedule, which picks K from the batch, not from the text). Positions
    past the end of `proposed` have unknown proposals: their rate is the naive one, flagged as a
    lower bound.

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
    k = len(counts) - 1
    shares = [1.0] * k if proposed is None else [float(s) for s in proposed[:k]]
    if not all(0.0 <= s <= 1.0 + 1e-9 for s in shares) or any(
        b > a * (1 + 1e-9) + 1e-12 for a, b in itertools.pairwise(shares)
    ):
        raise InputError(f"proposed shares must be non-increasing within [0, 1], got {shares}")
    trials: list[float] = []
    for i, reached in enumerate(counts[:-1]):
        if i >= len(shares):
            trials.append(reached)  # unknown proposals: every draft that reached i, at most
            continue
        before = shares[i - 1] if i else 1.0
        trials.append(reached * shares[i] / before if before > 0 else 0.0)
    lower = tuple(i >= len(shares) for i in range(k))
    return from_trials(counts[0], counts[1:], trials, lower, confidence=confidence)


def from_trials(
    drafts: float,
    successes: Sequence[float],
    trials: Sequence[float],
    lower_bound: Sequence[bool] = (),
    *,
    confidence: float = 0.95,
) -> AcceptanceEstimate:
    """An estimate from per-position successes and trials (pooled windows keep both)."""
    z = _z_for(confidence)
    rates, lows, highs, kept = [], [], [], []
    for accepted, tried in zip(successes, trials, strict=True):
        tried = max(float(tried), 0.0)
        won = min(max(float(accepted), 0.0), tried)  # noise in a share can push it past
        rates.append(won / tried if tried > 0 else 0.0)
        low, high = wilson_interval(won, tried, z)
        lows.append(low)
        highs.append(high)
        kept.append(tried)
    flags = tuple(bool(f) for f in lower_bound) or (False,) * len(kept)
    return AcceptanceEstimate(
        drafts=float(drafts),
        accepted_per_position=tuple(float(a) for a in successes),
        conditional=tuple(rates),
        conditional_low=tuple(lows),
        conditional_high=tuple(highs),
        confidence=confidence,
        trials=tuple(kept),
        lower_bound=flags,
    )


# Drafts * K - draft tokens below this share of the drafts: every draft proposed every position
# (within it, no conditional rate is off by more than this share).
FULL_PROPOSALS = 0.01
# Methods whose drafts propose fewer than K tokens at will (vLLM's ngram stops at the end of
# the matched text; suffix decoding sizes each speculation), besides adaptive verification.
VARIABLE_LENGTH_METHODS = frozenset({"ngram", "ngram_gpu", "suffix"})


class Proposals(str, Enum):
    """How a window's proposed lengths are known."""

    FULL = "full"  # every draft proposed all K positions
    SCHEDULE = "schedule"  # inferred from the deployed K schedule and the batch samples
    UNKNOWN = "unknown"  # only the mean is known: later positions are lower bounds

    def __str__(self) -> str:
        # Printed as the bare name, as the plain strings it replaces were.
        return self.value


class ProposedLengths(BaseModel):
    """How many tokens the drafts of a window proposed: `share[i]` is the share of drafts that
    proposed position i, for the positions where that is known (the rest are lower bounds)."""

    model_config = ConfigDict(frozen=True)

    share: tuple[float, ...]
    how: Proposals
    tokens_per_draft: float | None = None  # draft tokens / drafts, measured
    mix: dict[int, float] = {}  # K -> share of drafts, under a schedule
    note: str | None = None


def variable_length(drafter: Mapping[str, Any] | None) -> bool:
    """Whether the operator's `--speculative-config` lets a draft propose fewer than K tokens."""
    if not drafter:
        return False
    method = str(drafter.get("method") or "").lower()
    return method in VARIABLE_LENGTH_METHODS or bool(drafter.get("enable_adaptive_verification"))


def proposed_lengths(
    *,
    spec_tokens: int,
    drafts: float,
    draft_tokens: float,
    setup: Setup | None = None,
    batch_samples: Sequence[float] = (),
    variable: bool = False,
) -> ProposedLengths:
    """The share of drafts that proposed each of the `spec_tokens` positions.

    - Draft tokens = drafts * K (within FULL_PROPOSALS): every draft proposed every position.
    - A K schedule (`setup`, the deployed args) and a drafter that proposes all the K it is
      given: each batch sample b drafts K(b) tokens for b requests a step; the mix of K values
      over the window is that, tilted (exponentially, the least change) until its mean is the
      measured draft tokens per draft. With two K values in the schedule the mean alone fixes
      the mix; the samples only say which way to lean between three or more.
    - Otherwise (adaptive verification, n-gram, a schedule we were not told, counts that do not
      fit the schedule): only position 0 is known (vLLM counts no draft that proposed nothing);
      the later positions are lower bounds.
    """
    full = ProposedLengths(share=(1.0,) * spec_tokens, how=Proposals.FULL)
    if spec_tokens == 0 or drafts <= 0:
        return full
    per_draft = draft_tokens / drafts
    if spec_tokens == 1 or spec_tokens - per_draft <= FULL_PROPOSALS:
        # Every counted draft proposed position 0: with K = 1 that is every position.
        return full.model_copy(update={"tokens_per_draft": per_draft})
    unknown = ProposedLengths(share=(1.0,), how=Proposals.UNKNOWN, tokens_per_draft=per_draft)
    positions = f"position{'s' if spec_tokens > 2 else ''} {_span(1, spec_tokens - 1)}"
    if setup is None or not setup.schedule:
        why = (
            "the drafter proposes fewer tokens at will"
            if variable
            else "no K schedule was read from the target's args"
        )
        return unknown.model_copy(
            update={
                "note": f"{per_draft:.2f} draft tokens per draft at K={spec_tokens} and {why}: "
                f"{positions} are lower bounds"
            }
        )
    if variable:
        return unknown.model_copy(
            update={
                "note": f"the drafter proposes fewer tokens than the schedule's K at will "
                f"({per_draft:.2f} per draft): {positions} are lower bounds"
            }
        )
    if setup.spec_tokens != spec_tokens:
        return unknown.model_copy(
            update={
                "note": f"the args say K={setup.spec_tokens}, the engine exports {spec_tokens} "
                f"positions (a restart pending?): {positions} are lower bounds"
            }
        )
    mix = _schedule_mix(setup, batch_samples, per_draft)
    if mix is None:
        return unknown.model_copy(
            update={
                "note": f"{per_draft:.2f} draft tokens per draft does not fit the schedule "
                f"{setup.label}: {positions} are lower bounds"
            }
        )
    share = tuple(sum(f for k, f in mix.items() if k > i) for i in range(spec_tokens))
    return ProposedLengths(share=share, how=Proposals.SCHEDULE, tokens_per_draft=per_draft, mix=mix)


def _schedule_mix(
    setup: Setup, batch_samples: Sequence[float], per_draft: float
) -> dict[int, float] | None:
    """K -> share of drafts: the batch samples' mix (b drafts a step at batch b), tilted to
    the measured mean; None when the mean is outside what the schedule's K values allow."""
    values = sorted(
        {b.spec_tokens for b in setup.schedule if b.spec_tokens > 0}
        | ({setup.spec_tokens} if setup.spec_tokens > 0 else set())
    )
    if not values or not values[0] - FULL_PROPOSALS <= per_draft <= values[-1] + FULL_PROPOSALS:
        return None
    batches = np.maximum(np.round(np.asarray(batch_samples, dtype=np.float64)), 1.0)
    ks = setup.spec_tokens_at(batches.astype(np.int64)) if len(batches) else np.zeros(0)
    prior = np.array([float(batches[ks == k].sum()) for k in values])
    # A K no sample showed may still have run between scrapes: a small weight, not none.
    prior = np.maximum(prior, 1e-3 * max(float(prior.sum()), 1.0))
    prior /= prior.sum()
    k = np.asarray(values, dtype=np.float64)

    def tilted(theta: float) -> npt.NDArray[np.float64]:
        logits = np.log(prior) + theta * k
        weights = np.exp(logits - logits.max())
        return np.asarray(weights / weights.sum(), dtype=np.float64)

    if len(values) == 1 or per_draft <= values[0]:
        mix = np.eye(len(values))[0]
    elif per_draft >= values[-1]:
        mix = np.eye(len(values))[-1]
    else:
        low, high = -60.0, 60.0  # the tilted mean rises with theta
        for _ in range(100):
            middle = (low + high) / 2
            if float(tilted(middle) @ k) < per_draft:
                low = middle
            else:
                high = middle
        mix = tilted((low + high) / 2)
    return {int(v): float(f) for v, f in zip(values, mix, strict=True) if f > 0}


def _span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


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
