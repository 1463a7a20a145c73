"""The demo compares only setups that the model and the engine build can run."""

from autotuner.core.model.registry import load_model
from autotuner.core.types import Setup
from autotuner.demo import statics_for
from autotuner.engines.vllm.capabilities import REPLAY_SPEC, UPSTREAM

HYBRID = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4")
DENSE = load_model("meta-llama/Llama-3.1-70B-Instruct-FP8")
# What any model that speculates up to K=3 compares: without speculation and each K.
SPECULATION = ["plain", "spec:1", "spec:2", "spec:3"]


def labels(setups: tuple[Setup, ...]) -> list[str]:
    return [s.label for s in setups]


def test_a_hybrid_model_gets_replay_statics() -> None:
    assert labels(statics_for(HYBRID, UPSTREAM, 3, drafter=True)) == [
        *SPECULATION,
        "replay:16",
        "replay:8",
    ]


def test_replay_with_speculation_is_a_static_where_the_build_runs_it() -> None:
    both = labels(statics_for(HYBRID, REPLAY_SPEC, 3, drafter=True))
    assert "replay+spec:3:16" in both
    assert "replay+spec:1:8" in both
    assert not any(
        label.startswith("replay+spec")
        for label in labels(statics_for(HYBRID, UPSTREAM, 3, drafter=True))
    )


def test_a_dense_model_gets_no_replay_statics() -> None:
    assert labels(statics_for(DENSE, REPLAY_SPEC, 3, drafter=True)) == SPECULATION


def test_no_drafter_no_speculation_and_the_engine_refuses_what_it_lacks() -> None:
    assert labels(statics_for(DENSE, UPSTREAM, 3, drafter=False)) == ["plain"]
    no_replay = UPSTREAM.model_copy(update={"replay": False})
    assert labels(statics_for(HYBRID, no_replay, 2, drafter=True)) == ["plain", "spec:1", "spec:2"]


def test_in_the_prefix_cache_world_the_best_setup_changes_with_the_load() -> None:
    """The world the README names for it: speculation with the cache wins at low batch, plain at
    the peak; replay, which the build runs without the cache, pays the prompts again."""
    from dataclasses import replace

    from autotuner.demo import DEMO_WORLDS, fitting_truth

    model = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4")
    truth = fitting_truth(model, "H200", 1, None, DEMO_WORLDS["prefix-cache"])
    truth = replace(truth, prefix_caching=lambda setup: not setup.replay_window)
    rates = (0.8, 0.7, 0.6)
    setups = [Setup(), Setup(spec_tokens=2), Setup.parse("replay+spec:3:16")]

    def best(batch: int) -> str:
        return max(setups, key=lambda s: truth.tokens_per_s(s, batch, rates)).label

    assert best(16) == "spec:2"
    assert best(512) == "plain"
