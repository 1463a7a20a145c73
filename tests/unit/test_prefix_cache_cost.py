"""What a setup that turns prefix caching off pays: recomputed prefill, taken from decoding."""

from __future__ import annotations

import numpy as np
import pytest

from autotuner.core.engine.workload import Workload
from autotuner.core.model.registry import load_model
from autotuner.core.predict.acceptance import from_conditional
from autotuner.core.predict.attribution import Attribution
from autotuner.core.predict.costmodel import predict, predict_all
from autotuner.core.predict.hardware import datasheet
from autotuner.core.predict.predictor import Predictor
from autotuner.core.predict.prefill import prefill_cost, prefill_seconds_per_token
from autotuner.core.types import Setup, SetupKind

MODEL = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4")
H200 = datasheet("H200")
ACCEPT = from_conditional([0.8, 0.7, 0.6])
GRID = [1, 4, 16, 64, 256, 1024]
SETUPS = [Setup.parse(s) for s in ("plain", "spec:3", "replay:16", "replay+spec:3:16")]
HITS = Workload(prefix_hit_rate=0.6, prompt_tokens=4096, generation_tokens=512)


def hits(rate: float, prompt: float = 4096, generated: float = 512) -> Workload:
    return Workload(prefix_hit_rate=rate, prompt_tokens=prompt, generation_tokens=generated)


def same_curves(a: Workload, b: Workload, *, off: bool) -> None:
    for setup in SETUPS:
        before = predict(MODEL, H200, setup, GRID, ACCEPT, a)
        after = predict(MODEL, H200, setup, GRID, ACCEPT, b, prefix_caching=not off)
        np.testing.assert_array_equal(after.tokens_per_s, before.tokens_per_s)
        np.testing.assert_array_equal(after.time_per_output_token_s, before.time_per_output_token_s)
        np.testing.assert_array_equal(after.step_time_s, before.step_time_s)
        assert after.prefill is None
        assert not after.prefill_share.any()


def test_unknown_hit_rate_or_kept_caching_changes_nothing() -> None:
    same_curves(Workload(), HITS, off=False)  # kept: the hits are not lost
    same_curves(Workload(), Workload(), off=True)  # unknown: nothing is charged
    same_curves(Workload(), hits(0.0), off=True)  # nothing was hit: nothing to lose


def test_turning_it_off_costs_what_the_hits_saved() -> None:
    for setup in SETUPS:
        kept = predict(MODEL, H200, setup, GRID, ACCEPT, HITS)
        lost = predict(MODEL, H200, setup, GRID, ACCEPT, HITS, prefix_caching=False)
        assert lost.prefill is not None
        assert (lost.tokens_per_s < kept.tokens_per_s).all()
        np.testing.assert_allclose(lost.decode_tokens_per_s, kept.tokens_per_s, rtol=1e-12)
        # One GPU does both: decode time + prefill time fill each second.
        decode_share = lost.tokens_per_s / kept.tokens_per_s
        np.testing.assert_allclose(decode_share + lost.prefill_share, 1.0, rtol=1e-12)
        per_token = lost.prefill.seconds_per_token
        np.testing.assert_allclose(
            lost.recomputed_tokens_per_s * per_token, lost.prefill_share, rtol=1e-12
        )
        np.testing.assert_allclose(
            lost.recomputed_tokens_per_s, lost.tokens_per_s * 0.6 * 4096 / 512, rtol=1e-12
        )
        np.testing.assert_array_equal(lost.step_time_s, kept.step_time_s)


@pytest.mark.parametrize("setup", SETUPS, ids=lambda s: s.label)
def test_the_cost_grows_with_the_hit_rate_and_the_prompt(setup: Setup) -> None:
    def share(workload: Workload) -> np.ndarray:
        curve = predict(MODEL, H200, setup, GRID, ACCEPT, workload, prefix_caching=False)
        return curve.prefill_share

    by_rate = np.array([share(hits(h)) for h in (0.1, 0.3, 0.6, 0.9)])
    by_prompt = np.array([share(hits(0.6, prompt=p)) for p in (512, 2048, 4096, 16384)])
    by_output = np.array([share(hits(0.6, generated=g)) for g in (128, 512, 2048)])
    assert (np.diff(by_rate, axis=0) > 0).all()
    assert (np.diff(by_prompt, axis=0) > 0).all()
    assert (np.diff(by_output, axis=0) < 0).all()  # longer requests: fewer prompts per token
    assert ((by_rate > 0) & (by_rate < 1)).all()


