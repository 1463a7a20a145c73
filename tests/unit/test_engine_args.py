"""The engine as its args say it runs: vLLM argument lists read into EngineArgs (both flag
forms, bad JSON refused by name), the deployed drafter (no drafter, no speculation; ngram only
with measured acceptance; a draft model sized from its own config), and the live values over the
settings, each with its source."""

from __future__ import annotations

import json

import numpy as np
import pytest

from autotuner.core.engine.args import SpeculativeConfig
from autotuner.core.engine.drafter import (
    DECLARED,
    DEFAULT,
    LIVE,
    MODEL_CONFIG,
    NO_DRAFTER,
    deployed_drafter,
)
from autotuner.core.engine.resolution import OBSERVED, SAVED, SETTINGS, Fallback, Input, resolve
from autotuner.core.engine.workload import PrefixCacheReading, Workload
from autotuner.core.model.draft import DraftModel
from autotuner.core.model.registry import load_draft_model, load_model
from autotuner.core.model.spec import DrafterKind
from autotuner.core.predict.acceptance import geometric
from autotuner.core.predict.capacity import max_batch
from autotuner.core.predict.costmodel import predict
from autotuner.core.predict.hardware import datasheet
from autotuner.core.predict.report import build_report
from autotuner.core.types import Setup
from autotuner.engines.vllm.args import live_args, parse, speculative
from autotuner.engines.vllm.capabilities import PRESETS
from autotuner.engines.vllm.flags import FlagNames
from autotuner.engines.vllm.setup import parse_setup, vllm_tokens
from autotuner.errors import ArgsError
from tests.support.cli import printed, printed_json, refusal
from tests.support.fixtures import CONFIGS

LLAMA_CONFIG = CONFIGS / "llama-3.1-70b.config.json"
LLAMA_FP8 = load_model("meta-llama/Llama-3.1-70B-Instruct-FP8")
NEMOTRON = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4")
H200 = datasheet("H200")
ACCEPT = geometric(0.7, 4)
MTP = '{"method":"mtp","num_speculative_tokens":3}'


# --------------------------------------------------------------------------- parsing


def test_a_real_looking_command_line_is_read() -> None:
    args = [
        "vllm",
        "serve",
        "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4",
        "--tensor-parallel-size",
        "4",
        "--gpu-memory-utilization=0.85",
        "--max-num-seqs",
        "128",
        "--max-model-len",
        "32k",
        "--kv-cache-dtype",
        "fp8",
        "--mamba-ssm-cache-dtype",
        "float32",
        "--mamba-cache-mode",
        "align",
        "--enable-prefix-caching",
        "--speculative-config",
        MTP,
        "--port",
        "8000",
    ]
    read = parse(args)
    assert read.tensor_parallel_size == 4
    assert read.gpu_memory_utilization == 0.85
    assert read.max_num_seqs == 128
    assert read.max_model_len == 32_000  # vLLM: lower-case k is decimal
    assert read.kv_cache_dtype == "fp8"
    assert read.mamba_ssm_cache_dtype == "float32"
    assert read.mamba_cache_mode == "align"
    assert read.enable_prefix_caching is True
    assert read.speculative == SpeculativeConfig(method="mtp", num_speculative_tokens=3)
    assert read.speculative.kind is DrafterKind.MTP
    assert parse_setup(args) == Setup(spec_tokens=3)  # the actuators read the same args


def test_joined_forms_aliases_and_the_last_occurrence() -> None:
    read = parse(
        [
            "-tp",
            "2",
            "--max_num_seqs=64",  # vLLM takes underscores too
            "--max-model-len=32K",
            "--enable-prefix-caching",
            "--no-enable-prefix-caching",
            '--speculative-config={"method":"eagle3","model":"yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",'
            '"num_speculative_tokens":4,"enable_adaptive_verification":true}',
            "--tensor-parallel-size=8",
        ]
    )
    assert read.tensor_parallel_size == 8  # argparse keeps the last
    assert read.max_num_seqs == 64
    assert read.max_model_len == 32 * 1024
    assert read.enable_prefix_caching is False
    spec = read.speculative
    assert spec is not None
    assert (spec.resolved_method, spec.num_speculative_tokens) == ("eagle3", 4)
    assert spec.enable_adaptive_verification is True
    assert spec.kind is DrafterKind.EAGLE
    assert parse(["--max-model-len", "auto"]).max_model_len is None
    assert parse(["--enforce-eager"]).enforce_eager is True
    single = parse(["--speculative-config", "{'method': 'ngram', 'num_speculative_tokens': 4}"])
    assert single.speculative is not None
    assert single.speculative.kind is DrafterKind.NGRAM


