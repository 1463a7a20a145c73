"""The plan over the payback horizon: which setup to run in each piece of the forecast, net of
the restarts between them, with as few restarts as the tokens allow.

A dynamic programme over (piece, setup, restarts used): staying serves the setup's expected
tokens/s for the piece, a restart serves nothing for the setup's learned restart time (times
`restart.margin` and the share of replicas restarting). Among the best plan with each number
of restarts, the one with the fewest whose tokens are within `forecast.noise` of the best is
chosen (hysteresis on the whole horizon, not one window). Its first piece is what to run now:
a plan that goes to the peak's setup goes there at once, with no step on the way; a regime the
forecast says ends before a restart pays back is not restarted into, the way back counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from autotuner.core.types import Setup
from autotuner.durations import format_duration

Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Plan:
    """The setup of each piece of the horizon, what it serves net of restarts, and holding the
    running setup instead."""

    path: tuple[Setup, ...]
    starts: tuple[float, ...]  # seconds from now at which each piece begins
    tokens: float  # over the horizon and its tail, restarts charged (with the margin)
    holding: float  # the running setup held over the horizon and its tail
    restarts: int
    best_tokens: float  # the best plan of any restart count (before preferring fewer)
    horizon_s: float

    @property
    def gain(self) -> float:
        return self.tokens / self.holding - 1.0 if self.holding > 0 else 0.0

    def changes(self, current: Setup) -> list[tuple[float, Setup]]:
        """(seconds from now, setup) at each restart of the plan."""
        moves, running = [], current
        for start, setup in zip(self.starts, self.path, strict=True):
            if setup != running:
                moves.append((start, setup))
                running = setup
        return moves

    def now(self, current: Setup) -> Setup | None:
        """The setup to switch to now (None: the plan keeps the running setup for now)."""
        return self.path[0] if self.path[0] != current else None

    def describe(self, current: Setup) -> str:
        moves = self.changes(current)
        horizon = self.horizon_s
        steps = ", ".join(
            f"{setup.label} {'now' if at == 0 else f'in {format_duration(at)}'}"
            for at, setup in moves
        )
        what = f"{steps} ({len(moves)} restart(s))" if moves else f"hold {current.label}"
        return (
            f"plan over {format_duration(horizon)}: {what}, {self.tokens:,.0f} tokens net of "
            f"restarts vs {self.holding:,.0f} holding {current.label}"
        )


def best_plan(
    current: Setup,
    setups: Sequence[Setup],
    rates: Array,
    durations: Sequence[float],
    restart_s: Sequence[float],
    *,
    noise: float,
    max_restarts: int,
    tail_s: float = 0.0,
) -> Plan:
    """The plan over the pieces: `rates[c, m]` is setup c's tokens/s in piece m,
    `restart_s[c]` the seconds lost (margin and share included) restarting into setup c.
    The setup a plan ends with stays after the horizon: it is credited `tail_s` more of its
    last piece's rate (so a plan that ends where the load is going beats one that will need
    another restart just past the horizon)."""
    count, pieces = rates.shape
    home = list(setups).index(current)
    length = np.asarray(durations, dtype=np.float64)
    lost = np.asarray(restart_s, dtype=np.float64)
    layers = max_restarts + 1
    value = np.full((layers, count), -np.inf)
    value[0, home] = rates[home, 0] * length[0]
    if layers > 1:
        moved = rates[:, 0] * (length[0] - lost)
        moved[home] = -np.inf
        value[1] = moved
    back = np.full((pieces, layers, count), -1, dtype=np.int64)
    for m in range(1, pieces):
        stay = value + rates[:, m] * length[m]
        after = stay.copy()
        choice = np.tile(np.arange(count), (layers, 1))
        for r in range(1, layers):
            source = _best_other(value[r - 1])
            gained = value[r - 1, source] + rates[:, m] * (length[m] - lost)
            better = gained > after[r]
            after[r] = np.where(better, gained, after[r])
            choice[r] = np.where(better, source, choice[r])
        value, back[m] = after, choice
    value = value + rates[:, -1] * tail_s
    finals = value.max(axis=1)
    best = float(finals.max())
    floor = best - noise * abs(best)
    layer = int(next(r for r in range(layers) if finals[r] >= floor))
    path = _path(back, layer, int(np.argmax(value[layer])))
    starts = tuple(float(s) for s in np.concatenate(([0.0], np.cumsum(length)[:-1])))
    return Plan(
        path=tuple(setups[c] for c in path),
        starts=starts,
        tokens=float(finals[layer]),
        holding=float(rates[home] @ length + rates[home, -1] * tail_s),
        restarts=layer,
        best_tokens=best,
        horizon_s=float(length.sum()),
    )


def _best_other(values: Array) -> npt.NDArray[np.int64]:
    """For each setup, the best other setup to come from (a restart into oneself is none)."""
    order = np.argsort(-values)
    first, second = int(order[0]), int(order[1]) if len(order) > 1 else int(order[0])
    source = np.full(len(values), first, dtype=np.int64)
    source[first] = second
    return source


def _path(back: npt.NDArray[np.int64], layer: int, last: int) -> list[int]:
    """The setups of the plan ending in `last` with `layer` restarts, first piece first."""
    path = [last]
    for m in range(back.shape[0] - 1, 0, -1):
        previous = int(back[m, layer, path[-1]])
        if previous != path[-1]:
            layer -= 1
        path.append(previous)
    path.reverse()
    return path
