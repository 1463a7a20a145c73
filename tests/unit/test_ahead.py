"""Deciding ahead of the load (docs/policy.md, "Ahead of the load"): the decision core driven
over simulated days whose truth is the cost model itself, so that what is tested is the
forecast and the plan, not a misprediction."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np

from autotuner.core.decide.context import Context
from autotuner.core.decide.search import monotone_ks
from autotuner.core.decide.settings import PolicySettings
from autotuner.core.decide.state import TunerState
from autotuner.core.decide.step import step
from autotuner.core.engine.capabilities import EngineCapabilities
from autotuner.core.types import Action, BlockReason, Decision, Setup
from autotuner.engines.vllm.capabilities import GDN_REPLAY
from autotuner.sim.days import DAY
from autotuner.sim.worlds import World, qwen_on_b300
from tests.support.policy import SPEC3, cost_model_world, policy_settings

INTERVAL = 300.0
SETTINGS = policy_settings(
    restart={"first_compile_s": 0},
    exploration={"enabled": False},  # what is tested is the prediction, not a question
)
PRIOR = qwen_on_b300()


def _world(demand: Callable[[float], float], start: Setup = SPEC3) -> World:
    return cost_model_world(PRIOR, demand, (0.85, 0.75, 0.65), start)


def _drive(
    world: World,
    hours: float,
    engine: EngineCapabilities = GDN_REPLAY,
    settings: PolicySettings = SETTINGS,
    *,
    start_h: float = 0.0,
    remembered_days: int = 0,
    every: bool = False,
) -> list[tuple[float, Decision]]:
    """(time, decision) of every switch and revert of the policy from `start_h` for `hours`
    (`every`: of every decision), each applied at once; with `remembered_days`, the state
    starts with the demand of that many previous days in its profile (as if it had watched
    them)."""
    state, deployed, changes = TunerState(), world.start, []
    start = start_h * 3600
    if remembered_days:
        load = state.load
        for t in np.arange(start - remembered_days * DAY, start, INTERVAL):
            load = load.add(world.demand(float(t)), float(t), settings.forecast)
        state = state.updated(load=load)
    for t in np.arange(start + INTERVAL, start + hours * 3600, INTERVAL):
        ctx = Context(
            now=float(t),
            model=PRIOR.model,
            hardware=PRIOR.hardware,
            engine=engine,
            workload=PRIOR.workload,
            deployed=deployed,
        )
        result = step(state, world.observation(deployed, float(t), INTERVAL), ctx, settings)
        state = result.state
        if result.acts and result.decision.target is not None:
            deployed = result.decision.target
        if every or (result.acts and result.decision.target is not None):
            changes.append((float(t), result.decision))
    return changes


def _best_held(world: World, t: float, setups: list[Setup]) -> Setup:
    return max(setups, key=lambda s: world.tokens_per_s(s, t))


def _morning(t: float) -> float:
    """Quiet until 6:00, rising steadily in log to 450 at 8:00, held until 20:00."""
    hour = (t % DAY) / 3600
    if hour < 6 or hour >= 20:
        return 8.0
    return 8 * math.exp(math.log(450 / 8) * min((hour - 6) / 2, 1.0))


def test_a_rising_load_goes_straight_to_the_peaks_setup() -> None:
    # A second morning, the first remembered: one restart, into the setup that serves the
    # peak best, and none on the way up.
    world = _world(_morning)
    changes = _drive(world, 10, start_h=24 + 2, remembered_days=1)
    assert len(changes) == 1, [d.sentence for _, d in changes]
    target = changes[0][1].target
    options = [Setup(spec_tokens=k) for k in (1, 2, 3)] + [Setup(replay_window=w) for w in (8, 16)]
    peak = _best_held(world, DAY + 10 * 3600, options)
    assert target is not None
    assert target.kind is peak.kind
    assert "forecast demand" in changes[0][1].sentence


def test_no_restart_into_a_regime_the_forecast_says_ends_before_payback() -> None:
    # At 10:00 the load leaps from 8 to 450 for 20 minutes, then falls back, every day. With a
    # day remembered, the leap is foreseen to end: not worth a restart there and one back.
    def burst(t: float) -> float:
        hour = (t % DAY) / 3600
        return 450.0 if 10 <= hour < 10 + 1 / 3 else 8.0

    changes = _drive(_world(burst), 6, start_h=24 + 7, remembered_days=1)
    assert changes == [], [d.sentence for _, d in changes]


def test_every_proposed_schedule_is_non_increasing_in_k() -> None:
    rng = np.random.default_rng(7)
    for _ in range(50):
        table = rng.uniform(50, 150, size=(4, 23))
        mass = rng.dirichlet(np.ones(23)) * (rng.uniform(size=23) > 0.5)
        ks = monotone_ks(table, mass / max(mass.sum(), 1e-9))
        assert all(b <= a for a, b in itertools.pairwise(ks)), ks
        assert len(set(ks)) <= 3


def test_schedules_the_policy_proposes_never_raise_k_with_batch() -> None:
    def swinging(t: float) -> float:
        return (16.0, 64.0, 320.0, 128.0)[int(t / INTERVAL) % 4]

    engine = EngineCapabilities(name="schedules", spec_schedule=True)
    decisions = _drive(_world(swinging), 3, engine, every=True)
    compared = {label for _, d in decisions for label in d.predicted_tokens_per_s}
    scheduled = [Setup.parse(label) for label in compared if "@" in label]
    assert scheduled, sorted(compared)
    for setup in scheduled:
        ks = [band.spec_tokens for band in setup.schedule]
        assert all(b <= a for a, b in itertools.pairwise(ks)), setup.label
        assert len(setup.schedule) <= 3


def test_a_schedule_that_differs_only_where_the_load_never_goes_is_no_reason_to_restart() -> None:
    # The load stays at 16-24: a schedule identical there to the running one gains nothing.
    running = Setup.parse("spec:3@1-63:3,64-8191:1")
    world = _world(lambda t: 16.0 if int(t / INTERVAL) % 2 else 24.0, running)
    engine = EngineCapabilities(name="schedules", spec_schedule=True)
    changes = _drive(world, 4, engine)
    differing_high = [
        d
        for _, d in changes
        if d.target is not None
        and d.target.spec_tokens_at([16, 24]) == running.spec_tokens_at([16, 24])
    ]
    assert differing_high == []


def test_the_decision_says_what_the_forecast_was() -> None:
    changes = _drive(_world(lambda t: 8.0 if t < 3600 else 400.0), 3)
    assert changes
    decision = changes[0][1]
    assert any(note.startswith("forecast demand") for note in decision.notes)
    assert any(note.startswith("plan over") for note in decision.notes)
    assert decision.action is Action.SWITCH


def test_a_dip_not_worth_its_restarts_over_the_day_is_held_through() -> None:
    # Every day the load falls from 450 to 150 for three hours at noon, where spec:2 serves
    # more than replay:16. Over a 4 h horizon that is worth going there and back (two
    # restarts); over the day it is within the forecast's noise of holding, so with a day
    # remembered the plan for the whole period holds replay:16 through the dip, and says so.
    def dip(t: float) -> float:
        return 150.0 if 12 <= (t % DAY) / 3600 < 15 else 450.0

    decisions = _drive(_world(dip), 10, start_h=24 + 8, remembered_days=1, every=True)
    changes = [(t, d) for t, d in decisions if d.action is Action.SWITCH]
    assert [d.target for _, d in changes] == [Setup(replay_window=16)], [
        (round(t % DAY / 3600, 1), d.sentence) for t, d in changes
    ]
    in_dip = [d for t, d in decisions if 12.5 <= (t % DAY) / 3600 < 14.5]
    held = [d for d in in_dip if "over the period the plan with the fewest restarts" in d.sentence]
    assert held, [d.sentence for d in in_dip]
    assert all(d.blocked_by is BlockReason.RESTART_COST for d in held)
    # Without the plan over the whole day, the 4 h horizon's plan goes there and back.
    alone = policy_settings(SETTINGS, forecast={"whole_day": False})
    decisions = _drive(_world(dip), 10, settings=alone, start_h=24 + 8, remembered_days=1)
    assert len(decisions) >= 3, [d.sentence for _, d in decisions]
