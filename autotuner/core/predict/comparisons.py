"""Comparisons between predicted setups: the fastest at each batch, the batches where the winner
changes, and each setup's throughput as a ratio to a baseline's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from autotuner.core.predict.costmodel import SetupCurve
from autotuner.core.predict.roofline import Array


@dataclass(frozen=True)
class Crossover:
    """Where the faster of two setups changes: from `batch` on, `winner` is faster."""

    batch: int
    loser: str
    winner: str


def winners(curves: Sequence[SetupCurve]) -> list[str]:
    """The fastest setup's label at each batch (all curves share one batch grid)."""
    table = np.vstack([c.tokens_per_s for c in curves])
    return [curves[i].setup.label for i in np.argmax(table, axis=0)]


def winner_changes(curves: Sequence[SetupCurve]) -> list[Crossover]:
    """Every batch at which the best setup changes, in batch order."""
    best = winners(curves)
    batch = curves[0].batch
    return [
        Crossover(batch=int(batch[i]), loser=best[i - 1], winner=best[i])
        for i in range(1, len(best))
        if best[i] != best[i - 1]
    ]


def crossover_batches(first: SetupCurve, second: SetupCurve) -> list[Crossover]:
    """Batches at which the faster of two setups flips (first batch of the new winner)."""
    return flips(
        first.batch,
        (first.setup.label, first.tokens_per_s),
        (second.setup.label, second.tokens_per_s),
    )


def flips(
    batch: npt.NDArray[np.int64], first: tuple[str, Array], second: tuple[str, Array]
) -> list[Crossover]:
    """Batches at which the faster of two (label, tokens/s) curves on one grid flips."""
    sign = np.sign(first[1] - second[1])
    result = []
    for i in range(1, len(sign)):
        if sign[i] != 0 and sign[i] != sign[i - 1]:
            winner, loser = (first, second) if sign[i] > 0 else (second, first)
            result.append(Crossover(int(batch[i]), loser[0], winner[0]))
    return result


def ratio_to(curves: Mapping[str, SetupCurve], baseline: str) -> dict[str, Array]:
    base = curves[baseline].tokens_per_s
    return {
        label: np.divide(c.tokens_per_s, base, where=base > 0, out=np.zeros_like(base))
        for label, c in curves.items()
    }
