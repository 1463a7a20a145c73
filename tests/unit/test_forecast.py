"""The demand forecast (core/decide/forecast.py): the trend of the last windows, the profile
by time of day, and what the profile teaches a second day."""

from __future__ import annotations

import math

import numpy as np

from autotuner.core.decide.forecast import DAY_SEGMENTS, LoadMemory, day_forecast, forecast
from autotuner.core.decide.settings import ForecastSettings
from autotuner.sim.days import DAY, working_day

SETTINGS = ForecastSettings()
STEP = 300.0
HORIZON = 4 * 3600.0


def _fed(load: object, start: float, end: float, memory: LoadMemory | None = None) -> LoadMemory:
    memory = memory or LoadMemory()
    for t in np.arange(start, end, STEP):
        memory = memory.add(load(float(t)), float(t), SETTINGS)  # type: ignore[operator]
    return memory


def _error(memory: LoadMemory, now: float) -> float:
    """Mean absolute log error of the forecast made at `now` over the horizon."""
    ahead = forecast(memory, now, HORIZON, SETTINGS)
    assert ahead is not None
    truth = [working_day(now + dt) for dt in ahead.offsets]
    return float(np.mean([abs(math.log(f / t)) for f, t in zip(ahead.level, truth, strict=True)]))


def test_a_steady_load_is_forecast_flat_and_sure() -> None:
    memory = _fed(lambda t: 120.0, 0.0, 3600.0)
    ahead = forecast(memory, 3600.0, HORIZON, SETTINGS)
    assert ahead is not None
    assert all(abs(level / 120.0 - 1) < 0.01 for level in ahead.level)
    assert ahead.slope_per_h == 0.0
    assert "forecast demand 120 now" in ahead.describe()


def test_a_rising_load_is_forecast_to_keep_rising_with_growing_uncertainty() -> None:
    memory = _fed(lambda t: 20.0 * 2 ** (t / 3600), 0.0, 3600.0)
    ahead = forecast(memory, 3600.0, HORIZON, SETTINGS)
    assert ahead is not None
    assert ahead.level[-1] > ahead.level[0] * 1.5
    assert all(b >= a for a, b in zip(ahead.level, ahead.level[1:], strict=False))
    assert ahead.sigma[-1] > ahead.sigma[0]


def test_noise_around_a_level_is_not_a_trend() -> None:
    values = [40.0, 300.0, 60.0, 250.0]
    memory = _fed(lambda t: values[int(t / STEP) % 4], 0.0, 3600.0)
    ahead = forecast(memory, 3600.0, HORIZON, SETTINGS)
    assert ahead is not None
    assert ahead.slope_per_h == 0.0


def test_the_profile_makes_the_second_day_foresee_the_morning_better_than_the_first() -> None:
    # At 7:00 the load is still quiet; by 9:30 it is 70 times higher. The first day has only
    # the trend of a quiet night; the second has the first day's profile.
    morning = 7 * 3600.0
    first = _fed(working_day, 0.0, morning)
    second = _fed(working_day, 0.0, DAY + morning)
    ahead = forecast(second, DAY + morning, HORIZON, SETTINGS)
    assert ahead is not None
    assert ahead.profile_weight > 0.5
    assert _error(second, DAY + morning) < 0.5 * _error(first, morning)
    assert "profile of previous days" in ahead.describe()


def test_a_profile_kept_for_another_period_is_started_afresh() -> None:
    memory = _fed(working_day, 0.0, DAY)
    other = ForecastSettings(period_s=DAY / 2)
    assert memory.add(50.0, DAY, other).periods_seen() < memory.periods_seen()


def test_no_window_no_forecast() -> None:
    assert forecast(LoadMemory(), 0.0, HORIZON, SETTINGS) is None


def test_the_whole_day_is_forecast_only_once_a_day_has_been_watched() -> None:
    assert day_forecast(_fed(working_day, 0.0, DAY / 2), DAY / 2, SETTINGS) is None
    memory = _fed(working_day, 0.0, DAY + 3600)
    ahead = day_forecast(memory, DAY + 3600, SETTINGS)
    assert ahead is not None
    assert ahead.horizon_s == SETTINGS.period_s
    assert len(ahead.level) == DAY_SEGMENTS
    # It follows the day: the busiest hour ahead is the profile's, every hour near its level.
    truth = [working_day(DAY + 3600 + dt) for dt in ahead.offsets]
    assert int(np.argmax(ahead.level)) == int(np.argmax(truth))
    errors = [abs(math.log(f / t)) for f, t in zip(ahead.level, truth, strict=True)]
    assert float(np.mean(errors)) < 0.25
