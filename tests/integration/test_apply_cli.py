import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from autotuner.actuators.base import PAUSE_ANNOTATION, STATE_ANNOTATION
from autotuner.actuators.targets import open_target
from autotuner.cli.main import app
from autotuner.core.decide.state import TunerState
from autotuner.core.types import Setup
from tests.integration.test_controller_k8s import controller as loop_controller
from tests.support.fake_apiserver import FakeApiServer, deployment, fake_apiserver
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
        real = runner.invoke(app, ["apply", "--setup", "replay:16", "--force", *target])
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


def deployed(server: FakeApiServer) -> dict[str, Any]:
    return server.get("Deployment", "llm", "vllm")


def k8s_target(tmp_path: Path, server: FakeApiServer) -> tuple[list[str], Callable[[], Any]]:
    server.put("Deployment", deployment(args=["--model", "m", "--speculative-config", MTP]))
    target = ["--target", "k8s://llm/deployment/vllm/vllm", "--kube-server", server.url]
    return target, lambda: open_target(target[1], kube_server=server.url)


def file_target(tmp_path: Path, server: FakeApiServer) -> tuple[list[str], Callable[[], Any]]:
    path = tmp_path / "vllm.yaml"
    path.write_text(MANIFEST)
    return ["--target", f"file://{path}"], lambda: open_target(f"file://{path}")


def exec_target(tmp_path: Path, server: FakeApiServer) -> tuple[list[str], Callable[[], Any]]:
    path = tmp_path / "vllm.args"
    path.write_text(f"--model\nm\n--speculative-config\n{MTP}\n")
    uri = f"exec://{path}?restart=true"
    return ["--target", uri], lambda: open_target(uri)


@pytest.mark.parametrize("make", [k8s_target, file_target, exec_target])
def test_speculation_off_and_on_by_hand_restores_the_drafter(
    tmp_path: Path, make: Callable[[Path, FakeApiServer], tuple[list[str], Callable[[], Any]]]
) -> None:
    with fake_apiserver() as server:
        target, actuator = make(tmp_path, server)
        drafter = actuator().read().speculative_config
        assert drafter is not None
        off = runner.invoke(app, ["apply", "--setup", "plain", *target])
        assert off.exit_code == 0, off.output
        live = actuator().read()
        assert live.speculative_config is None
        assert live.state is not None
        state = TunerState.model_validate_json(live.state)
        assert state.current == Setup()
        assert state.drafter == drafter
        assert len(state.changes) == 1
        on = runner.invoke(app, ["apply", "--setup", "spec:2", *target])
        assert on.exit_code == 0, on.output
        live = actuator().read()
        assert live.setup == Setup(spec_tokens=2)
        assert live.speculative_config == {**drafter, "num_speculative_tokens": 2}
        assert live.state is not None
        assert TunerState.model_validate_json(live.state).current == Setup(spec_tokens=2)


def test_a_manual_apply_on_kubernetes_posts_an_event_and_is_no_drift(tmp_path: Path) -> None:
    with fake_apiserver() as server:
        target, _ = k8s_target(tmp_path, server)
        result = runner.invoke(app, ["apply", "--setup", "replay:16", "--force", *target])
        assert result.exit_code == 0, result.output
        (posted,) = server.events
        assert posted["reason"] == "ManualApply"
        assert posted["message"].startswith("spec:3 -> replay:16 by ")
        assert "@" in posted["message"]
        clock = [time.time()]
        tuner = loop_controller(server, "a", clock, [64.0], "policy.restart.cooldown_s=3600")
        tuner.step()
        assert tuner.state is not None
        assert tuner.state.current == Setup(replay_window=16)
        assert not [e for e in server.events if e["reason"] == "DriftDetected"]
        decision = tuner.metrics.current().decision
        assert decision is not None
        assert "managed flags changed" not in " ".join(decision.notes)


def test_paused_targets_are_refused_unless_forced_and_dry_runs_write_nothing(
    tmp_path: Path,
) -> None:
    with fake_apiserver() as server:
        target, _ = k8s_target(tmp_path, server)
        obj = deployed(server)
        obj["metadata"]["annotations"][PAUSE_ANNOTATION] = "true"
        server.put("Deployment", obj)
        version = deployed(server)["metadata"]["resourceVersion"]
        refused = runner.invoke(app, ["apply", "--setup", "plain", *target])
        assert refused.exit_code == 1
        assert "paused" in refused.stderr
        assert "--force" in refused.stderr
        dry = runner.invoke(app, ["apply", "--setup", "plain", "--dry-run", "--force", *target])
        assert dry.exit_code == 0, dry.output
        assert "would change spec:3 -> plain" in dry.stdout
        assert deployed(server)["metadata"]["resourceVersion"] == version
        assert STATE_ANNOTATION not in deployed(server)["metadata"]["annotations"]
        assert server.events == []
        forced = runner.invoke(app, ["apply", "--setup", "plain", "--force", *target])
        assert forced.exit_code == 0, forced.output
        assert deployed(server)["metadata"]["annotations"][STATE_ANNOTATION]
        assert [e["reason"] for e in server.events] == ["ManualApply"]


def test_a_leading_sidecar_takes_a_manual_apply_as_a_known_change(tmp_path: Path) -> None:
    with fake_apiserver() as server:
        target, _ = k8s_target(tmp_path, server)
        clock = [time.time()]
        tuner = loop_controller(server, "a", clock, [64.0], "policy.restart.cooldown_s=3600")
        tuner.step()  # leading, with its own state (and perhaps a change of its own)
        assert tuner.state is not None
        assert tuner.state.current != Setup(spec_tokens=1)
        result = runner.invoke(app, ["apply", "--setup", "spec:1", *target])
        assert result.exit_code == 0, result.output
        clock[0] += 15
        tuner.step()
        assert tuner.state.current == Setup(spec_tokens=1)
        assert tuner.state.changes  # counted for the budget and cooldown
        assert not [e for e in server.events if e["reason"] == "DriftDetected"]
        assert tuner.metrics.registry.get_sample_value("autotuner_drift_total") == 0
