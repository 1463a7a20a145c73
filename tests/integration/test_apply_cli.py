import json
from pathlib import Path

from typer.testing import CliRunner

from autotuner.cli import app
from tests.support.fake_apiserver import deployment, fake_apiserver
from tests.unit.test_manifest_exec import MANIFEST

runner = CliRunner()
MTP = '{"method":"mtp","num_speculative_tokens":3}'


def test_apply_and_status_against_kubernetes() -> None:
    with fake_apiserver() as server:
        server.put("Deployment", deployment(args=["--model", "m", "--speculative-config", MTP]))
        target = ["--target", "k8s://llm/deployment/vllm/vllm", "--kube-server", server.url]
        dry = runner.invoke(
            app,
            ["apply", "--setup", "spec:3", "--schedule", "1-64:3,65-512:0", "--dry-run", *target],
        )
        assert dry.exit_code == 0, dry.output
        assert "would change spec:3 -> spec:3@1-64:3,65-512:0" in dry.stdout
        assert [r for r in server.requests if r[0] == "PATCH"][-1][1].endswith("/vllm")
        real = runner.invoke(app, ["apply", "--setup", "replay:16", *target])
        assert real.exit_code == 0, real.output
        shown = runner.invoke(app, ["status", "--json", *target])
        assert json.loads(shown.stdout)["setup"] == "replay:16"
        forbidden = runner.invoke(
            app, ["apply", "--setup", "plain", *target[:2], "--kube-server", "http://127.0.0.1:9"]
        )
        assert forbidden.exit_code == 1
        assert forbidden.stderr.startswith("autotuner: error:")


def test_apply_to_a_manifest(tmp_path: Path) -> None:
    path = tmp_path / "vllm.yaml"
    path.write_text(MANIFEST)
    result = runner.invoke(app, ["apply", "--setup", "spec:1", "--target", f"file://{path}"])
    assert result.exit_code == 0, result.output
    assert '"num_speculative_tokens":1' in path.read_text()
    bad = runner.invoke(app, ["apply", "--setup", "fast", "--target", f"file://{path}"])
    assert bad.exit_code == 2
    unknown = runner.invoke(app, ["apply", "--setup", "plain", "--target", "ftp://x"])
    assert unknown.exit_code == 2
