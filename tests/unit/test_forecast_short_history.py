"""A forecast on a few seconds of history (issue 39: "0 (+-70138475449336315904%) in 33.8m"
after a restart). By default a trend needs `min_trend_s` (10 min) of history: seconds of a
ramp give none. Where an operator lets shorter trends count, the trend is carried no further
than the history supports, the interval is capped, and the sentence prints only numbers an
operator can read. A long history still extrapolates its trend as before."""

from __future__ import annotations

import math
import re

from autotuner.core.decide.forecast import (
    MAX_SIGMA,
    SUPPORTED_SPANS,
    LoadMemory,
    forecast,
)
from autotuner.core.decide.settings import ForecastSettings

# The bounds on a short trend are what these tests are about: let any span's trend count.
SETTINGS = ForecastSettings(min_trend_s=0)
HOUR = 3600.0


def memory_of(points: list[tuple[float, float]]) -> LoadMemory:
    memory = LoadMemory()
    for t, demand in points:
        memory = memory.add(demand, t, SETTINGS)
    return memory


def falling_for_seconds() -> LoadMemory:
    """Demand 40 -> 1 over 3 s of windows (clients reconnecting seen as a collapse)."""
    return memory_of([(1000.0 + 0.5 * i, 40.0 * 0.5**i) for i in range(7)])


def test_a_trend_over_seconds_is_held_beyond_what_they_support() -> None:
    memory = falling_for_seconds()
    ahead = forecast(memory, 1003.0, HOUR, SETTINGS)
    assert ahead is not None
    assert ahead.slope_per_h < 0  # the history did fall
    reach = SUPPORTED_SPANS * ahead.history_s
    assert reach < 60
    pieces = zip(ahead.level[1:], ahead.offsets[1:], strict=True)  # the first is now
    beyond = [level for level, offset in pieces if offset > reach]
    assert len(beyond) >= 2
    assert max(beyond) / min(beyond) < 1.2  # held, up to the growing interval's drift
    assert all(s <= MAX_SIGMA for s in ahead.sigma)


def test_the_sentence_on_seconds_of_history_is_readable() -> None:
    ahead = forecast(falling_for_seconds(), 1003.0, HOUR, SETTINGS)
    assert ahead is not None
    sentence = ahead.describe()
    for unreadable in ("e+", "inf", "nan"):
        assert unreadable not in sentence
    numbers = [float(n.replace(",", "")) for n in re.findall(r"\d[\d,]*\.?\d*", sentence)]
    assert max(numbers) < 100, sentence  # demand 40 at most was seen
    assert "held beyond" in sentence, sentence
    assert "watched" in sentence, sentence


def test_a_long_history_still_extrapolates_its_trend() -> None:
    """An hour of demand doubling every hour: the forecast carries it (no hold, no cap)."""
    start = 10 * HOUR
    points = [(start + 60.0 * i, 16.0 * 2 ** (60.0 * i / HOUR)) for i in range(61)]
    ahead = forecast(memory_of(points), start + HOUR, 2 * HOUR, SETTINGS)
    assert ahead is not None
    assert math.isclose(ahead.slope_per_h, math.log(2), rel_tol=0.05)
    assert ahead.level[-1] > 1.5 * ahead.level[0]
    assert "held beyond" not in ahead.describe()


def test_beyond_its_support_the_held_level_keeps_the_level_now_in_its_interval() -> None:
    """What seconds of history say of the next hour is no better than the move they made: the
    interval of every piece held beyond the reach spans back to (nearly) the demand now."""
    ahead = forecast(falling_for_seconds(), 1003.0, HOUR, SETTINGS)
    assert ahead is not None
    now = ahead.level[0]
    reach = SUPPORTED_SPANS * ahead.history_s
    pieces = zip(ahead.level[1:], ahead.sigma[1:], ahead.offsets[1:], strict=True)
    held = [(level, sigma) for level, sigma, offset in pieces if offset > reach]  # [0]: now
    assert held
    for level, sigma in held:
        assert level < now  # the fall is still forecast
        assert level * math.exp(sigma) >= now * 0.95  # but the level now is not ruled out


def test_a_demand_under_one_prints_its_figures_not_zero() -> None:
    ahead = forecast(falling_for_seconds(), 1003.0, HOUR, SETTINGS)
    assert ahead is not None
    assert ahead.level[-1] < 0.5
    assert ahead.level[0] < 1
    sentence = ahead.describe()
    assert f"forecast demand {ahead.level[0]:.2g} now" in sentence  # 0.78, not a rounded 1
    assert f", {ahead.level[-1]:.2g} (" in sentence  # 0.097, not 0


def test_no_trend_on_seconds_of_history_says_so() -> None:
    steady = memory_of([(1000.0 + 1.1 * i, 1.0) for i in range(3)])
    ahead = forecast(steady, 1003.0, HOUR, SETTINGS)
    assert ahead is not None
    assert ahead.slope_per_h == 0
    assert "no trend in the 2.2s watched" in ahead.describe()


def test_an_hour_of_history_barely_widens_the_last_piece() -> None:
    """Windows every 5 min for an hour (the benchmark's): the last piece of a 4 h horizon lies
    just past four spans, and its interval is the trend's own, not the held move's."""
    start = 10 * HOUR
    points = [(start + 300.0 * i, 16.0 * 2 ** (300.0 * i / HOUR)) for i in range(13)]
    ahead = forecast(memory_of(points), start + HOUR, 4 * HOUR, SETTINGS)
    assert ahead is not None
    assert SUPPORTED_SPANS * ahead.history_s < ahead.offsets[-1]  # just beyond the reach
    moved = math.log(ahead.level[-1] / ahead.level[0])
    assert moved > math.log(1.5)  # the trend is carried
    assert ahead.sigma[-1] < 0.5 * moved


def test_by_default_seconds_of_a_ramp_are_no_trend() -> None:
    """The real-vLLM tier's flap: clients starting doubled demand (1 -> 2) over 10 s of
    windows, and the forecast carried that to 14 within the hour. A trend needs ten minutes
    of history by default: the level holds."""
    ramp = [(1000.0 + 1.0 * i, 2 ** (i / 10)) for i in range(11)]
    memory = memory_of(ramp)
    short = forecast(memory, 1010.0, HOUR, SETTINGS)
    assert short is not None
    assert short.level[-1] > 4  # counted, the ramp's trend would move the level far
    ahead = forecast(memory, 1010.0, HOUR, ForecastSettings())
    assert ahead is not None
    assert ahead.slope_per_h == 0
    assert max(ahead.level) < 2
    assert "no trend in the 10s watched" in ahead.describe()
