"""Every prompt is prefilled on the GPU that decodes: speculation and replay speed up only the
decode share, so long prompts and short answers shrink their gain (and can reorder setups)."""

from __future__ import annotations

import numpy as np
import pytest

from autotuner.core.engine.workload import Workload
from autotuner.core.model.registry import load_model
from autotuner.core.predict.acceptance import from_conditional
from autotuner.core.predict.attribution import Attribution
from autotuner.core.predict.costmodel import predict
from autotuner.core.predict.hardware import datasheet
from autotuner.core.predict.predictor import Predictor
from autotuner.core.predict.prefill import prompt_share_weighed
from autotuner.core.types import PLAIN, Setup, SetupKind

MODEL = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4")
H200 = datasheet("H200")
ACCEPT = from_conditional([0.8, 0.7, 0.6])
SPEC = Setup.parse("spec:3")
REPLAY_SPEC = Setup.parse("replay+spec:3:16")
BATCH = [64]
OUTPUT = 1024


def served(setup: Setup, workload: Workload, *, caching: bool = True) -> float:
    curve = predict(MODEL, H200, setup, BATCH, ACCEPT, workload, prefix_caching=caching)
    return float(curve.tokens_per_s[0])


def lengths(ratio: float, hit_rate: float | None = None) -> Workload:
    """Requests of `ratio` x OUTPUT prompt tokens and OUTPUT output tokens."""
    return Workload(
        prompt_tokens=ratio * OUTPUT, generation_tokens=OUTPUT, prefix_hit_rate=hit_rate
    )


def test_speculation_gains_on_the_decode_share_only() -> None:
    decode_gain = served(SPEC, Workload()) / served(PLAIN, Workload())
    gains = [served(SPEC, lengths(r)) / served(PLAIN, lengths(r)) for r in (0.5, 2, 8, 32)]
    assert decode_gain > 1.2
    assert decode_gain > gains[0] > gains[1] > gains[2] > gains[3] > 1.0
    # The served rate is the decode rate with the prefill's seconds added per output token.
    curve = predict(MODEL, H200, SPEC, BATCH, ACCEPT, lengths(8))
    assert curve.prefill is not None
    decode = curve.decode_tokens_per_s[0]
    assert curve.tokens_per_s[0] == pytest.approx(
        1.0 / (1.0 / decode + 8 * curve.prefill.seconds_per_token)
    )


def test_the_same_setups_rank_differently_at_p_over_g_half_and_eight() -> None:
    """Replay + speculation needs prefix caching off here (the caller's rule): at P/G = 0.5 its
    decode gain carries it past speculation alone; at P/G = 8 the prompts it prefills (half of
    them again) take so much of each second that speculation alone serves more."""

    def ranking(ratio: float) -> list[Setup]:
        workload = lengths(ratio, hit_rate=0.5)
        rates = {
            SPEC: served(SPEC, workload),
            REPLAY_SPEC: served(REPLAY_SPEC, workload, caching=False),
        }
        return sorted(rates, key=rates.__getitem__, reverse=True)

    assert ranking(0.5) == [REPLAY_SPEC, SPEC]
    assert ranking(8) == [SPEC, REPLAY_SPEC]


def test_the_decision_note_says_the_prompts_share() -> None:
    predictor = Predictor(
        MODEL,
        H200,
        lengths(8, hit_rate=0.5),
        Attribution(),
        0.0,
        3600.0,
        prefix_caching=lambda s: s.kind is not SetupKind.REPLAY_SPEC,
    )
    rates = {s: float(predictor.curve(s, BATCH, ACCEPT)[0][0]) for s in (SPEC, REPLAY_SPEC)}
    note = prompt_share_weighed(
        (SPEC.label, rates[SPEC], predictor.workload_prefill(SPEC)),
        (REPLAY_SPEC.label, rates[REPLAY_SPEC], predictor.workload_prefill(REPLAY_SPEC)),
    )
    assert note is not None
    assert "8,192-token prompts per 1,024 output tokens (P/G 8.0, 50% cached)" in note
    assert "decoding alone spec:3 would be" in note
    spec_cost = predictor.workload_prefill(SPEC)
    assert spec_cost is not None
    share = float(spec_cost.share(np.array([rates[SPEC]]))[0])
    assert f"take {share:.0%} of each second under spec:3" in note
    short = Predictor(MODEL, H200, lengths(0.01), Attribution(), 0.0, 3600.0)
    tiny = {s: float(short.curve(s, BATCH, ACCEPT)[0][0]) for s in (SPEC, PLAIN)}
    assert (
        prompt_share_weighed(
            (SPEC.label, tiny[SPEC], short.workload_prefill(SPEC)),
            (PLAIN.label, tiny[PLAIN], short.workload_prefill(PLAIN)),
        )
        is None
    )  # a few prompt tokens per answer: not worth a sentence


def test_time_to_first_token_follows_the_prompt_and_the_chunk_budget() -> None:
    def ttft(setup: Setup, ratio: float, chunk: int = 8192, batch: int = 64) -> float:
        workload = Workload(
            prompt_tokens=ratio * OUTPUT, generation_tokens=OUTPUT, prefill_chunk_tokens=chunk
        )
        predictor = Predictor(MODEL, H200, workload, Attribution(), 0.0, 3600.0)
        return float(predictor.time_to_first_token_s(setup, [batch], ACCEPT)[0])

    assert ttft(PLAIN, 2) < ttft(PLAIN, 8) < ttft(PLAIN, 32)
    assert ttft(PLAIN, 32, chunk=16384) < ttft(PLAIN, 32, chunk=2048)
    # Drafts take budget from the prompt's chunk: 64 x 4 tokens of 512 leave 256 for it.
    assert ttft(SPEC, 8, chunk=512) > ttft(PLAIN, 8, chunk=512)
    unknown = Predictor(MODEL, H200, Workload(), Attribution(), 0.0, 3600.0)
    assert np.isnan(unknown.time_to_first_token_s(PLAIN, BATCH, ACCEPT)).all()
