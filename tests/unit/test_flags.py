import json
import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotuner.core.types import Setup
from autotuner.engines.commandline import shell_tokens
from autotuner.engines.vllm.flags import FlagNames
from autotuner.engines.vllm.setup import (
    parse_setup,
    parse_shell,
    render,
    render_shell,
    speculative_config,
)
from autotuner.errors import ArgsError

MTP = '{"method":"mtp","num_speculative_tokens":3}'
BASE = [
    "--model",
    "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4",
    "--tensor-parallel-size",
    "1",
    "--speculative-config",
    MTP,
    "--max-num-seqs",
    "256",
]


def test_parse_both_forms() -> None:
    assert parse_setup(BASE) == Setup(spec_tokens=3)
    joined = ["--speculative-config=" + MTP, "--use-replayssm", "--replayssm-buffer-len=32"]
    assert parse_setup(joined) == Setup(spec_tokens=3, replay_window=32)
    assert parse_setup(["--use-replayssm", "--replayssm-buffer-len", "8"]) == Setup(replay_window=8)
    assert parse_setup(["--use-replayssm"]) == Setup(replay_window=16)
    assert parse_setup(["--use-replayssm=false"]) == Setup()


def test_unreadable_speculative_config_is_refused() -> None:
    with pytest.raises(ArgsError, match="not a JSON object"):
        parse_setup(["--speculative-config", "{method: mtp"])
    with pytest.raises(ArgsError, match="has no value"):
        parse_setup(["--speculative-config"])


def test_single_quoted_json_is_read() -> None:
    args = ["--speculative-config", "{'method': 'ngram', 'num_speculative_tokens': 4}"]
    assert parse_setup(args) == Setup(spec_tokens=4)


def test_schedule_round_trip() -> None:
    setup = Setup.parse("spec:3@1-64:3,65-128:1,129-512:0")
    args = render(BASE, setup)
    assert parse_setup(args) == setup
    config = json.loads(args[args.index("--speculative-config") + 1])
    assert config["num_speculative_tokens_per_batch_size"] == [
        [1, 64, 3],
        [65, 128, 1],
        [129, 512, 0],
    ]
    assert config["method"] == "mtp"


def test_turning_speculation_off_removes_the_flag_and_on_restores_the_drafter() -> None:
    saved = speculative_config(BASE)
    off = render(BASE, Setup(replay_window=16))
    assert "--speculative-config" not in off
    assert off[:4] == BASE[:4]
    assert off[-3:] == ["--use-replayssm", "--replayssm-buffer-len", "16"]
    on = render(off, Setup(spec_tokens=2), saved_speculative_config=saved)
    assert parse_setup(on) == Setup(spec_tokens=2)
    config = json.loads(on[on.index("--speculative-config") + 1])
    assert config["method"] == "mtp"
    assert "--use-replayssm" not in on


def test_never_invents_a_drafter() -> None:
    with pytest.raises(ArgsError, match="never invents"):
        render(["--model", "x"], Setup(spec_tokens=3))


def test_low_precision_state_blocks_replay() -> None:
    args = [*BASE, "--mamba-ssm-cache-dtype", "bfloat16"]
    with pytest.raises(ArgsError, match="drifts"):
        render(args, Setup(replay_window=16))
    assert parse_setup(
        render(args, Setup(replay_window=16), allow_low_precision_replay=True)
    ) == Setup(replay_window=16)


def test_flag_names_are_data() -> None:
    names = FlagNames(use_replayssm="--enable-replay", replayssm_buffer_len="--replay-window")
    args = render(["--model", "x"], Setup(replay_window=8), names=names)
    assert args == ["--model", "x", "--enable-replay", "--replay-window", "8"]
    assert parse_setup(args, names) == Setup(replay_window=8)


def test_unchanged_setup_returns_identical_args() -> None:
    args = ["--speculative-config", "{'method': 'mtp', 'num_speculative_tokens': 3}"]
    assert render(args, Setup(spec_tokens=3)) == args


OTHER = st.lists(
    st.sampled_from(
        [
            "--max-num-seqs",
            "256",
            "--port",
            "8000",
            "--enable-prefix-caching",
            "--dtype=bfloat16",
            "--kv-cache-dtype",
            "fp8",
            "--served-model-name",
            "m",
        ]
    ),
    max_size=8,
)
SETUPS = st.builds(
    Setup,
    spec_tokens=st.integers(0, 6),
    replay_window=st.sampled_from([0, 8, 16, 32]),
).filter(lambda s: not (s.spec_tokens and s.replay_window))


@settings(max_examples=200)
@given(OTHER, SETUPS, SETUPS, st.booleans())
def test_round_trip_keeps_other_args_byte_identical(
    other: list[str], first: Setup, second: Setup, joined: bool
) -> None:
    spec = ["--speculative-config=" + MTP] if joined else ["--speculative-config", MTP]
    args = ["--model", "m", *spec, *other]
    saved = speculative_config(args)
    once = render(args, first, saved_speculative_config=saved)
    twice = render(once, second, saved_speculative_config=saved)
    assert parse_setup(once) == first
    assert parse_setup(twice) == second
    managed = {"--speculative-config", "--use-replayssm", "--replayssm-buffer-len"}

    def unmanaged(values: list[str]) -> list[str]:
        kept, skip = [], False
        for value in values:
            if skip:
                skip = False
                continue
            name = value.split("=", 1)[0]
            if name in managed:
                skip = "=" not in value and name != "--use-replayssm"
                continue
            kept.append(value)
        return kept

    assert unmanaged(twice) == unmanaged(args)


def test_shell_string_is_edited_in_place() -> None:
    line = (
        "vllm serve  nvidia/model --port 8000 --speculative-config "
        '\'{"method": "mtp", "num_speculative_tokens": 3}\'   --max-num-seqs 64'
    )
    assert parse_shell(line) == Setup(spec_tokens=3)
    edited = render_shell(line, Setup(replay_window=16))
    assert edited.startswith("vllm serve  nvidia/model --port 8000")
    assert "   --max-num-seqs 64" in edited
    assert parse_shell(edited) == Setup(replay_window=16)
    back = render_shell(
        edited,
        Setup(spec_tokens=2),
        saved_speculative_config={"method": "mtp", "num_speculative_tokens": 3},
    )
    assert parse_shell(back) == Setup(spec_tokens=2)
    assert shlex.split(back)[:5] == ["vllm", "serve", "nvidia/model", "--port", "8000"]


@pytest.mark.parametrize(
    "line",
    [
        "vllm serve m && echo done",
        "vllm serve m | tee log",
        "vllm serve $MODEL",
        "vllm serve m > out",
        "vllm serve 'unterminated",
        'vllm serve "$(cat f)"',
    ],
)
def test_shell_syntax_is_refused(line: str) -> None:
    with pytest.raises(ArgsError):
        shell_tokens(line)
