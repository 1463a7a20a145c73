"""The prefill every setup pays (each prompt's fresh tokens), and what a setup that turns prefix
caching off adds (the recomputed hits), taken from decoding."""

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


def test_unknown_lengths_change_nothing() -> None:
    for setup in SETUPS:
        before = predict(MODEL, H200, setup, GRID, ACCEPT, Workload())
        after = predict(MODEL, H200, setup, GRID, ACCEPT, Workload(), prefix_caching=False)
        np.testing.assert_array_equal(after.tokens_per_s, before.tokens_per_s)
        np.testing.assert_array_equal(after.time_per_output_token_s, before.time_per_output_token_s)
        assert after.prefill is None
        assert not after.prefill_share.any()


def test_kept_caching_pays_the_fresh_prompt_only() -> None:
    for setup in SETUPS:
        bare = predict(MODEL, H200, setup, GRID, ACCEPT, Workload())
        kept = predict(MODEL, H200, setup, GRID, ACCEPT, HITS)
        assert kept.prefill is not None
        assert kept.prefill.recomputed() is None
        assert not kept.recomputed_tokens_per_s.any()
        assert kept.prefill.prefilled_per_output_token == pytest.approx(0.4 * 4096 / 512)
        np.testing.assert_allclose(kept.decode_tokens_per_s, bare.tokens_per_s, rtol=1e-12)
        np.testing.assert_allclose(
            kept.tokens_per_s / bare.tokens_per_s + kept.prefill_share, 1.0, rtol=1e-12
        )
        np.testing.assert_array_equal(kept.step_time_s, bare.step_time_s)


def test_turning_it_off_costs_what_the_hits_saved() -> None:
    for setup in SETUPS:
        kept = predict(MODEL, H200, setup, GRID, ACCEPT, HITS)
        lost = predict(MODEL, H200, setup, GRID, ACCEPT, HITS, prefix_caching=False)
        assert lost.prefill is not None
        recomputed = lost.prefill.recomputed()
        assert recomputed is not None
        assert (lost.tokens_per_s < kept.tokens_per_s).all()
        np.testing.assert_allclose(lost.decode_tokens_per_s, kept.decode_tokens_per_s, rtol=1e-12)
        # The recomputed part, on top of what the setup serves with the cache.
        np.testing.assert_allclose(
            lost.tokens_per_s, recomputed.tokens_per_s(kept.tokens_per_s), rtol=1e-9
        )
        np.testing.assert_allclose(
            lost.recomputed_tokens_per_s, lost.tokens_per_s * 0.6 * 4096 / 512, rtol=1e-12
        )
        assert lost.prefill.prefilled_per_output_token == pytest.approx(4096 / 512)
        np.testing.assert_array_equal(lost.step_time_s, kept.step_time_s)


@pytest.mark.parametrize("setup", SETUPS, ids=lambda s: s.label)
def test_the_cost_grows_with_the_hit_rate_and_the_prompt(setup: Setup) -> None:
    def loss(workload: Workload) -> np.ndarray:
        kept = predict(MODEL, H200, setup, GRID, ACCEPT, workload)
        lost = predict(MODEL, H200, setup, GRID, ACCEPT, workload, prefix_caching=False)
        return 1.0 - lost.tokens_per_s / kept.tokens_per_s

    by_rate = np.array([loss(hits(h)) for h in (0.1, 0.3, 0.6, 0.9)])
    by_prompt = np.array([loss(hits(0.6, prompt=p)) for p in (512, 2048, 4096, 16384)])
    by_output = np.array([loss(hits(0.6, generated=g)) for g in (128, 512, 2048)])
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
        assert predictor.workload_prefill(setup) is not None  # every prompt is prefilled
        if setup.kind is SetupKind.REPLAY_SPEC:
            cost = predictor.prefill_cost(setup)  # the recomputed part alone
            assert cost is not None
            assert (tokens < plain_tokens).all()
            np.testing.assert_allclose(tokens, cost.tokens_per_s(plain_tokens), rtol=1e-9)
        else:
            assert predictor.prefill_cost(setup) is None
            np.testing.assert_array_equal(tokens, plain_tokens)
    curves = predict_all(
        MODEL, H200, SETUPS, GRID, ACCEPT, HITS, prefix_caching=without_replay_spec
    )
    recomputed = [c.prefill.recomputed() if c.prefill else None for c in curves.values()]
    assert [c is not None for c in recomputed] == [False, False, False, True]
    cost = recomputed[3]
    assert cost is not None
    sentence = cost.weighed("replay+spec:3:16", 2000.0)
    share = 2000.0 * 0.6 * 4096 / 512 * cost.seconds_per_token
    assert f"loses {share:.0%} to recomputed prefill at hit rate 60%" in sentence
    at = curves["replay+spec:3:16"].at(4)
    assert at.prefill_share > 0.6 * 4096 / 512 * cost.seconds_per_token * at.tokens_per_s
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
    plain_rare = predict(MODEL, H200, SETUPS[0], big, ACCEPT, hits(0.05))
    assert rare.tokens_per_s[0] > plain_rare.tokens_per_s[0]  # few hits: replay+spec still wins
