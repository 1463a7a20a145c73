"""`autotuner demo` on the simulated SGLang: its settings name the engine, the statics are
what SGLang 0.5.23 runs (setups it runs alike shown once), and a model that does not fit the
GPUs given is refused before anything runs. (The whole loop against the simulated SGLang:
tests/integration/test_sglang_sim.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from autotuner import plots
from autotuner.core.engine.workload import Workload
from autotuner.core.model.registry import load_model
from autotuner.core.model.spec import SsmKind
from autotuner.core.predict.hardware import datasheet
from autotuner.core.types import Setup
from autotuner.demo import (
    DemoResult,
    DemoWorld,
    compare_statics,
    demo_settings,
    fitting_truth,
    run_demo,
    statics_for,
)
from autotuner.engines.kinds import EngineKind
from autotuner.engines.sglang.capabilities import FOLLOW_BUILD
from autotuner.errors import InputError
from autotuner.sim.sglang_startup import run_at
from autotuner.sim.truth import TruthEngine, no_error

QWEN = load_model("Qwen/Qwen3.5-122B-A10B")


def test_the_settings_name_sglang_and_its_capability_table(tmp_path: Path) -> None:
    settings = demo_settings(
        model_id=QWEN.name,
        gpu="H200",
        duration_s=90,
        manifest=tmp_path / "sglang.yaml",
        tp=4,
        drafter=None,
        engine="sglang",
    )
    assert settings.engine.kind is EngineKind.SGLANG
    assert settings.source.kind.value == "sglang"
    assert settings.engine.capabilities.replay_families == (SsmKind.GATED_DELTANET,)


def test_statics_are_what_sglang_runs_each_shown_once() -> None:
    statics = statics_for(QWEN, FOLLOW_BUILD, 3, True, (8, 16))
    assert Setup(spec_tokens=3, replay_window=16) in statics
    result = DemoResult(series=plots.DemoSeries(title="", seconds_per_hour=1.0))
    result.series.t = [0.0, 1.0, 2.0]
    truth = TruthEngine(QWEN, datasheet("H200"), Workload(tensor_parallel=4))
    compare_statics(result, statics, truth, lambda t: 512.0, 0.0, (0.8, 0.7, 0.6), run_at)
    # GDN verifies through the draft maximum whatever the window: 3:8 and 3:16 run alike.
    assert [label for label in result.statics if label.startswith("replay+spec:3:")] == [
        "replay+spec:3:16"
    ]
    assert result.statics["spec:3"] < result.statics["plain"] < result.statics["replay+spec:3:16"]


def test_a_model_that_does_not_fit_is_refused_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not fit 1 x H200: give a larger --tp"):
        run_demo(
            model_id=QWEN.name,
            gpu="H200",
            duration_s=90,
            out=tmp_path,
            acceptance=(0.8, 0.7, 0.6),
            live=False,
            fast=True,
            engine_kind="sglang",
        )
    assert list(tmp_path.iterdir()) == []


def test_without_a_tp_the_demo_takes_the_fewest_gpus_that_hold_batch_512() -> None:
    truth = fitting_truth(QWEN, "H200", None, None, DemoWorld(no_error))
    assert truth.workload.tensor_parallel == 4  # 2 x H200 holds Qwen3.5-122B, not 512 requests
    assert fitting_truth(QWEN, "H200", 2, None, DemoWorld(no_error)).workload.tensor_parallel == 2
