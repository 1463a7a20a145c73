"""The step's prefill budget as the engine runs it: vLLM's --max-num-batched-tokens and SGLang's
--chunked-prefill-size read from the live args in every spelling the engines' parsers take (bad
values refused by name), the engine's own default on the GPU where the args give none, and the
time to first token priced with it. Published manifests give the values the engines would run."""

from __future__ import annotations

import numpy as np
import pytest

from autotuner.core.engine.args import EngineArgs
from autotuner.core.engine.drafter import DEFAULT, LIVE
from autotuner.core.engine.resolution import resolve
from autotuner.core.engine.workload import Workload
from autotuner.core.model.registry import load_model
from autotuner.core.predict.acceptance import from_conditional
from autotuner.core.predict.attribution import Attribution
from autotuner.core.predict.hardware import datasheet
from autotuner.core.predict.predictor import Predictor
from autotuner.core.types import PLAIN
from autotuner.engines.sglang import args as sglang_args
from autotuner.engines.vllm import args as vllm_args
from autotuner.errors import ArgsError
from tests.support.cli import printed_json
from tests.support.corpus import CORPUS, engine_containers

MODEL = "Qwen/Qwen3.5-122B-A10B"
VLLM = Workload(engine_name="vLLM")
SGLANG = Workload(engine_name="SGLang")


@pytest.mark.parametrize(
    ("words", "budget"),
    [
        (["--max-num-batched-tokens", "4096"], 4096),
        (["--max-num-batched-tokens=4096"], 4096),
        (["--max_num_batched_tokens", "4096"], 4096),
        (["--max-num-batched-tokens", "8k"], 8000),  # decimal suffix
        (["--max-num-batched-tokens", "8K"], 8192),  # binary suffix
        (["--max-num-batched-tokens", "2.5k"], 2500),
        (["--max-num-batched-tokens", "1024", "--max_num_batched_tokens=2048"], 2048),
    ],
)
def test_vllm_budget_is_read_in_every_spelling_vllm_takes(words: list[str], budget: int) -> None:
    assert vllm_args.parse(["serve", "m", *words]).prefill_chunk_tokens == budget


@pytest.mark.parametrize("value", ["8.5K", "lots", "0", "-4", "8kk", ""])
def test_a_vllm_budget_vllm_would_refuse_is_refused_naming_the_flag(value: str) -> None:
    with pytest.raises(ArgsError, match="--max-num-batched-tokens"):
        vllm_args.parse(["serve", "m", f"--max-num-batched-tokens={value}"])


def test_a_vllm_performance_mode_it_does_not_know_is_refused() -> None:
    with pytest.raises(ArgsError, match="--performance-mode"):
        vllm_args.parse(["serve", "m", "--performance-mode", "fast"])


@pytest.mark.parametrize(
    ("words", "budget", "chunked"),
    [
        (["--chunked-prefill-size", "4096"], 4096, True),
        (["--chunked-prefill-size=4096"], 4096, True),
        (["--chunked-prefill-size", "-1"], None, False),  # SGLang's way to turn chunking off
        (["--chunked-prefill-size", "0"], None, False),
    ],
)
def test_sglang_budget_is_read_and_minus_one_turns_chunking_off(
    words: list[str], budget: int | None, chunked: bool
) -> None:
    read = sglang_args.parse(["--model-path", "m", *words])
    assert (read.prefill_chunk_tokens, read.chunked_prefill) == (budget, chunked)


@pytest.mark.parametrize("value", ["4k", "lots", "4096.0"])
def test_an_sglang_budget_its_int_parser_refuses_is_refused_naming_the_flag(value: str) -> None:
    with pytest.raises(ArgsError, match="--chunked-prefill-size"):
        sglang_args.parse(["--model-path", "m", "--chunked-prefill-size", value])


@pytest.mark.parametrize(
    ("words", "groups"),
    [
        (["--attn-dp-size", "4"], 4),
        (["--attention-data-parallel-size", "4"], 4),
        (["--dp-size", "4", "--enable-dp-attention"], 4),
        (["--dp-size", "4"], None),  # replicas, each with the whole budget
    ],
)
def test_sglang_attention_groups_are_read(words: list[str], groups: int | None) -> None:
    assert sglang_args.parse(["--model-path", "m", *words]).attention_data_parallel == groups


