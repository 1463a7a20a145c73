"""A world whose engine runs a K schedule as vllm-project/vllm#49548 measured it: with
Qwen3.5-122B, MTP K=2 and the schedule [[1,4,2],[5,512,0]], 8 concurrent requests served 24-157
tokens/s where the static K served ~232 (a tenth to two thirds), while a single stream ran at
the expected piecewise-graph rate. vLLM picks K per step from the scheduled requests, so a
batch that moves across a band edge flips K from step to step; the report's batch (8) sat
within a factor of two of its edge (5). The world keeps that: a schedule serves
`COLLAPSED_SHARE` of its rate wherever the batch is within a factor of two of an edge where K
changes, and its rate elsewhere."""

from __future__ import annotations

import itertools

from autotuner.core.decide.schedule_check import EDGE_REACH
from autotuner.core.types import Setup
from autotuner.sim.truth import StepError, no_error

# What the collapsed schedule serves of its rate: inside the report's range (24-157 of ~232,
# 0.10-0.68), near its geometric middle.
COLLAPSED_SHARE = 0.35


def k_edges(setup: Setup) -> list[int]:
    """The first batch of each band whose K differs from the band before it."""
    bands = setup.schedule
    return [
        after.start_batch
        for before, after in itertools.pairwise(bands)
        if after.spec_tokens != before.spec_tokens
    ]


def near_an_edge(setup: Setup, batch: float) -> bool:
    return any(edge / EDGE_REACH <= batch <= edge * EDGE_REACH for edge in k_edges(setup))


def collapsing_schedules(error: StepError = no_error) -> StepError:
    """`error`, with a schedule's steps as slow as the collapse near its band edges."""

    def step_error(setup: Setup, batch: float) -> float:
        factor = error(setup, batch)
        if setup.schedule and near_an_edge(setup, batch):
            return factor / COLLAPSED_SHARE
        return factor

    return step_error