def test_a_shell_line_in_a_container_is_read() -> None:
    command = [
        "/bin/sh",
        "-c",
        f"exec vllm serve m --tensor-parallel-size 2 --speculative-config '{MTP}'",
    ]
    read = parse(vllm_tokens(command, []))
    assert read.tensor_parallel_size == 2
    assert read.speculative is not None
    assert read.speculative.num_speculative_tokens == 3
    assert live_args(command, []) == read  # the one reading of a container's live args


def test_live_args_use_the_configured_flag_names() -> None:
    flags = FlagNames(speculative_config="--spec-config", mamba_ssm_cache_dtype="--ssm-dtype")
    args = ["--model", "m", "--spec-config", MTP, "--ssm-dtype", "float32"]
    read = live_args(["vllm", "serve"], args, flags)
    assert read.speculative is not None
    assert read.speculative.num_speculative_tokens == 3
    assert read.mamba_ssm_cache_dtype == "float32"
    assert live_args(["vllm", "serve"], args).speculative is None  # vLLM's own spelling


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--speculative-config", '{"method": mtp}'], r"--speculative-config: value is not a JSON"),
        (["--speculative-config={'method': 'mtp'"], r"not a JSON object \(.* column"),
        (["--speculative-config", "[1, 2]"], "not a JSON object"),
        (["--speculative-config"], "has no value"),
        (["--speculative-config", '{"num_speculative_tokens": "three"}'], "must be an integer"),
        (["--tensor-parallel-size", "two"], "--tensor-parallel-size: not an integer"),
        (["--gpu-memory-utilization", "90"], r"must lie in \(0, 1\]"),
        (["--max-model-len", "1.5K"], "decimals"),
        (["--max-num-seqs", "0"], "must be >= 1"),
    ],
)
def test_bad_values_are_refused_naming_the_flag(args: list[str], message: str) -> None:
    with pytest.raises(ArgsError, match=message):
        parse(args)


@pytest.mark.parametrize(
    ("config", "method", "kind"),
    [
        ({"method": "nemotron_h_mtp", "num_speculative_tokens": 2}, "mtp", DrafterKind.MTP),
        ({"model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B"}, "eagle", DrafterKind.EAGLE),
        ({"model": "meta-llama/Llama-3.2-1B-Instruct"}, "draft_model", DrafterKind.DRAFT_MODEL),
        ({"model": "[ngram]"}, "ngram", DrafterKind.NGRAM),
        ({"method": "suffix"}, "suffix", DrafterKind.SUFFIX),
        ({"method": "medusa", "model": "x/medusa"}, "medusa", None),
        ({"num_speculative_tokens": 3}, None, None),
    ],
)
def test_the_method_is_placed_as_vllm_places_it(
    config: dict[str, object], method: str | None, kind: DrafterKind | None
) -> None:
    spec = speculative(config)
    assert (spec.resolved_method, spec.kind) == (method, kind)


# --------------------------------------------------------------------------- the drafter


def labels(report: dict[str, object]) -> set[str]:
    predictions = report["predictions"]
    assert isinstance(predictions, list)
    return {p["setup"]["label"] for p in predictions}


def report_for(model_path: str, *extra: str) -> dict[str, object]:
    report: dict[str, object] = printed_json(
        "predict", "--model", model_path, "--batch", "1,32", *extra, "--json"
    )
    return report


def test_a_bare_llama_config_gets_no_speculation_until_a_drafter_is_declared() -> None:
    bare = report_for(str(LLAMA_CONFIG))
    assert labels(bare) == {"plain"}
    assert NO_DRAFTER in bare["notes"]  # type: ignore[operator]
    assert bare["quick_rule"] == []
    eagle = report_for(str(LLAMA_CONFIG), "--drafter", "eagle")
    assert {"spec:1", "spec:4"} <= labels(eagle)
    assert eagle["drafter"]["source"] == DECLARED  # type: ignore[index]
    draft = [p["time_s"]["draft"] for p in eagle["predictions"] if p["setup"]["spec_tokens"]]  # type: ignore[attr-defined]
    assert min(draft) > 0  # the declared drafter is charged, never free


def test_a_built_in_llama_id_without_a_drafter_predicts_only_plain() -> None:
    spec = load_model("meta-llama/Llama-3.1-70B-Instruct-FP8")
    report = build_report(
        spec,
        H200,
        ACCEPT,
        Workload(),
        batches=[1, 8],
        spec_tokens=[1, 2, 3, 4],
        windows=[8, 16],
        engine=PRESETS["upstream"],
    )
    assert {row["setup"] for row in report["best"]} == {"plain"}
    assert labels(report) == {"plain"}


