"""The held-out world on a second published table (sim/table_worlds.py): it serves the table's
tokens/s at every measured concurrency, speculation crosses below plain where the table says,
it never calls the cost model, and what the table does not measure is derived as said."""

from __future__ import annotations

import pytest

import autotuner.core.predict.costmodel
import autotuner.sim.worlds as worlds
from autotuner.core.types import Setup
from autotuner.sim.days import DAY
from autotuner.sim.table_worlds import (
    ACCEPTANCE,
    CONCURRENCY,
    DEPTH_TPS,
    PLAIN_TPS,
    REPLAY_SPEC3_TPS,
    REPLAY_TPS,
    SPEC3_TPS,
    TableSpeed,
    depth_ratio,
    published_sglang_world,
)
from autotuner.sim.worlds import PUBLISHED, SGLANG, World, constant_acceptance
from benchmarks.decision_quality import SGLANG_0523, build_world, engines_of

WORLD = published_sglang_world()


def at(concurrency: float) -> World:
    """The world held at one concurrency (its own speed, acceptance and SGLang's run rules)."""
    return World(
        "fixed",
        "",
        WORLD.prior,
        TableSpeed(),
        lambda t: concurrency,
        constant_acceptance(ACCEPTANCE),
        runs=WORLD.runs,
    )


def served(label: str, concurrency: float) -> float:
    return at(concurrency).tokens_per_s(Setup.parse(label), 0.0)


@pytest.mark.parametrize("index", range(len(CONCURRENCY)))
def test_it_serves_the_published_tokens_per_s(index: int) -> None:
    """Plain, MTP with stock verify (spec:3) and with the buffered verify (replay with
    speculation, which SGLang verifies through a K + 1 window whatever window is named)."""
    c = CONCURRENCY[index]
    assert served("plain", c) == pytest.approx(PLAIN_TPS[index], rel=1e-3)
    assert served("spec:3", c) == pytest.approx(SPEC3_TPS[index], rel=1e-3)
    for window in (8, 16):
        assert served(f"replay+spec:3:{window}", c) == pytest.approx(
            REPLAY_SPEC3_TPS[index], rel=1e-3
        )
    if c in REPLAY_TPS:
        assert served("replay:16", c) == pytest.approx(REPLAY_TPS[c], rel=1e-3)


# Read off the source (evidence/bench/README.md at 10e73171, "confirm/" and the depth sweep),
# apart from the module's tables, so that a number mistyped there fails here.
SOURCE_POINTS = [
    ("plain", 1, 282),
    ("plain", 48, 8286),
    ("plain", 128, 13898),
    ("spec:3", 16, 4045),  # mtp-stockverify
    ("spec:3", 128, 9464),
    ("replay+spec:3:4", 8, 2682),  # mtp-tuned: the buffered verify
    ("replay+spec:3:4", 96, 10573),
    ("replay:16", 64, 9917),  # plain-tuned-replayssm
]


@pytest.mark.parametrize(("label", "concurrency", "published"), SOURCE_POINTS)
def test_it_serves_what_the_source_prints(label: str, concurrency: int, published: int) -> None:
    assert served(label, concurrency) == pytest.approx(published, rel=1e-3)


def test_the_depth_sweep_is_the_sources() -> None:
    """MTP s2 and s4 over s3 at concurrency 8 and 128 of the tune split's one session."""
    assert depth_ratio(2, 8) == pytest.approx(2288 / 2482)
    assert depth_ratio(4, 8) == pytest.approx(2608 / 2482)
    assert depth_ratio(4, 128) == pytest.approx(9276 / 9593)


def test_the_benchmark_runs_it_on_sglang_alone() -> None:
    assert build_world("published-sglang", "unused", "unused").name == "published-sglang"
    assert engines_of("published-sglang") == (SGLANG_0523,)


def test_speculation_leads_plain_to_32_and_trails_it_from_48() -> None:
    for c in (1, 4, 16):
        assert served("spec:3", c) > 1.1 * served("plain", c)
        assert served("replay+spec:3:4", c) > 1.1 * served("plain", c)
    for c in (48, 64, 96, 128):
        assert served("spec:3", c) < served("plain", c)
        assert served("replay+spec:3:4", c) < served("plain", c)
    assert served("replay:16", 128) > served("plain", 128)  # replay alone wins the peak


def test_between_points_plains_step_is_linear_in_concurrency() -> None:
    step_32, step_48 = 32 / PLAIN_TPS[5], 48 / PLAIN_TPS[6]
    assert 40 / served("plain", 40) == pytest.approx((step_32 + step_48) / 2, rel=1e-9)


def test_the_depth_sweep_prices_k_2_and_4_and_k_1_is_linear_through_them() -> None:
    for c in (1, 8, 32, 128):
        assert depth_ratio(4, c) == pytest.approx(DEPTH_TPS[4][c] / DEPTH_TPS[3][c])
        assert depth_ratio(2, c) == pytest.approx(DEPTH_TPS[2][c] / DEPTH_TPS[3][c])
        assert depth_ratio(1, c) == pytest.approx(2 * depth_ratio(2, c) - 1)
    with pytest.raises(ValueError, match="K=5"):
        depth_ratio(5, 8)


def test_below_32_replay_alone_keeps_its_ratio_at_32() -> None:
    ratio_32 = REPLAY_TPS[32] / PLAIN_TPS[5]
    for c in (1, 8, 16):
        assert served("replay:16", c) / served("plain", c) == pytest.approx(ratio_32)


def test_the_world_is_published_and_never_calls_the_cost_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the table world called the cost model")

    monkeypatch.setattr(autotuner.core.predict.costmodel, "predict", refuse)
    monkeypatch.setattr(worlds, "predict", refuse)
    assert (WORLD.truth, WORLD.engine) == (PUBLISHED, SGLANG)
    assert WORLD.start == Setup(spec_tokens=3)
    assert WORLD.largest_k == 4
    assert WORLD.demand(0.0) == pytest.approx(1.0)
    assert WORLD.demand(DAY / 2) == pytest.approx(128.0)
    for label in ("plain", "spec:3", "replay:16", "replay+spec:4:16", "spec:3@1-32:3,33-8191:0"):
        assert WORLD.tokens_per_s(Setup.parse(label), DAY / 2) > 0
        assert WORLD.observation(Setup.parse(label), DAY / 2, 300.0).usable
