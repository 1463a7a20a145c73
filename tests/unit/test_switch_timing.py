"""benchmarks/switch_timing.py: one switch from the start setup, priced on a published world's
truth as the decision-quality benchmark prices the policy."""

from __future__ import annotations

import math

import pytest

from benchmarks.decision_quality import build_world
from benchmarks.switch_timing import speeds_against_model, timing


@pytest.mark.parametrize("name", ["measured", "published-diurnal"])
def test_from_spec3_even_the_first_window_cannot_reach_a_static_oracle(name: str) -> None:
    # replay with speculation is the best setup at every moment: the restart to it costs its
    # downtime, so no policy starting on spec:3 ends at or above it.
    result = timing(build_world(name, "", ""), "replay-spec", None, [0.08, 0.17])
    assert result.oracle_over_static == pytest.approx(1.0)
    first, second = result.switches
    assert math.isnan(first.gap_won)
    assert second.tokens_per_static < first.tokens_per_static < 1.0


def test_a_later_morning_switch_wins_less_of_the_gap() -> None:
    result = timing(
        build_world("published-drift", "", ""), "gdn-replay", "replay:16", [2.75, 3.0, 3.25]
    )
    won = [s.gap_won for s in result.switches]
    assert won == sorted(won, reverse=True)
    assert result.best_static == "replay:16"


def test_the_published_world_and_the_model_agree_where_plain_is_published() -> None:
    ratios = dict(speeds_against_model())
    assert ratios[512]["plain"] == pytest.approx(1.0, abs=0.1)
    assert ratios[78]["plain"] > 1.3  # the interpolated middle, far from the model's
