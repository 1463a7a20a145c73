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
"""

from __future__ import annotations

from autotuner.core.predict.acceptance import AcceptanceEstimate


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
