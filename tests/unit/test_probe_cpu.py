"""kernels_probe's CPU profile for the real-vLLM tier: the weight-streaming rate of a one-row
matmul sets the GEMM bandwidth, and the torch-cpu options are refused clearly where they
cannot apply."""

from __future__ import annotations

import importlib.util

import pytest

from autotuner.core.predict.hardware import Measurement
from kernels_probe.probe import Rates, build_profile, numpy_backend
from tests.support.run import python_module


def rate(median: float) -> Measurement:
    return Measurement(median=median, p10=0.9 * median, p90=1.1 * median, unit="B/s", samples=5)


def rates(stream: Measurement | None) -> Rates:
    return Rates(rate(1e10), rate(5e9), [1e11], stream, [], 0.0)


def test_a_decode_steps_gemms_stream_at_the_measured_weight_rate() -> None:
    streamed = build_profile(numpy_backend(), {}, rates(rate(2e10)), None)
    assert streamed.bandwidth("gemm") == pytest.approx(2e10)
    assert streamed.hbm_bytes_per_s == pytest.approx(2e10)  # the fastest traffic measured
    assert streamed.bandwidth("copies") == pytest.approx(1e10)


def test_without_the_stream_the_gemms_read_at_the_read_rate() -> None:
    profile = build_profile(numpy_backend(), {}, rates(None), None)
    assert profile.bandwidth("gemm") == pytest.approx(5e9)
    assert profile.bf16_flops == pytest.approx(1e11)


def test_threads_only_with_torch_cpu() -> None:
    result = python_module("kernels_probe", "--backend", "numpy", "--threads", "1")
    assert result.returncode == 2
    assert "--threads takes a count of 1 or more, with --backend torch-cpu" in result.stderr


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed")
def test_torch_cpu_without_torch_names_the_venv_that_has_it() -> None:
    result = python_module("kernels_probe", "--backend", "torch-cpu", "--quick")
    assert result.returncode == 2
    assert "torch is not installed in this Python" in result.stderr
    assert "vllm-venv" in result.stderr
