"""Faults of the sidecar as a whole: a first step wedged (the liveness probe must fail), a
SIGTERM while a patch is in flight (`autotuner run --mode act` against the test API server)
and while a scrape trickles (`autotuner run --mode advise`).
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from autotuner.actuators.base import STATE_ANNOTATION
from autotuner.actuators.kubeapi import K8sTarget, api_client
from autotuner.actuators.kubernetes import KubernetesActuator
from autotuner.core.model.registry import load_model
from autotuner.core.predict.hardware import datasheet
from autotuner.core.types import Observation, Setup
from autotuner.engines.vllm.setup import parse_setup
from autotuner.settings import cli_overrides, load_settings
from autotuner.sim.deployment import SimulatedDeployment, demo_manifest
from autotuner.sim.truth import TruthEngine, realistic_error
from tests.faults.conftest import Record
from tests.faults.loopback import Request, fault_server, trickle
from tests.faults.timing import wait_for
from tests.integration.conftest import free_port
from tests.support.fake_apiserver import deployment, fake_apiserver
from tests.support.fixtures import FIXTURES
from tests.support.loop import wired
from tests.support.run import sidecar_process

MODEL_ID = "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4"
MODEL, H200 = load_model(MODEL_ID), datasheet("H200")
TRUTH = TruthEngine(MODEL, H200, error=realistic_error)


def test_a_first_step_wedged_fails_the_liveness_probe(record: Record) -> None:
    clock = [1000.0]
    settings, _ = load_settings(cli=cli_overrides(["loop.interval_s=1"]))
    wedged, entered = threading.Event(), threading.Event()

    def observe() -> Observation:
        entered.set()
        wedged.wait(60)  # a source that never answers (past any deadline of its own)
        raise RuntimeError("released")

    with fake_apiserver() as server:
        server.put("Deployment", deployment(args=["--model", MODEL_ID]))
        actuator = KubernetesActuator(
            K8sTarget("llm", "deployment", "vllm", "vllm"), api_client(server.url, timeout_s=1)
        )
        tuner = wired(settings, (MODEL, H200), observe, actuator, lambda: clock[0])
        loop = threading.Thread(target=tuner.run, daemon=True)
        loop.start()
        try:
            wait_for(entered.is_set, 30, "the first step never began")
            assert tuner.alive()
            clock[0] += settings.loop.stalled_after_s + 1  # no step completed since start
            assert not tuner.alive()
        finally:
            tuner.stop_event.set()
            wedged.set()
            loop.join(timeout=30)
    record(
        "first step wedged (a source past every deadline)",
        "/healthz fails after stalled_after_s since start: the pod is restarted",
        settings.loop.stalled_after_s,
    )


def terminate_when(
    config: Path, begun: threading.Event, what: str, exit_within_s: float
) -> tuple[int, bytes, float]:
    """Run the sidecar on `config`, send it SIGTERM once `begun` is set (within 60 s: the
    sidecar never did `what` otherwise) and wait for it to exit: its exit code, what it
    printed and the seconds from the signal to the exit. Killed if it outlives the test."""
    process = sidecar_process(config, subprocess.PIPE)
    try:
        wait_for(begun.is_set, 60, f"the sidecar never {what}")
        process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        out, _ = process.communicate(timeout=exit_within_s)
        return process.returncode, out, time.monotonic() - signalled
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def settings_file(folder: Path, url: str, kube: str, port: int) -> Path:
    path = folder / "autotuner.yaml"
    path.write_text(f"""\
mode: act
source: {{urls: ["{url}"], timeout_s: 1s}}
target: {{uri: "k8s://llm/deployment/vllm/vllm", kube_server: "{kube}"}}
model: {{id: {MODEL_ID}, gpu: H200}}
loop: {{interval_s: 250ms, window_s: 1s}}
exporter: {{host: 127.0.0.1, port: {port}}}
limits: {{min_drafts: 20, min_batch_samples: 2, max_age_s: 5s}}
quality: {{enabled: false}}
policy:
  switch: {{dwell_s: 1s}}
  restart: {{cooldown_s: 2s, horizon_s: 60s, downtime_s: 500ms, first_compile_s: 0, max_per_hour: 8,
             max_per_day: 8}}
  estimates: {{batch_half_life_s: 1500ms, min_batch_weight: 2}}
