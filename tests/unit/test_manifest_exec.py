"""The GitOps manifest and exec actuators on real files."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from autotuner.actuators.exec import ExecActuator
from autotuner.actuators.manifest import ManifestActuator
from autotuner.core.types import Setup
from autotuner.errors import ActuatorError, AdviceOnlyError, ConflictError

MANIFEST = """\
# vLLM serving Nemotron-3-Super; reviewed by the platform team.
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  note: "kept as is"
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: vllm   # the serving deployment
  namespace: llm
  labels: &labels
    team: inference
spec:
  replicas: 2
  strategy:
    type: RollingUpdate
    rollingUpdate: {maxSurge: 0, maxUnavailable: 1}
  template:
    metadata:
      labels: *labels
    spec:
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.20.0
          args:
            - --model
            - nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4   # weights on the PVC
            - '--speculative-config'
            - '{"method": "mtp", "num_speculative_tokens": 3}'
            - --max-num-seqs=256  # capacity plan
          env:
            - name: NOTE
              value: "kept"
        - name: autotuner
          image: spec-autotuner:0.1.0
"""


def write(tmp_path: Path, text: str = MANIFEST) -> Path:
    path = tmp_path / "vllm.yaml"
    path.write_text(text)
    return path


def test_manifest_changes_only_the_managed_flags(tmp_path: Path) -> None:
    path = write(tmp_path)
    actuator = ManifestActuator(path, container="vllm")
    live = actuator.read()
    assert live.setup == Setup(spec_tokens=3)
    result = actuator.apply(
        Setup(replay_window=16), state='{"id": 1}', expected_version=live.version
    )
    assert result.changed
    text = path.read_text()
    before, after = MANIFEST.splitlines(), text.splitlines()
    removed = [line for line in before if line not in after]
    added = [line for line in after if line not in before]
    # the operator's own drafter, recorded to put back later: the tuner's line, its own format
    records = [line for line in added if line.startswith("    spec-autotuner.io/operator-args: ")]
    assert len(records) <= 1
    added = [line for line in added if line not in records]
    assert removed == [
        "            - '--speculative-config'",
        """            - '{"method": "mtp", "num_speculative_tokens": 3}'""",
    ]
    assert sorted(added) == sorted(
        [
            "            - --use-replayssm",
            "            - --replayssm-buffer-len",
            "            - '16'",
            "  annotations:",
            """    spec-autotuner.io/state: '{"id": 1}'""",
        ]
    )
    assert "# weights on the PVC" in text
    assert "labels: &labels" in text
    assert "labels: *labels" in text
    assert "--max-num-seqs=256  # capacity plan" in text
    assert ManifestActuator(path).read().setup == Setup(replay_window=16)
    assert "+            - --use-replayssm" in result.diff


def test_manifest_round_trip_back_to_speculation(tmp_path: Path) -> None:
    path = write(tmp_path)
    actuator = ManifestActuator(path)
    drafter = actuator.read().speculative_config
    actuator.apply(Setup(replay_window=16), state=None, expected_version=None)
    actuator.apply(
        Setup(spec_tokens=2), state=None, expected_version=None, saved_speculative_config=drafter
    )
    assert actuator.read().setup == Setup(spec_tokens=2)
    assert "# weights on the PVC" in path.read_text()


def test_manifest_dry_run_writes_nothing(tmp_path: Path) -> None:
    path = write(tmp_path)
    result = ManifestActuator(path).apply(
        Setup(spec_tokens=1), state=None, expected_version=None, dry_run=True
    )
    assert result.dry_run
    assert '"num_speculative_tokens":1' in result.diff
    assert path.read_text() == MANIFEST


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("apiVersion: v1\nkind: Service\nmetadata: {name: x}\n", "no Deployment"),
        ("kind: Deployment\nmetadata: {name: x}\nspec: {}\n", "no pod template"),
        ("key: [unclosed\n", "not valid YAML"),
    ],
)
def test_manifest_bad_input(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ActuatorError, match=message):
        ManifestActuator(path).apply(Setup(spec_tokens=1), state=None, expected_version=None)
    assert path.read_text() == text


def test_manifest_unknown_container_and_conflict(tmp_path: Path) -> None:
    path = write(tmp_path)
    with pytest.raises(ActuatorError, match="no container named"):
        ManifestActuator(path, container="nope").read()
    actuator = ManifestActuator(path)
    with pytest.raises(ConflictError):
        actuator.apply(Setup(spec_tokens=1), state=None, expected_version="stale")
    assert path.read_text() == MANIFEST


def restart_script(tmp_path: Path, code: int = 0, sleep: float = 0.0) -> list[str]:
    script = tmp_path / "restart.py"
    script.write_text(
        "import os, sys, time\n"
        f"time.sleep({sleep})\n"
        "open(os.environ['AUTOTUNER_ARGS_FILE'] + '.restarted', 'a').write('x')\n"
        f"print('restarting'); sys.exit({code})\n"
    )
    return [sys.executable, str(script)]


def test_exec_writes_args_and_restarts(tmp_path: Path) -> None:
    args = tmp_path / "vllm.args"
    args.write_text(
        '--model\nm\n--speculative-config\n{"method":"ngram","num_speculative_tokens":3}\n'
    )
    actuator = ExecActuator(args, restart_script(tmp_path))
    assert actuator.read().setup == Setup(spec_tokens=3)
    result = actuator.apply(Setup(spec_tokens=0), state='{"s": 1}', expected_version=None)
    assert result.changed
    assert args.read_text() == "--model\nm\n"
    assert (tmp_path / "vllm.args.restarted").read_text() == "x"
    assert actuator.read().state == '{"s": 1}'
    assert "restarting" in actuator.last_output


def test_exec_env_file(tmp_path: Path) -> None:
    env = tmp_path / "vllm.env"
    env.write_text("OTHER=1\nVLLM_ARGS='--model m --use-replayssm'\n")
    actuator = ExecActuator(env, restart_script(tmp_path), env_var="VLLM_ARGS")
    assert actuator.read().setup == Setup(replay_window=16)
    actuator.apply(Setup(replay_window=32), state=None, expected_version=None)
    assert actuator.read().setup == Setup(replay_window=32)


def test_exec_failure_and_timeout_are_failed_changes(tmp_path: Path) -> None:
    args = tmp_path / "vllm.args"
    args.write_text("--model\nm\n")
    failing = ExecActuator(args, restart_script(tmp_path, code=3))
    with pytest.raises(ActuatorError, match="exited 3"):
        failing.apply(Setup(replay_window=8), state=None, expected_version=None)
    slow = ExecActuator(args, restart_script(tmp_path, sleep=5), timeout_s=0.5)
    with pytest.raises(ActuatorError, match="timed out"):
        slow.apply(Setup(replay_window=16), state=None, expected_version=None)


def test_exec_keeps_the_operators_companion_flags_and_puts_them_back(tmp_path: Path) -> None:
    """replay+spec on vLLM 0.33 (no image: the table's default version) changes the
    operator's backend; the record of what they had lives beside the args until spec:3 puts
    it back, and then goes."""
    from autotuner.core.model.registry import load_model
    from autotuner.engines.vllm.capabilities import FOLLOW_BUILD

    args = tmp_path / "vllm.args"
    operator = (
        "--model\nm\n--mamba-backend\ntriton\n"
        '--speculative-config\n{"method":"mtp","num_speculative_tokens":3}\n'
    )
    args.write_text(operator)
    actuator = ExecActuator(args, restart_script(tmp_path))
    actuator.engine = FOLLOW_BUILD.serving(load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B"))
    actuator.apply(Setup(spec_tokens=3, replay_window=16), state=None, expected_version=None)
    written = args.read_text().splitlines()
    assert written[2:4] == ["--mamba-backend", "flashinfer"]  # in place
    assert written[-1] == "--no-enable-prefix-caching"
    assert actuator.read().operator_args == {
        "mamba_backend_flashinfer": ["--mamba-backend", "triton"],
        "prefix_caching_off": None,
    }
    actuator.apply(Setup(spec_tokens=3), state=None, expected_version=None)
    assert args.read_text() == operator
    assert actuator.read().operator_args is None
    assert not actuator.operator_file.exists()


def test_manifest_with_several_workloads_names_them_and_the_file_form(tmp_path: Path) -> None:
    second = MANIFEST.split("---\n")[1].replace("name: vllm   #", "name: vllm-b   #")
    path = write(tmp_path, MANIFEST + "---\n" + second)
    with pytest.raises(ActuatorError) as raised:
        ManifestActuator(path).read()
    assert str(raised.value) == (
        f"{path}: several workloads (vllm, vllm-b); name one: file://{path}?name=NAME"
    )
    assert ManifestActuator(path, name="vllm-b").read().setup == Setup(spec_tokens=3)


def test_manifest_refuses_a_change_its_text_cannot_hold(tmp_path: Path) -> None:
    # the args are also another key's: writing them in place would change both
    shared = MANIFEST.replace("          args:\n", "          args: &args\n") + "copy: *args\n"
    path = write(tmp_path, shared)
    with pytest.raises(AdviceOnlyError, match="cannot edit the file's text safely"):
        ManifestActuator(path).apply(Setup(spec_tokens=1), state=None, expected_version=None)
    assert path.read_text() == shared


def test_manifest_keeps_windows_line_ends(tmp_path: Path) -> None:
    path = write(tmp_path)
    path.write_bytes(MANIFEST.replace("\n", "\r\n").encode())
    ManifestActuator(path).apply(Setup(spec_tokens=2), state=None, expected_version=None)
    data = path.read_bytes()
    assert ManifestActuator(path).read().setup == Setup(spec_tokens=2)
    assert data.count(b"\n") == data.count(b"\r\n") == MANIFEST.count("\n")
