"""The metrics that describe the latest loop step: one collector per concern (status,
observation, decision, quality, calibration), each reading one Snapshot so that a scrape sees
one consistent step."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric

from autotuner import __version__
from autotuner.core.decide.state import QualityStatus
from autotuner.core.predict.acceptance import copy_rule, copy_rule_break_even
from autotuner.core.types import BlockReason, Decision
from autotuner.errors import UnusableReason
from autotuner.settings import Mode
from autotuner.telling.snapshot import Snapshot

PREFIX = "autotuner"


class _SnapshotCollector:
    """A collector over the latest Snapshot. `describe()` yields the families it can produce
    (without samples), so the registry's duplicate-name check covers them."""

    def __init__(self, current: Callable[[], Snapshot]) -> None:
        self.current = current

    def describe(self) -> Iterator[Metric]:
        yield from self.families(Snapshot(), describing=True)

    def collect(self) -> Iterator[Metric]:
        yield from self.families(self.current(), describing=False)

    def families(self, s: Snapshot, *, describing: bool) -> Iterator[Metric]:
        raise NotImplementedError


class StatusCollector(_SnapshotCollector):
    """Build, leadership, mode, pause, rollout and data freshness."""

    def families(self, s: Snapshot, *, describing: bool) -> Iterator[Metric]:
        info = InfoMetricFamily(f"{PREFIX}_build", "Version of spec-autotuner.")
        info.add_metric([], {"version": __version__})
        yield info
        yield _gauge("leader", "1 when this instance holds the Lease.", float(s.leader))
        yield _gauge("paused", "1 while tuning is paused.", float(s.paused))
        yield _gauge("advisory", "1 in advise mode (never patches).", float(s.mode is Mode.ADVISE))
        yield _gauge(
            "rollout_stuck", "1 when the rollout after our change is stuck.", float(s.rollout_stuck)
        )
        staleness = (s.at - s.last_usable_at) if s.last_usable_at is not None else float("inf")
        yield _gauge("data_staleness_seconds", "Seconds since the last usable window.", staleness)


class ObservationCollector(_SnapshotCollector):
    """The latest window: batch, step time, tokens/s, acceptance, the quick rule."""

    def families(self, s: Snapshot, *, describing: bool) -> Iterator[Metric]:
        obs = s.observation
        yield _gauge(
            "observation_usable",
            "1 when the latest window was usable.",
            float(bool(obs and obs.usable)),
        )
        known = GaugeMetricFamily(
            f"{PREFIX}_unusable_reason",
            "Why the latest window was unusable (one-hot).",
            labels=["reason"],
        )
        for unusable in UnusableReason:
            known.add_metric([unusable.value], float(bool(obs and obs.reason is unusable)))
        yield known
        if describing or (obs is not None and obs.batch is not None):
            batch = GaugeMetricFamily(
                f"{PREFIX}_observed_batch",
                "Running requests per engine in the window.",
                labels=["quantile"],
            )
            if obs is not None and obs.batch is not None:
                for label, value in (
                    ("mean", obs.batch.mean),
                    ("0.5", obs.batch.p50),
                    ("0.9", obs.batch.p90),
                    ("0.99", obs.batch.p99),
                ):
                    batch.add_metric([label], value)
            yield batch
        step = obs.step_time_s if obs else None
        if describing or step is not None:
            yield _gauge("observed_step_seconds", "Measured decode step time.", step or 0.0)
        tokens = obs.generation_tokens_per_s if obs else None
        if describing or tokens is not None:
            yield _gauge(
                "observed_tokens_per_second", "Measured generation tokens/s.", tokens or 0.0
            )
        yield from self._acceptance(s, describing)

    def _acceptance(self, s: Snapshot, describing: bool) -> Iterator[Metric]:
        stats = s.observation.acceptance if s.observation else None
        if describing or stats is not None:
            rate = GaugeMetricFamily(
                f"{PREFIX}_acceptance_rate",
                "Conditional acceptance per draft position.",
                labels=["position"],
            )
            for position, value in enumerate(stats.per_position if stats else ()):
                rate.add_metric([str(position)], value)
            yield rate
            tau = stats.tau if stats else 0.0
            yield _gauge("tau", "Tokens kept per verify step at the deployed K.", tau)
        drafts = s.live.spec_tokens if s.live else 0
        if describing or (s.quick_rule_rate is not None and drafts):
            yield _gauge(
                "quick_rule",
                "copy_rule(p, T) at the deployed K: > 1 means "
                "speculation with state copies still wins when state dominates.",
                copy_rule(s.quick_rule_rate or 0.0, max(drafts, 1)),
            )
            yield _gauge(
                "quick_rule_break_even_rate",
                "Acceptance at which the rule is 1.",
                copy_rule_break_even(max(drafts, 1)),
            )


