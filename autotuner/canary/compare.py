"""Compare two greedy canary runs: exact match, first divergence, known-answer scores, and a
one-sided exact test that tells "within noise" from "worse".

Greedy decoding on an exact change (speculation, ReplaySSM) should reproduce every output. Real
engines are not bit-exact across batch shapes and kernels, so a few outputs may drift, usually
late. Two tests decide a regression, each as a p-value the operator can read:

* early divergences (before `early_fraction` of the output) against a tolerated rate `noise_rate`:
  binomial P(X >= k | n, noise_rate);
* known-answer scores, paired (McNemar, exact): of the prompts whose correctness changed, how
  unlikely it is that this many got worse if the change were neutral.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from autotuner.canary.run import CanaryPrompt, CanaryRun
from autotuner.errors import InputError


class Verdict(str, Enum):
    IDENTICAL = "identical"
    WITHIN_NOISE = "within_noise"
    WORSE = "worse"


@dataclass(frozen=True, kw_only=True)
class PromptResult:
    name: str
    identical: bool
    first_divergence: int | None  # character offset where the outputs first differ
    length: int  # the longer output, in characters
    early: bool  # diverged before early_fraction of the output
    correct_before: bool | None  # known-answer prompts only
    correct_after: bool | None


@dataclass(frozen=True, kw_only=True)
class Comparison:
    verdict: Verdict
    prompts: tuple[PromptResult, ...]
    exact_match_rate: float
    early_divergences: int
    divergence_p_value: float  # P(this many early divergences | only noise); small = worse
    score_before: float | None
    score_after: float | None
    score_p_value: float | None  # McNemar exact, one-sided; small = worse
    alpha: float
    summary: str

    @property
    def confidence(self) -> float:
        """How sure a WORSE verdict is (1 - the smallest p-value)."""
        p_values = [self.divergence_p_value]
        if self.score_p_value is not None:
            p_values.append(self.score_p_value)
        return 1.0 - min(p_values)


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    if k <= 0:
        return 1.0
    return min(1.0, sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1)))


def first_divergence(a: str, b: str) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _result(prompt: CanaryPrompt, old: str, new: str, early_fraction: float) -> PromptResult:
    at = first_divergence(old, new)
    length = max(len(old), len(new))
    return PromptResult(
        name=prompt.name,
        identical=at is None,
        first_divergence=at,
        length=length,
        early=at is not None and at < early_fraction * length,
        correct_before=prompt.correct(old),
        correct_after=prompt.correct(new),
    )


def _scores(results: list[PromptResult]) -> tuple[float | None, float | None, float | None]:
    """Known-answer scores before and after, and the sign test's p-value for what was lost."""
    scored = [r for r in results if r.correct_before is not None]
    if not scored:
        return None, None, None
    before = sum(bool(r.correct_before) for r in scored) / len(scored)
    after = sum(bool(r.correct_after) for r in scored) / len(scored)
    lost = sum(bool(r.correct_before) and not r.correct_after for r in scored)
    gained = sum(bool(r.correct_after) and not r.correct_before for r in scored)
    return before, after, binomial_tail(lost, lost + gained, 0.5) if lost else 1.0


def compare(
    before: CanaryRun,
    after: CanaryRun,
    *,
    noise_rate: float = 0.05,
    early_fraction: float = 0.5,
    alpha: float = 0.05,
) -> Comparison:
    """Compare `after` with `before`; both must have run the same prompts the same way."""
    if before.prompts_hash != after.prompts_hash:
        raise InputError("the two canary runs used different prompt sets")
    if (before.max_tokens, before.seed) != (after.max_tokens, after.seed):
        raise InputError("the two canary runs used different max_tokens or seed")
    results = [
        _result(prompt, old, new, early_fraction)
        for prompt, old, new in zip(before.prompts, before.outputs, after.outputs, strict=True)
    ]
    n = len(results)
    early = sum(r.early for r in results)
    divergence_p = binomial_tail(early, n, noise_rate)
    score_before, score_after, score_p = _scores(results)
    worse = divergence_p < alpha or (score_p is not None and score_p < alpha)
    identical = all(r.identical for r in results)
    verdict = Verdict.WORSE if worse else Verdict.IDENTICAL if identical else Verdict.WITHIN_NOISE
    diverged = [r for r in results if not r.identical]
    summary = f"{n - len(diverged)}/{n} outputs identical"
    if diverged:
        summary += (
            f"; {early} diverged early (p={divergence_p:.3g} against a {noise_rate:.0%} noise rate)"
        )
        summary += f", first at char {min(r.first_divergence or 0 for r in diverged)}"
    if score_before is not None and score_after is not None:
        summary += f"; known answers {score_before:.0%} -> {score_after:.0%}"
        if score_p is not None and score_p < 1.0:
            summary += f" (p={score_p:.3g})"
    return Comparison(
        verdict=verdict,
        prompts=tuple(results),
        exact_match_rate=(n - len(diverged)) / n if n else 1.0,
        early_divergences=early,
        divergence_p_value=divergence_p,
        score_before=score_before,
        score_after=score_after,
        score_p_value=score_p,
        alpha=alpha,
        summary=summary,
    )
