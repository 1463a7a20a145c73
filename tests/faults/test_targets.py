"""Faults of the targets over loopback: the Kubernetes API answering 500, 429 or 409 to
`autotuner apply` and going away in the middle of the loop's rollout; the exec target's
restart command wedged by a child that holds its output; a sidecar killed between the two
writes of an exec change, then restarted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from autotuner.actuators.exec import ExecActuator
from autotuner.actuators.kubeapi import K8sTarget, api_client
from autotuner.actuators.kubernetes import KubernetesActuator
from autotuner.actuators.manual import apply_by_hand
from autotuner.controller import Controller
from autotuner.core.model.registry import load_model
from autotuner.core.predict.hardware import datasheet
from autotuner.core.types import Action, Observation, Setup
from autotuner.engines.vllm.setup import parse_setup
from autotuner.errors import RestartError
from autotuner.settings import cli_overrides, load_settings
from autotuner.sim.truth import TruthEngine
from tests.faults.conftest import Record
from tests.faults.timing import StillRunning, timed, wait_for
from tests.support.fake_apiserver import FakeApiServer, deployment, fake_apiserver
from tests.support.loop import wired
from tests.support.run import ROOT, python_module
from tests.support.settings import ACT_AT_ONCE

MODEL = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4")
H200 = datasheet("H200")
TRUTH = TruthEngine(MODEL, H200)
MTP = '{"method":"mtp","num_speculative_tokens":3}'
ARGS = ["--model", MODEL.name, "--speculative-config", MTP, "--max-num-seqs", "256"]
TARGET = "k8s://llm/deployment/vllm/vllm"
GIVE_UP_S = 30.0


def containers(server: FakeApiServer) -> list[dict[str, Any]]:
    spec = server.get("Deployment", "llm", "vllm")["spec"]["template"]["spec"]
    return list(spec["containers"])


def applied_in(server: FakeApiServer, setup: str) -> float:
    """Seconds `autotuner apply --setup setup` took against `server` (it must succeed)."""
    started = time.monotonic()
    done = python_module(
        "autotuner.cli",
        "apply",
        "--setup",
        setup,
        "--target",
        TARGET,
        "--kube-server",
        server.url,
        timeout_s=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return time.monotonic() - started


# --------------------------------------------------------------------------- autotuner apply


def test_apply_rides_out_a_500_and_a_429(record: Record) -> None:
    with fake_apiserver() as server:
        server.put("Deployment", deployment(args=ARGS))
        server.fail_next = [500, 500]
        took = applied_in(server, "spec:1")
        assert parse_setup(containers(server)[0]["args"]) == Setup(spec_tokens=1)
        record(
            "API server: 500 twice on autotuner apply", "retried within the deadline; applied", took
        )
        server.fail_next, server.retry_after = [429], "1"
        took = applied_in(server, "spec:2")
        assert parse_setup(containers(server)[0]["args"]) == Setup(spec_tokens=2)
        record("API server: 429, Retry-After 1 s", "waited 1 s, applied", took)


def test_apply_after_another_writer_keeps_their_change(record: Record) -> None:
    with fake_apiserver() as server:
        server.put("Deployment", deployment(args=ARGS))  # vLLM 0.33: replay on NemotronH

        def other_writer(method: str, path: str) -> None:
            if method == "PATCH" and server.interfere is not None:
                server.interfere = None  # once: between our read and our first write
                other = server.get("Deployment", "llm", "vllm")
                args = other["spec"]["template"]["spec"]["containers"][0]["args"]
                args[args.index("--max-num-seqs") + 1] = "128"
                other["spec"]["template"]["spec"]["containers"][0]["image"] = "vllm:next"
                server.put("Deployment", other)

        server.interfere = other_writer
        took = applied_in(server, "replay:16")
        main = containers(server)[0]
        assert parse_setup(main["args"]) == Setup(replay_window=16)
        assert main["args"][main["args"].index("--max-num-seqs") + 1] == "128"
        assert main["image"] == "vllm:next"
        conflicts = [r for r in server.requests if r[0] == "PATCH"]
        assert len(conflicts) >= 3  # the refused dry run, then a dry run and the write
    record(
        "API server: 409 (another writer between read and write)",
        "re-read, re-rendered, applied; the other writer's change kept",
        took,
    )


# --------------------------------------------------------------------------- the loop


def loop(server: FakeApiServer, clock: list[float]) -> Controller:
    settings, _ = load_settings(cli=cli_overrides([*ACT_AT_ONCE, "target.rollout_deadline_s=3000"]))
    target = K8sTarget("llm", "deployment", "vllm", "vllm")

    def observe() -> Observation:
        setup = parse_setup(containers(server)[0]["args"]) if server.objects else Setup()
        return TRUTH.observation(
            now=clock[0], window_s=60, setup=setup, batch=512, rates=(0.8, 0.7, 0.6)
        )

    api = api_client(server.url, timeout_s=1)
    actuator = KubernetesActuator(target, api, timeout_s=1)
    return wired(settings, (MODEL, H200), observe, actuator, lambda: clock[0])


def test_api_server_going_away_mid_rollout(record: Record) -> None:
    clock = [1000.0]
    with fake_apiserver() as server:
        server.put("Deployment", deployment(args=ARGS))
        tuner = loop(server, clock)
        for _ in range(10):  # until the loop patches (its rollout is left in progress)
            clock[0] += 60
            if tuner.step().action in (Action.SWITCH, Action.REVERT):
                break
        switched = parse_setup(containers(server)[0]["args"])
        assert switched != Setup(spec_tokens=3), "the loop never switched"
        kept = dict(server.objects)
        generation = server.get("Deployment", "llm", "vllm")["metadata"]["generation"]
        port = int(server.url.rsplit(":", 1)[1])
    # Gone: every step still ends, within the requests' deadlines, and says why.
    started = time.monotonic()
    for _ in range(3):
        clock[0] += 60
        outcome, _ = timed(tuner.step, GIVE_UP_S)
        assert not isinstance(outcome, StillRunning | Exception), outcome
    gone_s = time.monotonic() - started
    with fake_apiserver(port) as back:  # back on the port it went away from
        back.objects.update(kept)
        back.complete_rollout("Deployment", "llm", "vllm")
        for _ in range(3):
            clock[0] += 60
            tuner.step()
        assert parse_setup(containers(back)[0]["args"]) == switched  # nothing undone
        assert tuner.state is not None
        assert tuner.state.current == switched  # no drift adopted
        after = back.get("Deployment", "llm", "vllm")["metadata"]["generation"]
        assert after == generation  # no second rollout
    record(
        "API server: gone mid-rollout (3 steps), then back",
        "each step ended (read failed, loop went on); resumed the verification, no second patch",
        gone_s / 3,
    )


# --------------------------------------------------------------------------- exec


def test_exec_restart_wedged_by_a_child_is_killed_whole(tmp_path: Path, record: Record) -> None:
    args = tmp_path / "vllm.args"
    args.write_text("".join(f"{a}\n" for a in ARGS))
    pid_file = tmp_path / "child.pid"
    command = ["sh", "-c", f"sleep 120 & echo $! > {pid_file}; wait"]
    actuator = ExecActuator(args, command, timeout_s=1)
    outcome, took = timed(
        lambda: actuator.apply(Setup(spec_tokens=1), state=None, expected_version=None), GIVE_UP_S
    )
    assert isinstance(outcome, RestartError), outcome
    assert took < 10
    child = int(pid_file.read_text())
    wait_for(lambda: not _running(child), 10, "the restart command's child is still running")
    record(
        "exec: restart command wedged by a child holding its pipe",
        "killed its process group at the timeout; a failed change (RestartError)",
        took,
    )


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


KILL_BETWEEN = """
import os, signal, sys
import autotuner.actuators.exec as target
from autotuner.actuators.manual import apply_by_hand
from autotuner.core.types import Setup

