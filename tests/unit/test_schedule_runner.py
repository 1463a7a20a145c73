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


def test_the_cpu_build_runs_v1_without_graphs_to_force_down() -> None:
    # V1 (no Triton), but the CPU build captures no CUDA graphs: a schedule costs no split.
    cpu = TABLE.build_in_force("0.32.0-cpu")
    engine = VLLM.deployed(cpu, NEMOTRON, kv_connector=False, drafter_method="mtp")
    assert engine.runner() is ModelRunner.V1
    assert not engine.piecewise_graphs(SCHEDULE)


def test_sglang_tiers_are_not_judged_by_vllm_runner_rules() -> None:
    qwen = load_model("Qwen/Qwen3.5-122B-A10B")
    engine = SGLANG.deployed(None, qwen, kv_connector=False, drafter_method="suffix")
    tiers = engine.as_run(Setup.parse("spec:3@adaptive"))
    assert tiers.schedule
    assert not engine.piecewise_graphs(tiers)


def test_each_build_row_carries_its_schedule_rules() -> None:
    """The rules are the build table's (engines/vllm/builds.yaml), per version: 0.32 has no
    method rule on V1 (no _maybe_disable_dynamic_sd_for_v1), 0.33 has; both drop a schedule under
    data parallelism and force piecewise graphs on V1."""
    v033, v032 = TABLE.build_in_force("0.33.0"), TABLE.build_in_force("0.32.0")
    assert all(r.schedule == v033.rows[0].schedule for r in v033.rows)
    rules_033, rules_032 = v033.schedule, v032.schedule
    assert rules_033 is not None
    assert rules_032 is not None
    assert rules_033.v1_methods_rule is not None
    assert rules_033.v1_methods_rule.source == "vllm/config/vllm.py:1088-1108"
    assert rules_032.v1_methods is None
    assert rules_032.data_parallel_drops is not None
    assert rules_032.data_parallel_drops.source == "vllm/config/vllm.py:1058-1075"
    assert rules_032.v1_piecewise is not None
    on_032 = VLLM.deployed(v032, NEMOTRON, kv_connector=False, drafter_method="suffix")
    assert on_032.runner() is ModelRunner.V1
    assert on_032.accepts(SCHEDULE)
    assert on_032.piecewise_graphs(SCHEDULE)
    dp = VLLM.deployed(v032, NEMOTRON, kv_connector=False, data_parallel=2).refusal(SCHEDULE)
    assert dp is not None
    assert "vllm/config/vllm.py:1058-1075" in dp


def test_without_a_build_read_the_newest_rules_hold() -> None:
    from autotuner.core.engine.capabilities import NEWEST_SCHEDULE_RULES

    newest = TABLE.build_in_force("0.33.0").schedule
    assert newest is not None
    assert NEWEST_SCHEDULE_RULES.v1_methods == newest.v1_methods
    assert NEWEST_SCHEDULE_RULES.v2_unsupported_methods == newest.v2_unsupported_methods
    for name in ("data_parallel_drops", "v1_methods_rule", "v2_unsupported_rule", "v1_piecewise"):
        ours, table = getattr(NEWEST_SCHEDULE_RULES, name), getattr(newest, name)
        assert ours.source == table.source, name
    unknown = TABLE.build_in_force("0.40.0").schedule
    assert unknown == newest
