"""Remembered acceptance widens by how fast it moved while measured (core/decide/estimates.py
AcceptanceDrift): on the published drifting day the tuner left speculation at 3.3 h, and at
21.25 h moved back to a K=4 schedule on the morning's acceptance (the day's falls from 0.85 to
0.45) and was reverted. A move into drafting on acceptance that moved while it was watched
must now hold at the widened interval's low end; a steady acceptance moves nothing."""

from __future__ import annotations

import pytest

from autotuner.core.decide.context import Context
from autotuner.core.decide.estimates import AcceptanceDrift, AcceptanceMemory
from autotuner.core.decide.state import TunerState
from autotuner.core.types import Action, BlockReason, Decision
from tests.support.policy import H200, MODEL, policy_settings
from tests.support.policy import STATIC_K as ENGINE
from tests.unit.test_exploration import REPLAY, SETTINGS, SPEC3, World

HOUR = 3600.0
NOW = 100_000.0
HALF_LIFE = 2 * HOUR
NO_QUESTIONS = policy_settings(SETTINGS, exploration={"enabled": False})


def watched(rates: list[float], every_s: float = 600.0, end: float = NOW) -> AcceptanceDrift:
    """The drift fitted on one window every `every_s` ending at `end`."""
    drift = AcceptanceDrift()
    for i, rate in enumerate(rates):
        drift = drift.add(rate, end - (len(rates) - 1 - i) * every_s, HALF_LIFE)
    return drift


def linear(first: float, per_hour: float, hours: float = 3.0) -> list[float]:
    return [first + per_hour * i / 6 for i in range(int(hours * 6) + 1)]


def test_a_steady_acceptance_moves_nothing() -> None:
    assert watched([0.7] * 19).moved(12 * HOUR) == 0.0


def test_a_drift_is_measured_at_its_rate_whatever_the_clock_reads() -> None:
    for end in (NOW, 1.7e9):  # simulated seconds and the epoch alike
        drift = watched(linear(0.85, -0.0167), end=end)
        assert drift.per_s() * HOUR == pytest.approx(0.0167, rel=0.01)
        assert drift.moved(18 * HOUR) == pytest.approx(0.30, rel=0.01)


def test_noise_around_a_steady_rate_is_not_a_drift() -> None:
    # Windows alternating 0.05 either side of 0.7: their line's slope is within its noise.
    noisy = [0.7 + (0.05 if i % 2 else -0.05) for i in range(19)]
    assert watched(noisy).moved(12 * HOUR) == 0.0
    # Two windows cannot say how fast anything moves.
    assert watched([0.8, 0.6]).per_s() == 0.0


def test_the_remembered_interval_widens_by_the_drift_times_its_age() -> None:
    memory = AcceptanceMemory(
        drafts=1e6,
        accepted_per_position=(7e5, 4.9e5),
        trials_per_position=(1e6, 7e5),
        updated_at=NOW - 12 * HOUR,
    )
    ctx = Context(now=NOW, model=MODEL, hardware=H200, engine=ENGINE, deployed=REPLAY)
    steady = ctx.acceptance(TunerState(acceptance=memory), SETTINGS)
    moving = TunerState(acceptance=memory, acceptance_drift=watched(linear(0.8, -0.02)))
    widened = ctx.acceptance(moving, SETTINGS)
    assert steady is not None
    assert widened is not None
    assert widened.conditional == steady.conditional  # the point is not extrapolated
    assert widened.conditional_low[0] == pytest.approx(steady.conditional_low[0] - 0.24, abs=0.01)
    assert widened.conditional_high[0] == pytest.approx(steady.conditional_high[0] + 0.24, abs=0.01)


def back_to_speculation(per_hour: float) -> list[Decision]:
    """Replay running for 12 h since speculation was last measured (0.7 at every position, after
    three hours moving `per_hour`), at batch 8, where the model prices spec:3 at 0.7 well
    above replay and at 0.46 under it."""
    memory = AcceptanceMemory(
        drafts=1e6,
        accepted_per_position=(7e5, 4.9e5, 3.43e5),
        trials_per_position=(1e6, 7e5, 4.9e5),
        updated_at=NOW - 12 * HOUR,
    )
    drift = watched(linear(0.76, per_hour), end=NOW - 12 * HOUR)
    state = TunerState(current=REPLAY, acceptance=memory, acceptance_drift=drift)
    world = World(
        lambda setup, batch: 1.0,
        batch=8.0,
        rates=(0.7, 0.7, 0.7),
        deployed=REPLAY,
        state=state,
        now=NOW,
        settings=NO_QUESTIONS,
    )
    return world.run(8)


def test_a_move_onto_acceptance_that_drifted_must_hold_at_its_low_end() -> None:
    held = back_to_speculation(-0.02)
    assert not any(d.action is Action.SWITCH for d in held)
    last = held[-1]
    assert last.blocked_by is BlockReason.LOW_CONFIDENCE
    assert "remembered from 12" in last.sentence
    assert "moved 0.020 an hour while measured" in last.sentence
    assert "every scenario must" in last.sentence
    # The same memory of a steady acceptance: all three scenarios agree, and the move is made.
    made = [d for d in back_to_speculation(0.0) if d.action is Action.SWITCH]
    assert [d.target for d in made] == [SPEC3]
