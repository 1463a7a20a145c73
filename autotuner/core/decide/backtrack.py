"""The best path of a dynamic programme over steps whose states are indexed by two numbers: the
search's K schedules (K, bands used) and the benchmark's hindsight oracle (restarts used,
setup) both keep, per step, the best total ending in each state and the state it came from."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def best_path(value: npt.NDArray[np.float64], back: npt.NDArray[np.int64]) -> list[tuple[int, int]]:
    """The state of each step on the best path, first step first: `value[a, b]` is the best
    total ending in state (a, b) at the last step, `back[step, a, b]` the state that path held
    at the step before (`back[0]` is not read)."""
    a, b = (int(x) for x in np.unravel_index(int(np.argmax(value)), value.shape))
    path = [(a, b)]
    for step in range(back.shape[0] - 1, 0, -1):
        a, b = (int(x) for x in back[step, a, b])
        path.append((a, b))
    path.reverse()
    return path