def test_a_recomputed_token_costs_its_flops() -> None:
    """Compute-bound: at least 2 x active parameters at the tensor rate; the attention over a
    longer prefix adds to it."""
    gemm_only = 2.0 * (MODEL.active_params - MODEL.embedding_params)
    floor = gemm_only / (H200.bf16_flops * H200.efficiency.mma)  # NVFP4 on H200: BF16 cores
    short = prefill_seconds_per_token(MODEL, H200, Workload(), attended_tokens=100)
    long = prefill_seconds_per_token(MODEL, H200, Workload(), attended_tokens=100_000)
    assert floor <= short < long
    assert short == pytest.approx(floor, rel=0.05)  # the GEMMs are nearly all of it
    halved = prefill_seconds_per_token(
        MODEL, H200, Workload(tensor_parallel=2), attended_tokens=100
    )
    assert halved == pytest.approx(short / 2, rel=1e-9)  # per GPU under tensor parallelism
    cost = prefill_cost(MODEL, H200, HITS, prefix_caching=False)
    assert cost is not None
    assert cost.recomputed_per_output_token == pytest.approx(0.6 * 4096 / 512)


def test_the_inputs_come_together() -> None:
    with pytest.raises(ValueError, match="prompt_tokens"):
        Workload(prefix_hit_rate=0.5)
    with pytest.raises(ValueError, match="less than or equal to 1"):
        Workload(prefix_hit_rate=1.5, prompt_tokens=10, generation_tokens=10)


def without_replay_spec(setup: Setup) -> bool:
    return setup.kind is not SetupKind.REPLAY_SPEC


def test_the_predictor_charges_the_setups_the_caller_names() -> None:
    predictor = Predictor(
        MODEL, H200, HITS, Attribution(), 0.0, 3600.0, prefix_caching=without_replay_spec
    )
    blind = Predictor(MODEL, H200, HITS, Attribution(), 0.0, 3600.0)
    for setup in SETUPS:
        tokens, step = predictor.curve(setup, GRID, ACCEPT)
        plain_tokens, plain_step = blind.curve(setup, GRID, ACCEPT)
        np.testing.assert_array_equal(step, plain_step)
        if setup.kind is SetupKind.REPLAY_SPEC:
            cost = predictor.prefill_cost(setup)
            assert cost is not None
            assert (tokens < plain_tokens).all()
            np.testing.assert_allclose(tokens, cost.tokens_per_s(plain_tokens), rtol=1e-9)
        else:
            assert predictor.prefill_cost(setup) is None
            np.testing.assert_array_equal(tokens, plain_tokens)
    curves = predict_all(
        MODEL, H200, SETUPS, GRID, ACCEPT, HITS, prefix_caching=without_replay_spec
    )
    assert [c.prefill is not None for c in curves.values()] == [False, False, False, True]
    cost = curves["replay+spec:3:16"].prefill
    assert cost is not None
    sentence = cost.weighed("replay+spec:3:16", 2000.0)
    share = 2000.0 * 0.6 * 4096 / 512 * cost.seconds_per_token
    assert f"loses {share:.0%} to recomputed prefill at hit rate 60%" in sentence
    at = curves["replay+spec:3:16"].at(4)
    assert 0 < at.prefill_share < 1
    assert at.recomputed_prompt_tokens_per_s == pytest.approx(at.tokens_per_s * 0.6 * 4096 / 512)


def test_a_high_hit_rate_can_rank_replay_spec_below_plain_with_the_cache() -> None:
    """The weighing the decision must show: at 60% hits of 4k prompts, 512-token answers, the
    setup that needs the cache off falls below one that keeps it (large batch)."""
    big = [256]
    replay_spec = predict(MODEL, H200, SETUPS[3], big, ACCEPT, HITS, prefix_caching=False)
    plain = predict(MODEL, H200, SETUPS[0], big, ACCEPT, HITS)
    free = predict(MODEL, H200, SETUPS[3], big, ACCEPT, HITS)
    assert free.tokens_per_s[0] > plain.tokens_per_s[0] > replay_spec.tokens_per_s[0]
    rare = predict(MODEL, H200, SETUPS[3], big, ACCEPT, hits(0.05), prefix_caching=False)
    assert rare.tokens_per_s[0] > plain.tokens_per_s[0]  # few hits: replay+spec still wins
