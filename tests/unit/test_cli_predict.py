"""The `predict` command: its JSON and table, its one-line refusals, and what the engine build
lets win (every command's help: tests/unit/test_cli_help.py)."""

import pytest

from autotuner.core.types import Setup, SetupKind
from tests.support.cli import printed, printed_json, refusal


def test_predict_json_has_the_promised_fields() -> None:
    report = printed_json(
        "predict", "--gpu", "H200", "--batch", "1,64,256", "--spec-tokens", "1..3", "--json"
    )
    first = report["predictions"][0]
    assert {"setup", "batch", "tokens_per_s", "step_time_s", "feasible"} <= set(first)
    assert {"spec_tokens", "replay_window"} <= set(first["setup"])
    labels = {p["setup"]["label"] for p in report["predictions"]}
    assert {"plain", "spec:3", "replay:16", "replay+spec:3:16"} <= labels
    assert len(report["predictions"]) == len(labels) * 3
    assert [r["drafts"] for r in report["quick_rule"]] == [1, 2, 3]
    assert isinstance(report["crossovers"], list)
    assert report["model"]["ssm_state_mib_per_request"] == 160.0


def test_predict_table_names_the_winner() -> None:
    text = printed(
        "predict",
        "--model",
        "Qwen/Qwen3.5-122B-A10B-FP8",
        "--gpu",
        "B300",
        "--acceptance-per-position",
        "0.8,0.7,0.6",
        env={"COLUMNS": "160"},
    )
    assert "winner" in text
    assert "Quick rule" in text


@pytest.mark.parametrize(
    "args",
    [
        ["--batch", "0"],
        ["--batch", "a,b"],
        ["--model", "nope/nothing"],
        ["--gpu", "TPU-v9"],
        ["--acceptance", "0.8", "--acceptance-per-position", "0.8"],
        ["--acceptance-per-position", "0.9", "--spec-tokens", "1..3"],
        ["--acceptance", "1.5"],
        ["--profile", "/no/such/file.json"],
        ["--tp", "0"],
    ],
)
def test_bad_arguments_exit_2_with_one_line(args: list[str]) -> None:
    lines = [line for line in refusal("predict", *args).splitlines() if line.strip()]
    assert len(lines) == 1
    assert lines[0].startswith("autotuner: error:")


def test_winners_are_only_setups_the_engine_accepts() -> None:
    args = ["predict", "--batch", "8,256", "--spec-tokens", "1..3", "--json"]
    upstream = printed_json(*args, "--engine", "upstream")
    both = printed_json(*args, "--engine", "replay-spec")
    assert all("+" not in row["setup"] for row in upstream["best"])
    assert any("+" in row["setup"] for row in both["best"])
    refused = [p for p in upstream["predictions"] if p["refused_by_engine"]]
    assert refused
    assert all(p["setup"]["name"] == "replay+spec" for p in refused)
    refusal("predict", "--engine", "tgi")


def test_weights_override_is_used_and_said() -> None:
    model = "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4"
    before = printed_json("predict", "--model", model, "--batch", "1", "--json")
    after = printed_json("predict", "--model", model, "--batch", "1", "--json", "--weights", "bf16")
    assert after["model"]["weight_source"] == "override"
    assert after["model"]["weight_gib"] > 3 * before["model"]["weight_gib"]
    assert any("given as an override" in note for note in after["notes"])
    refusal("predict", "--model", model, "--weights", "fp7")


def test_vllm_0_33_ranks_replay_spec_at_large_batch_with_its_companion_flags() -> None:
    """The default model (Nemotron-3-Super NVFP4) on one H200 and vLLM 0.33's row: replay+spec
    wins at large batch, within L <= 16, and is printed with the flags 0.33 needs for it."""
    args = ["predict", "--gpu", "H200", "--batch", "8,256,512", "--engine-version", "0.33"]
    report = printed_json(*args, "--json")
    large = [row for row in report["best"] if row["batch"] >= 256]
    assert all(Setup.parse(row["setup"]).kind is SetupKind.REPLAY_SPEC for row in large)
    assert all(Setup.parse(row["setup"]).replay_window <= 16 for row in report["best"])
    assert report["build"]["row"] == "vllm >=0.33.0,<0.34 mamba2"
    winner = large[0]["setup"]
    assert "--mamba-backend flashinfer" in report["flags"][winner]
    assert "--no-enable-prefix-caching" in report["flags"][winner]
    text = printed(*args, env={"COLUMNS": "300"})
    assert "--no-enable-prefix-caching" in text
    assert "vLLM 0.33 from settings (--engine-version: 0.33)" in text


def test_qwen3_5_on_vllm_0_33_gets_no_replay_and_says_why() -> None:
    args = ["predict", "--model", "Qwen/Qwen3.5-122B-A10B", "--gpu", "H200", "--tp", "4"]
    text = printed(*args, "--engine-version", "0.33", env={"COLUMNS": "300"})
    assert "is not supported for architecture" in text
    assert "vllm/config/vllm.py:3475-3479" in text
    report = printed_json(*args, "--engine-version", "0.33", "--json")
    assert all(Setup.parse(row["setup"]).replay_window == 0 for row in report["best"])
    forked = printed_json(*args, "--engine", "gdn-replay", "--json")
    assert any(Setup.parse(row["setup"]).replay_window for row in forked["best"])


def test_sglang_adaptive_is_predicted_as_its_batch_tiers() -> None:
    """On SGLang, --speculative-adaptive drafts nothing from batch 64: `predict` prices it so
    (K = 0 there), where vLLM's adaptive verification keeps verifying drafts. Four GPUs, so
    512 requests run (the tier is the running batch's)."""
    args = ["predict", "--model", "Qwen/Qwen3.5-122B-A10B", "--gpu", "B300", "--batch", "4,512"]
    args += ["--tp", "4"]
    report = printed_json(*args, "--engine-kind", "sglang", "--json")
    adaptive = {
        row["batch"]: row["spec_tokens"]
        for row in report["predictions"]
        if row["setup"]["label"] == "spec:3@adaptive"
    }
    assert adaptive == {4: 3, 512: 0}
    assert all(
        not Setup.parse(row["setup"]).adaptive for row in report["best"] if row["batch"] == 512
    )
