"""Demand ahead: where the load per engine is going over the payback horizon, from the trend of
the last windows and from what the same time of day looked like on previous days.

`LoadMemory` is persisted in the TunerState: the recent windows' demand (the trend) and a
decayed profile of log demand by time of day (Dynamo's planner predicts load the same way).
`forecast` blends the two by how much of the profile has been seen at the hours in question:
on the first day it is the damped trend alone, from the second the profile's shape anchored at
the current level. Everything is in log demand (requests per engine), with its uncertainty.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict

from autotuner.core.decay import decay
from autotuner.core.decide.settings import ForecastSettings
from autotuner.durations import format_duration

PROFILE_SLOTS = 48  # half-hours of a day
PROFILE_FULL = 0.5  # periods of coverage from which the profile is trusted alone
DAY_SEGMENTS = 24  # pieces of the whole-period forecast the day's plan is made over
MIN_SIGMA = 0.05  # log-space floor: no forecast is exact
MAX_TREND_CHANGE = math.log(8.0)  # the trend alone never moves the level more than this
SIGNIFICANT = 2.0  # a slope under this many standard errors is taken as none
# A trend is carried at most this many times the span of history it was fitted on: seconds of
# windows say nothing of the next hour. Beyond that the level holds.
SUPPORTED_SPANS = 4.0
# The widest interval a forecast gives (log space): as far as the trend may ever move the level.
MAX_SIGMA = MAX_TREND_CHANGE


class LoadMemory(BaseModel):
    """The demand per engine the tuner has seen: recent windows (time, log demand) for the
    trend, and per slot of the period the decayed coverage, mean and mean square of log
    demand (coverage counts periods: a slot fully watched once weighs 1)."""

    model_config = ConfigDict(frozen=True)

    recent: tuple[tuple[float, float], ...] = ()
    period_s: float = 0.0  # the period the profile was kept for (another period restarts it)
    coverage: tuple[float, ...] = (0.0,) * PROFILE_SLOTS
    log_mean: tuple[float, ...] = (0.0,) * PROFILE_SLOTS
    log_square: tuple[float, ...] = (0.0,) * PROFILE_SLOTS
    updated_at: float | None = None

    def add(self, demand: float, now: float, settings: ForecastSettings) -> LoadMemory:
        """One window's mean demand per engine at `now`."""
        value = math.log(max(demand, 1.0))
        keep = [(t, v) for t, v in self.recent if t > now - settings.trend_window_s]
        memory = self if self.period_s == settings.period_s else LoadMemory()
        slot_s = settings.period_s / PROFILE_SLOTS
        last = memory.updated_at
        # A window stands for the time since the last one (at most a slot): the first, for none.
        covered = min((now - last) / slot_s, 1.0) if last is not None else 0.0
        fade = decay(now - last, settings.profile_half_life_s) if last is not None else 1.0
        weight = np.asarray(memory.coverage) * fade
        mean, square = np.asarray(memory.log_mean), np.asarray(memory.log_square)
        slot = _slot(now, settings.period_s)
        if covered > 0:
            total = weight[slot] + covered
            mean[slot] = (mean[slot] * weight[slot] + value * covered) / total
            square[slot] = (square[slot] * weight[slot] + value * value * covered) / total
            weight[slot] = total
        return LoadMemory(
            recent=(*keep, (now, value)),
            period_s=settings.period_s,
            coverage=tuple(float(w) for w in weight),
            log_mean=tuple(float(m) for m in mean),
            log_square=tuple(float(s) for s in square),
            updated_at=now,
        )

    def periods_seen(self) -> float:
        """How many whole periods the profile holds, decayed (the mean slot coverage)."""
        return float(np.mean(self.coverage))


def _slot(t: float, period_s: float) -> int:
    return int((t % period_s) / period_s * PROFILE_SLOTS) % PROFILE_SLOTS


