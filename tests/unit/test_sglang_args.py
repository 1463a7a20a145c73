"""SGLang's args, read and written: every setup the tuner renders passes SGLang 0.5.23's own
start-up checks (restated with file and line in tests/support/sglang_rules.py), the drafter is
the operator's, and going back restores the operator's args."""

from __future__ import annotations

import pytest

from autotuner.core.engine.builds import Companion
from autotuner.core.types import Setup
from autotuner.engines.sglang.args import parse, served_model_id
from autotuner.engines.sglang.capabilities import FOLLOW_BUILD
from autotuner.engines.sglang.dialect import SglangDialect
from autotuner.engines.sglang.setup import parse_setup, render
from autotuner.errors import ArgsError, EngineRuleError
from tests.support.sglang_command import NEXTN_K3
from tests.support.sglang_rules import broken

LAUNCH = ["python3", "-m", "sglang.launch_server"]
MODEL = ["--model-path", "Qwen/Qwen3.5-122B-A10B", "--tp-size", "8"]
BASES = {
    "plain": [*MODEL, "--max-running-requests", "512"],
    "nextn": [
        *MODEL,
        "--max-running-requests=512",
        *NEXTN_K3,
        "--speculative-num-draft-tokens",
        "4",
    ],
    "eagle-model": [
        *MODEL,
        "--max-running-requests",
        "256",
        "--speculative-algorithm=EAGLE",
        "--speculative-draft-model-path",
        "org/qwen3.5-eagle",
        "--speculative-use-rejection-sampling",
        "--mamba-radix-cache-strategy",
        "extra_buffer",
        "--enable-metrics",
    ],
}
SETUPS = [
    "plain",
    *(f"spec:{k}" for k in range(1, 8)),
    "replay:8",
    "replay:16",
    "replay:64",
    "replay+spec:1:16",
    "replay+spec:3:16",
    "replay+spec:5:32",
    *(f"spec:{k}@adaptive" for k in (1, 3, 5, 7)),
]
DRAFTER = {"args": ["--speculative-algorithm", "NEXTN"]}
GDN = FOLLOW_BUILD.build.row("gated_deltanet") if FOLLOW_BUILD.build else None


def _render(base: list[str], label: str) -> tuple[list[str], dict[str, list[str] | None] | None]:
    setup = Setup.parse(label)
    assert GDN is not None
    command, _, saved = SglangDialect().render(
        [*LAUNCH, *base],
        [],
        setup,
        saved_speculative_config=DRAFTER,
        allow_low_precision_replay=False,
        companions=GDN.companions(setup),
    )
    return command, saved


@pytest.mark.parametrize("base", sorted(BASES))
@pytest.mark.parametrize("label", SETUPS)
def test_every_rendered_setup_passes_sglangs_checks_and_reads_back(base: str, label: str) -> None:
    command, _ = _render(BASES[base], label)
    assert broken(command) == []
    assert parse_setup(command) == Setup.parse(label)
    changed = parse_setup(BASES[base]) != Setup.parse(label)
    assert ("--enable-metrics" in command) is (changed or "--enable-metrics" in BASES[base])
    assert command[: len(LAUNCH) + len(MODEL)] == [*LAUNCH, *MODEL]  # untouched args stay


def test_the_rules_catch_args_sglang_refuses() -> None:
    """The restated rules can fail: replay without no_buffer, both replay switches, no cap."""
    replay_auto = [*BASES["plain"], "--enable-linear-replayssm"]
    assert any("no_buffer" in rule for rule in broken(replay_auto))
    both = [*BASES["nextn"], "--enable-linear-replayssm", "--enable-linear-replayssm-spec"]
    assert any("mutually exclusive" in rule for rule in broken(both))
    uncapped = [*MODEL, "--speculative-algorithm", "NEXTN"]
    assert any("48" in rule for rule in broken(uncapped))
    assert broken([*BASES["plain"], "--speculative-adaptive=true"])
    on_flashinfer = [*replay_auto, "--linear-attn-backend", "flashinfer"]
    assert any("Triton, or Helion" in rule for rule in broken(on_flashinfer))


def test_speculation_back_on_uses_the_operators_drafter_never_an_invented_one() -> None:
    off, _ = _render(BASES["eagle-model"], "plain")
    assert not any(t.startswith("--speculative-") for t in off)
    saved = SglangDialect().speculative_config([*LAUNCH, *BASES["eagle-model"]], [])
    assert saved == {
        "args": [
            "--speculative-algorithm=EAGLE",
            "--speculative-draft-model-path",
            "org/qwen3.5-eagle",
            "--speculative-use-rejection-sampling",
        ]
    }
    on = render(off, Setup.parse("spec:2"), saved_speculative_config=saved)
    assert parse(on).speculative is not None
    assert parse(on).speculative.model == "org/qwen3.5-eagle"  # type: ignore[union-attr]
    with pytest.raises(ArgsError, match="never invents"):
        render(off, Setup.parse("spec:2"), saved_speculative_config=None)


