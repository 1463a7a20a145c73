"""kernels_probe: the replay forms are exact in float64, bf16 state drifts, and the CPU probe
writes a profile the core loads and `predict` uses."""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from autotuner.core.predict.hardware import load_profile
from kernels_probe.exactness import (
    BOUND,
    ReplayReport,
    bf16_drift,
    gdn_replay,
    gdn_speculative,
    gdn_step,
    mamba_replay,
    mamba_speculative,
    mamba_step,
    to_bfloat16,
)
from tests.support.cli import printed_json
from tests.support.run import python_module


class Run(TypedDict):
    """Replay window, drafts per step and steps: the same runs for both recurrences."""

    window: int
    drafts: int
    steps: int


class MambaDims(TypedDict):
    heads: int
    head_dim: int
    d_state: int


class DeltaNetDims(TypedDict):
    heads: int
    d_k: int
    d_v: int


SEEDS = st.integers(0, 2**32 - 1)
SIZE = st.integers(1, 8)
RUNS = st.builds(Run, window=st.integers(2, 24), drafts=st.integers(0, 5), steps=st.integers(1, 20))


def assert_exact(report: ReplayReport) -> None:
    assert report.max_output_error <= BOUND
    assert report.max_state_error <= BOUND


@settings(max_examples=40, deadline=None)
@given(SEEDS, st.builds(MambaDims, heads=st.integers(1, 4), head_dim=SIZE, d_state=SIZE), RUNS)
def test_mamba2_replay_equals_the_recurrence(seed: int, dims: MambaDims, run: Run) -> None:
    assert_exact(mamba_speculative(np.random.default_rng(seed), **dims, **run))


@settings(max_examples=40, deadline=None)
@given(SEEDS, st.builds(DeltaNetDims, heads=st.integers(1, 3), d_k=SIZE, d_v=SIZE), RUNS)
def test_gated_deltanet_replay_equals_the_recurrence(
    seed: int, dims: DeltaNetDims, run: Run
) -> None:
    assert_exact(gdn_speculative(np.random.default_rng(seed), **dims, **run))


def test_flushes_happen_at_the_window_boundary() -> None:
    rng = np.random.default_rng(3)
    # L <= K + 1: every verify step flushes first (COSTMODEL.md section 3).
    tight = mamba_speculative(
        rng, heads=1, head_dim=2, d_state=2, window=4, drafts=3, steps=6, accept=[0]
    )
    assert tight.flushes >= 5
    roomy = mamba_speculative(
        rng, heads=1, head_dim=2, d_state=2, window=64, drafts=3, steps=6, accept=[0]
    )
    assert roomy.flushes == 1  # only the final fold


def test_replay_forms_against_a_hand_sized_case() -> None:
    rng = np.random.default_rng(0)
    a = np.array([-0.5])
    h0 = rng.normal(size=(1, 2, 3))
    x, dt, b = rng.normal(size=(4, 1, 2)), np.full((4, 1), 0.3), rng.normal(size=(4, 3))
    h = h0
    for i in range(4):
        h = mamba_step(h, a, x[i], dt[i], b[i])
    np.testing.assert_allclose(mamba_replay(h0, a, x, dt, b), h, rtol=1e-13)
    s0 = rng.normal(size=(1, 2, 2))
    s, us = s0, []
    ks = rng.normal(size=(3, 1, 2))
    gs = np.full((3, 1), -0.1)
    for i in range(3):
        s, u = gdn_step(
            s, rng.normal(size=(1, 2)), ks[i], rng.normal(size=(1, 2)), gs[i], np.array([0.5])
        )
        us.append(u)
    np.testing.assert_allclose(gdn_replay(s0, np.array(us), ks, gs), s, rtol=1e-13)


def test_bf16_state_drifts_and_the_error_grows() -> None:
    errors = bf16_drift(np.random.default_rng(0), steps=2_000, report_at=(10, 100, 2_000))
    assert 0 < errors[10] < errors[100] < errors[2_000]
    assert errors[2_000] > 0.01
    assert to_bfloat16(np.array([1.0, 1.00390625 + 1e-4]))[1] != 1.0


def test_exactness_cli() -> None:
    result = python_module("kernels_probe", "exactness")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "10000 steps" in result.stdout
    assert result.stdout.count(" ok") == 4


def test_cpu_probe_writes_a_profile_predict_uses(tmp_path: Path) -> None:
    out = tmp_path / "profile.json"
    result = python_module("kernels_probe", "--backend", "numpy", "--quick", "--out", str(out))
    assert result.returncode == 0, result.stderr
    profile = load_profile(out)
    assert profile.source == "kernels_probe"
    assert profile.measured_hbm_bytes_per_s is not None
    assert profile.measured_hbm_bytes_per_s > 1e8
    assert {"copy_bytes_per_s", "read_bytes_per_s", "small_kernel_per_s"} <= set(
        profile.measurements
    )
    assert any(k.startswith("replay_L16_") for k in profile.measurements)
    assert all(m.p10 <= m.median <= m.p90 for m in profile.measurements.values())
    report = printed_json(
        "predict",
        "--profile",
        str(out),
        "--model",
        "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B",
        "--tp",
        "8",
        "--drafter",
        "eagle",
        "--batch",
        "1,4",
        "--spec-tokens",
        "1..2",
        "--json",
    )
    assert report["profile_source"] == "kernels_probe"
    assert any(p["tokens_per_s"] > 0 for p in report["predictions"])