@dataclass(frozen=True)
class Forecast:
    """Demand per engine over the horizon, one segment at a time: each segment's length, the
    seconds from now to its middle, its level (geometric mean) and the log-space uncertainty
    of that level (single windows spread around it as the batch history does)."""

    durations: tuple[float, ...]
    offsets: tuple[float, ...]
    level: tuple[float, ...]
    sigma: tuple[float, ...]
    profile_weight: float  # how much the profile counted at the horizon's end (0: trend only)
    slope_per_h: float  # the recent trend, log demand per hour
    history_s: float = math.inf  # the span of recent windows the trend was fitted on

    @property
    def horizon_s(self) -> float:
        return float(sum(self.durations))

    def scaled(self, factor: float) -> Forecast:
        """The same forecast with demand moved by exp(+-sigma) x factor (a scenario)."""
        levels = tuple(
            lv * math.exp(factor * s) for lv, s in zip(self.level, self.sigma, strict=True)
        )
        return Forecast(
            self.durations,
            self.offsets,
            levels,
            self.sigma,
            self.profile_weight,
            self.slope_per_h,
            self.history_s,
        )

    def describe(self) -> str:
        """One phrase for the decision: the demand now, halfway and at the end, and whence."""

        def at(i: int) -> str:
            level, sigma = self.level[i], self.sigma[i]
            if sigma <= math.log(2.0):
                return f"{_demand(level)} (+-{math.expm1(sigma):.0%})"
            # Wider than a factor 2 either way: a percentage would read as nonsense.
            low, high = level * math.exp(-sigma), level * math.exp(sigma)
            return f"{_demand(level)} ({_demand(low)}-{_demand(high)})"

        middle = len(self.level) // 2
        reach = SUPPORTED_SPANS * self.history_s
        watched = format_duration(self.history_s)
        if self.profile_weight >= 0.05:
            source = f"trend and {self.profile_weight:.0%} the profile of previous days"
        elif reach < self.horizon_s and self.slope_per_h == 0:
            source = f"no trend in the {watched} watched"
        elif reach < self.horizon_s:
            # A slope per hour from seconds of windows would print as a huge number.
            moved = math.exp(self.slope_per_h * self.history_s / 3600)
            source = (
                f"trend x{moved:.2g} over the {watched} watched, held beyond "
                f"{format_duration(reach)}"
            )
        else:
            source = f"trend {self.slope_per_h:+.2f}/h in log demand"
        return (
            f"forecast demand {_demand(self.level[0])} now, {at(middle)} in "
            f"{format_duration(self.offsets[middle])}, {at(-1)} in "
            f"{format_duration(self.horizon_s)} ({source})"
        )


def _demand(value: float) -> str:
    """A demand as an operator reads it: whole from 10 up, two figures below (0.097, not 0)."""
    return f"{value:,.0f}" if value >= 9.5 else f"{value:.2g}"


def day_forecast(memory: LoadMemory, now: float, settings: ForecastSettings) -> Forecast | None:
    """Demand per engine over the next whole period, an hour-long piece at a time for a day
    (None until the profile has seen every slot of the period)."""
    if memory.period_s != settings.period_s or min(memory.coverage) < PROFILE_FULL:
        return None
    return forecast(memory, now, settings.period_s, settings, segments=DAY_SEGMENTS)


def forecast(
    memory: LoadMemory,
    now: float,
    horizon_s: float,
    settings: ForecastSettings,
    segments: int | None = None,
) -> Forecast | None:
    """Demand per engine over [now, now + horizon_s] in `segments` pieces (default: the
    settings'; None: no window seen yet).

    Where the profile has seen the hours in question, the forecast is the profile there plus
    today's departure from it (its level and damped trend, fitted on the recent windows minus
    the profile), weighted by how much of the profile was seen; elsewhere, the damped trend of
    the recent windows alone."""
    if not memory.recent:
        return None
    raw = _Line.fit(memory.recent, now)
    if raw.span < settings.min_trend_s:
        raw = _Line.fit(memory.recent, now, sloped=False)
    departures = _departures(memory, settings.period_s)
    # Today's departure from the profile is a level: its slope would mostly fit how coarsely
    # the profile's half-hours follow a steep hour.
    departure = _Line.fit(departures, now, sloped=False) if departures else None
    tau, count = settings.trend_damping_s, segments or settings.segments
    durations = (horizon_s / count,) * count
    offsets = tuple((i + 0.5) * horizon_s / count for i in range(count))
    levels, sigmas, weight = [], [], 0.0
    for i, dt in enumerate(offsets):
        ahead = 0.0 if i == 0 else dt
        value, sigma = raw.at(ahead, tau, horizon_s)
        profile = _profile_at(memory, now + ahead) if departure is not None else None
        weight = 0.0
        if departure is not None and profile is not None:
            mean, spread, seen = profile
            shift, shift_sigma = departure.at(ahead, tau, horizon_s)
            weight = min(seen / PROFILE_FULL, 1.0)
            value = weight * (mean + shift) + (1 - weight) * value
            # The slot's spread is of single windows; its level is known to about half that.
            sigma = weight * math.hypot(spread / 2, shift_sigma) + (1 - weight) * sigma
        levels.append(math.exp(value))
        sigmas.append(min(max(sigma, MIN_SIGMA), MAX_SIGMA))
    return Forecast(
        durations, offsets, tuple(levels), tuple(sigmas), weight, raw.slope * 3600, raw.span
    )