@pytest.mark.parametrize(
    ("gpu", "vllm", "sglang"),
    [
        ("H100-SXM", 8192, 8192),
        ("H200", 8192, 8192),
        ("A100-80GB", 2048, 8192),  # vLLM keeps A100s on the small tier
        ("L40S", 2048, 4096),
        ("B200", 16384, 16384),
        ("MI300X", 16384, 16384),
    ],
)
def test_without_a_budget_each_engine_runs_its_own_default_for_the_gpu(
    gpu: str, vllm: int, sglang: int
) -> None:
    hardware = datasheet(gpu)
    assert VLLM.chunk_budget(hardware.name, hardware.memory_bytes) == vllm
    assert SGLANG.chunk_budget(hardware.name, hardware.memory_bytes) == sglang


def test_throughput_mode_doubles_only_the_default_and_attention_groups_share_sglangs() -> None:
    h100 = datasheet("H100-SXM")
    on = (h100.name, h100.memory_bytes)
    assert VLLM.model_copy(update={"throughput_mode": True}).chunk_budget(*on) == 16384
    given = VLLM.model_copy(update={"throughput_mode": True, "prefill_chunk_tokens": 4096})
    assert given.chunk_budget(*on) == 4096
    assert SGLANG.model_copy(update={"attention_data_parallel": 4}).chunk_budget(*on) == 2048
    assert VLLM.model_copy(update={"chunked_prefill": False}).chunk_budget(*on) is None


def _resolved(engine: Workload, args: EngineArgs) -> tuple[Workload, dict[str, object]]:
    resolved = resolve(load_model(MODEL), args, base=engine)
    return resolved.workload, resolved.inputs["prefill_chunk_tokens"].model_dump()


def test_the_live_budget_reaches_the_workload_with_its_source() -> None:
    workload, source = _resolved(
        VLLM, vllm_args.parse(["serve", "m", "--max-num-batched-tokens", "2k"])
    )
    assert workload.prefill_chunk_tokens == 2000
    assert source["source"] == LIVE
    assert source["value"] == 2000
    assert "time to first token" in str(source["note"])


def test_without_the_flag_the_input_says_which_engines_default_runs() -> None:
    for engine, name in ((VLLM, "vLLM"), (SGLANG, "SGLang")):
        workload, source = _resolved(engine, EngineArgs())
        assert workload.prefill_chunk_tokens is None
        assert source["source"] == DEFAULT
        assert str(source["note"]).startswith(f"{name}'s default on this GPU")


def test_a_budget_the_shell_computes_is_unknown_and_said_so() -> None:
    workload, source = _resolved(
        VLLM, vllm_args.parse(["serve", "m", "--max-num-batched-tokens", "${MAX_TOKENS}"])
    )
    assert workload.prefill_chunk_tokens is None
    assert source["value"] == "${MAX_TOKENS}"
    assert source["modelled"] is False
    assert "the shell computes it" in str(source["note"])


def _ttft(workload: Workload, gpu: str = "H100-SXM", prompt: float = 32768) -> float:
    predictor = Predictor(
        load_model(MODEL),
        datasheet(gpu),
        workload.model_copy(
            update={"prompt_tokens": prompt, "generation_tokens": 512.0, "tensor_parallel": 4}
        ),
        Attribution(),
        now=0.0,
        calibration_half_life_s=600.0,
    )
    ttft = predictor.time_to_first_token_s(PLAIN, [32], from_conditional([]))
    return float(ttft[0])


def test_ttft_is_priced_with_the_engines_budget() -> None:
    """The same prompt takes more steps to prefill in a smaller budget: A100s get 2048 under
    vLLM and 8192 under SGLang by default, and a live 16K budget beats both."""
    small, large = _ttft(VLLM, "A100-80GB"), _ttft(SGLANG, "A100-80GB")
    assert small > 1.2 * large
    given = _ttft(VLLM.model_copy(update={"prefill_chunk_tokens": 16384}), "A100-80GB")
    assert given < large
    whole = _ttft(VLLM.model_copy(update={"chunked_prefill": False}), "A100-80GB")
    assert whole < given
    assert np.isfinite([small, large, given, whole]).all()


PUBLISHED = CORPUS


def _published_args(path: str, engine: str) -> list[EngineArgs]:
    text = (PUBLISHED / path).read_text(encoding="utf-8")
    reader = sglang_args.live_args if engine == "sglang" else vllm_args.live_args
    return [reader(command, args) for command, args in engine_containers(text) if args]


