import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autotuner.core.predict import acceptance as acc
from autotuner.errors import InputError


def test_copy_rule_matches_the_article() -> None:
    assert round(acc.copy_rule(0.6, 4), 2) == 0.92
    assert round(acc.copy_rule(0.8, 4), 2) == 1.34


def test_tokens_kept_is_the_geometric_sum() -> None:
    assert acc.tokens_kept(0.5, 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert acc.tokens_kept(0.0, 5) == 1.0


def test_copy_rule_break_even_solves_the_rule() -> None:
    for drafts in (2, 3, 4, 8):
        p = acc.copy_rule_break_even(drafts)
        assert acc.copy_rule(p, drafts) == pytest.approx(1.0, abs=1e-9)
        assert acc.copy_rule(p - 0.01, drafts) < 1 < acc.copy_rule(p + 0.01, drafts)
    assert acc.copy_rule_break_even(1) == 0.0


def test_copy_rule_needs_a_draft() -> None:
    with pytest.raises(InputError):
        acc.copy_rule(0.5, 0)


def test_conditional_rates_from_vllm_counters() -> None:
    # 1000 drafts; 800 accepted at position 0, 480 at 1, 240 at 2.
    est = acc.from_counts(1000, [800, 480, 240])
    assert est.conditional == pytest.approx((0.8, 0.6, 0.5))
    assert est.tau(3) == pytest.approx(1 + 0.8 + 0.48 + 0.24)
    assert est.tau(1) == pytest.approx(1.8)
    assert est.tau(0) == 1.0
    for low, rate, high in zip(
        est.conditional_low, est.conditional, est.conditional_high, strict=True
    ):
        assert low < rate < high
    low, high = est.tau_interval(3)
    assert low < est.tau(3) < high


def test_interval_narrows_with_more_counts() -> None:
    few = acc.from_counts(10, [8])
    many = acc.from_counts(10_000, [8_000])
    assert (
        many.conditional_high[0] - many.conditional_low[0]
        < (few.conditional_high[0] - few.conditional_low[0]) / 10
    )


def test_no_prediction_beyond_the_observed_k() -> None:
    est = acc.from_counts(100, [50, 20])
    with pytest.raises(InputError, match="extrapolation"):
        est.tau(3)


@pytest.mark.parametrize(
    ("drafts", "accepted"),
    [(-1, [0]), (10, [11]), (10, [5, 6]), (math.nan, [1]), (10, [math.inf])],
)
def test_inconsistent_counters_are_refused(drafts: float, accepted: list[float]) -> None:
    with pytest.raises(InputError):
        acc.from_counts(drafts, accepted)


def test_positions_after_zero_acceptance_carry_no_information() -> None:
    est = acc.from_counts(100, [0, 0])
    assert est.conditional == (0.0, 0.0)
    assert (est.conditional_low[1], est.conditional_high[1]) == (0.0, 1.0)


def test_wilson_interval_without_trials_is_uninformative() -> None:
    assert acc.wilson_interval(0, 0) == (0.0, 1.0)


rates = st.lists(st.floats(0, 1), min_size=1, max_size=8)


@given(rates)
def test_tau_is_monotone_in_k(conditional: list[float]) -> None:
    curve = acc.tau_curve(conditional)
    assert all(b >= a - 1e-12 for a, b in itertools.pairwise(curve))
    assert curve[-1] <= len(conditional) + 1 + 1e-9


@given(rates, st.integers(0, 7), st.floats(0, 1))
def test_tau_is_monotone_in_acceptance(
    conditional: list[float], index: int, raise_by: float
) -> None:
    index %= len(conditional)
    higher = list(conditional)
    higher[index] = min(1.0, higher[index] + raise_by)
    k = len(conditional)
    assert acc.tau(higher, k) >= acc.tau(conditional, k) - 1e-12


@given(st.floats(0, 1), st.integers(1, 8))
def test_geometric_tau_equals_tokens_kept(p: float, k: int) -> None:
    assert acc.geometric(p, k).tau(k) == pytest.approx(acc.tokens_kept(p, k))
