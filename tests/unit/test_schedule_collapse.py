"""A schedule that collapses the way vllm-project/vllm#49548 measured (a tenth to two thirds of
the static rate while the batch moves across a band edge) is reverted within one
verification, with that reason, and K schedules are refused for `quarantine.capability_s`;
a schedule the engine did not run (it drafted its largest K) is reverted naming that."""

from __future__ import annotations

from typing import Any

from autotuner.core.decide.context import Context, situation
from autotuner.core.decide.estimates import AcceptanceMemory
from autotuner.core.decide.schedule_check import COLLAPSED, judge_schedule
from autotuner.core.decide.state import TunerState
from autotuner.core.engine.capabilities import Capability
from autotuner.core.engine.workload import Workload
from autotuner.core.observe.limits import ObservationLimits
from autotuner.core.predict.hardware import datasheet
from autotuner.core.types import Action, Decision, Observation, Setup
from autotuner.engines.vllm.capabilities import UPSTREAM
from autotuner.sim.schedule_worlds import collapsing_schedules, k_edges, near_an_edge
from autotuner.sim.truth import StepError, TruthEngine, no_error
from tests.support.policy import H200, MODEL, policy_settings
from tests.unit.test_policy import NO_DWELL, Run, _k1_crosses_plain

B200, TP2 = datasheet("B200"), Workload(tensor_parallel=2)
MIXED = [32, 64, 128, 300, 320, 300]
LIMITS = ObservationLimits(min_drafts=10)
SETTINGS = policy_settings()


def scheduled_run(error: StepError) -> Run:
    """test_policy's schedule scene (two B200s, an acceptance where K=1 beats plain at batch
    64 and loses at 320, the load moving between them), on a world with `error`."""
    rate = _k1_crosses_plain(B200, TP2, low=64, high=320)
    run = Run(
        engine=UPSTREAM,
        hardware=B200,
        workload=TP2,
        truth=TruthEngine(MODEL, B200, TP2, error),
        settings=policy_settings(
            NO_DWELL,
            switch={"min_gain": 0.02},
            candidates={"replay_windows": ()},
            restart={"max_per_hour": 4},
        ),
    )
    run.run(60, lambda m: MIXED[m % len(MIXED)], (rate, rate, rate))
    return run


def first_schedule(run: Run) -> tuple[int, Decision]:
    for i, decision in enumerate(run.decisions):
        if decision.action is Action.SWITCH and decision.target and decision.target.schedule:
            return i, decision
    raise AssertionError([d.sentence for d in run.decisions[-3:]])


def test_the_world_collapses_a_schedule_near_its_edges_only() -> None:
    schedule = Setup.parse("spec:2@1-4:2,5-512:0")
    assert k_edges(schedule) == [5]
    assert near_an_edge(schedule, 8)
    assert not near_an_edge(schedule, 64)
    error = collapsing_schedules()
    assert error(schedule, 8) > 2.5
    assert error(schedule, 64) == 1.0
    assert error(Setup.parse("spec:2"), 8) == 1.0


def test_a_collapsing_schedule_is_reverted_at_its_first_verification() -> None:
    run = scheduled_run(collapsing_schedules())
    at, switched = first_schedule(run)
    later = [d for d in run.decisions[at + 1 :] if d.action in (Action.KEEP, Action.REVERT)]
    assert later, "the change is judged"
    judged = later[0]
    assert judged.action is Action.REVERT, judged.sentence
    assert judged.current == switched.target
    assert "the schedule collapsed: its band" in judged.sentence
    assert "vllm-project/vllm#49548" in judged.sentence
    assert "spec_schedule refused for 24 h" in judged.sentence
    refused = run.state.refused[Capability.SPEC_SCHEDULE.value]
    assert refused.until > run.now
    after = run.decisions[run.decisions.index(judged) + 1 :]
    assert not any(d.target and d.target.schedule for d in after if d.action is Action.SWITCH)


def test_a_schedule_that_holds_up_is_kept() -> None:
    run = scheduled_run(no_error)
    at, _ = first_schedule(run)
    judged = [d for d in run.decisions[at + 1 :] if d.action in (Action.KEEP, Action.REVERT)]
    assert judged
    assert judged[0].action is Action.KEEP, judged[0].sentence
    assert run.state.refused == {} or Capability.SPEC_SCHEDULE.value not in run.state.refused


class DroppingSchedules(TruthEngine):
    """An engine that drops the schedule it is given and drafts its largest K throughout (as
    vLLM does under data parallelism, with a warning)."""

    def observation(self, *, setup: Setup, **window: Any) -> Observation:
        return super().observation(setup=setup.model_copy(update={"schedule": ()}), **window)


def test_a_schedule_the_engine_did_not_run_is_reverted_naming_that() -> None:
    rate = _k1_crosses_plain(B200, TP2, low=64, high=320)
    run = scheduled_run(no_error)
    dropping = Run(
        engine=run.engine,
        hardware=run.hardware,
        workload=run.workload,
        truth=DroppingSchedules(MODEL, B200, TP2),
        settings=run.settings,
    )
    dropping.run(60, lambda m: MIXED[m % len(MIXED)], (rate, rate, rate))
    at, _switched = first_schedule(dropping)
    judged = [d for d in dropping.decisions[at + 1 :] if d.action in (Action.KEEP, Action.REVERT)]
    assert judged
    assert judged[0].action is Action.REVERT, judged[0].sentence
    assert "the engine did not run the schedule" in judged[0].sentence
    assert Capability.SPEC_SCHEDULE.value in dropping.state.refused


def judged_at(previous: Setup, target: Setup, share_of_expected: float) -> str | None:
    """The collapse judge's reason for `target` (replacing `previous`) at batch 300 when it
    serves `share_of_expected` of what the cost model expects of it beside `previous`'s
    measured rate (None: no collapse)."""
    memory = AcceptanceMemory(
        drafts=1e5, accepted_per_position=(3e4, 9e3), trials_per_position=(1e5, 3e4), updated_at=0
    )
    state = TunerState(current=target, acceptance=memory)
    truth = TruthEngine(MODEL, H200)
    window = truth.observation(
        now=60.0, window_s=60.0, setup=previous, batch=300, rates=(0.3, 0.3), limits=LIMITS
    )
    ctx = Context(now=60.0, model=MODEL, hardware=H200, engine=UPSTREAM, deployed=target)
    sit = situation(state, window.model_copy(update={"acceptance": None}), ctx, SETTINGS)
    ratio = sit.predictor.model_tokens_per_s_at(
        target, 300, sit.accept
    ) / sit.predictor.model_tokens_per_s_at(previous, 300, sit.accept)
    # Under COLLAPSED of the previous setup's rate either way, so only the model's expectation
    # tells a schedule that ran as written from one that collapsed.
    assert ratio * share_of_expected < COLLAPSED
    reference = 10_000.0
    measured = reference * ratio * share_of_expected
    failed = judge_schedule(sit, (previous, target), measured, reference, 300.0)
    return failed.why if failed is not None else None


def test_a_schedule_serving_what_the_model_expected_did_not_collapse() -> None:
    """At acceptance 0.3 and batch 300 the model expects the schedule well under replay:
    serving that (under 0.6 of replay's rate) is the prediction's to judge, not a collapse;
    serving a third of it is one."""
    previous, target = Setup(replay_window=16), Setup.parse("spec:2@1-191:2,192-8191:1")
    assert judged_at(previous, target, 0.9) is None
    why = judged_at(previous, target, 0.3)
    assert why is not None
    assert "collapsed" in why
    assert "where the model expected" in why
