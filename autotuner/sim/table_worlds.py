"""A held-out world whose truth is a second published table, with a crossover: Qwen3.5-4B
(BF16) on one GH200 served by SGLang, decode throughput measured at concurrency 1 to 128 for
plain decoding, plain with SGLang's linear ReplaySSM, MTP with 3 steps with the stock verify
(state copies: spec:3) and with the buffered verify (replay with speculation), 88-token prompts
(mean) and 512-token answers: the mean of three sessions a point for plain and for the buffered
verify from concurrency 32 up, one session for the rest (stock verify, replay alone, the buffered
verify below 32).

Source: SamMausberg/verified-progress, `evidence/bench/README.md` at 10e73171 ("confirm/"; raw
points in `evidence/bench/confirm/frontier.csv`), SGLang 0.5.21.dev861, `--max-running-requests
128`. Speculation gains 1.6x at concurrency 1 and trails plain from 48 up. Its tokens/s are the
client's (first send to last completion, prefill and drain included), taken here as decode
throughput. What the table does not measure is interpolated or assumed, each said where it is
used (`TABLE_ASSUMPTIONS`); the cost model is never called.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from autotuner.core.engine.workload import Workload
from autotuner.core.model.registry import load_model
from autotuner.core.predict.hardware import datasheet
from autotuner.core.types import Setup
from autotuner.sim.days import daily_load
from autotuner.sim.sglang_startup import run_at
from autotuner.sim.worlds import (
    PUBLISHED,
    SGLANG,
    Prior,
    World,
    constant_acceptance,
    flat,
    log_interp,
    tau,
)

SOURCE = (
    "https://github.com/SamMausberg/verified-progress/blob/"
    "10e73171e195f31653b7bcaabdbd2150687c3294/evidence/bench/README.md"
)
CONCURRENCY = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128)
# tokens/s at each concurrency, the mean of three sessions (one where the README marks n=1:
# every spec:3 and replay-alone point, the buffered verify below 32)
PLAIN_TPS = (282, 546, 1053, 2002, 3646, 6233, 8286, 9901, 12180, 13898)  # plain-tuned
SPEC3_TPS = (461, 855, 1541, 2556, 4045, 5872, 6980, 7607, 8653, 9464)  # mtp-stockverify
REPLAY_SPEC3_TPS = (456, 853, 1579, 2682, 4442, 6556, 8091, 9033, 10573, 12003)  # mtp-tuned
REPLAY_TPS = {32: 5888, 48: 8077, 64: 9917, 96: 12773, 128: 15012}  # plain-tuned-replayssm
# The depth sweep (the tune split, one session): MTP with K steps at concurrency 1, 8, 32, 128.
DEPTH_TPS: Mapping[int, Mapping[int, float]] = {
    2: {1: 385, 8: 2288, 32: 5455, 128: 9153},
    3: {1: 461, 8: 2482, 32: 5839, 128: 9593},
    4: {1: 465, 8: 2608, 32: 5761, 128: 9276},
}
# Acceptance length 3.24-3.28 at K = 3, flat over concurrency (3.26: 1 + a + a^2 + a^3 at
# a = 0.865); 3.72 at K = 4 puts the fourth position's conditional rate at 0.71.
ACCEPTANCE = (0.865, 0.865, 0.865, 0.71)
CAPACITY = 128.0  # --max-running-requests
TABLE_ASSUMPTIONS = (
    "replay alone below concurrency 32 (not measured): its ratio to plain at 32 (0.94)",
    "K = 1 (not measured): the depth ratio linear in K through K = 2 and 3",
    "any replay window: the one measured (SGLang verifies replay with speculation through K+1)",
    "replay with speculation at K = 2 and 4: the depth sweep's ratio to K = 3, as measured with "
    "the stock verify (one session, radix cache on; the arms above ran with it off)",
)


def _ratio_anchors(tps: Sequence[float] | Mapping[int, float]) -> dict[int, float]:
    """A setup's tokens/s over plain's at each concurrency it was measured at."""
    points = dict(zip(CONCURRENCY, tps, strict=True)) if not isinstance(tps, Mapping) else tps
    plain = dict(zip(CONCURRENCY, PLAIN_TPS, strict=True))
    return {c: value / plain[c] for c, value in points.items()}


# Read once: the benchmark asks for a step time per setup and interval.
PLAIN_STEPS = tuple(c / t for c, t in zip(CONCURRENCY, PLAIN_TPS, strict=True))
SPEC3_RATIO = _ratio_anchors(SPEC3_TPS)
REPLAY_SPEC3_RATIO = _ratio_anchors(REPLAY_SPEC3_TPS)
REPLAY_RATIO = _ratio_anchors(REPLAY_TPS)


def depth_ratio(k: int, batch: float) -> float:
    """MTP with K steps over MTP with 3 at this concurrency (the depth sweep)."""
    at = {k_: log_interp(batch, points) for k_, points in DEPTH_TPS.items()}
    if k in at:
        return at[k] / at[3]
    if k == 1:
        return (2 * at[2] - at[3]) / at[3]
    raise ValueError(f"K={k}: the GH200 table measures MTP depth 2 to 4 here")


@dataclass(frozen=True)
class TableSpeed:
    """Step times from the published tokens/s: plain's step is linear in batch between the
    measured points; every other setup runs at its measured ratio to plain (piecewise linear
    in log2 batch, flat beyond), its tokens per step from the world's acceptance."""

    def plain_step(self, batch: float) -> float:
        return float(np.interp(max(batch, 1.0), CONCURRENCY, PLAIN_STEPS))

    def ratio(self, setup: Setup, batch: float) -> float:
        """Tokens/s over plain's at this batch (a static setup)."""
        k, window = setup.spec_tokens, setup.replay_window
        if k:
            anchors = REPLAY_SPEC3_RATIO if window else SPEC3_RATIO
            return log_interp(batch, anchors) * depth_ratio(k, batch)
        return log_interp(batch, REPLAY_RATIO) if window else 1.0

    def step_time(self, setup: Setup, batch: float, rates: Sequence[float]) -> float:
        static = flat(setup, batch)
        return self.plain_step(batch) * tau(static, batch, rates) / self.ratio(static, batch)

    def capacity(self, setup: Setup) -> float:
        return CAPACITY


def gh200_prior() -> Prior:
    """What the policy is told: the model, the GPU's datasheet, the table's request lengths
    and SGLang's request limit."""
    workload = Workload(
        context_tokens=88 + 512 / 2,
        prompt_tokens=88,
        generation_tokens=512,
        max_num_seqs=int(CAPACITY),
    )
    return Prior(load_model("Qwen/Qwen3.5-4B"), datasheet("GH200"), workload)


def published_sglang_world() -> World:
    """The table's day: demand from 1 at midnight to 128 (the table's largest concurrency) at
    noon, acceptance as the table's, deployed at spec:3 (the table's MTP); the oracle and the
    statics may draft up to K = 4 (measured in the depth sweep)."""
    return World(
        name="published-sglang",
        about=f"Qwen3.5-4B on one GH200, SGLang's published points ({SOURCE}); load 1 to 128; "
        f"assumed: {'; '.join(TABLE_ASSUMPTIONS)}",
        prior=gh200_prior(),
        speed=TableSpeed(),
        demand=daily_load(1, 128),
        acceptance=constant_acceptance(ACCEPTANCE),
        start=Setup(spec_tokens=3),
        runs=run_at,
        engine=SGLANG,
        truth=PUBLISHED,
        oracle_spec_tokens=4,
    )


def table_worlds() -> dict[str, World]:
    return {"published-sglang": published_sglang_world()}
