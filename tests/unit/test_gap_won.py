"""Issue 42's measure: the share of the oracle's gain over the best static the policy wins, and
the held-out days whose truth is the published table, reported apart."""

from __future__ import annotations

import math

import pytest

from autotuner.core.types import Setup
from autotuner.sim.days import DAY
from autotuner.sim.worlds import PUBLISHED, MeasuredSpeed, held_out_worlds, issue_worlds
from benchmarks.decision_quality import Outcome, Result


def result(policy: float, static: float, oracle: float) -> Result:
    outcomes = {
        "policy": Outcome(policy, 1.0, 0.0),
        "oracle": Outcome(oracle, 1.0, 0.0),
        "oracle, <= 4 restarts": Outcome(oracle, 1.0, 0.0),
    }
    best = ("replay:16", Outcome(static, 1.0, 0.0))
    return Result("w", "e", PUBLISHED, outcomes, best, best, 0, 0, [], [])


@pytest.mark.parametrize(
    ("policy", "won"), [(100.0, 0.0), (110.0, 1.0), (105.0, 0.5), (98.0, -0.2)]
)
def test_gap_won_is_the_share_of_the_oracles_gain_over_the_best_static(
    policy: float, won: float
) -> None:
    assert result(policy, 100.0, 110.0).gap_won() == pytest.approx(won)


def test_without_a_gap_the_target_is_the_best_static_to_within_a_restart() -> None:
    """No gap (the oracle within NO_GAP of a static): the policy, which starts on another
    setup, must come within NO_GAP of that static (about one restart's downtime at the day's
    mean rate)."""
    assert math.isnan(result(100.0, 100.0, 100.0).gap_won())
    assert result(100.0, 100.0, 100.0).gap_target_met()
    assert result(99.9, 100.0, 100.0).gap_target_met()
    assert result(99.9, 100.0, 100.15).gap_target_met()  # a gap under NO_GAP is none
    assert not result(99.7, 100.0, 100.0).gap_target_met()
    assert not result(99.0, 100.0, 100.0).gap_target_met()
    assert not result(104.0, 100.0, 110.0).gap_target_met()


def test_the_held_out_days_run_the_published_speeds_at_085_and_drifting() -> None:
    days = held_out_worlds()
    diurnal, drift = days["published-diurnal"], days["published-drift"]
    for world in days.values():
        assert isinstance(world.speed, MeasuredSpeed)
        assert world.truth == PUBLISHED
        assert world.largest_k == 4  # the oracle may draft as far as the engine accepts
        assert world.start == Setup(spec_tokens=3)
        assert world.demand(DAY / 2) == pytest.approx(512.0)
    assert diurnal.acceptance(DAY) == pytest.approx((0.85,) * 4)
    assert drift.acceptance(0.0)[0] == pytest.approx(0.85)
    assert drift.acceptance(DAY)[0] == pytest.approx(0.45)


def test_only_the_published_worlds_are_marked_published() -> None:
    marked = {name for name, world in issue_worlds().items() if world.truth == PUBLISHED}
    assert marked == {"measured", "published-diurnal", "published-drift"}
