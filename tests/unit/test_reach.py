"""Speculation valued one position past the deployed K: the next position continues the
observed decline, so a deployment started at K = 3 can reach the K = 4 the engine accepts; a
deeper K within the forecast's noise of the observed one is not taken on that guess."""

from __future__ import annotations

import numpy as np
import pytest

from autotuner.core.decide.reach import beyond_observed, within_noise_of_observed
from autotuner.core.decide.settings import PolicySettings, RestartSettings
from autotuner.core.predict.acceptance import from_conditional
from autotuner.core.types import ScheduleBand, Setup
from autotuner.engines.vllm.capabilities import REPLAY_SPEC
from autotuner.sim.worlds import World, held_out_worlds, issue_worlds
from benchmarks.decision_quality import PolicyRun, run_policy


def test_flat_acceptance_stays_flat_one_position_deeper() -> None:
    reached = beyond_observed(from_conditional([0.85, 0.85, 0.85]), limit=4, positions=1)
    assert reached.max_spec_tokens == 4
    assert reached.conditional[3] == pytest.approx(0.85)
    assert reached.tau(4) > reached.tau(3)


def test_falling_acceptance_keeps_falling_at_the_last_pace() -> None:
    reached = beyond_observed(from_conditional([0.85, 0.75, 0.65]), limit=8, positions=2)
    assert reached.conditional[3] == pytest.approx(0.65 * 0.65 / 0.75)
    assert reached.conditional[4] == pytest.approx(0.65 * (0.65 / 0.75) ** 2)
    assert reached.conditional_low[3] <= reached.conditional[3] <= reached.conditional_high[3]


def test_a_rising_last_position_is_not_extrapolated_upward() -> None:
    reached = beyond_observed(from_conditional([0.6, 0.8]), limit=3, positions=1)
    assert reached.conditional[2] == pytest.approx(0.8)


@pytest.mark.parametrize(
    ("rates", "limit"),
    [([0.85, 0.85, 0.85], 3), ([0.85], 4), ([], 4)],
)
def test_nothing_is_added_at_the_limit_or_without_a_decline_to_read(
    rates: list[float], limit: int
) -> None:
    estimate = from_conditional(rates)
    assert beyond_observed(estimate, limit=limit, positions=1) is estimate


def test_nothing_is_read_past_a_position_that_is_only_a_lower_bound() -> None:
    estimate = from_conditional([0.85, 0.8]).model_copy(update={"lower_bound": (False, True)})
    assert beyond_observed(estimate, limit=4, positions=1) is estimate


def _first_hour(world_name: str, worlds: dict[str, World]) -> PolicyRun:
    world = worlds[world_name]
    engine = REPLAY_SPEC.serving(world.prior.model)
    settings = PolicySettings(restart=RestartSettings(downtime_s=180.0, first_compile_s=0))
    return run_policy(world, engine, settings, np.arange(0.0, 3600.0, 300.0), 300.0)


def test_a_deployment_started_at_k3_reaches_the_k4_high_acceptance_pays_for() -> None:
    """The held-out day at acceptance 0.85 (published speeds): the engine accepts K = 4 and the
    oracle runs it; started at spec:3, the policy must be able to go there."""
    run = _first_hour("published-diurnal", held_out_worlds())
    assert max(setup.spec_tokens for setup in run.used) == 4


def test_a_deeper_k_within_the_noise_of_the_observed_one_is_not_taken() -> None:
    """lull-days at batch 450: the model values K = 4 (its fourth position a guess) within a
    fraction of a percent of K = 3, so the move goes to K = 3, which needs no guess; a K = 4
    schedule taken on the guess alone was moved again later that day."""
    run = _first_hour("lull-days", issue_worlds())
    assert any(setup.replay_window for setup in run.used), "it moved into replay"
    assert max(setup.spec_tokens for setup in run.used) == 3


K3, K4 = Setup(spec_tokens=3, replay_window=16), Setup(spec_tokens=4, replay_window=16)
K4_SCHEDULE = Setup(
    spec_tokens=4,
    replay_window=16,
    schedule=(
        ScheduleBand(start_batch=1, end_batch=95, spec_tokens=4),
        ScheduleBand(start_batch=96, end_batch=8191, spec_tokens=3),
    ),
)


def test_a_deeper_k_within_the_noise_is_named_with_the_setup_that_needs_no_guess() -> None:
    values = {K3: 10_000.0, K4: 10_100.0, K4_SCHEDULE: 10_150.0, Setup(spec_tokens=4): 9_000.0}
    named = within_noise_of_observed(values, observed=3, noise=0.02, keep=Setup(spec_tokens=3))
    assert named == {K4: K3, K4_SCHEDULE: K3}  # spec:4 has no spec K <= 3 beside it


def test_a_deeper_k_ahead_by_more_than_the_noise_or_running_is_kept() -> None:
    values = {K3: 10_000.0, K4: 10_600.0, K4_SCHEDULE: 10_150.0}
    assert within_noise_of_observed(values, observed=3, noise=0.02, keep=K4_SCHEDULE) == {}
    assert within_noise_of_observed(values, observed=4, noise=0.02, keep=K3) == {}
