"""Where vLLM 0.33.0 runs a per-batch K schedule, and how (read from the wheel):
- on Model Runner V1 only for ngram, eagle, eagle3, mtp, draft_model and dflash; dropped with a
  warning for any other method (vllm/config/vllm.py:1088-1108);
- V1 is what the engine picks for a method V2 does not run (suffix, custom_class:
  vllm/config/vllm.py:3066-3068), without Triton (the CPU build), or where the environment says
  VLLM_USE_V2_MODEL_RUNNER=0; V2 otherwise (vllm/config/vllm.py:731-767);
- on V1 full CUDA graphs are forced down to PIECEWISE (vllm/config/vllm.py:1069-1086); V2 keeps
  them. SGLang's adaptive tiers keep their own graph runner per tier: no such rule."""

from __future__ import annotations

import pytest

from autotuner.core.engine.capabilities import ModelRunner
from autotuner.core.model.registry import load_model
from autotuner.core.types import Setup
from autotuner.engines.sglang.capabilities import FOLLOW_BUILD as SGLANG
from autotuner.engines.vllm.builds import TABLE
from autotuner.engines.vllm.capabilities import FOLLOW_BUILD as VLLM

NEMOTRON = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4")
SCHEDULE = Setup.parse("spec:3@1-64:3,65-8191:1")
STATIC = Setup.parse("spec:3")


@pytest.mark.parametrize("method", ["suffix", "custom_class"])
def test_a_method_v2_lacks_runs_on_v1_which_drops_the_schedule(method: str) -> None:
    engine = VLLM.deployed(None, NEMOTRON, kv_connector=False, drafter_method=method)
    assert engine.runner() is ModelRunner.V1
    reason = engine.refusal(SCHEDULE)
    assert reason is not None
    assert f"'{method}' method" in reason
    assert "vllm/config/vllm.py:1088-1108" in reason
    assert "vllm/config/vllm.py:3066-3068" in reason
    assert engine.accepts(STATIC)


@pytest.mark.parametrize("method", ["ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash"])
def test_v1_keeps_the_schedule_for_proposers_that_truncate_drafts(method: str) -> None:
    engine = VLLM.model_copy(update={"model_runner": ModelRunner.V1}).deployed(
        None, NEMOTRON, kv_connector=False, drafter_method=method
    )
    assert engine.accepts(SCHEDULE)
    assert engine.piecewise_graphs(SCHEDULE)
    assert not engine.piecewise_graphs(STATIC)


def test_v1_by_environment_drops_the_schedule_for_ngram_gpu() -> None:
    v1 = VLLM.model_copy(update={"model_runner": ModelRunner.V1})
    engine = v1.deployed(None, NEMOTRON, kv_connector=False, drafter_method="ngram_gpu")
    reason = engine.refusal(SCHEDULE)
    assert reason is not None
    assert "the environment selects V1" in reason
    on_v2 = VLLM.deployed(None, NEMOTRON, kv_connector=False, drafter_method="ngram_gpu")
    assert on_v2.runner() is ModelRunner.V2
    assert on_v2.accepts(SCHEDULE)


def test_v2_keeps_full_graphs_under_a_schedule() -> None:
    engine = VLLM.deployed(None, NEMOTRON, kv_connector=False, drafter_method="mtp")
    assert engine.runner() is ModelRunner.V2
    assert engine.accepts(SCHEDULE)
    assert not engine.piecewise_graphs(SCHEDULE)


def test_the_cpu_build_runs_v1() -> None:
    cpu = TABLE.build_in_force("0.32.0-cpu")
    engine = VLLM.deployed(cpu, NEMOTRON, kv_connector=False, drafter_method="mtp")
    assert engine.runner() is ModelRunner.V1
    assert engine.piecewise_graphs(SCHEDULE)


def test_sglang_tiers_are_not_judged_by_vllm_runner_rules() -> None:
    qwen = load_model("Qwen/Qwen3.5-122B-A10B")
    engine = SGLANG.deployed(None, qwen, kv_connector=False, drafter_method="suffix")
    tiers = engine.as_run(Setup.parse("spec:3@adaptive"))
    assert tiers.schedule
    assert not engine.piecewise_graphs(tiers)