@dataclass(frozen=True)
class _Line:
    """A least-squares line through (time, log demand) points, as of `now`: the level now,
    the slope per second and their standard errors (a slope under SIGNIFICANT standard errors
    is taken as none: the level is then the mean)."""

    level: float
    slope: float
    level_error: float
    slope_error: float
    span: float  # seconds of history fitted

    @staticmethod
    def fit(points: Sequence[tuple[float, float]], now: float, *, sloped: bool = True) -> _Line:
        times = np.asarray([t for t, _ in points]) - now
        values = np.asarray([v for _, v in points])
        span = float(np.ptp(times))
        if len(points) < 3 or span <= 0:
            return _Line(float(values[-1]), 0.0, MIN_SIGMA, 0.0, span)
        if not sloped:
            noise = float(np.std(values, ddof=1))
            return _Line(float(values.mean()), 0.0, noise / math.sqrt(len(points)), 0.0, span)
        slope, intercept = np.polyfit(times, values, 1)
        fitted = intercept + slope * times
        residual = float(np.sqrt(np.sum((values - fitted) ** 2) / (len(points) - 2)))
        spread = float(np.sum((times - times.mean()) ** 2))
        slope_error = residual / math.sqrt(spread)
        if abs(slope) < SIGNIFICANT * slope_error:
            noise = float(np.std(values, ddof=1))
            return _Line(float(values.mean()), 0.0, noise / math.sqrt(len(points)), 0.0, span)
        level_error = residual * math.sqrt(1 / len(points) + float(times.mean()) ** 2 / spread)
        return _Line(float(intercept), float(slope), level_error, slope_error, span)

    def at(self, ahead: float, tau: float, horizon_s: float) -> tuple[float, float]:
        """(log demand, its standard error) `ahead` seconds from now, the slope damped with
        time constant `tau`, carried no further than SUPPORTED_SPANS times the history it was
        fitted on, and never moving the level more than MAX_TREND_CHANGE. Beyond what the
        history supports, the held level is known no better than the move the trend made, in
        the share of `ahead` the history does not support: seconds of history leave the level
        now inside the interval of the next hour; an hour of it barely widens the fourth."""
        carried = min(ahead, SUPPORTED_SPANS * self.span)
        damped = tau * (1 - math.exp(-carried / tau))
        change = float(np.clip(self.slope * damped, -MAX_TREND_CHANGE, MAX_TREND_CHANGE))
        sigma = math.hypot(self.level_error, self.slope_error * damped)
        if ahead > carried:
            sigma = max(sigma, abs(change) * (1 - carried / ahead))
        return self.level + change, sigma + 0.1 * ahead / max(horizon_s, 1.0)


def _departures(memory: LoadMemory, period_s: float) -> list[tuple[float, float]]:
    """The recent windows' log demand minus the profile at their time (where it was seen)."""
    if memory.period_s != period_s:
        return []
    found = []
    for t, value in memory.recent:
        profile = _profile_at(memory, t)
        if profile is not None:
            found.append((t, value - profile[0]))
    return found


def _profile_at(memory: LoadMemory, t: float) -> tuple[float, float, float] | None:
    """(mean log demand, its spread, coverage) at time `t`, between the two nearest slots."""
    position = (t % memory.period_s) / memory.period_s * PROFILE_SLOTS - 0.5
    low = math.floor(position)
    part = position - low
    slots = [low % PROFILE_SLOTS, (low + 1) % PROFILE_SLOTS]
    coverage = [memory.coverage[s] for s in slots]
    if min(coverage) <= 0.05:
        return None
    mean = (1 - part) * memory.log_mean[slots[0]] + part * memory.log_mean[slots[1]]
    variances = [max(memory.log_square[s] - memory.log_mean[s] ** 2, 0.0) for s in slots]
    spread = math.sqrt((1 - part) * variances[0] + part * variances[1])
    return mean, spread, min(coverage)
