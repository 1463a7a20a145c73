"""The sidecar's own metrics, health and /decision endpoints.

A private CollectorRegistry; event counts are Counters, everything that describes the latest
step (observation, recommendation, state) comes from a custom collector reading one snapshot,
so a scrape always sees one consistent step.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric

from autotuner import __version__
from autotuner.core.acceptance import copy_rule, copy_rule_break_even
from autotuner.core.policy import TunerState
from autotuner.core.types import (
    Action,
    BlockReason,
    Decision,
    Observation,
    Setup,
    UnusableReason,
)

PREFIX = "autotuner"
ERROR_KINDS = ("read", "patch", "conflict", "state", "event", "lease", "step")


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
    crossover: tuple[str, str, int] | None = None  # (from, to, batch)
    calibration: dict[str, float] = field(default_factory=dict)
    quick_rule_rate: float | None = None
    mode: str = "advise"


class TunerMetrics:
    """Counters plus a collector over the latest Snapshot, in a private registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.lock = threading.Lock()
        self.snapshot = Snapshot()
        self.decisions = Counter(
            f"{PREFIX}_decisions", "Decisions by action.", ["action"], registry=self.registry
        )
        self.patches = Counter(
            f"{PREFIX}_patches",
            "Changes written to the target, by kind.",
            ["kind"],
            registry=self.registry,
        )
        self.reverts = Counter(
            f"{PREFIX}_reverts", "Changes reverted after verification.", registry=self.registry
        )
        self.errors = Counter(
            f"{PREFIX}_errors", "Errors by kind.", ["kind"], registry=self.registry
        )
        self.unusable = Counter(
            f"{PREFIX}_unusable_windows",
            "Unusable windows by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.drift = Counter(
            f"{PREFIX}_drift", "Managed flags changed by someone else.", registry=self.registry
        )
        self.canary_runs = Counter(
            f"{PREFIX}_canary_runs",
            "Quality canary runs by phase (baseline, before, after) and outcome.",
            ["phase", "outcome"],
            registry=self.registry,
        )
        self.quality_regressions = Counter(
            f"{PREFIX}_quality_regressions",
            "Switches reverted because the quality canary got worse.",
            registry=self.registry,
        )
        # Every label value exists from the start, so rate() and alerts see a 0, not nothing.
        for action in Action:
            self.decisions.labels(action.value)
        for kind in ("switch", "revert"):
            self.patches.labels(kind)
        for kind in ERROR_KINDS:
            self.errors.labels(kind)
        for reason in UnusableReason:
            self.unusable.labels(reason.value)
        for phase in ("baseline", "before", "after"):
            for outcome in ("ok", "skipped", "error"):
                self.canary_runs.labels(phase, outcome)
        self.registry.register(_SnapshotCollector(self))

    def update(self, snapshot: Snapshot) -> None:
        with self.lock:
            self.snapshot = snapshot

    def current(self) -> Snapshot:
        with self.lock:
            return self.snapshot

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _SnapshotCollector:
    def __init__(self, metrics: TunerMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        s = self.metrics.current()
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
        obs = s.observation
        yield _gauge(
            "observation_usable",
            "1 when the latest window was usable.",
            float(bool(obs and obs.usable)),
        )
        if obs is not None and obs.batch is not None:
            batch = GaugeMetricFamily(
                f"{PREFIX}_observed_batch",
                "Running requests per engine in the window.",
                labels=["quantile"],
            )
            for label, value in (
                ("mean", obs.batch.mean),
                ("0.5", obs.batch.p50),
                ("0.9", obs.batch.p90),
                ("0.99", obs.batch.p99),
            ):
                batch.add_metric([label], value)
            yield batch
        if obs is not None and obs.step_time_s is not None:
            yield _gauge("observed_step_seconds", "Measured decode step time.", obs.step_time_s)
        if obs is not None and obs.generation_tokens_per_s is not None:
            yield _gauge(
                "observed_tokens_per_second",
                "Measured generation tokens/s.",
                obs.generation_tokens_per_s,
            )
        if obs is not None and obs.acceptance is not None:
            rate = GaugeMetricFamily(
                f"{PREFIX}_acceptance_rate",
                "Conditional acceptance per draft position.",
                labels=["position"],
            )
            for position, value in enumerate(obs.acceptance.per_position):
                rate.add_metric([str(position)], value)
            yield rate
            yield _gauge(
                "tau", "Tokens kept per verify step at the deployed K.", obs.acceptance.tau
            )
        if s.quick_rule_rate is not None and s.live is not None and s.live.spec_tokens:
            drafts = s.live.spec_tokens
            yield _gauge(
                "quick_rule",
                "copy_rule(p, T) at the deployed K: > 1 means "
                "speculation with state copies still wins when state dominates.",
                copy_rule(s.quick_rule_rate, drafts),
            )
            yield _gauge(
                "quick_rule_break_even_rate",
                "Acceptance at which the rule is 1.",
                copy_rule_break_even(drafts),
            )
        decision = s.decision
        if decision is not None:
            predicted = GaugeMetricFamily(
                f"{PREFIX}_predicted_tokens_per_second",
                "Expected tokens/s of each candidate setup over the batch distribution.",
                labels=["setup"],
            )
            for label, value in decision.predicted_tokens_per_s.items():
                predicted.add_metric([label], value)
            yield predicted
            yield _gauge("gain", "Predicted gain of the recommended setup.", decision.gain)
            yield _gauge("confidence", "Confidence of the recommendation.", decision.confidence)
            current = GaugeMetricFamily(
                f"{PREFIX}_current_setup", "The deployed setup.", labels=["setup"]
            )
            current.add_metric([(s.live or decision.current).label], 1.0)
            yield current
            recommended = GaugeMetricFamily(
                f"{PREFIX}_recommended_setup", "The setup the policy recommends.", labels=["setup"]
            )
            recommended.add_metric([(decision.target or decision.current).label], 1.0)
            yield recommended
            blocked = GaugeMetricFamily(
                f"{PREFIX}_blocked", "The rule that blocked a switch (one-hot).", labels=["reason"]
            )
            for reason in BlockReason:
                blocked.add_metric([reason.value], float(decision.blocked_by is reason))
            yield blocked
            yield _gauge("last_decision_id", "Id of the latest decision.", float(decision.id))
            yield _gauge("last_decision_timestamp_seconds", "When it was made.", decision.at)
        if s.crossover is not None:
            crossover = GaugeMetricFamily(
                f"{PREFIX}_predicted_crossover_batch",
                "Batch at which the faster setup changes.",
                labels=["from", "to"],
            )
            crossover.add_metric([s.crossover[0], s.crossover[1]], float(s.crossover[2]))
            yield crossover
        yield from _quality(s.state)
        calibration = GaugeMetricFamily(
            f"{PREFIX}_calibration_factor",
            "Measured / predicted step time per setup and band.",
            labels=["setup", "band"],
        )
        for key, value in s.calibration.items():
            label, _, band = key.partition("|")
            calibration.add_metric([label, band], value)
        yield calibration
        known = GaugeMetricFamily(
            f"{PREFIX}_unusable_reason",
            "Why the latest window was unusable (one-hot).",
            labels=["reason"],
        )
        for unusable in UnusableReason:
            known.add_metric([unusable.value], float(bool(obs and obs.reason is unusable)))
        yield known


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", documentation, value=value)


def _quality(state: TunerState) -> Iterator[Metric]:
    """The latest quality check (one-hot by status) and the one in flight, if any."""
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
    if state.last_quality is not None and state.last_quality.confidence is not None:
        yield _gauge(
            "quality_regression_confidence",
            "How sure the latest canary comparison is that quality got worse (1 - p).",
            state.last_quality.confidence,
        )


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
        "crossover": list(snapshot.crossover) if snapshot.crossover else None,
        "calibration": snapshot.calibration,
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