def test_the_models_own_mtp_layers_need_no_declaration() -> None:
    drafter = deployed_drafter(NEMOTRON, None)
    assert (drafter.kind, drafter.source, drafter.predictable) == (
        DrafterKind.MTP,
        MODEL_CONFIG,
        True,
    )
    mtp_on_llama = deployed_drafter(LLAMA_FP8, speculative(json.loads(MTP)))
    assert not mtp_on_llama.predictable
    assert "no MTP layers" in (mtp_on_llama.problem or "")


def test_ngram_and_suffix_are_predicted_only_from_measured_acceptance() -> None:
    args = ["--vllm-args", '--speculative-config \'{"method":"ngram","num_speculative_tokens":3}\'']
    assumed = report_for(str(LLAMA_CONFIG), *args)
    assert labels(assumed) == {"plain"}
    assert any("acceptance is the workload's" in n for n in assumed["notes"])  # type: ignore[attr-defined]
    measured = report_for(str(LLAMA_CONFIG), *args, "--acceptance-per-position", "0.6,0.5,0.4,0.3")
    assert "spec:3" in labels(measured)
    spec = [p for p in measured["predictions"] if p["setup"]["spec_tokens"]]  # type: ignore[attr-defined]
    assert all(p["time_s"]["draft"] == 0 for p in spec)  # prompt lookup runs on the CPU
    suffix = report_for(str(LLAMA_CONFIG), "--drafter", "suffix")
    assert labels(suffix) == {"plain"}


def test_a_draft_model_is_sized_from_its_own_config() -> None:
    small = load_draft_model("meta-llama/Llama-3.1-8B-Instruct")
    assert 6.5e9 < small.params < 8.1e9  # 8.03B with a 0.53B embedding table not streamed
    report = report_for(
        str(LLAMA_CONFIG), "--draft-model", "meta-llama/Llama-3.1-8B-Instruct", "--tp", "2"
    )
    assert "spec:2" in labels(report)
    assert report["drafter"]["kind"] == "draft_model"  # type: ignore[index]
    capacity = report["capacity"]
    assert isinstance(capacity, dict)
    assert capacity["spec:1"] < capacity["plain"]  # its weights and KV share the memory
    # K passes of an 8B model (14 GiB each) cost more than an EAGLE head's (one layer of the
    # target's width and its LM head, about 4 GiB in the config's BF16).
    eagle = report_for(str(LLAMA_CONFIG), "--drafter", "eagle", "--tp", "2")

    def draft_time(r: dict[str, object]) -> float:
        rows = r["predictions"]
        assert isinstance(rows, list)
        return float(next(p["time_s"]["draft"] for p in rows if p["setup"]["label"] == "spec:3"))

    assert draft_time(report) > 2 * draft_time(eagle)
    unknown = report_for(str(LLAMA_CONFIG), "--draft-model", "/no/such/draft")
    assert labels(unknown) == {"plain"}
    assert any("size unknown" in n for n in unknown["notes"])  # type: ignore[attr-defined]


def test_a_draft_model_charges_its_passes_in_the_cost_model() -> None:
    draft = DraftModel.of(load_model("meta-llama/Llama-3.1-8B-Instruct"))
    with_draft = Workload(tensor_parallel=2, drafter=DrafterKind.DRAFT_MODEL, draft_model=draft)
    curve = predict(LLAMA_FP8, H200, Setup(spec_tokens=2), [1], ACCEPT, with_draft)
    # K = 2 is two sequential passes, each reading the draft's weights (split over TP 2) once
    # at batch 1, plus its KV and a launch overhead per pass.
    one_pass = draft.weight_bytes / 2 / H200.bandwidth("gemm")
    assert 2 * one_pass < curve.time_s["draft"][0] < 2.3 * one_pass
    plain_capacity = max_batch(LLAMA_FP8, H200, Setup(), with_draft)
    assert max_batch(LLAMA_FP8, H200, Setup(spec_tokens=2), with_draft) < plain_capacity


def test_unmodelled_methods_are_not_predicted() -> None:
    drafter = deployed_drafter(LLAMA_FP8, SpeculativeConfig(method="medusa", model="x/m"))
    assert not drafter.predictable
    assert "method medusa" in (drafter.problem or "")


# --------------------------------------------------------------------------- live over settings


