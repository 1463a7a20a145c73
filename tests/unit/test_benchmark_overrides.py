"""`decision_quality --set policy.group.field=value`: the policy run with one setting changed,
as the tuner's own --set reads it, so that a row can be read against the same policy without
a rule or a candidate (policy.candidates.spec_tokens=[1,2,3]: what the row owes to K = 4)."""

from __future__ import annotations

import numpy as np
import pytest

from autotuner.engines.vllm.capabilities import REPLAY_SPEC
from autotuner.errors import InputError
from autotuner.sim.worlds import held_out_worlds
from benchmarks.decision_quality import DOWNTIME_S, benchmark_settings, run_policy


def test_a_setting_is_laid_over_the_benchmarks_own() -> None:
    settings = benchmark_settings(
        overrides=["policy.candidates.spec_tokens=[1,2,3]", "policy.exploration.reserve=2"]
    )
    assert settings.candidates.spec_tokens == (1, 2, 3)
    assert settings.candidates.replay_windows == (8, 16)  # the group's other fields kept
    assert settings.exploration.reserve == 2
    assert settings.restart.downtime_s == DOWNTIME_S  # the benchmark's own kept


def test_a_duration_reads_as_the_tuners_own_set_reads_it() -> None:
    assert benchmark_settings(overrides=["policy.switch.dwell_s=10m"]).switch.dwell_s == 600


def test_without_overrides_the_policy_keeps_its_defaults() -> None:
    assert benchmark_settings().candidates.spec_tokens == (1, 2, 3, 4)


@pytest.mark.parametrize(
    ("pair", "names"),
    [
        ("source.urls=[a]", "not source"),
        ("policy.candidates.spec_token=[1]", "spec_token"),
        ("policy.exploration.reserve=-1", "reserve"),
        ("policy.switch", "group.field=value"),
        ("policy=3", "name a field"),
        ("policy.switch=3", "switch"),
    ],
)
def test_a_pair_that_is_not_a_valid_policy_setting_is_refused(pair: str, names: str) -> None:
    with pytest.raises(InputError, match=names):
        benchmark_settings(overrides=[pair])


def test_without_k4_the_held_out_days_first_hour_drafts_at_most_three() -> None:
    """published-diurnal's first hour moves to K = 4 with the policy's defaults
    (tests/unit/test_reach.py); with K = 4 left out of the candidates, never."""
    world = held_out_worlds()["published-diurnal"]
    engine = REPLAY_SPEC.serving(world.prior.model)
    settings = benchmark_settings(overrides=["policy.candidates.spec_tokens=[1,2,3]"])
    run = run_policy(world, engine, settings, np.arange(0.0, 3600.0, 300.0), 300.0)
    assert any(setup.replay_window for setup in run.used), "it moved into replay"
    assert max(setup.spec_tokens for setup in run.used) == 3
