"""The cost model against COSTMODEL.md: formulas, published behaviour, and properties."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotuner.core.engine.workload import Workload
from autotuner.core.model.registry import load_model
from autotuner.core.predict.acceptance import geometric
from autotuner.core.predict.capacity import max_batch
from autotuner.core.predict.comparisons import crossover_batches, winner_changes, winners
from autotuner.core.predict.costmodel import SetupCurve, predict, predict_all
from autotuner.core.predict.hardware import datasheet
from autotuner.core.types import PLAIN, Setup
from autotuner.errors import InputError

SUPER_FP4 = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4")
SUPER_FP8 = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8")
QWEN_FP8 = load_model("Qwen/Qwen3.5-122B-A10B-FP8")
H200, B300 = datasheet("H200"), datasheet("B300")
ACCEPT = geometric(0.7, 8)
BATCHES = [1, 4, 8, 16, 32, 64, 128, 256, 512]


def ratio(model, gpu, setup: str, batches=BATCHES, acceptance=ACCEPT, **workload):  # type: ignore[no-untyped-def]
    wl = Workload(**workload)
    base = predict(model, gpu, PLAIN, batches, acceptance, wl)
    other = predict(model, gpu, Setup.parse(setup), batches, acceptance, wl)
    return other.tokens_per_s / base.tokens_per_s


def test_plain_state_traffic_is_the_worked_example() -> None:
    # Plain decode at B=256 moves 40 GiB of state each way (COSTMODEL.md section 6).
    curve = predict(
        SUPER_FP4,
        H200,
        PLAIN,
        [256],
        ACCEPT,
        Workload(activation_reserve_bytes=0, gpu_memory_utilization=1),
    )
    assert curve.bytes["ssm_state"][0] == pytest.approx(2 * 40 * 2**30)


def test_state_bytes_follow_the_table() -> None:
    s = SUPER_FP4.ssm_state_bytes * SUPER_FP4.ssm_layers
    spec = predict(SUPER_FP4, H200, Setup(spec_tokens=3), [4], ACCEPT)
    assert spec.bytes["ssm_state"][0] == pytest.approx(4 * s * (1 + 4))  # read S, write n*S
    replay = predict(SUPER_FP4, H200, Setup(replay_window=16), [4], ACCEPT)
    assert replay.bytes["ssm_state"][0] == pytest.approx(4 * s)
    assert replay.bytes["ssm_checkpoint"][0] == pytest.approx(4 * s / 16)
    e = SUPER_FP4.ring_entry_bytes * SUPER_FP4.ssm_layers
    assert replay.bytes["ssm_ring"][0] == pytest.approx(4 * e * (7.5 + 1))


def test_batch_one_is_weight_bound() -> None:
    """Section 7: at batch 1 state copies are a rounding error and replay gives no speed-up."""
    spec = predict(SUPER_FP4, H200, Setup(spec_tokens=3), [1], ACCEPT)
    copies = SUPER_FP4.ssm_state_bytes * SUPER_FP4.ssm_layers * 3
    total = sum(v[0] for v in spec.bytes.values())
    assert copies / total < 0.10
    assert ratio(SUPER_FP4, H200, "replay:16", [1])[0] <= 1.0


def test_replay_alone_gains_20_to_47_percent_at_batch_256() -> None:
    assert 1.20 <= ratio(SUPER_FP4, H200, "replay:16", [256])[0] <= 1.47
    assert 1.20 <= ratio(SUPER_FP4, datasheet("B200"), "replay:16", [256])[0] <= 1.47


def test_replay_breaks_even_near_batch_8() -> None:
    grid = np.arange(1, 65)
    gains = ratio(SUPER_FP4, H200, "replay:16", grid)
    first_win = int(grid[np.argmax(gains > 1.0)])
    assert 4 <= first_win <= 16


def test_speculation_with_copies_stops_gaining_beyond_128() -> None:
    for model, tp in ((SUPER_FP4, 1), (SUPER_FP8, 4)):
        gains = ratio(model, H200, "spec:3", tensor_parallel=tp)
        peak = BATCHES[int(np.argmax(gains))]
        assert peak <= 128
        assert gains[-1] < gains.max() * 0.8


def test_qwen35_speculation_falls_below_plain_at_512() -> None:
    # One B300, FP8 weights, MTP K=3 at p=0.65: 1+K state slots per request cap the batch.
    gains = ratio(QWEN_FP8, B300, "spec:3", [64, 512], acceptance=geometric(0.65, 3))
    assert gains[0] > 1.3
    assert gains[1] < 1.0


def test_verifying_8_drafts_costs_5x_a_step_with_copies_and_1x_in_state_with_replay() -> None:
    """Section 7. Copies: one state read and nine written, 5x plain's read + write in bytes;
    the multi-token kernel moves them slower than the decode kernel, and the whole step per
    request costs nearly 5x plain's. Replay: state time about plain's."""
    wl = Workload(tensor_parallel=4)
    plain, copies, replay = (
        predict(SUPER_FP8, H200, Setup.parse(s), [256], ACCEPT, wl)
        for s in ("plain", "spec:8", "replay+spec:8:16")
    )

    def per_request(curve: SetupCurve, value: float) -> float:
        return value / float(curve.effective_batch[0])

    def state(curve: SetupCurve) -> float:
        flushes = curve.bytes["ssm_checkpoint"][0] / H200.bandwidth("copies")
        seconds = curve.time_s["ssm"][0] + curve.time_s["ssm_verify"][0] + flushes
        return per_request(curve, float(seconds))

    def step(curve: SetupCurve) -> float:
        return per_request(curve, float(curve.step_time_s[0]))

    state_bytes = [per_request(c, float(c.bytes["ssm_state"][0])) for c in (plain, copies)]
    assert state_bytes[1] == pytest.approx(5 * state_bytes[0])
    assert state(copies) / state(plain) > 5.5
    assert 4.0 <= step(copies) / step(plain) <= 6.0
    assert 0.6 <= state(replay) / state(plain) <= 1.2


def test_replay_plus_speculation_keeps_gaining_past_128() -> None:
    """Replay + speculation stays well above plain past batch 128 (NVIDIA: 1.87-1.96x at
    serving batch), while speculation with copies falls to or below plain."""
    for model, tp in ((SUPER_FP4, 1), (SUPER_FP8, 4)):
        both = ratio(model, H200, "replay+spec:3:16", tensor_parallel=tp)
        copies = ratio(model, H200, "spec:3", tensor_parallel=tp)
        past = slice(BATCHES.index(128), None)
        assert np.all(both[past] > 1.5)
        assert np.all(both[BATCHES.index(256) :] > copies[BATCHES.index(256) :] + 0.3)
        assert np.all(copies[BATCHES.index(256) :] < 1.0)


def test_capacity_counts_state_slots() -> None:
    wl = Workload()
    plain, spec = (
        max_batch(SUPER_FP4, H200, PLAIN, wl),
        max_batch(SUPER_FP4, H200, Setup(spec_tokens=3), wl),
    )
    assert spec < plain / 2
    curve = predict(SUPER_FP4, H200, Setup(spec_tokens=3), [spec, spec + 1], ACCEPT, wl)
    assert curve.feasible.tolist() == [True, False]
    assert curve.effective_batch[1] == spec
    assert "queue" in str(curve.at(1).reason)


@pytest.mark.parametrize(
    ("engine", "cap_flag"), [("vLLM", "--max-num-seqs"), ("SGLang", "--max-running-requests")]
)
def test_the_queueing_reason_names_the_engine_serving(engine: str, cap_flag: str) -> None:
    spec = Setup(spec_tokens=3)
    full = max_batch(SUPER_FP4, H200, spec, Workload(engine_name=engine))
    memory = predict(SUPER_FP4, H200, spec, [full + 1], ACCEPT, Workload(engine_name=engine))
    assert str(memory.at(0).reason).startswith(f"{engine} admits {full} requests with spec:3")
    capped = Workload(engine_name=engine, max_num_seqs=8)
    flag = predict(SUPER_FP4, H200, spec, [9], ACCEPT, capped)
    assert str(flag.at(0).reason).startswith(f"{engine} runs at most 8 requests ({cap_flag})")


def test_weights_that_do_not_fit_make_every_batch_infeasible() -> None:
    bf16 = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16")
    curve = predict(bf16, H200, PLAIN, [1, 8], ACCEPT)
    assert curve.max_batch == 0
    assert not curve.feasible.any()
    assert np.all(curve.tokens_per_s == 0)
    assert "tensor parallelism" in str(curve.infeasible_reason)


def test_schedule_uses_k_per_band() -> None:
    scheduled = Setup.parse("spec:3@1-64:3,65-1024:0")
    curve = predict(SUPER_FP8, H200, scheduled, [8, 200], ACCEPT, Workload(tensor_parallel=4))
    spec = predict(SUPER_FP8, H200, Setup(spec_tokens=3), [8], ACCEPT, Workload(tensor_parallel=4))
    assert curve.spec_tokens.tolist() == [3, 0]
    assert curve.tokens_per_s[0] == pytest.approx(spec.tokens_per_s[0])
    assert curve.tau[1] == 1.0


def test_no_extrapolation_beyond_observed_k() -> None:
    with pytest.raises(InputError, match="no prediction beyond"):
        predict(SUPER_FP4, H200, Setup(spec_tokens=4), [1], geometric(0.8, 3))


def test_bad_batches_are_refused() -> None:
    with pytest.raises(InputError):
        predict(SUPER_FP4, H200, PLAIN, [0, 1], ACCEPT)
    with pytest.raises(InputError):
        predict(SUPER_FP4, H200, PLAIN, [], ACCEPT)


def test_gated_deltanet_prefers_shorter_windows_than_mamba2() -> None:
    qwen = [ratio(QWEN_FP8, B300, f"replay:{w}", [256])[0] for w in (8, 32)]
    nemotron = [ratio(SUPER_FP4, H200, f"replay:{w}", [256])[0] for w in (8, 32)]
    assert qwen[0] > qwen[1]
    assert (qwen[0] - qwen[1]) > (nemotron[0] - nemotron[1])


def test_windows_as_published() -> None:
    """MEASUREMENTS.md: 16 was best in vLLM's sweep for Gated DeltaNet (its kernels run the whole
    16-entry ring tile whatever L below 16), 8 for Nemotron-3's Mamba-2 (Tri Dao's write-up)."""
    qwen_256 = {w: ratio(QWEN_FP8, B300, f"replay:{w}", [256])[0] for w in (8, 16, 32)}
    assert max(qwen_256, key=lambda w: qwen_256[w]) == 16
    for batch in (256, 512):
        qwen = {w: ratio(QWEN_FP8, B300, f"replay:{w}", [batch])[0] for w in (8, 16, 32)}
        assert qwen[16] >= 0.995 * max(qwen.values()) > qwen[32]
        nemotron = {w: ratio(SUPER_FP4, H200, f"replay:{w}", [batch])[0] for w in (8, 16, 32)}
        assert nemotron[8] >= 0.98 * max(nemotron.values())


# --------------------------------------------------------------------------- properties

models = st.sampled_from(
    [
        SUPER_FP4,
        SUPER_FP8,
        QWEN_FP8,
        load_model("Qwen/Qwen3-Next-80B-A3B-Instruct-FP8"),
        load_model("ibm-granite/granite-4.0-h-small"),
    ]
)
gpus = st.sampled_from([H200, B300, datasheet("MI300X")])


@settings(max_examples=40, deadline=None)
@given(models, gpus, st.integers(1, 1024), st.integers(1, 8))
def test_state_traffic_plain_below_copies(model, gpu, batch, k):  # type: ignore[no-untyped-def]
    plain = predict(model, gpu, PLAIN, [batch], ACCEPT)
    spec = predict(model, gpu, Setup(spec_tokens=k), [batch], ACCEPT)

    def per_request(curve: SetupCurve) -> float:
        return float(curve.bytes["ssm_state"][0] / curve.effective_batch[0])

    assert per_request(plain) < per_request(spec)


@settings(max_examples=40, deadline=None)
@given(models, gpus, st.integers(1, 1024), st.integers(2, 64))
def test_replay_state_traffic_below_plain(model, gpu, batch, window):  # type: ignore[no-untyped-def]
    plain = predict(model, gpu, PLAIN, [batch], ACCEPT)
    replay = predict(model, gpu, Setup(replay_window=window), [batch], ACCEPT)
    keys = ("ssm_state", "ssm_ring", "ssm_checkpoint")

    def traffic(curve: SetupCurve) -> float:
        return float(sum(curve.bytes[k][0] for k in keys) / curve.effective_batch[0])

    assert traffic(replay) < traffic(plain)


@settings(max_examples=25, deadline=None)
@given(models, gpus, st.floats(0.3, 0.95), st.integers(64, 600))
def test_crossovers_agree_with_the_per_batch_winner(model, gpu, p, top):  # type: ignore[no-untyped-def]
    grid = np.arange(1, top + 1)
    setups = [
        PLAIN,
        Setup(spec_tokens=2),
        Setup(spec_tokens=4),
        Setup(replay_window=16),
        Setup(spec_tokens=2, replay_window=16),
    ]
    curves = list(predict_all(model, gpu, setups, grid, geometric(p, 4)).values())
    best = winners(curves)
    changes = winner_changes(curves)
    assert all(best[c.batch - 1] == c.winner and best[c.batch - 2] == c.loser for c in changes)
    assert len(changes) == sum(1 for a, b in itertools.pairwise(best) if a != b)
    for flip in crossover_batches(curves[1], curves[0]):
        winner = curves[1] if flip.winner == curves[1].setup.label else curves[0]
        loser = curves[0] if winner is curves[1] else curves[1]
        i = flip.batch - 1
        assert winner.tokens_per_s[i] > loser.tokens_per_s[i]
        assert winner.tokens_per_s[i - 1] <= loser.tokens_per_s[i - 1]