args_file, state_file = sys.argv[1], sys.argv[2]
real = target.atomic_write

def write_then_die(path, text):
    real(path, text)
    if str(path) == state_file:
        os.kill(os.getpid(), signal.SIGKILL)  # between the state write and the args write

target.atomic_write = write_then_die
apply_by_hand(target.ExecActuator(args_file, ["true"]), Setup(spec_tokens=2), who="test")
"""


def test_killed_between_the_writes_of_a_change_is_not_drift(tmp_path: Path, record: Record) -> None:
    args = tmp_path / "vllm.args"
    args.write_text("".join(f"{a}\n" for a in ARGS))
    actuator = ExecActuator(args, ["true"])
    apply_by_hand(actuator, Setup(spec_tokens=1), who="test")  # a state record to resume from
    killed = subprocess.run(
        [sys.executable, "-c", KILL_BETWEEN, str(args), str(actuator.state_file)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    started = time.monotonic()
    clock = [2e9]
    settings, _ = load_settings(cli=cli_overrides([*ACT_AT_ONCE, "mode=advise"]))

    def observe() -> Observation:
        setup = parse_setup(args.read_text().split())
        return TRUTH.observation(
            now=clock[0], window_s=60, setup=setup, batch=8, rates=(0.8, 0.7, 0.6)
        )

    restarted = wired(
        settings, (MODEL, H200), observe, ExecActuator(args, ["true"]), lambda: clock[0]
    )
    decision = restarted.step()
    took = time.monotonic() - started
    said = " ".join((decision.sentence, *decision.notes))
    assert "outside the tuner" not in said  # not taken for someone else's change
    assert restarted.state is not None
    assert restarted.state.current == Setup(spec_tokens=1) == parse_setup(args.read_text().split())
    record(
        "SIGKILL between the state write and the args write, then a restart",
        "resumed from the state that goes with the live args; no drift",
        took,
    )
