"""The best path of a two-index dynamic programme, read back from its last step."""

from __future__ import annotations

import numpy as np

from autotuner.core.decide.backtrack import best_path


def test_the_path_ends_in_the_best_state_and_follows_each_steps_pointer() -> None:
    back = np.zeros((3, 2, 3, 2), dtype=np.int64)
    back[0] = -1  # the first step has no step before it: never read
    back[1, 0, 1] = (1, 0)
    back[2, 1, 2] = (0, 1)
    value = np.array([[1.0, 5.0, 2.0], [0.0, 3.0, 7.0]])
    assert best_path(value, back) == [(1, 0), (0, 1), (1, 2)]
