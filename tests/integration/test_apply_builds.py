"""`autotuner apply` on a GitOps manifest of Nemotron-3-Super on vllm/vllm-openai:v0.33.0: each
setup is written so that vLLM 0.33 starts with it (its companion flags), what 0.33 refuses is
refused naming the rule (nothing changed) unless --force, and leaving a setup puts the
operator's container back byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotuner.actuators.manifest import ManifestActuator
from autotuner.cli.main import app
from autotuner.engines.vllm.setup import vllm_tokens
from tests.unit.test_build_rules import vllm_starts

runner = CliRunner()
NEMOTRON = "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4"


def manifest(model: str) -> str:
    return f"""\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: vllm  # the operator's comment
spec:
  template:
    spec:
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.33.0
          args:
            - --model
            - {model}
            - --speculative-config
            - '{{"method":"mtp","num_speculative_tokens":3}}'
            - --enable-prefix-caching
            - --max-num-seqs
            - "1024"
"""


def apply(path: Path, setup: str, *extra: str) -> tuple[int, str]:
    result = runner.invoke(app, ["apply", "--setup", setup, "--target", f"file://{path}", *extra])
    return result.exit_code, result.output


def container_args(path: Path) -> list[str]:
    live = ManifestActuator(path).read()
    return vllm_tokens(live.command, live.args)


@pytest.mark.parametrize("setup", ["replay+spec:3:16", "replay+spec:2:8", "replay:16"])
def test_what_0_33_starts_with_is_written_whole(tmp_path: Path, setup: str) -> None:
    path = tmp_path / "vllm.yaml"
    path.write_text(manifest(NEMOTRON))
    assert not vllm_starts(
        [*container_args(path), "--use-replayssm"], "NemotronHForCausalLM", (0, 33)
    )
    code, output = apply(path, setup)
    assert code == 0, output
    args = container_args(path)
    assert vllm_starts(args, "NemotronHForCausalLM", (0, 33)), args
    assert "--no-enable-prefix-caching" in args
    assert "--enable-prefix-caching" not in args  # edited in place, not contradicted


@pytest.mark.parametrize(
    ("model", "setup", "rule"),
    [
        (NEMOTRON, "replay+spec:4:4", "1 + num_speculative_tokens"),
        (NEMOTRON, "replay+spec:3:32", "<= 16"),
        ("Qwen/Qwen3.5-122B-A10B", "replay:16", "is not supported for architecture"),
    ],
)
def test_what_0_33_refuses_is_refused_naming_the_rule(
    tmp_path: Path, model: str, setup: str, rule: str
) -> None:
    path = tmp_path / "vllm.yaml"
    path.write_text(manifest(model))
    before = path.read_bytes()
    code, output = apply(path, setup)
    assert code == 2  # refused as bad input
    assert rule in output
    assert "vllm/config/vllm.py:" in output
    assert path.read_bytes() == before  # nothing changed
    forced, output = apply(path, setup, "--force")
    assert forced == 0, output
    assert path.read_bytes() != before


def test_a_round_trip_leaves_the_operators_container_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "vllm.yaml"
    path.write_text(manifest(NEMOTRON))
    code, _ = apply(path, "spec:2")
    assert code == 0
    spec_text = path.read_text()
    code, output = apply(path, "replay+spec:2:8")
    assert code == 0, output
    assert "--mamba-backend" in path.read_text()
    code, output = apply(path, "spec:2")
    assert code == 0, output
    container = spec_text.split("containers:")[1].split("\n  ")[0]
    assert path.read_text().split("containers:")[1].split("\n  ")[0] == container
    assert "operator-args" not in path.read_text()  # nothing kept once put back


def test_status_says_which_build_rows_are_in_force(tmp_path: Path) -> None:
    import json

    path = tmp_path / "vllm.yaml"
    path.write_text(manifest(NEMOTRON))
    result = runner.invoke(app, ["status", "--target", f"file://{path}", "--json"])
    assert result.exit_code == 0, result.output
    build = json.loads(result.stdout)["build"]
    assert build["origin"] == "image tag"
    assert build["version"] == "0.33.0"
    assert "vllm >=0.33.0,<0.34 mamba2" in build["rows"]
    declared = runner.invoke(
        app, ["status", "--target", f"file://{path}", "--json", "--set", "engine.build=0.32.0"]
    )
    assert json.loads(declared.stdout)["build"]["origin"] == "settings"


def test_a_schedule_data_parallel_would_drop_is_refused_naming_the_rule(tmp_path: Path) -> None:
    path = tmp_path / "vllm.yaml"
    text = manifest(NEMOTRON).replace(
        '            - "1024"\n',
        '            - "1024"\n            - --data-parallel-size\n            - "2"\n',
    )
    path.write_text(text)
    code, output = apply(path, "spec:3", "--schedule", "1-64:3,65-8191:1")
    assert code == 2, output
    assert "it is 2 > 1" in " ".join(output.split())
    assert path.read_text() == text
    code, output = apply(path, "spec:3", "--schedule", "1-64:3,65-8191:1", "--force")
    assert code == 0, output
    assert "num_speculative_tokens_per_batch_size" in path.read_text()


def test_sglang_names_its_adaptive_tiers_for_a_schedule(tmp_path: Path) -> None:
    """SGLang writes no per-batch schedule: its own dialect says so (the build rules that judge
    vLLM's schedules are not asked), on the manifest LWS publishes."""
    published = Path(__file__).parents[1] / "corpus" / "published" / "lws" / "sglang-lws.yaml"
    path = tmp_path / "sglang-lws.yaml"
    path.write_bytes(published.read_bytes())
    code, output = apply(path, "spec:3", "--schedule", "1-64:3,65-8191:1")
    assert code != 0
    assert "its tiers are --speculative-adaptive" in " ".join(output.split())
    assert path.read_bytes() == published.read_bytes()


def test_a_schedule_is_refused_where_the_shell_computes_data_parallel(tmp_path: Path) -> None:
    """llm-d's published wide-EP decode starts vLLM with `--data-parallel-size $((...))`: the
    size is unknown here and may well be above 1, so a schedule is refused naming the rule."""
    published = Path(__file__).parents[1] / "corpus" / "published" / "llm-d" / "wide-ep-decode.yaml"
    path = tmp_path / "wide-ep-decode.yaml"
    path.write_bytes(published.read_bytes())
    target = f"file://{path}?container=vllm"
    result = runner.invoke(
        app, ["apply", "--setup", "spec:3", "--schedule", "1-64:3,65-8191:1", "--target", target]
    )
    assert result.exit_code == 2, result.output
    assert "computed by the shell" in " ".join(result.output.split())
    assert path.read_bytes() == published.read_bytes()


def test_a_schedule_the_v1_runner_would_drop_is_refused_naming_the_rule(tmp_path: Path) -> None:
    """Suffix decoding runs on Model Runner V1 (V2 lacks it), which drops a schedule for any
    method but the ones whose proposers truncate drafts: refused, nothing changed."""
    path = tmp_path / "vllm.yaml"
    text = manifest(NEMOTRON).replace('"method":"mtp"', '"method":"suffix"')
    assert '"suffix"' in text
    path.write_text(text)
    code, output = apply(path, "spec:3", "--schedule", "1-64:3,65-8191:1")
    assert code == 2, output
    said = " ".join(output.split())
    assert "Model Runner V1 for the 'suffix' method" in said
    assert path.read_text() == text
