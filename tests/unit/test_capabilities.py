import re

import pytest

from autotuner.core.engine.capabilities import EngineCapabilities, needed
from autotuner.core.model.registry import load_model
from autotuner.core.observe.observation import WindowTotals, live_setup
from autotuner.core.types import LiveSetup, Setup
from autotuner.engines.vllm.capabilities import GDN_REPLAY, REPLAY_SPEC, UPSTREAM
from tests.support.fixtures import FIXTURES


def test_upstream_runs_replay_or_speculation_not_both() -> None:
    assert UPSTREAM.accepts(Setup.parse("spec:3"))
    assert UPSTREAM.accepts(Setup.parse("replay:16"))
    assert UPSTREAM.accepts(Setup.parse("spec:3@1-64:3,65-512:0"))
    reason = UPSTREAM.refusal(Setup.parse("replay+spec:3:16"))
    assert reason is not None
    assert "does not support speculative decoding" in reason
    assert REPLAY_SPEC.accepts(Setup.parse("replay+spec:3:16"))


def test_limits_of_an_older_build() -> None:
    old = EngineCapabilities(name="v0.10", replay=False, spec_schedule=False, max_spec_tokens=4)
    assert not old.accepts(Setup.parse("replay:16"))
    assert not old.accepts(Setup.parse("spec:3@1-64:3"))
    assert not old.accepts(Setup.parse("spec:5"))
    assert old.accepts(Setup.parse("spec:4"))
    assert old.accepts(Setup())


@pytest.mark.parametrize(
    ("target", "previous", "capability"),
    [
        ("spec:3@1-64:3,65-512:0", "spec:3", "spec_schedule"),
        ("replay+spec:2:16", "replay:16", "replay_with_speculation"),
        ("replay:16", "spec:3", "replay"),
        ("spec:2", "plain", "speculation"),
        ("spec:1", "spec:3", None),
        ("plain", "replay:16", None),
    ],
)
def test_a_failed_change_names_the_capability_it_needed(
    target: str, previous: str, capability: str | None
) -> None:
    assert needed(Setup.parse(target), Setup.parse(previous)) == capability


def test_refused_capabilities_are_turned_off_and_unknown_names_ignored() -> None:
    engine = UPSTREAM.without(["spec_schedule", "no_such_thing"])
    assert not engine.spec_schedule
    assert engine.replay
    assert not engine.accepts(Setup.parse("spec:3@1-64:3,65-512:0"))
    assert engine.accepts(Setup.parse("spec:3"))


QWEN_GDN = load_model("Qwen/Qwen3.5-122B-A10B-FP8")
NEMOTRON_MAMBA2 = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4")
LLAMA = load_model("meta-llama/Llama-3.1-8B-Instruct")


def test_replay_means_replay_only_for_the_families_the_build_has_kernels_for() -> None:
    replay = Setup.parse("replay:16")
    reason = UPSTREAM.serving(QWEN_GDN).refusal(replay)
    assert reason is not None
    assert "not gated_deltanet" in reason
    assert UPSTREAM.serving(NEMOTRON_MAMBA2).accepts(replay)
    assert GDN_REPLAY.serving(QWEN_GDN).accepts(replay)
    assert not GDN_REPLAY.serving(QWEN_GDN).accepts(Setup.parse("replay+spec:3:16"))
    assert REPLAY_SPEC.serving(QWEN_GDN).accepts(Setup.parse("replay+spec:3:16"))
    assert UPSTREAM.serving(LLAMA).served_family is None


def test_a_running_replay_shows_its_build_has_the_kernels() -> None:
    engine = UPSTREAM.serving(QWEN_GDN).proven_by(Setup.parse("replay:16"))
    assert engine.accepts(Setup.parse("replay:8"))
    assert "gated_deltanet" in engine.replay_families


def _live(cache_config: dict[str, str]) -> LiveSetup:
    totals = WindowTotals(
        start=0.0, end=60.0, last_sample_at=60.0, series=1, cache_config=cache_config
    )
    return live_setup(totals)


def test_a_cache_config_without_use_replayssm_is_a_build_before_replay() -> None:
    older = UPSTREAM.shown_by(_live({"mamba_cache_mode": "none", "block_size": "16"}))
    assert not older.replay
    assert not older.accepts(Setup.parse("replay:16"))
    assert UPSTREAM.shown_by(_live({"use_replayssm": "False"})).replay
    assert UPSTREAM.shown_by(_live({})).replay  # no cache_config_info at all: nothing said
    assert UPSTREAM.shown_by(None) == UPSTREAM


def test_the_real_capture_shows_a_build_with_replay() -> None:
    labels = {}
    for line in (FIXTURES / "vllm_cpu_spec_ngram.metrics.txt").read_text().splitlines():
        if line.startswith("vllm:cache_config_info{"):
            inside = line[line.index("{") + 1 : line.rindex("}")]
            labels = dict(re.findall(r'(\w+)="([^"]*)"', inside))
    assert labels, "the capture has a vllm:cache_config_info line"
    assert UPSTREAM.shown_by(_live(labels)).replay


def test_unknown_replay_families_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown SSM families"):
        EngineCapabilities(name="x", replay_families=("mamba3",))
