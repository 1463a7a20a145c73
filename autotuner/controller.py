"""The observe -> decide -> act -> verify loop: the one place that wires the parts and owns
time. Everything it knows between steps is in the TunerState, persisted on the target."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import cache
from typing import TYPE_CHECKING, Any

from autotuner.actuators.base import Actuator, LiveTarget
from autotuner.actuators.flags import vllm_tokens
from autotuner.canary.phase import CanaryPhase, Capacity
from autotuner.core.decide.policy import Context
from autotuner.core.decide.state import TunerState, read_state
from autotuner.core.decide.step import Notice, NoticeKind, Step, restart_refused, step
from autotuner.core.engine.args import parse as parse_engine_args
from autotuner.core.engine.resolution import Fallback, Resolved, resolve, speculative_of
from autotuner.core.model.registry import load_draft_model
from autotuner.core.model.spec import ModelSpec
from autotuner.core.observe.observation import read_acceptance
from autotuner.core.predict.acceptance import from_conditional
from autotuner.core.predict.comparisons import Crossover
from autotuner.core.predict.hardware import HardwareProfile
from autotuner.core.predict.report import equivalent_rate
from autotuner.core.types import Action, Decision, Observation, Setup
from autotuner.errors import ActuatorError, ArgsError, ConflictError, RestartError
from autotuner.settings import Settings
from autotuner.telling.exporter import Snapshot, TunerMetrics
from autotuner.telling.notifier import ErrorKind, Notifier

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
    state_saved_at: float = 0.0
    stop_event: threading.Event = field(default_factory=threading.Event)
    notifier: Notifier = field(init=False)
    canary: CanaryPhase = field(init=False)
    set_aside_told: str | None = field(default=None, init=False)  # unreadable state, told once
    written: str | None = field(default=None, init=False)  # the state record we last wrote
    inputs: dict[str, Any] = field(default_factory=dict, init=False)  # the workload's sources
    args_problem: str | None = field(default=None, init=False)  # unreadable live args, told once

    def __post_init__(self) -> None:
        self.notifier = Notifier(self.logger, self.metrics, self.actuator)
        interval = self.settings.loop.interval_s
        self.canary = CanaryPhase(self.quality, self.quality_off, self.notifier, interval)

    # ----------------------------------------------------------------- one step

    def step(self) -> Decision:
        now = self.clock()
        timed = PhaseTimer(self.metrics)
        with timed("observe"):
            observation = self._observe(now)
        with timed("lease"):
            leader = self._lead()
        with timed("read_target"):
            live = self._read()
        if live is not None:  # per-position acceptance under the deployed schedule and drafter
            observation = read_acceptance(observation, live.setup, live.speculative_config)
        with timed("resume"):
            state = self._resume(live, leader)
        ctx = self._context(state, observation, live, leader, now)
        capacity = self._capacity(state, observation, ctx)
        with timed("canary"):
            state = self._canary(state, observation, live, capacity, ctx)
        with timed("decide"):
            planned = step(state, observation, ctx, self.settings.policy)
        with timed("carry_out"):
            planned = self._carry_out(planned, state, live, observation, capacity, ctx)
        with timed("save_state"):
            self._save_periodically(planned, live, leader, now)
        with timed("export"):
            self._export(planned, observation, live, leader, ctx)
        self._log(planned.decision, observation, timed.seconds)
        self.state, self.last_step_at = planned.state, now
        return planned.decision

    def _observe(self, now: float) -> Observation:
        observation = self.observe()
        if observation.usable:
            self.last_usable_at = now
        elif observation.reason is not None:
            self.metrics.unusable.labels(observation.reason.value).inc()
        return observation

    def _lead(self) -> bool:
        if self.elector is None:
            return True
        leader = self.elector.try_acquire_or_renew()
        if self.elector.last_error:
            self.metrics.errors.labels(ErrorKind.LEASE.value).inc()
        return leader

    def _read(self) -> LiveTarget | None:
        if self.actuator is None:
            return None
        try:
            return self.actuator.read()
        except ActuatorError as exc:
            self.notifier.failed(ErrorKind.READ, f"cannot read the target: {exc}")
            return None

    def _resume(self, live: LiveTarget | None, leader: bool) -> TunerState:
        """Resume from the target's annotation at start, and follow it while not leading
        (so a new leader continues a verification instead of deciding afresh)."""
        state = self.state
        if (state is None or not leader) and live is not None and live.state:
            state = self._restored(live.state) or state
        elif state is not None and live is not None and live.state not in (None, self.written):
            state = self._recorded_by_hand(state, live)
        state = state or TunerState()
        if live is not None and live.speculative_config:
            state = state.keeping_drafter(live.speculative_config)
        return state

    def _recorded_by_hand(self, state: TunerState, live: LiveTarget) -> TunerState:
        """Someone else wrote the state record while we lead (`autotuner apply` records its
        change there): when it names what runs, take its change, keep our estimates."""
        read = read_state(live.state or "")
        record = read.state
        if record is None or record.current != live.setup or record.current == state.current:
            return state
        self.notifier.log(f"a change recorded on the target: {record.current.label} runs")
        return state.following(record)

    def _restored(self, text: str) -> TunerState | None:
        """The persisted state (migrated when older); an unreadable one is kept aside in the
        new state, and said loudly once, instead of being dropped."""
        read = read_state(text)
        if read.state is not None:
            if self.state is None:
                migrated = (
                    f" (migrated from schema {read.written_as}"
                    + "".join(f"; not carried over: {what}" for what in read.dropped)
                    + ")"
                )
                self.notifier.log(
                    "resumed from the persisted state" + (migrated if read.migrated else ""),
                    decision_id=read.state.last_decision_id,
                    verifying=read.state.verification is not None,
                )
            return read.state
        if text == self.set_aside_told:
            return None
        self.set_aside_told = text
        message = (
            f"the persisted state cannot be read ({read.problem}): starting with fresh "
            "estimates; the unreadable record is kept in the state's set_aside field"
        )
        self.notifier.tell(Notice(NoticeKind.STATE_SET_ASIDE, message))
        return (self.state or TunerState()).setting_aside(text)

    def _context(
        self,
        state: TunerState,
        observation: Observation,
        live: LiveTarget | None,
        leader: bool,
        now: float,
    ) -> Context:
        resolved = self._resolve(state, observation, live)
        return Context(
            now=now,
            model=resolved.model,
            hardware=self.hardware,
            engine=self.settings.engine.capabilities.serving(resolved.model)
            .shown_by(observation.live_setup)
            .without(k for k, r in state.refused.items() if r.until > now)
            .proven_by(live.setup if live else None),
            workload=resolved.workload,
            deployed=live.setup if live else None,
            drafter_available=bool(
                (live and live.speculative_config)
                or state.drafter
                or (live is None and observation.live_setup and observation.live_setup.speculation)
            )
            and resolved.drafter.predictable,
            drafter_problem=resolved.drafter.problem,
            leader=leader,
            paused=self.settings.target.paused or bool(live and live.paused),
            rollout_in_progress=bool(live and not live.rollout.done),
            rollout_stuck=live.rollout.stuck if live else None,
            rollout_deadline_s=self.settings.target.rollout_deadline_s,
            low_precision_replay=self.settings.target.allow_low_precision_replay,
            advisory=self._advisory(leader),
        )

    def _advisory(self, leader: bool) -> str | None:
        """Why nothing decided this step is written to the target (None: it is)."""
        if self.settings.mode == "advise":
            return "advisory mode"
        if self.actuator is None:
            return "no target to patch"
        return None if leader else "not the leader"

    def _resolve(
        self, state: TunerState, observation: Observation, live: LiveTarget | None
    ) -> Resolved:
        """The workload, model and drafter the engine really runs: the target's live args
        over the settings (core/resolution.py); each input's source goes to /decision."""
        names = self.settings.engine.flags
        args, problem = None, None
        if live is not None:
            try:
                args = parse_engine_args(
                    vllm_tokens(live.command, live.args, names),
                    speculative_flag=names.speculative_config,
                    mamba_ssm_flag=names.mamba_ssm_cache_dtype,
                )
            except ArgsError as exc:
                problem = f"the live args cannot be read ({exc}): the settings are used"
        if problem != self.args_problem and problem is not None:
            self.notifier.log(problem, logging.WARNING)
        self.args_problem = problem
        model = self.settings.model
        resolved = resolve(
            self.model,
            args,
            Fallback(
                context_tokens=model.context_tokens,
                tensor_parallel=model.tensor_parallel,
                drafter=model.drafter,
            ),
            observed_context=observation.mean_context_tokens if observation.usable else None,
            saved=speculative_of(state.drafter),
            load_draft=_draft_model_size,
        )
        self.inputs = resolved.table()
        if problem is not None:
            self.inputs["live_args"] = {"value": None, "source": "live args", "note": problem}
        return resolved

    def _capacity(self, state: TunerState, observation: Observation, ctx: Context) -> Capacity:
        """Tokens/s one engine can serve in a setup (the canary's budget): the calibrated
        model's peak, or what it serves now when that is more."""
        policy = self.settings.policy
        predictor = ctx.predictor(state, policy)
        accept = state.acceptance.estimate(
            ctx.now, policy.estimates.acceptance_memory_half_life_s
        ) or from_conditional([])
        observed = (observation.generation_tokens_per_s or 0.0) / max(observation.series, 1)

        def capacity(setup: Setup) -> float:
            if setup.spec_tokens > accept.max_spec_tokens:
                return observed
            return max(observed, predictor.peak_tokens_per_s(setup, accept))

        return capacity

    def _canary(
        self,
        state: TunerState,
        observation: Observation,
        live: LiveTarget | None,
        capacity: Capacity,
        ctx: Context,
    ) -> TunerState:
        if ctx.advisory is not None:
            return state
        return self.canary.refresh(state, observation, live, capacity, ctx.now)

    # ---------------------------------------------------------------- carrying out

    def _carry_out(
        self,
        planned: Step,
        before: TunerState,
        live: LiveTarget | None,
        observation: Observation,
        capacity: Capacity,
        ctx: Context,
    ) -> Step:
        self.metrics.decisions.labels(planned.decision.action.value).inc()
        for notice in planned.notices:
            self.notifier.tell(notice)
        if not planned.acts or ctx.advisory is not None:
            return planned
        if planned.decision.action is Action.SWITCH:
            state = self.canary.before_switch(before, planned.state, observation, capacity)
            check = state.verification.quality if state.verification else None
            decision = planned.decision
            if check is not None and check.status == "skipped":
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
            return Step(decision.noted("conflict: not applied"), before)
        except ActuatorError as exc:
            self.notifier.tell(Notice(NoticeKind.PATCH_FAILED, f"patch failed: {exc}"))
            failed = Step(decision.noted(f"patch failed: {exc}"), before)
            if isinstance(exc, RestartError):
                return self._roll_back(failed, before, str(exc), ctx)
            return failed
        self.written = record
        switched = decision.action is Action.SWITCH
        kind = NoticeKind.SWITCHED if switched else NoticeKind.REVERTED
        self.notifier.tell(Notice(kind, decision.sentence))
        self.state_saved_at = ctx.now
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
        self._save(refused.state, version=None)
        return refused

    def _save_periodically(
        self, planned: Step, live: LiveTarget | None, leader: bool, now: float
    ) -> None:
        """Persist what was learned now and then (a change writes its state with its patch)."""
        actuator = self.actuator
        if not leader or actuator is None or planned.acts:
            return
        due = now - self.state_saved_at >= self.settings.loop.state_save_interval_s
        if not due or not getattr(actuator, "periodic_state", True):
            return
        if self._save(planned.state, version=live.version if live else None):
            self.state_saved_at = now

    def _save(self, state: TunerState, *, version: str | None) -> bool:
        assert self.actuator is not None
        record = state.model_dump_json()
        try:
            self.actuator.save_state(record, expected_version=version)
        except ActuatorError as exc:
            self.notifier.failed(ErrorKind.STATE, f"state not saved: {exc}")
            return False
        self.written = record
        return True

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
        setup = (
            live.setup
            if live
            else (observation.live_setup.setup if observation.live_setup else state.current)
        )
        rate = None
        if observation.acceptance is not None and setup is not None and setup.spec_tokens:
            accept = from_conditional(observation.acceptance.per_position)
            rate = equivalent_rate(accept, min(setup.spec_tokens, accept.max_spec_tokens))
        policy = self.settings.policy
        self.metrics.update(
            Snapshot(
                at=ctx.now,
                observation=observation,
                decision=decision,
                state=state,
                live=setup,
                leader=leader,
                paused=bool(live and live.paused),
                rollout_stuck=planned.rollout_stuck,
                last_usable_at=self.last_usable_at,
                crossover=self._crossover(planned, ctx),
                calibration=ctx.predictor(state, policy).fit.factors(),
                quick_rule_rate=rate,
                mode=self.settings.mode,
                inputs=self.inputs,
                engine=ctx.engine,
            )
        )

    def _crossover(self, planned: Step, ctx: Context) -> Crossover | None:
        """The batch at which the running setup stops (or starts) being the faster one against
        its strongest rival of another kind: what the dashboard draws next to the batch."""
        state, decision = planned.state, planned.decision
        policy = self.settings.policy
        accept = state.acceptance.estimate(ctx.now, policy.estimates.acceptance_memory_half_life_s)
        predicted = decision.predicted_tokens_per_s
        rivals = [Setup.parse(label) for label in sorted(predicted, key=lambda k: -predicted[k])]
        current = state.current or decision.current
        return ctx.predictor(state, policy).crossover(
            current, rivals, accept or from_conditional([])
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
        stalled = self.settings.loop.stalled_after_s
        return self.last_step_at is None or self.clock() - self.last_step_at < stalled

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
                self.metrics.errors.labels(ErrorKind.STEP.value).inc()
                self.logger.exception("step failed: %s", exc)
            self.stop_event.wait(max(0.0, interval - (time.monotonic() - started)))
        self.shutdown()

    def shutdown(self) -> None:
        leading = self.elector is not None and self.elector.is_leader
        if leading and self.actuator is not None and self.state is not None:
            try:
                self.actuator.save_state(self.state.model_dump_json(), expected_version=None)
            except ActuatorError as exc:
                self.notifier.log(f"state not flushed at shutdown: {exc}", logging.WARNING)
        if self.elector is not None:
            self.elector.release()
        self.notifier.log("stopped")


_draft_model_size = cache(load_draft_model)  # a deployed draft model's config, read once


class PhaseTimer:
    """Times each named phase of one step (exported per phase, and logged with the step)."""

    def __init__(self, metrics: TunerMetrics) -> None:
        self.metrics = metrics
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - started
            self.seconds[phase] = elapsed
            self.metrics.phase_seconds.labels(phase).observe(elapsed)
