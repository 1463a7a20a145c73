"""The simulated SGLang starts, or refuses to, as SGLang 0.5.23 does, and shows its metrics as
SGLang's collectors define them.

The rules restated (sglang 0.5.23 wheel, paths under sglang/srt/):
- arg_groups/overrides.py:453-487: `--mamba-radix-cache-strategy auto` resolves to extra_buffer
  while the overlap scheduler is on (Qwen3.5 supports it with the Triton backend);
- arg_groups/attention_hook.py:417-423: `--enable-linear-replayssm` refuses extra_buffer;
- arg_groups/mamba_hook.py:156-163: an explicit no_buffer asserts `disable_overlap_schedule`;
- arg_groups/attention_hook.py:450-507: `--enable-linear-replayssm-spec` needs topk in {None, 1}
  and is exclusive with `--enable-linear-replayssm`;
- arg_groups/speculative_hook.py:1086-1094: speculation without `--max-running-requests` caps
  the server at 48; :1255-1266: topk 1 forces draft tokens = steps + 1; :1415-1421: adaptive
  steps must be a candidate (0, 1, 3, 5, 7);
- speculative/spec_info.py:65: an unknown algorithm is refused.
"""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from autotuner.core.model.registry import load_model
from autotuner.core.types import Setup
from autotuner.sim.engine import SimSetup
from autotuner.sim.sglang import SimulatedSglang
from autotuner.sim.sglang_startup import Started, StartupError, start
from tests.support.clock import Clock

QWEN = load_model("Qwen/Qwen3.5-122B-A10B")
NEMOTRON = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4")
BASE = ["--model-path", "Qwen/Qwen3.5-122B-A10B", "--enable-metrics"]
NEXTN = ["--speculative-algorithm", "NEXTN"]
SPEC = [*NEXTN, "--speculative-num-steps", "3", "--speculative-eagle-topk", "1"]
NO_BUFFER = ["--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule"]
REPLAY = ["--enable-linear-replayssm", "--linear-replayssm-cache-len", "16"]


def refusal(*tokens: str) -> str:
    with pytest.raises(StartupError) as caught:
        start([*BASE, *tokens], QWEN)
    return str(caught.value)


def test_speculation_resolves_draft_tokens_and_caps_the_server_at_48() -> None:
    started = start([*BASE, *SPEC, "--speculative-num-draft-tokens", "9"], QWEN)
    assert started.args.speculative_algorithm == "EAGLE"  # NEXTN is EAGLE
    assert started.args.speculative_num_draft_tokens == 4
    assert started.max_running == 48
    assert started.setup == Setup(spec_tokens=3)
    kept = start([*BASE, *SPEC, "--max-running-requests", "1024"], QWEN)
    assert kept.max_running == 1024


def test_replay_needs_no_buffer_and_no_buffer_needs_the_overlap_scheduler_off() -> None:
    assert "requires --mamba-radix-cache-strategy no_buffer" in refusal(*REPLAY)
    assert "'extra_buffer'" in refusal(*REPLAY)  # what `auto` resolved to
    half = ["--mamba-radix-cache-strategy", "no_buffer"]
    assert "no_buffer do not support overlap schedule" in refusal(*REPLAY, *half)
    started = start([*BASE, *REPLAY, *NO_BUFFER], QWEN)
    assert started.setup == Setup(replay_window=16)
    assert started.max_running == float("inf")


def test_replay_under_speculation_is_a_linear_chain_exclusive_with_replay() -> None:
    spec_replay = [*SPEC, "--enable-linear-replayssm-spec", "--max-running-requests", "512"]
    started = start([*BASE, *spec_replay], QWEN)
    assert started.setup == Setup(spec_tokens=3, replay_window=4)  # GDN: the draft maximum
    assert started.args.mamba_ssm_dtype == "float32"
    assert "mutually exclusive" in refusal(*spec_replay, *REPLAY, *NO_BUFFER)
    assert "linear draft chain" in refusal(*spec_replay, "--speculative-eagle-topk", "2")


