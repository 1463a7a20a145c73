"""The quality guard inside the loop: when the canary may run, and turning runs into the
`QualityCheck` the policy's verification reads.

The controller calls three things: `baseline` (refresh the canary of the running setup while
the server is quiet), `before` (the run a switch is judged against: the fresh baseline, or one
taken now) and `after` (once the new setup serves: run, compare, pass or fail). Each returns a
result the controller stores in the TunerState, so a restarted sidecar finishes the comparison.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from autotuner.canary.compare import Comparison, Verdict, compare
from autotuner.canary.run import CanaryPrompt, CanaryRun, load_canary, run_canary
from autotuner.core.decide.state import QualityCheck, QualityStatus
from autotuner.core.types import Observation, Setup
from autotuner.core.vocabulary import Word
from autotuner.durations import format_duration
from autotuner.errors import CanaryError, InputError
from autotuner.settings import QualitySettings


def admission(
    observation: Observation,
    *,
    cost_tokens: float,
    capacity_tokens_per_s: float | None,
    settings: QualitySettings,
) -> str | None:
    """Why the canary may not run now (None: it may): saturated, unknown load, over budget."""
    if not observation.usable:
        return "no usable observation of the server's load"
    waiting = observation.waiting_mean or 0.0  # per engine
    if waiting > settings.max_waiting:
        return f"the server is saturated ({waiting:.1f} requests waiting per engine)"
    if not capacity_tokens_per_s or capacity_tokens_per_s <= 0:
        return "the server's capacity is unknown"
    budget = settings.budget_share * 60.0 * capacity_tokens_per_s
    if cost_tokens > budget:
        return (
            f"one canary run costs {cost_tokens:,.0f} tokens, over {settings.budget_share:.0%} "
            f"of a minute's capacity ({budget:,.0f} tokens)"
        )
    return None


class CanaryResult(Word):
    """What one guard call did; its value is what logs and labels print."""

    RAN = "ran"  # the server answered the set
    REUSED = "reused"  # a fresh baseline stands for the run before a switch
    SKIPPED = "skipped"  # not admitted now (saturated, unknown load, over budget)
    ERROR = "error"  # the server did not answer the set


@dataclass(frozen=True)
class Outcome:
    """What one guard call did: the new value to store, and what to tell the operator."""

    result: CanaryResult
    check: QualityCheck | None = None  # for the verification (None: nothing to store yet)
    baseline: CanaryRun | None = None  # a fresh run of the running setup
    why: str | None = None  # why no run happened (skipped, error), also while retrying


class QualityGuard:
    """The canary adapter the controller calls; its HTTP client is injectable."""

    def __init__(
        self,
        settings: QualitySettings,
        base_url: str,
        *,
        client: httpx.Client | None = None,
    ) -> None:
        self.settings = settings
        self.base_url = base_url
        self.prompts: list[CanaryPrompt] = load_canary(
            str(settings.prompts) if settings.prompts else None
        )
        self.client = client

    @property
    def cost_tokens(self) -> float:
        return float(len(self.prompts) * self.settings.max_tokens)

    def _admit(self, observation: Observation, capacity: float | None) -> str | None:
        return admission(
            observation,
            cost_tokens=self.cost_tokens,
            capacity_tokens_per_s=capacity,
            settings=self.settings,
        )

    def _run(self, setup: Setup) -> CanaryRun:
        return run_canary(
            self.base_url,
            self.prompts,
            model=self.settings.model or None,
            max_tokens=self.settings.max_tokens,
            seed=self.settings.seed,
            setup=setup.label,
            timeout_s=self.settings.timeout_s,
            priority=self.settings.priority,
            client=self.client,
        )

    def fresh(self, baseline: dict[str, Any] | None, setup: Setup, now: float) -> bool:
        """A stored baseline still stands for `setup` with this canary set."""
        run = self._load(baseline)
        return (
            run is not None
            and run.setup == setup.label
            and now - run.at < self.settings.baseline_max_age_s
        )

    def baseline(self, setup: Setup, observation: Observation, capacity: float | None) -> Outcome:
        """Refresh the running setup's canary while the server has room for it."""
        why = self._admit(observation, capacity)
        if why is not None:
            return Outcome(CanaryResult.SKIPPED, why=why)
        try:
            return Outcome(CanaryResult.RAN, baseline=self._run(setup))
        except CanaryError as exc:
            return Outcome(CanaryResult.ERROR, why=str(exc))

    def before(
        self,
        baseline: dict[str, Any] | None,
        setup: Setup,
        observation: Observation,
        capacity: float | None,
        now: float,
    ) -> Outcome:
        """The run a switch away from `setup` is judged against."""
        if self.fresh(baseline, setup, now):
            return Outcome(
                CanaryResult.REUSED,
                check=QualityCheck(status=QualityStatus.PENDING, before=baseline, since=now),
            )
        why = self._admit(observation, capacity)
        if why is not None:
            check = _skipped(f"no canary before the switch: {why}")
            return Outcome(CanaryResult.SKIPPED, check=check, why=why)
        try:
            run = self._run(setup)
        except CanaryError as exc:
            check = _skipped(f"no canary before the switch: {exc}")
            return Outcome(CanaryResult.ERROR, check=check, why=str(exc))
        return Outcome(
            CanaryResult.RAN,
            check=QualityCheck(status=QualityStatus.PENDING, before=run.to_record(), since=now),
            baseline=run,
        )

    def after(
        self,
        check: QualityCheck,
        setup: Setup,
        observation: Observation,
        capacity: float | None,
        now: float,
    ) -> Outcome:
        """Run on the new setup and compare; a run that cannot happen yet is retried until
        `after_deadline_s`, then the check is skipped."""
        before = self._load(check.before)
        if before is None:
            return Outcome(
                CanaryResult.SKIPPED,
                check=_skipped(
                    "the canary set or its request settings changed since the run before the switch"
                ),
            )
        late = check.since is not None and now - check.since > self.settings.after_deadline_s
        why = self._admit(observation, capacity)
        result = CanaryResult.SKIPPED
        if why is None:
            try:
                run = self._run(setup)
            except CanaryError as exc:
                why, result = str(exc), CanaryResult.ERROR
            else:
                return self._judge(before, run)
        if late:
            deadline = format_duration(self.settings.after_deadline_s)
            check = _skipped(f"no canary after the switch within {deadline}: {why}")
            return Outcome(result, check=check, why=why)
        return Outcome(result, why=why)

    def _judge(self, before: CanaryRun, after: CanaryRun) -> Outcome:
        """Compare the run after the switch with the one before: passed or failed."""
        if before.model and after.model and before.model != after.model:
            return Outcome(
                CanaryResult.RAN,
                check=_skipped(
                    f"the served model changed ({before.model} -> {after.model}) since "
                    "the run before the switch: not comparable"
                ),
            )
        comparison = compare(
            before, after, noise_rate=self.settings.noise_rate, alpha=self.settings.alpha
        )
        failed = comparison.verdict is Verdict.WORSE
        return Outcome(
            CanaryResult.RAN,
            check=QualityCheck(
                status=QualityStatus.FAILED if failed else QualityStatus.PASSED,
                summary=f"{comparison.verdict.value}: {comparison.summary}",
                confidence=comparison.confidence,
                evidence=evidence(before, after, comparison),
            ),
            baseline=None if failed else after,
        )

    def _load(self, data: dict[str, Any] | None) -> CanaryRun | None:
        """A stored run, if it was made with this canary set and these request settings."""
        if data is None:
            return None
        try:
            run = CanaryRun.from_record(data, self.prompts)
        except InputError:
            return None
        same = run.max_tokens == self.settings.max_tokens and run.seed == self.settings.seed
        return run if same else None


def evidence(
    before: CanaryRun, after: CanaryRun, comparison: Comparison, *, limit: int = 6
) -> tuple[str, ...]:
    """One line per diverged prompt (early ones first): where, and both texts from there."""
    lines = []
    indexed = list(enumerate(comparison.prompts))
    for i, result in sorted(indexed, key=lambda item: not item[1].early):
        if result.identical or result.first_divergence is None:
            continue
        at = result.first_divergence
        old, new = before.outputs[i][at : at + 40], after.outputs[i][at : at + 40]
        when = "early" if result.early else "late"
        lines.append(f"{result.name}: diverged at char {at} ({when}): {old!r} -> {new!r}")
    return tuple(lines[:limit])


def _skipped(why: str) -> QualityCheck:
    return QualityCheck(status=QualityStatus.SKIPPED, summary=why)