def test_published_manifests_give_the_budget_the_engine_would_run() -> None:
    """llm-d's TPU decode pool writes `--max-num-batched-tokens=8192`; LWS's SGLang decode
    pool writes 262144 across 16 attention DP groups (16384 each); llm-d's wide-EP decode
    computes it in the shell (unknown: the engine's default is assumed, and said)."""
    (tpu,) = _published_args("llm-d/pd-tpu-v7-decode.yaml", "vllm")
    assert tpu.prefill_chunk_tokens == 8192
    for sglang in _published_args("sglang/lws-pd-decode.yaml", "sglang"):
        workload, source = _resolved(SGLANG, sglang)
        assert workload.chunk_budget("B200", 180e9) == 16384
        assert "16 attention DP groups" in str(source["note"])
    computed = [
        a for a in _published_args("llm-d/wide-ep-decode.yaml", "vllm") if a.prefill_chunk_text
    ]
    assert [a.prefill_chunk_text for a in computed] == ["${MAX_TOKENS}"]
    assert _resolved(VLLM, computed[0])[0].prefill_chunk_tokens is None


def test_a_published_manifest_with_a_budget_and_chunking_on_reads_both() -> None:
    """Dynamo's Nemotron-3 Super aggregated H200 recipe: --enable-chunked-prefill and
    --max-num-batched-tokens 16384 (its --speculative-config comes from a ConfigMap,
    `$(SPECULATIVE_CONFIG)`, which a reading of the file cannot know: left out here)."""
    text = (PUBLISHED / "dynamo/nemotron-3-super-agg-h200-chat.yaml").read_text(encoding="utf-8")
    (args,) = [a for _, a in engine_containers(text) if "--max-num-batched-tokens" in a]
    at = args.index("--max-num-batched-tokens")
    read = vllm_args.parse(["serve", "m", *args[at : at + 2], "--enable-chunked-prefill"])
    assert (read.prefill_chunk_tokens, read.chunked_prefill) == (16384, True)
    assert "--enable-chunked-prefill" in args


def test_predict_names_the_budget_each_engine_runs_on_the_gpu() -> None:
    def budget(*extra: str) -> tuple[object, object]:
        report = printed_json(
            "predict",
            "--model",
            MODEL,
            "--gpu",
            "L40S",
            "--tp",
            "4",
            "--batch",
            "8",
            "--prompt-tokens",
            "4096",
            "--output-tokens",
            "256",
            "--json",
            *extra,
        )
        return report["prefill_chunk_tokens"], report["inputs"]["prefill_chunk_tokens"]["value"]

    assert budget() == (2048, 2048)
    assert budget("--engine-kind", "sglang") == (4096, 4096)
    assert budget("--vllm-args", "--max-num-batched-tokens=3K") == (3072, 3072)


def test_sglang_mixes_prefill_into_decode_only_when_told() -> None:
    plain = sglang_args.parse(["--model-path", "m"])
    mixed = sglang_args.parse(["--model-path", "m", "--enable-mixed-chunk"])
    assert (plain.mixed_prefill, mixed.mixed_prefill) == (False, True)
    assert _resolved(SGLANG, plain)[0].prefill_mixed is False
    assert "SGLang runs prompt chunks before decoding" in str(_resolved(SGLANG, plain)[1]["note"])
    assert _resolved(SGLANG, mixed)[0].prefill_mixed is True
    assert _resolved(VLLM, vllm_args.parse(["serve", "m"]))[0].prefill_mixed is True


def test_chunks_run_on_their_own_take_their_prefill_and_at_least_one_pass_each() -> None:
    predictor = Predictor(
        load_model(MODEL),
        datasheet("H200"),
        Workload(prompt_tokens=20000, generation_tokens=500, tensor_parallel=4),
        Attribution(),
        now=0.0,
        calibration_half_life_s=600.0,
    )
    cost = predictor.workload_prefill(PLAIN)
    assert cost is not None
    prompt_s = cost.prefilled_tokens * cost.seconds_per_token
    assert cost.time_to_first_token_s(1.0, 64.0, 8192, mixed=False) == pytest.approx(prompt_s)
    floored = cost.time_to_first_token_s(1.0, 64.0, 8192, mixed=False, forward_floor_s=10.0)
    assert floored == pytest.approx(3 * 10.0)  # 20,000 tokens in 8,192-token chunks: 3 passes


def test_under_sglang_a_prompt_waits_for_no_decode_step() -> None:
    """At a large batch vLLM's chunks each wait for a decode step; SGLang (not mixed) runs
    them first, so the same budget gives it the shorter TTFT, and --enable-mixed-chunk gives
    vLLM's."""
    budget = {"prefill_chunk_tokens": 4096}
    apart = _ttft(SGLANG.model_copy(update={**budget, "prefill_mixed": False}), "H200")
    mixed = _ttft(SGLANG.model_copy(update=budget), "H200")
    assert apart < mixed
    assert mixed == pytest.approx(_ttft(VLLM.model_copy(update=budget), "H200"))