def test_adaptive_speculation_runs_its_tiers_and_refuses_a_step_count_no_tier_has() -> None:
    started = start([*BASE, *SPEC[:2], "--speculative-adaptive"], QWEN)  # 3, the middle
    k = started.setup.spec_tokens_at([1, 8, 32, 64, 512])
    assert list(k) == [3, 3, 1, 0, 0]
    message = refusal(*SPEC[:2], "--speculative-num-steps", "4", "--speculative-adaptive")
    assert "not in the adaptive config candidate_steps [0, 1, 3, 5, 7]" in message


def test_bad_values_and_unknown_algorithms_are_refused() -> None:
    assert "invalid choice" in refusal("--mamba-radix-cache-strategy", "ring")
    assert "Unknown speculative algorithm name: MEDUSA" in refusal(
        "--speculative-algorithm", "MEDUSA"
    )
    eagle = ["--speculative-algorithm", "EAGLE"]
    assert "AssertionError" in refusal(*eagle, "--speculative-eagle-topk", "1")
    assert "TypeError" in refusal(*eagle, "--speculative-num-steps", "3")  # no topk


def test_mamba2_replay_flags_start_a_server_that_runs_without_replay() -> None:
    tokens = ["--model-path", NEMOTRON.name, *REPLAY, *NO_BUFFER]
    assert start(tokens, NEMOTRON).setup == Setup()


def simulated(started: Started, engines: int = 1) -> tuple[SimulatedSglang, Clock]:
    clock = Clock()
    sim = SimulatedSglang(
        started=lambda: started,
        model=QWEN,
        setup=SimSetup.of(started.setup, (0.8, 0.6, 0.4)),
        load=lambda t: 64.0,
        step_time=lambda batch, setup: 0.05,
        engines=engines,
        model_name=QWEN.name,
        clock=clock,
    )
    return sim, clock


def samples(sim: SimulatedSglang) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(sim.render().decode()):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return found


def test_counters_give_the_mean_accepted_length_of_the_truth() -> None:
    started = start([*BASE, *SPEC, "--max-running-requests", "1024"], QWEN)
    sim, clock = simulated(started)
    assert "sglang:spec_verify_calls_total" not in samples(sim)  # no sample before its first inc
    clock.t += 60
    before = samples(sim)
    clock.t += 600
    after = samples(sim)

    def delta(name: str) -> float:
        return after[name][0][1] - before[name][0][1]

    verify = delta("sglang:spec_verify_calls_total")
    accepted = (delta("sglang:generation_tokens_total") - delta("sglang:num_requests_total")) / (
        verify
    )
    assert accepted == pytest.approx(1 + 0.8 + 0.8 * 0.6 + 0.8 * 0.6 * 0.4)
    assert after["sglang:spec_num_steps"][0][1] == 3
    assert after["sglang:num_running_reqs"][0][1] == 64
    labels = after["sglang:num_running_reqs"][0][0]
    assert sorted(labels) == ["engine_type", "model_name", "moe_ep_rank", "pp_rank", "tp_rank"]
    streaming = after["sglang:generation_tokens_total"][0][0]
    assert streaming == {"model_name": QWEN.name, "engine_type": "unified", "is_streaming": "false"}
    assert "is_streaming" not in after["sglang:spec_verify_calls_total"][0][0]


def test_without_speculation_no_verify_sample_and_data_parallel_ranks_are_labelled() -> None:
    sim, clock = simulated(start([*BASE, *REPLAY, *NO_BUFFER], QWEN), engines=2)
    clock.t += 60
    found = samples(sim)
    assert "sglang:spec_verify_calls_total" not in found
    assert "sglang:spec_accept_length" not in found
    assert [labels["dp_rank"] for labels, _ in found["sglang:num_running_reqs"]] == ["0", "1"]
    assert len(found["sglang:generation_tokens_total"]) == 1  # one tokenizer for both ranks
    info = sim.server_info()
    assert info["enable_linear_replayssm"] is True
    assert info["mamba_radix_cache_strategy"] == "no_buffer"
    assert info["version"] == "0.5.23"
    assert len(info["internal_states"]) == 2
