"""Building this step's Decisions: the fields every one shares, the numbers an evaluation gives
them, and the phrases their sentences share."""

from __future__ import annotations

import math
from typing import TypedDict

from autotuner.core.decide.valuation import Evaluation
from autotuner.core.types import Action, BlockReason, Decision, Observation, Setup
from autotuner.errors import UnusableReason


class Make:
    """Builds this step's Decisions: id, time and running setup filled in, every other field
    named (a misspelt one is a TypeError, not a silently dropped key)."""

    def __init__(self, decision_id: int, now: float, current: Setup) -> None:
        self.decision_id, self.now, self.current = decision_id, now, current

    def __call__(
        self,
        action: Action,
        sentence: str,
        *,
        target: Setup | None = None,
        blocked_by: BlockReason | None = None,
        gain: float = 0.0,
        confidence: float = 0.0,
        predicted_tokens_per_s: dict[str, float] | None = None,
        predicted_interval: dict[str, tuple[float, float]] | None = None,
        notes: tuple[str, ...] = (),
        current: Setup | None = None,
    ) -> Decision:
        return Decision(
            id=self.decision_id,
            at=self.now,
            action=action,
            current=current or self.current,
            sentence=sentence,
            target=target,
            blocked_by=blocked_by,
            gain=gain,
            confidence=confidence,
            predicted_tokens_per_s=predicted_tokens_per_s or {},
            predicted_interval=predicted_interval or {},
            notes=notes,
        )


class Numbers(TypedDict):
    target: Setup
    gain: float
    confidence: float
    predicted_tokens_per_s: dict[str, float]
    predicted_interval: dict[str, tuple[float, float]]
    notes: tuple[str, ...]


def numbers(evaluation: Evaluation) -> Numbers:
    """What a Decision shows of an evaluation (by label: the Decision is the JSON edge)."""
    return {
        "target": evaluation.best,
        "gain": evaluation.gain,
        "confidence": evaluation.confidence,
        "predicted_tokens_per_s": {s.label: v for s, v in evaluation.values.items()},
        "predicted_interval": {s.label: v for s, v in evaluation.intervals.items()},
        "notes": evaluation.notes,
    }


def percent(gain: float) -> str:
    """A gain for a sentence; infinite when the running setup has no estimate yet."""
    return f"{gain:+.1%}" if math.isfinite(gain) else "an unknown amount (no estimate for now)"


def why_unusable(observation: Observation) -> str:
    if observation.usable:
        return "usable"
    reason = observation.reason or UnusableReason.EMPTY
    return f"{reason.value}: {observation.detail}"
