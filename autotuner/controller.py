"""The observe -> decide -> act -> verify loop: the one place that wires the parts and owns
time. Everything it knows between steps is in the TunerState, persisted on the target."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from autotuner.actuators.base import (
    Actuator,
    ActuatorError,
    ConflictError,
    LiveTarget,
    RestartError,
)
from autotuner.core.acceptance import from_conditional
from autotuner.core.capabilities import PRESETS, EngineCapabilities, needed
from autotuner.core.costmodel import Workload, crossover_batches, max_batch, predict
from autotuner.core.hardware import HardwareProfile, datasheet, load_profile
from autotuner.core.model import ModelSpec
from autotuner.core.observation import unusable
from autotuner.core.policy import Context, QualityCheck, Refusal, TunerState, decide
from autotuner.core.registry import load_model
from autotuner.core.report import equivalent_rate
from autotuner.core.types import Action, Decision, Observation, Setup
from autotuner.exporter import Snapshot, TunerMetrics
from autotuner.logs import event
from autotuner.settings import Settings
from autotuner.sources.errors import SourceError

if TYPE_CHECKING:  # the Kubernetes client is heavy: imported only for k8s targets
    from autotuner.actuators.lease import LeaseElector
    from autotuner.canary.guard import Outcome, QualityGuard

Observer = Callable[[], Observation]
GUARD_DISABLED = "the quality guard is disabled (quality.enabled=false)"


class ScrapeObserver:
    """Direct scrape: one scrape per step into a rolling window."""

    def __init__(self, settings: Settings) -> None:
        from autotuner.sources.vllm_scrape import VllmScraper

        self.window_s = settings.loop.window_s
        self.limits = settings.limits
        self.scraper = VllmScraper(
            settings.source.urls,
            timeout_s=settings.source.timeout_s,
            max_bytes=settings.source.max_bytes,
        )

    def __call__(self) -> Observation:
        try:
            self.scraper.record(self.scraper.scrape(), keep_s=2 * self.window_s)
        except SourceError as exc:
            now = time.time()
            return unusable("vllm", exc.reason, exc.detail, start=now - self.window_s, end=now)
        return self.scraper.observation(self.window_s, self.limits)


class PrometheusObserver:
    def __init__(self, settings: Settings) -> None:
        from autotuner.sources.prometheus_api import PrometheusSource

        self.window_s = settings.loop.window_s
        self.limits = settings.limits
        self.source = PrometheusSource(
            settings.source.urls[0],
            settings.source.selector,
            timeout_s=settings.source.timeout_s,
            scrape_interval_s=settings.source.scrape_interval_s,
        )

    def __call__(self) -> Observation:
        return self.source.observe(self.window_s, limits=self.limits)


@dataclass
class Controller:
    settings: Settings
    model: ModelSpec
    hardware: HardwareProfile
    observe: Observer
    actuator: Actuator | None
    metrics: TunerMetrics
    logger: logging.Logger
    elector: LeaseElector | None = None
    quality: QualityGuard | None = None
    quality_off: str = GUARD_DISABLED  # why there is no guard, said at every switch
    clock: Callable[[], float] = time.time
    state: TunerState | None = None
    last_step_at: float | None = None
    last_usable_at: float | None = None
    state_saved_at: float = 0.0
    canary_retry_at: float = 0.0
    stop_event: threading.Event = field(default_factory=threading.Event)

    def engine(self, state: TunerState, now: float) -> EngineCapabilities:
        """What the engine accepts: the settings, less what it was seen to refuse."""
        engine = self.settings.engine
        configured = PRESETS[engine.capabilities].model_copy(
            update={
                "spec_schedule": engine.spec_schedule,
                "max_spec_tokens": engine.max_spec_tokens,
            }
        )
        return configured.without(k for k, r in state.refused.items() if r.until > now)

    @property
    def workload(self) -> Workload:
        return Workload(
            context_tokens=self.settings.model.context_tokens,
            tensor_parallel=self.settings.model.tensor_parallel,
            drafter=self.settings.model.drafter,
        )

    # ----------------------------------------------------------------- one step

    def step(self) -> Decision:
        now = self.clock()
        observation = self.observe()
        if observation.usable:
            self.last_usable_at = now
        elif observation.reason is not None:
            self.metrics.unusable.labels(observation.reason.value).inc()
        leader = self.elector.try_acquire_or_renew() if self.elector else True
        if self.elector and self.elector.last_error:
            self.metrics.errors.labels("lease").inc()
        live = self._read()
        state = self._state(live, leader)
        state, drifted = self._drift(state, live, now)
        if leader and self.settings.mode == "act" and self.actuator is not None:
            state = self._canary(state, observation, live, now)
        rollout_stuck = bool(live and live.rollout.stuck)
        in_progress = bool(live and not live.rollout.done)
        verification = state.verification
        if (
            verification is not None
            and in_progress
            and now - verification.switched_at > self.settings.target.rollout_deadline_s
        ):
            rollout_stuck = True
        context = Context(
            now=now,
            model=self.model,
            hardware=self.hardware,
            engine=self.engine(state, now),
            workload=self._workload(observation),
            deployed=live.setup if live else None,
            drafter_available=bool(
                (live and live.speculative_config)
                or state.drafter
                or (live is None and observation.live_setup and observation.live_setup.speculation)
            ),
            leader=leader,
            paused=self.settings.target.paused or bool(live and live.paused),
            rollout_in_progress=in_progress and not rollout_stuck,
        )
        if rollout_stuck and verification is not None:
            decision, new_state = self._stuck(state, context, live)
        else:
            decision, new_state = decide(state, observation, context, self.settings.policy)
        decision, new_state = self._carry_out(
            decision, state, new_state, live, leader, now, observation
        )
        self.state = new_state
        self._export(now, observation, decision, new_state, live, leader, rollout_stuck)
        self.last_step_at = now
        if drifted:
            decision = decision.model_copy(update={"notes": (*decision.notes, drifted)})
        return decision

    def _read(self) -> LiveTarget | None:
        if self.actuator is None:
            return None
        try:
            return self.actuator.read()
        except ActuatorError as exc:
            self.metrics.errors.labels("read").inc()
            event(self.logger, f"cannot read the target: {exc}", logging.WARNING)
            return None

    def _state(self, live: LiveTarget | None, leader: bool) -> TunerState:
        """Resume from the target's annotation at start, and follow it while not leading
        (so a new leader continues a verification instead of deciding afresh)."""
        if (self.state is None or not leader) and live is not None and live.state:
            try:
                restored = TunerState.model_validate_json(live.state)
                if self.state is None:
                    event(
                        self.logger,
                        "resumed from the persisted state",
                        decision_id=restored.last_decision_id,
                        verifying=restored.verification is not None,
                    )
                return restored
            except ValueError:
                self.metrics.errors.labels("state").inc()
                event(self.logger, "persisted state unreadable; starting fresh", logging.WARNING)
        state = self.state or TunerState()
        if live is not None and live.speculative_config:
            state = state.model_copy(update={"drafter": live.speculative_config})
        return state

    def _drift(
        self, state: TunerState, live: LiveTarget | None, now: float
    ) -> tuple[TunerState, str | None]:
        """Someone else changed the managed flags: adopt their setup, back off, say so."""
        if live is None or state.current is None or live.setup == state.current:
            return state, None
        message = (
            f"managed flags changed outside the tuner ({state.current.label} -> "
            f"{live.setup.label}): adopting it and backing off for the cooldown"
        )
        self.metrics.drift.inc()
        event(self.logger, message, logging.WARNING, drift=True)
        self._event("DriftDetected", message, warning=True)
        return state.model_copy(
            update={
                "current": live.setup,
                "verification": None,
                "pending": None,
                "changes": (*state.changes, now),
            }
        ), message

    def _stuck(
        self, state: TunerState, context: Context, live: LiveTarget | None
    ) -> tuple[Decision, TunerState]:
        """The rollout after our change cannot finish: revert to the previous setup."""
        assert state.verification is not None
        verification = state.verification
        quarantine = dict(state.quarantine)
        quarantine[verification.target.label] = context.now + self.settings.policy.quarantine_s
        stuck = live.rollout.stuck if live and live.rollout.stuck else "deadline passed"
        decision = Decision(
            id=state.last_decision_id + 1,
            at=context.now,
            action=Action.REVERT,
            current=verification.target,
            target=verification.previous,
            sentence=f"revert {verification.target.label} -> {verification.previous.label}: "
            f"the rollout is stuck ({stuck})",
        )
        return decision, state.model_copy(
            update={
                "current": verification.previous,
                "verification": None,
                "quarantine": quarantine,
                "last_decision_id": decision.id,
                "changes": (*state.changes, context.now),
            }
        )

    def _refusal(
        self, state: TunerState, target: Setup, previous: Setup, why: str, now: float
    ) -> dict[str, Refusal]:
        """After the engine failed to come up with `target`: the capability it needed that
        `previous` did not use is taken as missing for a while (said in an Event)."""
        capability = needed(target, previous)
        refused = dict(state.refused)
        if capability is None:
            return refused
        until = now + 4 * self.settings.policy.quarantine_s
        refused[capability] = Refusal(why=f"{target.label}: {why}", until=until)
        message = (
            f"the engine did not come up with {target.label}: treating {capability} as "
            f"unsupported for {4 * self.settings.policy.quarantine_s / 3600:.0f} h ({why})"
        )
        event(self.logger, message, logging.WARNING, capability=capability)
        self._event("CapabilityRefused", message, warning=True)
        return refused

    def _carry_out(
        self,
        decision: Decision,
        before: TunerState,
        after: TunerState,
        live: LiveTarget | None,
        leader: bool,
        now: float,
        observation: Observation,
    ) -> tuple[Decision, TunerState]:
        self.metrics.decisions.labels(decision.action.value).inc()
        acts = decision.action in (Action.SWITCH, Action.REVERT) and decision.target is not None
        if acts and (self.settings.mode == "advise" or self.actuator is None or not leader):
            # Advisory (or not leading): explain, never write; keep what was learned.
            why = "advisory mode" if self.settings.mode == "advise" else "not the leader"
            after = after.model_copy(
                update={
                    "current": before.current,
                    "last_known_good": before.last_known_good,
                    "verification": before.verification,
                    "changes": before.changes,
                    "quarantine": before.quarantine,
                }
            )
            decision = decision.model_copy(
                update={"notes": (*decision.notes, f"{why}: not applied")}
            )
            self._event("SwitchRecommended", f"{decision.sentence} ({why}: not applied)")
        elif acts and decision.target is not None and self.actuator is not None:
            target = decision.target
            if decision.action is Action.SWITCH:
                after = self._before_switch(before, after, observation, now)
                check = after.verification.quality if after.verification else None
                if check is not None and check.status == "skipped":
                    decision = decision.model_copy(
                        update={"notes": (*decision.notes, f"quality: {check.summary}")}
                    )
            try:
                self.actuator.apply(
                    target,
                    state=after.model_dump_json(),
                    expected_version=live.version if live else None,
                    saved_speculative_config=after.drafter,
                )
            except ConflictError as exc:
                self.metrics.errors.labels("conflict").inc()
                event(
                    self.logger,
                    f"target changed meanwhile; re-deciding next step: {exc}",
                    logging.WARNING,
                )
                return decision.model_copy(
                    update={"notes": (*decision.notes, "conflict: not applied")}
                ), before
            except ActuatorError as exc:
                self.metrics.errors.labels("patch").inc()
                self._event("PatchFailed", f"{decision.sentence}: {exc}", warning=True)
                event(self.logger, f"patch failed: {exc}", logging.ERROR)
                notes = (*decision.notes, f"patch failed: {exc}")
                if isinstance(exc, RestartError):
                    rolled, note = self._roll_back(before, decision.current, target, exc, now)
                    return decision.model_copy(update={"notes": (*notes, note)}), rolled
                return decision.model_copy(update={"notes": notes}), before
            kind = decision.action.value
            self.metrics.patches.labels(kind).inc()
            if decision.action is Action.REVERT:
                self.metrics.reverts.inc()
            self._event(
                "SetupReverted" if decision.action is Action.REVERT else "SetupSwitched",
                decision.sentence,
                warning=decision.action is Action.REVERT,
            )
            self.state_saved_at = now
        elif decision.blocked_by is not None and decision.target is not None:
            operator_visible = {"paused", "budget", "cooldown", "rollout_in_progress"}
            if decision.blocked_by.value in operator_visible and (
                before.last_decision_id == 0 or decision.id % 20 == 1
            ):
                self._event("SwitchBlocked", decision.sentence)
        if (
            leader
            and self.actuator is not None
            and not acts
            and (
                now - self.state_saved_at >= max(60.0, self.settings.loop.interval_s)
                and getattr(self.actuator, "periodic_state", True)
            )
        ):
            try:
                self.actuator.save_state(
                    after.model_dump_json(), expected_version=live.version if live else None
                )
                self.state_saved_at = now
            except ActuatorError as exc:
                self.metrics.errors.labels("state").inc()
                event(self.logger, f"state not saved: {exc}", logging.WARNING)
        event(
            self.logger,
            decision.sentence,
            decision_id=decision.id,
            action=decision.action.value,
            blocked_by=decision.blocked_by.value if decision.blocked_by else None,
            target=decision.target.label if decision.target else None,
            gain=round(decision.gain, 4),
            confidence=round(decision.confidence, 3),
            window=[round(observation.window_start, 3), round(observation.window_end, 3)],
        )
        return decision, after

    def _roll_back(
        self, before: TunerState, previous: Setup, target: Setup, exc: RestartError, now: float
    ) -> tuple[TunerState, str]:
        """The engine did not come up with `target` (args already written): restore the
        previous args, quarantine `target` and remember what it needed."""
        assert self.actuator is not None
        try:
            self.actuator.apply(
                previous,
                state=before.model_dump_json(),
                expected_version=None,
                saved_speculative_config=before.drafter,
            )
        except ActuatorError as again:
            self.metrics.errors.labels("patch").inc()
            event(self.logger, f"roll back to {previous.label} failed: {again}", logging.ERROR)
            return before, f"roll back to {previous.label} failed: {again}"
        self.metrics.patches.labels("revert").inc()
        quarantine = dict(before.quarantine)
        quarantine[target.label] = now + self.settings.policy.quarantine_s
        refused = self._refusal(before, target, previous, str(exc), now)
        self._event(
            "SetupReverted", f"rolled back {target.label} -> {previous.label}: {exc}", warning=True
        )
        state = before.model_copy(update={"quarantine": quarantine, "refused": refused})
        try:
            self.actuator.save_state(state.model_dump_json(), expected_version=None)
        except ActuatorError as failed:
            event(self.logger, f"state not saved: {failed}", logging.WARNING)
        return state, f"rolled back to {previous.label}; {target.label} quarantined"

    # ------------------------------------------------------------ quality guard

    def _canary_capacity(self, state: TunerState, setup: Setup, observation: Observation) -> float:
        """Tokens/s one engine can serve in `setup`: the model's peak, or what it serves now."""
        accept = state.acceptance.estimate(
            self.clock(), self.settings.policy.acceptance_memory_half_life_s
        ) or from_conditional([])
        observed = (observation.generation_tokens_per_s or 0.0) / max(observation.series, 1)
        if setup.spec_tokens > accept.max_spec_tokens:
            return observed
        peak = max_batch(self.model, self.hardware, setup, self.workload)
        curve = predict(self.model, self.hardware, setup, [max(peak, 1)], accept, self.workload)
        return max(observed, float(curve.tokens_per_s[0]))

    def _before_switch(
        self, before: TunerState, after: TunerState, observation: Observation, now: float
    ) -> TunerState:
        """Attach the quality check to the verification the switch starts."""
        verification = after.verification
        if verification is None:
            return after
        previous = verification.previous
        if self.quality is None:
            check = QualityCheck(status="skipped", summary=self.quality_off)
            outcome = None
        else:
            outcome = self.quality.before(
                before.canary_baseline,
                previous,
                observation,
                self._canary_capacity(before, previous, observation),
                now,
            )
            check = outcome.check or QualityCheck(status="skipped", summary="no canary")
            self._count_canary("before", outcome)
        update: dict[str, object] = {
            "verification": verification.model_copy(update={"quality": check})
        }
        if outcome is not None and outcome.baseline is not None:
            update["canary_baseline"] = outcome.baseline.to_record()
        if check.status == "skipped":
            update["last_quality"] = check
            self._report_quality(previous, verification.target, check)
        return after.model_copy(update=update)

    def _canary(
        self, state: TunerState, observation: Observation, live: LiveTarget | None, now: float
    ) -> TunerState:
        """After a switch: run the canary on the new setup once it serves. Otherwise keep a
        fresh canary of the running setup, taken while the server has room for it."""
        guard = self.quality
        if guard is None or now < self.canary_retry_at:
            return state
        verification = state.verification
        serving = live.setup if live is not None else None
        ready = live is None or live.rollout.done
        if verification is not None:
            check = verification.quality
            if check is None or check.status != "pending" or not ready:
                return state
            if serving is not None and serving != verification.target:
                return state
            outcome = guard.after(
                check,
                verification.target,
                observation,
                self._canary_capacity(state, verification.target, observation),
                now,
            )
            self._count_canary("after", outcome)
            if outcome.check is None:  # not yet: saturated or not answering
                self.canary_retry_at = now + self._canary_backoff(outcome)
                return state
            result = outcome.check
            update: dict[str, object] = {
                "verification": verification.model_copy(update={"quality": result}),
                "last_quality": result,
            }
            if outcome.baseline is not None:
                update["canary_baseline"] = outcome.baseline.to_record()
            self._report_quality(verification.previous, verification.target, result)
            return state.model_copy(update=update)
        current = state.current or serving
        if current is None or (serving is not None and serving != current):
            return state
        if guard.fresh(state.canary_baseline, current, now):
            return state
        outcome = guard.baseline(
            current, observation, self._canary_capacity(state, current, observation)
        )
        self._count_canary("baseline", outcome)
        if outcome.baseline is None:
            self.canary_retry_at = now + self._canary_backoff(outcome)
            return state
        return state.model_copy(update={"canary_baseline": outcome.baseline.to_record()})

    def _canary_backoff(self, outcome: Outcome) -> float:
        interval = self.settings.loop.interval_s
        return 4 * interval if outcome.result == "error" else interval

    def _count_canary(self, phase: str, outcome: Outcome) -> None:
        if outcome.result == "reused":
            return
        self.metrics.canary_runs.labels(
            phase, "ok" if outcome.result == "ran" else outcome.result
        ).inc()
        if outcome.result != "ran":
            level = logging.WARNING if outcome.result == "error" else logging.DEBUG
            event(self.logger, f"quality canary ({phase}) {outcome.result}: {outcome.why}", level)

    def _report_quality(self, previous: Setup, target: Setup, check: QualityCheck) -> None:
        message = f"quality canary {previous.label} -> {target.label}: {check.summary}"
        if check.status == "failed":
            # Counted when judged, before the revert is written: a revert whose patch fails
            # (or whose restart takes minutes) is still a regression the operator must see.
            self.metrics.quality_regressions.inc()
            event(self.logger, message, logging.WARNING, evidence=list(check.evidence))
            self._event("QualityRegression", message, warning=True)
        elif check.status == "skipped":
            event(self.logger, message, logging.WARNING)
            self._event("CanarySkipped", message)
        else:
            event(self.logger, message)

    def _event(self, reason: str, message: str, *, warning: bool = False) -> None:
        if self.actuator is None:
            return
        try:
            self.actuator.event(reason, message, warning=warning)
        except ActuatorError as exc:
            self.metrics.errors.labels("event").inc()
            event(self.logger, f"event not posted: {exc}", logging.WARNING)

    def _workload(self, observation: Observation) -> Workload:
        workload = self.workload
        if observation.usable and observation.mean_context_tokens:
            workload = workload.model_copy(
                update={"context_tokens": observation.mean_context_tokens}
            )
        return workload

    def _export(
        self,
        now: float,
        observation: Observation,
        decision: Decision,
        state: TunerState,
        live: LiveTarget | None,
        leader: bool,
        stuck: bool,
    ) -> None:
        setup = (
            live.setup
            if live
            else (observation.live_setup.setup if observation.live_setup else state.current)
        )
        rate = None
        if observation.acceptance is not None and setup is not None and setup.spec_tokens:
            accept = from_conditional(observation.acceptance.per_position)
            rate = equivalent_rate(accept, min(setup.spec_tokens, accept.max_spec_tokens))
        self.metrics.update(
            Snapshot(
                at=now,
                observation=observation,
                decision=decision,
                state=state,
                live=setup,
                leader=leader,
                paused=bool(live and live.paused),
                rollout_stuck=stuck,
                last_usable_at=self.last_usable_at,
                crossover=self._crossover(state, decision),
                calibration=state.calibration.factors(
                    now, self.settings.policy.calibration_half_life_s
                ),
                quick_rule_rate=rate,
                mode=self.settings.mode,
            )
        )

    def _crossover(self, state: TunerState, decision: Decision) -> tuple[str, str, int] | None:
        """The batch at which the running setup stops (or starts) being the faster one against
        its strongest rival of another kind: what the dashboard draws next to the batch."""
        current = state.current or decision.current
        accept = state.acceptance.estimate(
            self.clock(), self.settings.policy.acceptance_memory_half_life_s
        )
        accept = accept or from_conditional([])
        rivals = sorted(
            decision.predicted_tokens_per_s, key=lambda k: -decision.predicted_tokens_per_s[k]
        )
        grid = np.arange(1, 1025)
        mine = None
        for label in rivals:
            try:
                rival = Setup.parse(label)
            except ValueError:
                continue
            if rival.kind is current.kind or max(current.spec_tokens, rival.spec_tokens) > (
                accept.max_spec_tokens
            ):
                continue
            mine = mine or predict(self.model, self.hardware, current, grid, accept, self.workload)
            flips = crossover_batches(
                mine, predict(self.model, self.hardware, rival, grid, accept, self.workload)
            )
            if flips:
                return flips[0].loser, flips[0].winner, flips[0].batch
        return None

    # ----------------------------------------------------------------- the loop

    def alive(self) -> bool:
        interval = self.settings.loop.interval_s
        return self.last_step_at is None or self.clock() - self.last_step_at < 5 * interval + 30

    def ready(self) -> tuple[bool, str]:
        if self.last_usable_at is None:
            return False, "no usable observation yet"
        age = self.clock() - self.last_usable_at
        limit = 3 * self.settings.loop.interval_s + self.settings.loop.window_s
        if age > limit:
            return False, f"data is {age:.0f}s old"
        return True, "ready"

    def run(self) -> None:
        """Step every interval until stopped; then release the Lease and flush the state."""
        interval = self.settings.loop.interval_s
        while not self.stop_event.is_set():
            started = time.monotonic()
            try:
                self.step()
            except Exception as exc:  # one bad step must not kill the sidecar
                self.metrics.errors.labels("step").inc()
                self.logger.exception("step failed: %s", exc)
            self.stop_event.wait(max(0.0, interval - (time.monotonic() - started)))
        self.shutdown()

    def shutdown(self) -> None:
        if (
            self.elector is not None
            and self.elector.is_leader
            and self.actuator is not None
            and self.state is not None
        ):
            try:
                self.actuator.save_state(self.state.model_dump_json(), expected_version=None)
            except ActuatorError as exc:
                event(self.logger, f"state not flushed at shutdown: {exc}", logging.WARNING)
        if self.elector is not None:
            self.elector.release()
        event(self.logger, "stopped")


