"""The plan over the payback horizon (core/decide/plan.py): straight to the setup the peak
needs, no restart into a regime that ends before it pays back, fewer restarts when the tokens
are within noise."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from autotuner.core.decide.plan import Plan, best_plan
from autotuner.core.types import Setup

A, B, C = Setup(spec_tokens=3), Setup(spec_tokens=2), Setup(replay_window=16)
PIECES = (1800.0,) * 8  # a 4 h horizon in half hours


def _plan(rates: Sequence[Sequence[float]], restart_s: float = 360.0, noise: float = 0.02) -> Plan:
    return best_plan(
        A,
        [A, B, C],
        np.asarray(rates, dtype=np.float64),
        PIECES,
        [restart_s] * 3,
        noise=noise,
        max_restarts=3,
    )


def test_a_rising_load_goes_straight_to_the_peaks_setup() -> None:
    # B is a little better than A on the way up, C much better at the peak: stepping through B
    # costs a restart more than it earns.
    rates = [
        [100, 100, 95, 90, 80, 80, 80, 80],  # A
        [100, 103, 104, 100, 90, 90, 90, 90],  # B
        [90, 98, 102, 110, 130, 130, 130, 130],  # C
    ]
    plan = _plan(rates)
    assert [s for _, s in plan.changes(A)] == [C]
    assert B not in plan.path


def test_a_regime_that_ends_before_payback_is_not_restarted_into() -> None:
    # C serves 10% more for the first half hour only: going there and back costs two restarts
    # of 6 minutes each, more than 10% of half an hour.
    rates = [
        [100] * 8,
        [95] * 8,
        [110, 90, 90, 90, 90, 90, 90, 90],
    ]
    plan = _plan(rates)
    assert plan.now(A) is None
    assert plan.restarts == 0
    # The same regime lasting three hours pays for both restarts: the plan goes and comes back.
    longer = _plan([[100] * 8, [95] * 8, [110] * 6 + [60, 60]])
    assert [s for _, s in longer.changes(A)] == [C, A]


def test_plans_within_noise_take_the_one_with_fewer_restarts() -> None:
    # Hopping A -> B -> A earns 1% more than holding A (net of its restarts): within noise.
    rates = [
        [100] * 8,
        [50, 50, 50, 50, 110, 110, 50, 50],
        [50] * 8,
    ]
    assert _plan(rates, restart_s=60.0).restarts == 0
    assert _plan(rates, restart_s=60.0, noise=0.0).restarts == 2


def test_the_plan_names_its_moves_and_the_tokens() -> None:
    plan = _plan([[100] * 8, [95] * 8, [200] * 8])
    text = plan.describe(A)
    assert "replay:16 now" in text
    assert "1 restart" in text
    assert plan.tokens > plan.holding
    assert plan.gain > 0.5
