"""The quality guard's phases of a loop step: keep a fresh canary of the running setup, take the
one a switch is judged against, and run the one after it once the new setup serves. What each
finds goes into the TunerState (so a restarted sidecar finishes the comparison); the policy
reads it in verification."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from autotuner.actuators.base import LiveTarget
from autotuner.core.decide.readings import Capacity
from autotuner.core.decide.state import QualityCheck, QualityStatus, TunerState, Verification
from autotuner.core.decide.step import Notice, NoticeKind
from autotuner.core.types import Observation, Setup
from autotuner.telling.counting import CanaryRunOutcome, CanaryStage
from autotuner.telling.notifier import Notifier

if TYPE_CHECKING:  # httpx is imported only where a guard is configured
    from autotuner.canary.guard import Outcome, QualityGuard

ERROR_BACKOFF_STEPS = 4  # a canary that failed to run is retried after this many steps


class CanaryPhase:
    """The guard's calls within the loop, with their back-off after a failed run."""

    def __init__(
        self, guard: QualityGuard | None, off: str, notifier: Notifier, interval_s: float
    ) -> None:
        self.guard, self.off, self.notifier, self.interval_s = guard, off, notifier, interval_s
        self.retry_at = 0.0

    def refresh(
        self,
        state: TunerState,
        observation: Observation,
        live: LiveTarget | None,
        capacity: Capacity,
        now: float,
    ) -> TunerState:
        """After a switch: the after-run once the new setup serves. Otherwise a fresh canary
        of the running setup, taken while the server has room for it."""
        if self.guard is None or now < self.retry_at:
            return state
        if state.verification is not None:
            return self._after(state, state.verification, observation, live, capacity, now)
        serving = live.setup if live is not None else None
        current = state.current or serving
        if current is None or (serving is not None and serving != current):
            return state
        if self.guard.fresh(state.canary_baseline, current, now):
            return state
        outcome = self.guard.baseline(current, observation, capacity(current))
        self._count(CanaryStage.BASELINE, outcome)
        if outcome.baseline is None:
            self._retry_later(outcome, now)
            return state
        return state.with_canary_baseline(outcome.baseline.to_record())

    def before_switch(
        self, before: TunerState, after: TunerState, observation: Observation, capacity: Capacity
    ) -> TunerState:
        """Attach the quality check to the verification the switch starts."""
        verification = after.verification
        if verification is None:
            return after
        previous, now = verification.previous, verification.switched_at
        if self.guard is None:
            check = QualityCheck(status=QualityStatus.SKIPPED, summary=self.off)
        else:
            outcome = self.guard.before(
                before.canary_baseline, previous, observation, capacity(previous), now
            )
            self._count(CanaryStage.BEFORE, outcome)
            check = outcome.check or QualityCheck(status=QualityStatus.SKIPPED, summary="no canary")
            if outcome.baseline is not None:
                after = after.with_canary_baseline(outcome.baseline.to_record())
        if check.status is QualityStatus.SKIPPED:
            self._report(previous, verification.target, check)
        return after.checking_quality(check)

    def _after(
        self,
        state: TunerState,
        verification: Verification,
        observation: Observation,
        live: LiveTarget | None,
        capacity: Capacity,
        now: float,
    ) -> TunerState:
        """The run after the switch `verification` follows, once the new setup serves."""
        assert self.guard is not None
        check = verification.quality
        ready = live is None or live.rollout.done
        if check is None or check.status is not QualityStatus.PENDING or not ready:
            return state
        if live is not None and live.setup != verification.target:
            return state
        target = verification.target
        outcome = self.guard.after(check, target, observation, capacity(target), now)
        self._count(CanaryStage.AFTER, outcome)
        if outcome.check is None:  # not yet: saturated or not answering
            self._retry_later(outcome, now)
            return state
        self._report(verification.previous, target, outcome.check)
        state = state.checking_quality(outcome.check)
        if outcome.baseline is not None:
            state = state.with_canary_baseline(outcome.baseline.to_record())
        return state

    def _count(self, stage: CanaryStage, outcome: Outcome) -> None:
        """Count a run, or say why there was none."""
        if outcome.result == "reused":
            return
        ran = outcome.result == "ran"
        counted = CanaryRunOutcome.OK if ran else CanaryRunOutcome(outcome.result.value)
        self.notifier.metrics.count_canary(stage, counted)
        if not ran:
            level = logging.WARNING if outcome.result == "error" else logging.DEBUG
            message = f"quality canary ({stage.value}) {outcome.result}: {outcome.why}"
            self.notifier.log(message, level)

    def _retry_later(self, outcome: Outcome, now: float) -> None:
        steps = ERROR_BACKOFF_STEPS if outcome.result == "error" else 1
        self.retry_at = now + steps * self.interval_s

    def _report(self, previous: Setup, target: Setup, check: QualityCheck) -> None:
        message = f"quality canary {previous.label} -> {target.label}: {check.summary}"
        if check.status is QualityStatus.FAILED:
            # Told when judged, before the revert is written: a revert whose patch fails (or
            # whose restart takes minutes) is still a regression the operator must see.
            notice = Notice(NoticeKind.QUALITY_REGRESSION, message)
            self.notifier.tell(notice, evidence=list(check.evidence))
        elif check.status is QualityStatus.SKIPPED:
            self.notifier.tell(Notice(NoticeKind.CANARY_SKIPPED, message))
        else:
            self.notifier.log(message)