def test_replay_and_back_restores_the_operators_companion_flags() -> None:
    base = [*BASES["eagle-model"]]
    replay, saved = _render(base, "replay:16")
    assert saved == {
        Companion.MAMBA_RADIX_NO_BUFFER.value: ["--mamba-radix-cache-strategy", "extra_buffer"],
        Companion.OVERLAP_SCHEDULE_OFF.value: None,
    }
    back, _, kept = SglangDialect().render(
        replay,
        [],
        parse_setup(base),
        saved_speculative_config=DRAFTER,
        allow_low_precision_replay=False,
        saved_companions=saved,
    )
    assert kept is None
    assert broken(back) == []
    assert back[back.index("--mamba-radix-cache-strategy") + 1] == "extra_buffer"
    assert "--disable-overlap-schedule" not in back


@pytest.mark.parametrize(
    ("extra", "label", "says"),
    [
        (["--page-size", "64"], "replay:16", "page-size"),
        (["--linear-attn-backend", "flashinfer"], "replay:16", "triton or helion"),
        (["--linear-attn-decode-backend", "helion"], "replay+spec:3:16", "triton or flashinfer"),
        (["--mamba-ssm-dtype", "bfloat16"], "replay:16", "low-precision"),
        (["--speculative-algorithm", "NGRAM"], "spec:3@adaptive", "static K"),
        ([], "spec:4@adaptive", "candidate steps"),
        ([], "spec:2@1-64:2", "schedule"),
    ],
)
def test_setups_sglang_would_refuse_or_ignore_are_refused_here(
    extra: list[str], label: str, says: str
) -> None:
    args = [*BASES["nextn"], *extra]
    with pytest.raises(ArgsError, match=says):
        render(args, Setup.parse(label), saved_speculative_config=DRAFTER)


@pytest.mark.parametrize(
    ("extra", "label"),
    [
        (["--page-size", "64"], "replay:16"),
        (["--linear-attn-backend", "flashinfer"], "replay:16"),
        (["--speculative-algorithm", "NGRAM"], "spec:3@adaptive"),
        ([], "spec:4@adaptive"),
    ],
)
def test_a_start_up_rule_is_an_engine_rule_that_force_may_override(
    extra: list[str], label: str
) -> None:
    """SGLang's own start-up rules are refused as the build's are (one error kind, one exit
    code for `apply`), and written when forced; what cannot be written at all is not."""
    args = [*BASES["nextn"], *extra]
    setup = Setup.parse(label)
    with pytest.raises(EngineRuleError):
        render(args, setup, saved_speculative_config=DRAFTER)
    forced = render(args, setup, saved_speculative_config=DRAFTER, enforce_rules=False)
    assert parse_setup(forced) == setup
    with pytest.raises(ArgsError) as schedule:
        render(args, Setup.parse("spec:2@1-64:2"), enforce_rules=False)
    assert not isinstance(schedule.value, EngineRuleError)


def test_speculation_without_the_running_cap_is_refused() -> None:
    with pytest.raises(ArgsError, match="48 running requests"):
        render(MODEL, Setup.parse("spec:3"), saved_speculative_config=DRAFTER)


def test_the_command_line_is_read_into_engine_args() -> None:
    args = parse([*BASES["nextn"], "--context-length", "32768", "--mamba-ssm-dtype", "float32"])
    assert (args.tensor_parallel_size, args.max_num_seqs, args.max_model_len) == (8, 512, 32768)
    assert args.speculative is not None
    assert (args.speculative.method, args.speculative.num_speculative_tokens) == ("mtp", 3)
    assert args.mamba_ssm_cache_dtype == "float32"
    assert served_model_id(["--model", "m/x"]) == "m/x"
    with pytest.raises(ArgsError, match="--tp-size"):
        parse(["--tp-size", "two"])


def test_a_low_precision_state_is_refused_by_a_rule_its_own_option_lifts() -> None:
    """Replay on a bf16 SSM state is the tuner's own rule: refused like the engine's (one exit
    code for apply), lifted by --allow-low-precision-replay, not by --force."""
    args = [*BASES["nextn"], "--mamba-ssm-dtype", "bfloat16"]
    replay = Setup.parse("replay:16")
    with pytest.raises(EngineRuleError) as refused:
        render(args, replay, enforce_rules=False)
    assert refused.value.override == "--allow-low-precision-replay"
    assert parse_setup(render(args, replay, allow_low_precision_replay=True)) == replay