log: {{format: json}}
""")
    return path


def test_sigterm_during_a_patch_exits_cleanly(tmp_path: Path, record: Record) -> None:
    manifest = tmp_path / "vllm.yaml"
    manifest.write_text(demo_manifest(MODEL_ID, Setup(spec_tokens=3)))
    args = [str(a) for a in _manifest_args(manifest)]
    in_flight, held, validated = threading.Event(), threading.Event(), threading.Event()

    def hold_the_patch(method: str, path: str) -> None:
        if method != "PATCH":
            return
        if "dryRun" in path:  # a change (a state save has no dry run): the write comes next
            validated.set()
        elif validated.is_set() and not in_flight.is_set():
            in_flight.set()
            held.wait(2.0)  # the patch is in flight while the signal arrives

    busy = SimulatedDeployment(manifest, TRUTH, load=lambda t: 480.0, acceptance=(0.8, 0.7, 0.6))
    with busy as engine, fake_apiserver() as server:
        server.put("Deployment", deployment(args=args))
        server.interfere = hold_the_patch
        config = settings_file(tmp_path, engine.url, server.url, free_port())
        try:
            code, out, stopped_s = terminate_when(config, in_flight, "patched", 60)
        finally:
            held.set()
        live = server.get("Deployment", "llm", "vllm")
    assert code == 0, out.decode()[-2000:]
    assert stopped_s < 0.25 + 10 + 10  # one interval, the longest deadline, a slow machine
    main = live["spec"]["template"]["spec"]["containers"][0]
    assert parse_setup(main["args"]) != Setup(spec_tokens=3)  # the patch in flight completed
    state = json.loads(live["metadata"]["annotations"][STATE_ANNOTATION])
    assert Setup.model_validate(state["current"]) == parse_setup(main["args"])  # saved with it
    assert b'"stopped"' in out or b"stopped" in out
    record(
        "SIGTERM while a patch is in flight",
        "the patch completed, the state saved with it, exit 0",
        stopped_s,
    )


def _manifest_args(manifest: Path) -> list[object]:
    import yaml

    documents = [d for d in yaml.safe_load_all(manifest.read_text()) if d]
    workload = next(d for d in documents if d.get("kind") in ("Deployment", "StatefulSet"))
    containers = workload["spec"]["template"]["spec"]["containers"]
    return list(next(c for c in containers if "vllm" in c["name"])["args"])


def test_sigterm_while_a_scrape_trickles_exits_cleanly(tmp_path: Path, record: Record) -> None:
    with fault_server() as metrics:
        started = threading.Event()
        body = (FIXTURES / "vllm_cpu_spec_ngram.metrics.txt").read_text()
        slow = trickle(body, 0.2)

        def trickling(sock: socket.socket, request: Request, stop: threading.Event) -> None:
            started.set()
            slow(sock, request, stop)

        metrics.route("/metrics", trickling)
        config = tmp_path / "autotuner.yaml"
        config.write_text(f"""\
mode: advise
source: {{urls: ["{metrics.url}/metrics"], timeout_s: 2s}}
model: {{id: {MODEL_ID}, gpu: H200}}
loop: {{interval_s: 1s, window_s: 2s}}
exporter: {{host: 127.0.0.1, port: {free_port()}}}
quality: {{enabled: false}}
""")
        code, out, stopped_s = terminate_when(config, started, "scraped", 30)
    assert code == 0, out.decode()[-2000:]
    assert stopped_s < 1 + 2 + 10  # one interval, the scrape's deadline, a slow machine
    record(
        "SIGTERM while /metrics trickles (advise mode)",
        "the scrape ended at its deadline, the loop stopped, exit 0",
        stopped_s,
    )
