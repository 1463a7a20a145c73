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


def test_sglang_prices_a_setup_as_it_runs_it() -> None:
    """SGLang's --speculative-adaptive runs its batch tiers (K = 0 from batch 64) and Gated
    DeltaNet verifies replay under speculation through a K+1 window: the predictor prices that,
    not vLLM's adaptive verification or the written window; vLLM runs what is written."""
    from autotuner.core.engine.workload import Workload
    from autotuner.core.predict.acceptance import from_conditional
    from autotuner.core.predict.attribution import Attribution
    from autotuner.core.predict.hardware import datasheet
    from autotuner.core.predict.predictor import Predictor
    from autotuner.engines.sglang.capabilities import FOLLOW_BUILD as SGLANG
    from autotuner.engines.vllm.capabilities import FOLLOW_BUILD as VLLM

    qwen = load_model("Qwen/Qwen3.5-122B-A10B")
    written = Setup.parse("replay+spec:3:16@adaptive")
    ran = SGLANG.serving(qwen).as_run(written)
    assert ran.replay_window == 4
    assert [int(k) for k in ran.spec_tokens_at([1, 8, 32, 64, 512])] == [3, 3, 1, 0, 0]
    assert VLLM.serving(qwen).as_run(written) == written
    mamba = SGLANG.serving(load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4"))
    assert mamba.as_run(Setup.parse("replay+spec:3:16")).replay_window == 16

    # Four GPUs, so batch 512 runs (a tier is the running batch's, not the demand's).
    gpu, accept = datasheet("B300"), from_conditional([0.8, 0.7, 0.6])
    four = Workload(tensor_parallel=4)
    sglang = Predictor(
        qwen, gpu, four, Attribution(), 0.0, 3600.0, as_run=SGLANG.serving(qwen).as_run
    )
    curve = sglang.model_curve(Setup.parse("spec:3@adaptive"), [4, 512], accept)
    assert curve.setup == Setup.parse("spec:3@adaptive")
    assert [int(k) for k in curve.spec_tokens] == [3, 0]
    vllm = Predictor(qwen, gpu, four, Attribution(), 0.0, 3600.0)
    assert int(vllm.model_curve(Setup.parse("spec:3@adaptive"), [512], accept).spec_tokens[0]) > 0


def test_replay_is_refused_beside_a_kv_connector_on_vllm() -> None:
    """vLLM refuses --use-replayssm with a KV connector (P/D disaggregation, KV offload): read
    from the live args, replay is not proposed there; SGLang's GDN replay is not refused."""
    from autotuner.core.engine.resolution import resolve
    from autotuner.engines.sglang.capabilities import FOLLOW_BUILD as SGLANG
    from autotuner.engines.vllm.args import parse
    from autotuner.engines.vllm.capabilities import FOLLOW_BUILD as VLLM

    nemotron = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4")
    connector = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
    args = parse(["--model", nemotron.name, "--kv-transfer-config", connector])
    resolved = resolve(nemotron, args)
    assert resolved.kv_connector
    assert not resolve(nemotron, parse(["--model", nemotron.name])).kv_connector
    engine = VLLM.serving(nemotron).connected(resolved.kv_connector)
    reason = engine.refusal(Setup.parse("replay:16"))
    assert reason is not None
    assert "KV connectors" in reason
    assert engine.accepts(Setup.parse("spec:3"))
    qwen = SGLANG.serving(load_model("Qwen/Qwen3.5-122B-A10B")).connected(True)
    assert qwen.accepts(Setup.parse("replay:16"))


def test_replay_is_refused_for_a_model_with_no_recurrent_layers() -> None:
    """An attention-only model has no state to replay: every engine refuses it at start ("not
    supported for architecture"), so the rule holds under the build's row and any preset."""
    from autotuner.engines.sglang.capabilities import FOLLOW_BUILD as SGLANG
    from autotuner.engines.vllm.capabilities import FOLLOW_BUILD as VLLM

    for engine in (VLLM, SGLANG, UPSTREAM, GDN_REPLAY):
        reason = engine.serving(LLAMA).refusal(Setup.parse("replay:16"))
        assert reason is not None
        assert "architecture" in reason
        assert LLAMA.architecture in reason
        assert engine.serving(LLAMA).accepts(Setup.parse("spec:3"))
    assert UPSTREAM.refusal(Setup.parse("replay:16")) is None  # no model known: not this rule


def test_the_loop_and_apply_judge_one_deployment_alike() -> None:
    """`deployed` composes the build, the model and the KV connector as the loop's engine_now
    and apply's check both read them: the args alone (no model) already refuse replay beside a
    KV connector, and the model adds its own rules."""
    from autotuner.engines.vllm.capabilities import FOLLOW_BUILD as VLLM

    replay = Setup.parse("replay:16")
    alone = VLLM.deployed(None, None, kv_connector=True).refusal(replay)
    assert alone is not None
    assert "KV connectors" in alone
    assert VLLM.deployed(None, None, kv_connector=False).refusal(replay) is None
    with_model = VLLM.deployed(None, NEMOTRON_MAMBA2, kv_connector=False)
    assert with_model == VLLM.serving(NEMOTRON_MAMBA2).connected(False)
    assert VLLM.deployed(None, LLAMA, kv_connector=False).refusal(replay) is not None


def test_a_schedule_is_refused_where_data_parallel_drops_it() -> None:
    """vLLM 0.33 drops num_speculative_tokens_per_batch_size with a warning when data parallel
    size > 1 (vllm/config/vllm.py:1110-1127): read from the live args, the schedule is never
    proposed there, and the same K without a schedule still is."""
    from autotuner.core.engine.resolution import resolve
    from autotuner.engines.vllm.args import parse
    from autotuner.engines.vllm.capabilities import FOLLOW_BUILD as VLLM

    nemotron = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4")
    args = parse(["--model", nemotron.name, "--data-parallel-size", "2"])
    assert args.data_parallel_size == 2
    assert parse(["--model", nemotron.name, "-dp", "4"]).data_parallel_size == 4
    resolved = resolve(nemotron, args)
    assert resolved.data_parallel == 2
    schedule = Setup.parse("spec:3@1-64:3,65-8191:1")
    engine = VLLM.deployed(None, nemotron, kv_connector=False, data_parallel=2)
    reason = engine.refusal(schedule)
    assert reason is not None
    assert "it is 2 > 1" in reason
    assert "vllm/config/vllm.py:1110-1127" in reason
    assert engine.accepts(Setup.parse("spec:3"))
    assert VLLM.deployed(None, nemotron, kv_connector=False).accepts(schedule)
    assert resolve(nemotron, parse(["--model", nemotron.name])).data_parallel == 1
    # A size the shell computes may well be above 1: not proposed either.
    computed = parse(["--model", nemotron.name, "--data-parallel-size", "$((GROUP * LOCAL))"])
    assert computed.data_parallel is None
    unknown = VLLM.deployed(None, nemotron, kv_connector=False, data_parallel=None)
    reason = unknown.refusal(schedule)
    assert reason is not None
    assert "computed by the shell" in reason
    assert unknown.accepts(Setup.parse("spec:3"))
