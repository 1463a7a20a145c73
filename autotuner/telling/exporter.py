"""The sidecar's own metrics, health and /decision endpoints.

A private CollectorRegistry; event counts are Counters, everything that describes the latest
step (observation, recommendation, state) comes from a custom collector reading one snapshot,
so a scrape always sees one consistent step.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric

from autotuner import __version__
from autotuner.core.decide.state import TunerState
from autotuner.core.engine.capabilities import EngineCapabilities
from autotuner.core.predict.acceptance import copy_rule, copy_rule_break_even
from autotuner.core.predict.attribution import Factor
from autotuner.core.predict.costmodel import Crossover
from autotuner.core.types import Action, BlockReason, Decision, Observation, Setup
from autotuner.errors import UnusableReason
from autotuner.telling.notifier import ErrorKind

PREFIX = "autotuner"
PHASE_BUCKETS = (0.001, 0.005, 0.02, 0.1, 0.5, 2.0, 10.0, 60.0, 300.0)


@dataclass
class Snapshot:
    """Everything the exporter shows about the latest loop step."""

    at: float = 0.0
    observation: Observation | None = None
    decision: Decision | None = None
    state: TunerState = field(default_factory=TunerState)
    live: Setup | None = None
    leader: bool = False
    paused: bool = False
    rollout_stuck: bool = False
    last_usable_at: float | None = None
    crossover: Crossover | None = None
    calibration: list[Factor] = field(default_factory=list)
    quick_rule_rate: float | None = None
    mode: str = "advise"
    inputs: dict[str, Any] = field(default_factory=dict)  # workload inputs with their sources
    engine: EngineCapabilities | None = None  # what the build accepts, as this step saw it


class TunerMetrics:
    """Counters of what happened, plus one collector per concern over the latest Snapshot
    (status, observation, decision, quality, calibration), in a private registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.lock = threading.Lock()
        self.snapshot = Snapshot()
        self._counters()
        self.phase_seconds = Histogram(
            f"{PREFIX}_step_phase_seconds",
            "Time spent in each phase of a loop step.",
            ["phase"],
            buckets=PHASE_BUCKETS,
            registry=self.registry,
        )
        for collector in (
            StatusCollector,
            ObservationCollector,
            DecisionCollector,
            QualityCollector,
            CalibrationCollector,
        ):
            self.registry.register(collector(self.current))

    def _counters(self) -> None:
        def counter(name: str, documentation: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(f"{PREFIX}_{name}", documentation, labels, registry=self.registry)

        self.decisions = counter("decisions", "Decisions by action.", ("action",))
        self.patches = counter("patches", "Changes written to the target, by kind.", ("kind",))
        self.reverts = counter(
            "reverts", "Changes reverted (a regression, a stuck rollout, a refused restart)."
        )
        self.errors = counter("errors", "Errors by kind.", ("kind",))
        self.unusable = counter("unusable_windows", "Unusable windows by reason.", ("reason",))
        self.drift = counter("drift", "Managed flags changed by someone else.")
        self.canary_runs = counter(
            "canary_runs",
            "Quality canary runs by phase (baseline, before, after) and outcome.",
            ("phase", "outcome"),
        )
        self.quality_regressions = counter(
            "quality_regressions", "Switches the quality canary judged worse (then reverted)."
        )
        # Every label value exists from the start, so rate() and alerts see a 0, not nothing.
        for action in Action:
            self.decisions.labels(action.value)
        for kind in ("switch", "revert"):
            self.patches.labels(kind)
        for error in ErrorKind:
            self.errors.labels(error.value)
        for reason in UnusableReason:
            self.unusable.labels(reason.value)
        for phase in ("baseline", "before", "after"):
            for outcome in ("ok", "skipped", "error"):
                self.canary_runs.labels(phase, outcome)

    def update(self, snapshot: Snapshot) -> None:
        with self.lock:
            self.snapshot = snapshot

    def current(self) -> Snapshot:
        with self.lock:
            return self.snapshot

    def render(self) -> bytes:
        return generate_latest(self.registry)


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
        yield _gauge("advisory", "1 in advise mode (never patches).", float(s.mode == "advise"))
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
            for status in ("pending", "passed", "failed", "skipped"):
                family.add_metric([status], float(check is not None and check.status == status))
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
            "every setup shares (term=shared) or on what a family adds (term=spec, replay, ...); "
            "only factors the evidence moved from 1.",
            labels=["term", "kernel", "band"],
        )
        for factor in s.calibration:
            calibration.add_metric([factor.term, factor.kernel, str(factor.band)], factor.factor)
        yield calibration


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", documentation, value=value)


def _of(decision: Decision | None, name: str) -> float:
    return float(getattr(decision, name)) if decision is not None else 0.0


def decision_document(snapshot: Snapshot) -> dict[str, Any]:
    """The /decision body: the last Decision with every number behind it."""
    obs = snapshot.observation
    return {
        "at": snapshot.at,
        "mode": snapshot.mode,
        "leader": snapshot.leader,
        "paused": snapshot.paused,
        "live_setup": snapshot.live.label if snapshot.live else None,
        "decision": snapshot.decision.model_dump(mode="json") if snapshot.decision else None,
        "observation": obs.model_dump(mode="json", exclude={"batch": {"values"}}) if obs else None,
        "crossover": _crossover_document(snapshot.crossover),
        "calibration": [f._asdict() for f in snapshot.calibration],
        "inputs": snapshot.inputs,
        "engine": snapshot.engine.model_dump(mode="json") if snapshot.engine else None,
        "state": {
            "current": snapshot.state.current.label if snapshot.state.current else None,
            "verification": snapshot.state.verification.model_dump(mode="json")
            if snapshot.state.verification
            else None,
            "changes": list(snapshot.state.changes),
            "quarantine": snapshot.state.quarantine,
            "acceptance_drafts": snapshot.state.acceptance.drafts,
            "quality": snapshot.state.last_quality.model_dump(mode="json")
            if snapshot.state.last_quality
            else None,
            "refused": {k: r.model_dump(mode="json") for k, r in snapshot.state.refused.items()},
        },
    }


def _crossover_document(flip: Crossover | None) -> list[object] | None:
    """[from, to, batch], as the dashboard's /decision readers expect."""
    return [flip.loser, flip.winner, flip.batch] if flip is not None else None


class ExporterServer:
    """/metrics, /healthz (the loop is alive), /readyz (profile loaded and data fresh),
    /decision (JSON)."""

    def __init__(
        self, metrics: TunerMetrics, *, host: str, port: int, alive: Any, ready: Any
    ) -> None:
        self.metrics = metrics
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                return

            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                if path == "/metrics":
                    self._reply(
                        200, exporter.metrics.render(), "text/plain; version=0.0.4; charset=utf-8"
                    )
                elif path == "/healthz":
                    ok = bool(alive())
                    self._reply(200 if ok else 503, b"ok\n" if ok else b"loop stalled\n")
                elif path == "/readyz":
                    ok, why = ready()
                    self._reply(200 if ok else 503, f"{why}\n".encode())
                elif path == "/decision":
                    body = json.dumps(decision_document(exporter.metrics.current()), indent=2)
                    self._reply(200, body.encode(), "application/json")
                else:
                    self._reply(404, b"not found\n")

            def _reply(self, status: int, body: bytes, kind: str = "text/plain") -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