def test_live_values_win_over_the_settings_and_say_so() -> None:
    args = parse(
        [
            "--tensor-parallel-size",
            "2",
            "--gpu-memory-utilization",
            "0.6",
            "--max-model-len",
            "2048",
            "--kv-cache-dtype",
            "fp8_e4m3",
            "--max-num-seqs",
            "16",
        ]
    )
    settings = Fallback(context_tokens=4096, tensor_parallel=1)
    live = resolve(LLAMA_FP8, args, settings)
    fallback = resolve(LLAMA_FP8, None, settings)
    assert live.workload.tensor_parallel == 2
    assert live.workload.gpu_memory_utilization == 0.6
    assert live.workload.context_tokens == 2048  # bounded by --max-model-len
    assert live.workload.max_num_seqs == 16
    assert live.model.kv_bytes_per_token == LLAMA_FP8.kv_bytes_per_token / 2
    table = live.table()
    assert table["tensor_parallel"]["source"] == LIVE
    assert "the live args win" in table["tensor_parallel"]["note"]
    assert table["context_tokens"]["source"] == SETTINGS
    assert "bounded by --max-model-len" in table["context_tokens"]["note"]
    assert table["enable_prefix_caching"]["modelled"] is True
    assert "recomputed prefill" in table["enable_prefix_caching"]["note"]
    assert table["prefix_hit_rate"]["value"] is None  # no window showed it: not charged
    assert table["prefix_hit_rate"]["modelled"] is False
    back = fallback.table()
    assert (back["tensor_parallel"]["source"], back["gpu_memory_utilization"]["source"]) == (
        SETTINGS,
        DEFAULT,
    )
    # The prediction moves with them: twice the GPUs, a 16-request ceiling.
    batch = np.array([8, 64])
    on_live = predict(live.model, H200, Setup(), batch, ACCEPT, live.workload)
    on_settings = predict(fallback.model, H200, Setup(), batch, ACCEPT, fallback.workload)
    assert on_live.tokens_per_s[0] > 1.5 * on_settings.tokens_per_s[0]
    assert on_live.max_batch == 16
    assert "--max-num-seqs" in (on_live.infeasible_reason or "")
    lower = resolve(LLAMA_FP8, parse(["--gpu-memory-utilization", "0.6"]), settings)
    assert max_batch(LLAMA_FP8, H200, Setup(), lower.workload) < max_batch(
        LLAMA_FP8, H200, Setup(), fallback.workload
    )


def test_the_saved_config_keeps_the_drafter_while_speculation_is_off() -> None:
    saved = SpeculativeConfig(method="eagle", num_speculative_tokens=3)
    resolved = resolve(LLAMA_FP8, parse(["--max-num-seqs", "64"]), saved=saved)
    assert resolved.drafter.kind is DrafterKind.EAGLE
    assert resolved.drafter.source == SAVED
    assert resolved.workload.drafter is DrafterKind.EAGLE


def test_predict_takes_the_live_args_and_shows_each_source() -> None:
    line = (
        "vllm serve meta-llama/Llama-3.1-70B-Instruct-FP8 --tensor-parallel-size 2 "
        "--gpu-memory-utilization=0.8 --speculative-config "
        '\'{"method":"eagle","num_speculative_tokens":3}\''
    )
    report = report_for("meta-llama/Llama-3.1-70B-Instruct-FP8", "--vllm-args", line)
    inputs = report["inputs"]
    assert isinstance(inputs, dict)
    assert Input.model_validate(inputs["tensor_parallel"]) == Input(value=2, source=LIVE)
    assert inputs["gpu_memory_utilization"]["value"] == 0.8
    assert inputs["context_tokens"]["source"] == DEFAULT
    assert inputs["drafter"]["source"] == LIVE
    assert report["workload"]["tensor_parallel"] == 2  # type: ignore[index]
    assert "spec:3" in labels(report)
    text = printed(
        "predict",
        "--model",
        "meta-llama/Llama-3.1-70B-Instruct-FP8",
        "--vllm-args",
        line,
        env={"COLUMNS": "200"},
    )
    assert "tensor_parallel 2 (live args)" in text
    assert "deployed drafter: eagle K=3 (live args)" in text
    bad = refusal("predict", "--vllm-args", "--speculative-config '{\"method\": mtp'")
    assert "--speculative-config: value is not a JSON object" in bad


def test_an_observed_prefix_cache_becomes_the_workload_with_its_source() -> None:
    """What a window showed of the prefix cache prices a setup that turns it off."""
    reading = PrefixCacheReading(
        hit_rate=0.6, prompt_tokens=4096, generation_tokens=512, looked_up_tokens=81920
    )
    resolved = resolve(
        load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4"), None, observed_prefix=reading
    )
    workload, table = resolved.workload, resolved.table()
    assert (workload.prefix_hit_rate, workload.prompt_tokens, workload.generation_tokens) == (
        0.6,
        4096,
        512,
    )
    assert table["prefix_hit_rate"]["source"] == OBSERVED
    assert "81,920 prompt tokens looked up" in table["prefix_hit_rate"]["note"]
    assert table["prompt_tokens"]["value"] == 4096