class DecisionCollector(_SnapshotCollector):
    """The latest decision: predictions, gain, the setups, what blocked it, the crossover."""

    def families(self, s: Snapshot, *, describing: bool) -> Iterator[Metric]:
        decision = s.decision
        if describing or decision is not None:
            yield from self._decision(s, decision)
        if describing or s.crossover is not None:
            crossover = GaugeMetricFamily(
                f"{PREFIX}_predicted_crossover_batch",
                "Batch at which the faster setup changes.",
                labels=["from", "to"],
            )
            if s.crossover is not None:
                flip = s.crossover
                crossover.add_metric([flip.loser, flip.winner], float(flip.batch))
            yield crossover

    def _decision(self, s: Snapshot, decision: Decision | None) -> Iterator[Metric]:
        predicted = GaugeMetricFamily(
            f"{PREFIX}_predicted_tokens_per_second",
            "Expected tokens/s of each candidate setup over the batch distribution.",
            labels=["setup"],
        )
        current = GaugeMetricFamily(
            f"{PREFIX}_current_setup", "The deployed setup.", labels=["setup"]
        )
        recommended = GaugeMetricFamily(
            f"{PREFIX}_recommended_setup", "The setup the policy recommends.", labels=["setup"]
        )
        blocked = GaugeMetricFamily(
            f"{PREFIX}_blocked", "The rule that blocked a switch (one-hot).", labels=["reason"]
        )
        if decision is not None:
            for label, value in decision.predicted_tokens_per_s.items():
                predicted.add_metric([label], value)
            current.add_metric([(s.live or decision.current).label], 1.0)
            recommended.add_metric([(decision.target or decision.current).label], 1.0)
            for reason in BlockReason:
                blocked.add_metric([reason.value], float(decision.blocked_by is reason))
        yield predicted
        yield _gauge("gain", "Predicted gain of the recommended setup.", _of(decision, "gain"))
        yield _gauge("confidence", "Confidence of the recommendation.", _of(decision, "confidence"))
        yield current
        yield recommended
        yield blocked
        yield _gauge("last_decision_id", "Id of the latest decision.", _of(decision, "id"))
        yield _gauge("last_decision_timestamp_seconds", "When it was made.", _of(decision, "at"))


class QualityCollector(_SnapshotCollector):
    """The latest quality check (one-hot by status), the one in flight, and its confidence."""

    def families(self, s: Snapshot, *, describing: bool) -> Iterator[Metric]:
        state = s.state
        checks = (
            (
                "quality_check",
                "The latest finished quality check (one-hot by status).",
                state.last_quality,
            ),
            (
                "quality_check_in_flight",
                "The quality check of the verification in flight (one-hot by status).",
                state.verification.quality if state.verification else None,
            ),
        )
        for name, documentation, check in checks:
            family = GaugeMetricFamily(f"{PREFIX}_{name}", documentation, labels=["status"])
            for status in QualityStatus:
                family.add_metric(
                    [status.value], float(check is not None and check.status is status)
                )
            yield family
        confidence = state.last_quality.confidence if state.last_quality else None
        if describing or confidence is not None:
            yield _gauge(
                "quality_regression_confidence",
                "How sure the latest canary comparison is that quality got worse (1 - p).",
                confidence or 0.0,
            )


class CalibrationCollector(_SnapshotCollector):
    """The cost model's learned corrections (core/attribution.py)."""

    def families(self, s: Snapshot, *, describing: bool) -> Iterator[Metric]:
        calibration = GaugeMetricFamily(
            f"{PREFIX}_calibration_factor",
            "Learned correction of the cost model per kernel class and batch band, on the part "
            "every setup shares (term=shared) or on what a family adds (term=spec, replay, ...), "
            "and kernel=whole_step on a family's whole step (what its bounds withheld); only "
            "factors the evidence moved from 1.",
            labels=["term", "kernel", "band"],
        )
        for factor in s.calibration:
            calibration.add_metric([factor.term, factor.kernel, str(factor.band)], factor.factor)
        yield calibration


class RestartCostCollector(_SnapshotCollector):
    """What restarts cost, learned from the rollouts watched (core/decide/restarts.py)."""

    def families(self, s: Snapshot, *, describing: bool) -> Iterator[Metric]:
        costs = s.state.restart_costs
        learned = GaugeMetricFamily(
            f"{PREFIX}_restart_seconds",
            "Learned seconds from patch to ready: per setup for a restart into a configuration "
            "the engine compiled before (kind=cached), and what a first compile of a new "
            "(replay, L, K) adds (kind=first_compile, setup=any); only what was measured.",
            labels=["setup", "kind"],
        )
        for label, duration in sorted(costs.cached.items()):
            learned.add_metric([label, "cached"], duration.seconds)
        if costs.first_compile is not None:
            learned.add_metric(["any", "first_compile"], costs.first_compile.seconds)
        yield learned


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", documentation, value=value)


def _of(decision: Decision | None, name: str) -> float:
    return float(getattr(decision, name)) if decision is not None else 0.0


COLLECTORS = (
    StatusCollector,
    ObservationCollector,
    DecisionCollector,
    QualityCollector,
    CalibrationCollector,
    RestartCostCollector,
)
