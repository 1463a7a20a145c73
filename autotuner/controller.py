"""The observe -> decide -> act -> verify loop: the one place that wires the parts and owns
time. Everything it knows between steps is in the TunerState, persisted on the target."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from autotuner.actuators.base import Actuator, LiveTarget
from autotuner.canary.phase import CanaryPhase
from autotuner.core.decide.context import Context
from autotuner.core.decide.readings import Capacity, capacity, outlook
from autotuner.core.decide.state import QualityStatus, TunerState
from autotuner.core.decide.step import Notice, NoticeKind, Step, restart_refused, step
from autotuner.core.decide.world import Standing, as_deployed, context_of
from autotuner.core.model.spec import ModelSpec
from autotuner.core.predict.hardware import HardwareProfile
from autotuner.core.types import Action, Decision, Observation
from autotuner.errors import ActuatorError, ConflictError, RestartError
from autotuner.loop.inputs import LiveInputs
from autotuner.loop.phases import PhaseTimer
from autotuner.loop.pods import ObservedPods
from autotuner.loop.records import StateRecords
from autotuner.settings import Settings
from autotuner.telling.counting import ErrorKind
from autotuner.telling.exporter import TunerMetrics
from autotuner.telling.notifier import Notifier
from autotuner.telling.snapshot import Snapshot

if TYPE_CHECKING:  # the Kubernetes client is heavy: imported only for k8s targets
    from autotuner.actuators.lease import LeaseElector
    from autotuner.canary.guard import QualityGuard

Observer = Callable[[], Observation]  # one window per call (sources/observers.py)


GUARD_DISABLED = "the quality guard is disabled (quality.enabled=false)"


@dataclass
class Controller:
    """Wires the parts and keeps time; `core.step` decides. One `step()` is a list of named,
    timed phases (as the VPA recommender's RunOnce)."""

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
    last_read_error: ActuatorError | None = None  # the latest step's, None when it read
    stop_event: threading.Event = field(default_factory=threading.Event)
    started_at: float = field(init=False)
    notifier: Notifier = field(init=False)
    canary: CanaryPhase = field(init=False)
    records: StateRecords = field(init=False)
    inputs: LiveInputs = field(init=False)
    pods: ObservedPods = field(init=False)  # a held canary's, or every pod

    def __post_init__(self) -> None:
        self.started_at = self.clock()
        self.notifier = Notifier(self.logger, self.metrics, self.actuator)
        loop = self.settings.loop
        self.canary = CanaryPhase(self.quality, self.quality_off, self.notifier, loop.interval_s)
        self.records = StateRecords(self.actuator, self.notifier, loop.state_save_interval_s)
        self.inputs = LiveInputs(self.settings, self.model, self.notifier)
        self.pods = ObservedPods(self.observe, self.notifier)

    # ----------------------------------------------------------------- one step

    def step(self) -> Decision:
        now = self.clock()
        timed = PhaseTimer(self.metrics)
        with timed("lease"):
            leader = self._lead()
        with timed("read_target"):
            live = self._read()
        with timed("observe"):  # after the read: a held canary narrows what is observed
            observation, narrowing = self._observe(now, live)
        observation = as_deployed(observation, live)
        with timed("resume"):
            state = self.records.resume(self.state, live, leader)
        ctx = self._context(state, observation, live, leader, now)
        budget = capacity(state, observation, ctx, self.settings.policy)
        with timed("canary"):
            if ctx.advisory is None:
                state = self.canary.refresh(state, observation, live, budget, now)
        with timed("decide"):
            planned = step(state, observation, ctx, self.settings.policy)
        with timed("carry_out"):
            planned = self._carry_out(planned, state, live, observation, budget, ctx)
        if narrowing:
            planned = replace(planned, decision=planned.decision.noted(narrowing))
        with timed("save_state"):
            if leader and self.actuator is not None and not planned.acts:
                self.records.save_periodically(planned.state, live, now)
        with timed("export"):
            self._export(planned, observation, live, leader, ctx)
        self._log(planned.decision, observation, timed.seconds)
        self.state, self.last_step_at = planned.state, now
        return planned.decision

    def _observe(self, now: float, live: LiveTarget | None) -> tuple[Observation, str | None]:
        """The window, and the observer's note when it cannot read a held canary alone."""
        note = self.pods.follow(live)
        observation = self.observe()
        if observation.usable:
            self.last_usable_at = now
        elif observation.reason is not None:
            self.metrics.count(observation.reason)
        return observation, note

    def _lead(self) -> bool:
        if self.elector is None:
            return True
        leader = self.elector.try_acquire_or_renew()
        if self.elector.last_error:
            self.metrics.count(ErrorKind.LEASE)
        return leader

    def _read(self) -> LiveTarget | None:
        if self.actuator is None:
            return None
        self.last_read_error = None
        try:
            return self.actuator.read()
        except ActuatorError as exc:
            self.last_read_error = exc
            self.notifier.failed(ErrorKind.READ, f"cannot read the target: {exc}")
            return None

    def _context(
        self,
        state: TunerState,
        observation: Observation,
        live: LiveTarget | None,
        leader: bool,
        now: float,
    ) -> Context:
        target = self.settings.target
        standing = Standing(
            capabilities=self.settings.engine.capabilities,
            paused=target.paused,
            rollout_deadline_s=target.rollout_deadline_s,
            low_precision_replay=target.allow_low_precision_replay,
            window_s=self.settings.loop.window_s,
        )
        resolved = self.inputs.resolve(state, observation, live)
        return context_of(
            now,
            resolved,
            self.hardware,
            state,
            observation,
            live,
            standing=standing,
            leader=leader,
            advisory=self._advisory(leader),
        )

    def _advisory(self, leader: bool) -> str | None:
        """Why nothing decided this step is written to the target (None: it is)."""
        if self.settings.mode == "advise":
            return "advisory mode"
        if self.actuator is None:
            return "no target to patch"
        return None if leader else "not the leader"

    # ---------------------------------------------------------------- carrying out

    def _carry_out(
        self,
        planned: Step,
        before: TunerState,
        live: LiveTarget | None,
        observation: Observation,
        budget: Capacity,
        ctx: Context,
    ) -> Step:
        self.metrics.count(planned.decision.action)
        for notice in planned.notices:
            self.notifier.tell(notice)
        if ctx.advisory is None and not ctx.paused and live is not None and live.canary_held:
            release_canary(self.actuator, self.notifier, planned)
        if not planned.acts or ctx.advisory is not None:
            return planned
        if planned.decision.action is Action.SWITCH:
            state = self.canary.before_switch(before, planned.state, observation, budget)
            check = state.verification.quality if state.verification else None
            decision = planned.decision
            if check is not None and check.status is QualityStatus.SKIPPED:
                decision = decision.noted(f"quality: {check.summary}")
            planned = replace(planned, decision=decision, state=state)
        return self._apply(planned, before, live, ctx)

    def _apply(
        self, planned: Step, before: TunerState, live: LiveTarget | None, ctx: Context
    ) -> Step:
        """Write the decided setup with the state that goes with it (one guarded patch)."""
        assert self.actuator is not None
        decision = planned.decision
        assert decision.target is not None
        record = planned.state.model_dump_json()
        try:
            self.actuator.apply(
                decision.target,
                state=record,
                expected_version=live.version if live else None,
                saved_speculative_config=planned.state.drafter,
            )
        except ConflictError as exc:
            message = f"target changed meanwhile; re-deciding next step: {exc}"
            self.notifier.failed(ErrorKind.CONFLICT, message)
            return Step(decision.noted("conflict: not applied"), before, ranked=planned.ranked)
        except ActuatorError as exc:
            self.notifier.tell(Notice(NoticeKind.PATCH_FAILED, f"patch failed: {exc}"))
            failed = Step(decision.noted(f"patch failed: {exc}"), before, ranked=planned.ranked)
            if isinstance(exc, RestartError):
                return self._roll_back(failed, before, str(exc), ctx)
            return failed
        self.records.applied(record, ctx.now)
        switched = decision.action is Action.SWITCH
        kind = NoticeKind.SWITCHED if switched else NoticeKind.REVERTED
        self.notifier.tell(Notice(kind, decision.sentence))
        return planned

    def _roll_back(self, failed: Step, before: TunerState, why: str, ctx: Context) -> Step:
        """The engine did not come up with the new args (already written): restore the
        previous ones; the core says what that teaches."""
        assert self.actuator is not None
        previous = failed.decision.current
        try:
            self.actuator.apply(
                previous,
                state=before.model_dump_json(),
                expected_version=None,
                saved_speculative_config=before.drafter,
            )
        except ActuatorError as again:
            message = f"roll back to {previous.label} failed: {again}"
            self.notifier.failed(ErrorKind.PATCH, message, logging.ERROR)
            return replace(failed, decision=failed.decision.noted(message))
        refused = restart_refused(before, failed.decision, why, ctx, self.settings.policy)
        for notice in refused.notices:
            self.notifier.tell(notice)
        self.records.save(refused.state, version=None)
        return replace(refused, ranked=failed.ranked)

    # ------------------------------------------------------------------ telling

    def _export(
        self,
        planned: Step,
        observation: Observation,
        live: LiveTarget | None,
        leader: bool,
        ctx: Context,
    ) -> None:
        state, decision = planned.state, planned.decision
        seen = outlook(state, decision, planned.ranked, observation, ctx, self.settings.policy)
        self.metrics.update(
            Snapshot(
                at=ctx.now,
                observation=observation,
                decision=decision,
                state=state,
                live=seen.running,
                leader=leader,
                paused=bool(live and live.paused),
                rollout_stuck=planned.rollout_stuck,
                last_usable_at=self.last_usable_at,
                crossover=seen.crossover,
                calibration=seen.calibration,
                quick_rule_rate=seen.quick_rule_rate,
                mode=self.settings.mode,
                inputs=self.inputs.table,
                engine=ctx.engine,
            )
        )

    def _log(self, decision: Decision, observation: Observation, phases: dict[str, float]) -> None:
        self.notifier.log(
            decision.sentence,
            decision_id=decision.id,
            action=decision.action.value,
            blocked_by=decision.blocked_by.value if decision.blocked_by else None,
            target=decision.target.label if decision.target else None,
            gain=round(decision.gain, 4),
            confidence=round(decision.confidence, 3),
            window=[round(observation.window_start, 3), round(observation.window_end, 3)],
            phases_ms={name: round(1000 * s, 1) for name, s in phases.items()},
        )

    # ----------------------------------------------------------------- the loop

    def alive(self) -> bool:
        """A step completed within `loop.stalled_after_s` (counted from the start until the
        first one: a loop wedged in its first step is not alive either)."""
        since = self.last_step_at if self.last_step_at is not None else self.started_at
        return self.clock() - since < self.settings.loop.stalled_after_s

    def ready(self) -> tuple[bool, str]:
        if self.last_usable_at is None:
            return False, "no usable observation yet"
        age = self.clock() - self.last_usable_at
        if age > self.settings.loop.stale_after_s:
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
                self.metrics.count(ErrorKind.STEP)
                self.logger.exception("step failed: %s", exc)
            self.stop_event.wait(max(0.0, interval - (time.monotonic() - started)))
        self.shutdown()

    def shutdown(self) -> None:
        leading = self.elector is None or self.elector.is_leader
        if leading and self.actuator is not None and self.state is not None:
            self.records.flush(self.state)
        if self.elector is not None:
            self.elector.release()
        self.notifier.log("stopped")


def release_canary(actuator: Actuator | None, notifier: Notifier, planned: Step) -> None:
    """A canary (one LeaderWorkerSet group) holds the rest back: once nothing is verified or
    written, let them roll (to a verified switch, or after a revert to what they run)."""
    if planned.acts or planned.state.verification is not None or actuator is None:
        return
    try:
        if actuator.release_canary():
            running = planned.decision.current.label
            notifier.log(f"canary released: the remaining groups roll to {running}")
    except ActuatorError as exc:
        notifier.failed(ErrorKind.PATCH, f"cannot release the canary: {exc}")
