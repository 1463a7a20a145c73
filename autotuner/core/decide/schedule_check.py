"""Judging a K schedule on what the engine did with it: the K it drafted (read from its
counters) and the rate its band measured against the rate predicted for that band.

A schedule can fail in two ways the throughput alone does not name. The engine may not run it
(vLLM drops it with a warning under data parallelism or on Model Runner V1 for some methods):
the window then drafts the schedule's largest K at batches whose band says less. Or it runs it
and collapses: vllm-project/vllm#49548 measured 8 concurrent requests fall from ~232 to 24-157
tokens/s when the batch moved across a band edge (K is chosen per step from the scheduled
requests, so it flips as requests come and go). Either way the schedule, not this one setup,
is what failed: verification reverts it and refuses K schedules for `quarantine.capability_s`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from autotuner.core.decide.context import Situation
from autotuner.core.engine.capabilities import Capability
from autotuner.core.types import Observation, ScheduleBand, Setup

# A band collapsed when it serves less than this share of what the setup it replaced serves
# there, and less than this share of what the model expected of it beside that setup
# (vllm#49548: 24-157 of ~232 tokens/s, 0.10-0.68 of the static K's rate); a smaller shortfall
# is the prediction's error, judged as any change's. The expectation is the cost model's ratio
# of the two setups before calibration: calibration has already learned from this window, and a
# setup the model expected to serve half as much and serving half as much ran as written.
COLLAPSED = 0.6
# Draft tokens per draft farther than this from what the bands give were not the bands' K.
K_USED_TOLERANCE = 0.5
# Where the bands give no drafts, an engine that drafted in this share of request-steps ran
# another K.
MOSTLY = 0.5
# The batches around an edge where K flips from step to step: within this factor of it.
EDGE_REACH = 2.0
# A region of the schedule the load spends at least this share of its time in is verified.
VISITED_SHARE = 0.10
# At most this many settled windows are waited for to see every visited region.
MAX_WINDOWS = 8


@dataclass(frozen=True)
class Region:
    """A range of batch a schedule is verified on: one band, or the batches around an edge."""

    label: str
    low: float
    high: float

    def holds(self, batch: float) -> bool:
        return self.low <= batch <= self.high


def regions(target: Setup) -> list[Region]:
    """The schedule's bands, and the batches within EDGE_REACH of each edge where K changes
    (vllm-project/vllm#49548: where it collapsed)."""
    found = [Region(_band_label(b), b.start_batch, b.end_batch) for b in target.schedule]
    for before, after in itertools.pairwise(target.schedule):
        if after.spec_tokens != before.spec_tokens:
            edge = after.start_batch
            label = f"edge at {edge} (K {before.spec_tokens}->{after.spec_tokens})"
            found.append(Region(label, edge / EDGE_REACH, edge * EDGE_REACH))
    return found


def unverified(sit: Situation, target: Setup, checked: tuple[str, ...]) -> list[Region]:
    """The regions the load visits (VISITED_SHARE of the batch histogram) that no settled
    window has measured yet."""
    middles, probabilities = sit.state.batch.distribution()
    return [
        region
        for region in regions(target)
        if region.label not in checked
        and float(sum(p for m, p in zip(middles, probabilities, strict=True) if region.holds(m)))
        >= VISITED_SHARE
    ]


@dataclass(frozen=True)
class ScheduleFailure:
    """Why the schedule failed in this window, said for the revert, and the capability it
    shows the engine does not serve well (refused for `quarantine.capability_s`)."""

    why: str
    capability: Capability


def judge_schedule(
    sit: Situation,
    switch: tuple[Setup, Setup],
    measured: float,
    reference: float,
    demand: float,
) -> ScheduleFailure | None:
    """The schedule's failure in this window, if it failed: not run as written (a schedule
    the engine takes per batch), or its band (of the target, as the engine runs it: SGLang's
    adaptive tiers too) collapsed, measuring under COLLAPSED of what the previous setup gives
    at this demand and of what the model expected of it there. `switch` is (previous,
    target)."""
    previous, target = switch
    run = sit.ctx.engine.as_run(target)
    if not run.schedule:
        return None
    observation = sit.observation
    if target.schedule:
        capability, what = Capability.SPEC_SCHEDULE, "the schedule"
    else:
        capability, what = Capability.ADAPTIVE_VERIFICATION, "the adaptive tiers"
    dropped = _not_run(observation, target) if target.schedule else None
    if dropped is not None:
        return ScheduleFailure(dropped, capability)
    if not (np.isfinite(reference) and measured < reference * COLLAPSED):
        return None  # a smaller shortfall is the prediction's error: reverted as any change's
    expected = reference * _model_ratio(sit, previous, target, demand)
    if np.isfinite(expected) and measured >= expected * COLLAPSED:
        return None  # it served about what the model expected of it: it ran as written
    band = _band_at(run, demand)
    return ScheduleFailure(
        f"{what} collapsed: its {_band_label(band)} measured {measured:,.0f} tokens/s per "
        f"engine at demand {demand:.0f}, {measured / reference - 1:.0%} against "
        f"{previous.label}'s {reference:,.0f} where the model expected "
        f"{expected / reference - 1:+.0%}{_k_used(observation)}, as a schedule whose batch "
        "moves across a band edge does (vllm-project/vllm#49548)",
        capability,
    )


def _model_ratio(sit: Situation, previous: Setup, target: Setup, demand: float) -> float:
    """The cost model's tokens/s of `target` over `previous`'s at `demand`, uncalibrated (nan
    where either drafts deeper than the acceptance reaches or serves nothing)."""
    accept = sit.accept
    if max(previous.spec_tokens, target.spec_tokens) > accept.max_spec_tokens:
        return float("nan")
    before = sit.predictor.model_tokens_per_s_at(previous, demand, accept)
    after = sit.predictor.model_tokens_per_s_at(target, demand, accept)
    return after / before if before > 0 else float("nan")


def _not_run(observation: Observation, target: Setup) -> str | None:
    """What says the engine drafted another K than the bands at the window's batches."""
    used = _tokens_per_draft(observation)
    if used is None:
        return None
    expected = _bands_tokens_per_draft(observation, target)
    if expected is not None and abs(used - expected) <= K_USED_TOLERANCE:
        return None
    if expected is None and _drafted_share(observation) < MOSTLY:
        return None  # a few steps between the samples drafted: the bands allow that
    gives = f"{expected:.1f}" if expected is not None else "no drafts (K=0)"
    return (
        f"the engine did not run the schedule: it drafted {used:.1f} tokens per draft where "
        f"the bands give {gives} at the window's batches (vLLM drops "
        "num_speculative_tokens_per_batch_size with a warning under data parallelism or on "
        "Model Runner V1 for some methods)"
    )


def _drafted_share(observation: Observation) -> float:
    """The share of the window's request-steps that drafted: drafts against the tokens
    served over the mean tokens a request-step keeps."""
    stats, rate = observation.acceptance, observation.generation_tokens_per_s
    length = observation.window_end - observation.window_start
    if stats is None or not rate or length <= 0 or stats.tau <= 0:
        return 0.0
    return stats.drafts / (rate * length / stats.tau)


def _tokens_per_draft(observation: Observation) -> float | None:
    stats = observation.acceptance
    if stats is None or stats.drafts <= 0:
        return None
    return stats.draft_tokens / stats.drafts


def _bands_tokens_per_draft(observation: Observation, target: Setup) -> float | None:
    """Draft tokens per draft the bands give over the window's batch samples: each sample b
    drafts K(b) for each of its b requests (vLLM counts one draft per request and step that
    drafted); None where no sample drafts."""
    drafted = spec_tokens_in_window(observation, target)
    if drafted is None:
        return None
    sizes, ks = drafted
    drafting = ks > 0
    if not drafting.any():
        return None
    return float(np.sum(sizes[drafting] * ks[drafting]) / np.sum(sizes[drafting]))


def spec_tokens_in_window(
    observation: Observation, setup: Setup
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
    """The window's batch samples (whole requests, at least 1) and the K `setup` drafts at
    each (None: the window has no batch)."""
    if observation.batch is None:
        return None
    samples = observation.batch.values or (observation.batch.mean,)
    sizes = np.maximum(np.round(np.asarray(samples, dtype=np.float64)), 1).astype(np.int64)
    return sizes, setup.spec_tokens_at(sizes)


def _k_used(observation: Observation) -> str:
    used = _tokens_per_draft(observation)
    return f", drafting {used:.1f} tokens per draft" if used is not None else ""


def _band_label(band: ScheduleBand) -> str:
    return f"band {band.start_batch}-{band.end_batch} (K={band.spec_tokens})"


def _band_at(target: Setup, demand: float) -> ScheduleBand:
    size = max(round(demand), 1)
    for band in target.schedule:
        if band.start_batch <= size <= band.end_batch:
            return band
    return target.schedule[-1]
