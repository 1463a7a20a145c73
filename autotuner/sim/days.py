"""Demand shapes of a day, requests per engine by time: a cosine day, and hour-of-day tables
(a working day, a busy day with an afternoon lull) repeated every day."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

DAY = 86400.0


def daily_load(low: float, high: float) -> Callable[[float], float]:
    """Demand rising from `low` at midnight to `high` at noon and back (a cosine)."""

    def demand(t: float) -> float:
        return low + (high - low) * (1 - math.cos(2 * math.pi * t / DAY)) / 2

    return demand


# A working day, as an hour-of-day -> demand table: quiet nights, a steep morning rise, a lunch
# dip, a slow evening fall. A cosine's trend would carry its own shape; this one needs the days
# before it to be foreseen.
WORKING_DAY: tuple[tuple[float, float], ...] = (
    (0, 6),
    (6, 6),
    (8, 60),
    (9.5, 420),
    (12, 420),
    (12.5, 200),
    (13.5, 200),
    (14, 440),
    (18, 420),
    (22, 40),
    (24, 6),
)


# Busy all day but for a three-hour afternoon lull, where speculation serves more than replay:
# over a 4 h horizon the lull is worth going there and back, over the day it is within noise
# (the level where the whole-day plan holds through it: at 150 the horizon's plan holds too).
LULL_DAY: tuple[tuple[float, float], ...] = (
    (0, 450),
    (12, 450),
    (12.25, 100),
    (15, 100),
    (15.25, 450),
    (24, 450),
)


def day_of(table: tuple[tuple[float, float], ...]) -> Callable[[float], float]:
    """Demand of an hour-of-day table at time t, every day alike (linear in log demand between
    rows)."""
    hours = [h for h, _ in table]
    logs = [math.log(v) for _, v in table]

    def demand(t: float) -> float:
        return float(math.exp(np.interp((t % DAY) / 3600, hours, logs)))

    return demand


working_day = day_of(WORKING_DAY)
