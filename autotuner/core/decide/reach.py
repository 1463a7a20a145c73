"""How far past the deployed K speculation is valued: the next draft positions' acceptance
continued from the observed ones, so that a deeper K the engine accepts is a candidate.

A deployment drafting K counts acceptance at positions 1..K only, so without this the search
never holds K + 1, however high acceptance is (the engine and the settings may allow it: an
MTP head at 0.85 per position started at K = 3 would never try 4). A drafter's conditional
rate does not rise with depth (each position predicts further from the verified prefix), so
the next position is the last one times the last observed decline (p_K / p_(K-1), at most 1):
flat rates stay flat, falling ones keep falling at the same pace. The interval's low end falls
the same way from the last position's low end; its high end is the last position's. A move to
such a K is judged like any other once it runs, on what it measures.

The continued position is a guess, not a measurement, so a setup drafting it is taken only
where it is ahead of the same setup drafting within the observed positions by more than the
forecast's noise: within the noise the two are equal, as plans are, and the one that needs no
guess wins (a K = 4 valued 0.1% over K = 3 at batch 450 would otherwise be run on the guess
alone, and a schedule built on it moved again later that day).
"""

from __future__ import annotations

import math

from autotuner.core.predict.acceptance import AcceptanceEstimate
from autotuner.core.types import Setup


def beyond_observed(estimate: AcceptanceEstimate, limit: int, positions: int) -> AcceptanceEstimate:
    """`estimate` with up to `positions` more draft positions continued from the observed ones,
    never past `limit` (the largest K the engine and the settings allow). Unchanged without two
    exact positions to take a decline from (a position that is only a lower bound says nothing
    of the next)."""
    observed = estimate.max_spec_tokens
    more = min(positions, limit - observed)
    if more <= 0 or observed < 2 or estimate.exact_spec_tokens < observed:
        return estimate
    point, low, high = (
        list(estimate.conditional),
        list(estimate.conditional_low),
        list(estimate.conditional_high),
    )
    decline = min(1.0, point[-1] / point[-2]) if point[-2] > 0 else 0.0
    accepted = list(estimate.accepted_per_position)
    for _ in range(more):
        point.append(point[-1] * decline)
        low.append(low[-1] * decline)
        high.append(high[-1])
        accepted.append(accepted[-1] * point[-1])
    return estimate.model_copy(
        update={
            "accepted_per_position": tuple(accepted),
            "conditional": tuple(point),
            "conditional_low": tuple(low),
            "conditional_high": tuple(high),
            "trials": (*estimate.trials, *(0.0,) * more) if estimate.trials else (),
            "lower_bound": (*estimate.lower_bound, *(False,) * more)
            if estimate.lower_bound
            else (),
        }
    )


def within_noise_of_observed(
    values: dict[Setup, float], observed: int, noise: float, *, keep: Setup
) -> dict[Setup, Setup]:
    """Each setup in `values` (expected tokens/s) drafting past the `observed` positions that is
    not ahead by more than `noise` of the best setup of its kind and window drafting within
    them, mapped to that setup. `keep` (the running setup) is never named; a setup with no
    such sibling is not either."""
    finite = {s: v for s, v in values.items() if math.isfinite(v)}
    named: dict[Setup, Setup] = {}
    for setup, value in finite.items():
        if setup == keep or _deepest(setup) <= observed:
            continue
        shape = _kind_and_window(setup)
        within = [s for s in finite if _deepest(s) <= observed and _kind_and_window(s) == shape]
        sibling = max(within, key=finite.__getitem__, default=None)
        if sibling is not None and value <= finite[sibling] * (1 + noise):
            named[setup] = sibling
    return named


def _deepest(setup: Setup) -> int:
    """The most positions `setup` drafts at any batch."""
    return max((band.spec_tokens for band in setup.schedule), default=setup.spec_tokens)


def _kind_and_window(setup: Setup) -> tuple[object, ...]:
    """What a deeper K must share with a shallower one to be set against it: kind, replay
    window and adaptive verification (a kind alone is what the calibration calls a family)."""
    return (setup.kind, setup.replay_window, setup.adaptive)