def build_controller(
    settings: Settings, metrics: TunerMetrics, logger: logging.Logger
) -> Controller:
    """Wire the parts the settings name."""
    from autotuner.actuators.targets import open_target

    model = load_model(settings.model.id)
    hardware = (
        load_profile(settings.model.profile)
        if settings.model.profile
        else datasheet(settings.model.gpu)
    )
    observe: Observer = (
        ScrapeObserver(settings) if settings.source.kind == "vllm" else PrometheusObserver(settings)
    )
    target = settings.target
    identity = target.identity or os.environ.get("POD_NAME") or socket.gethostname()
    uri = target.uri
    if not uri and os.environ.get("POD_NAME") and os.environ.get("POD_NAMESPACE"):
        from autotuner.actuators.kubernetes import api_client, discover_target

        found = discover_target(
            api_client(target.kube_server), os.environ["POD_NAMESPACE"], os.environ["POD_NAME"]
        )
        uri = str(found)
    actuator = (
        open_target(
            uri,
            kube_server=target.kube_server,
            names=settings.engine.flags,
            allow_surge=target.allow_surge,
            allow_low_precision_replay=settings.policy.allow_low_precision_replay,
            identity=identity,
        )
        if uri
        else None
    )
    elector = None
    if uri.startswith("k8s://"):
        from autotuner.actuators.kubernetes import K8sTarget, api_client
        from autotuner.actuators.lease import LeaseElector

        parsed = K8sTarget.parse(uri)
        elector = LeaseElector(
            api_client(target.kube_server),
            namespace=parsed.namespace,
            name=target.lease_name or f"spec-autotuner-{parsed.name}",
            identity=identity,
            lease_duration_s=target.lease_duration_s,
        )
    quality, quality_off = quality_guard(settings)
    return Controller(
        settings=settings,
        model=model,
        hardware=hardware,
        observe=observe,
        actuator=actuator,
        metrics=metrics,
        logger=logger,
        elector=elector,
        quality=quality,
        quality_off=quality_off,
    )


def quality_guard(settings: Settings) -> tuple[QualityGuard | None, str]:
    """The canary guard the settings ask for, or why there is none."""
    from autotuner.canary.guard import QualityGuard

    quality = settings.quality
    if not quality.enabled:
        return None, GUARD_DISABLED
    url = quality.url
    if not url and settings.source.kind == "vllm":
        url = settings.source.urls[0].removesuffix("/").removesuffix("/metrics")
    if not url:
        return None, "no canary URL: set quality.url to a replica's OpenAI-compatible base URL"
    return QualityGuard(quality, url), ""
