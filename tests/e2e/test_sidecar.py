"""`autotuner run` as a subprocess against the simulated deployment, acting on its manifest."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from autotuner.core.model.registry import load_model
from autotuner.core.predict.hardware import datasheet
from autotuner.core.types import Setup
from autotuner.sim.deployment import SimulatedDeployment, demo_manifest
from autotuner.sim.truth import TruthEngine, realistic_error
from tests.integration.conftest import free_port
from tests.support.run import sidecar_process

MODEL = "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4"
TRUTH = TruthEngine(load_model(MODEL), datasheet("H200"), error=realistic_error)
ACCEPTANCE = (0.8, 0.7, 0.6)


def settings_file(
    folder: Path, manifest: Path, url: str, port: int, *, mode: str = "act", settle: str = "1s"
) -> Path:
    path = folder / "autotuner.yaml"
    path.write_text(f"""\
mode: {mode}
source: {{urls: ["{url}"], timeout_s: 1s}}
target: {{uri: "file://{manifest}"}}
model: {{id: {MODEL}, gpu: H200}}
# Replay or speculation, not both (on vLLM 0.33 replay+spec leads at every load here): the
# crossover between them is what is tested.
engine: {{capabilities: upstream}}
loop: {{interval_s: 250ms, window_s: 1s}}
exporter: {{host: 127.0.0.1, port: {port}}}
limits: {{min_drafts: 20, min_batch_samples: 2, max_age_s: 5s}}
quality: {{max_tokens: 4, after_deadline_s: 2s}}
policy:
  switch: {{dwell_s: 1s}}
  restart: {{cooldown_s: 2s, horizon_s: 60s, downtime_s: 500ms, first_compile_s: 0, max_per_hour: 8,
             max_per_day: 8}}
  verification: {{settle_s: {settle}}}
  estimates: {{batch_half_life_s: 1500ms, min_batch_weight: 2}}
log: {{format: json}}
""")
    return path


@contextmanager
def sidecar(config: Path, port: int) -> Iterator[subprocess.Popen[bytes]]:
    process = sidecar_process(config, subprocess.PIPE)
    try:
        wait_until(lambda: _get(port, "/healthz") == 200, 30, "sidecar never answered /healthz")
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


# A request to the sidecar's own endpoints answers in milliseconds; a busy 2-core machine may
# hold the process off the CPU for seconds (the deadlines are conditions waited on, not this).
SLOW_MACHINE_S = 30.0


# A resumed verification waits for a settled window (settle 6 s) on the load the sidecar
# sees; on a busy 2-core machine that took more than 20 s once (the README test command).
VERIFICATION_ENDS_S = 60.0


def _verification_ended(port: int, timeout_s: float) -> str:
    """The decision sentence once the verification in flight has kept or reverted its change;
    fails naming the last sentence seen."""
    deadline, sentence = time.monotonic() + timeout_s, ""
    while time.monotonic() < deadline:
        latest = decision(port)["decision"] or {}
        sentence = str(latest.get("sentence", ""))
        if sentence.startswith("verified") or latest.get("action") == "revert":
            return sentence
        time.sleep(0.1)
    pytest.fail(f"the verification never finished; the last decision: {sentence!r}")


def _get(port: int, path: str) -> int | None:
    try:
        return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=SLOW_MACHINE_S).status_code
    except httpx.HTTPError:
        return None


def wait_until(check: Callable[[], bool], timeout_s: float, message: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    pytest.fail(message)


def decision(port: int) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(
        f"http://127.0.0.1:{port}/decision", timeout=SLOW_MACHINE_S
    ).json()
    return body


def went_and_came_back(labels: list[str]) -> bool:
    """The deployment ran replay, and speculation after it."""
    replays = [i for i, label in enumerate(labels) if label.startswith("replay")]
    return bool(replays) and any(label.startswith("spec") for label in labels[replays[-1] + 1 :])


def patched(scraped: dict[str, float]) -> float:
    """The patches the tuner counted: switches and reverts."""
    kinds = ("switch", "revert")
    return sum(scraped.get(f"autotuner_patches_total{{kind={kind}}}", 0.0) for kind in kinds)


def one_step_read(port: int) -> tuple[dict[str, float], dict[str, Any]]:
    """/metrics and /decision as one step left them: read again until the decision's id is
    the one the scrape showed (the loop steps every 250 ms; a busy machine can hold either
    read off the CPU for longer than that, so this waits on the condition, not a count)."""
    reads: list[tuple[dict[str, float], dict[str, Any]]] = []

    def same_step() -> bool:
        scraped, made = metrics(port), decision(port)
        reads[:] = [(scraped, made)]
        shown = (made.get("decision") or {}).get("id")
        return shown is not None and scraped.get("autotuner_last_decision_id") == shown

    wait_until(same_step, 120, "/metrics and /decision never showed the same step")
    return reads[0]


def metrics(port: int) -> dict[str, float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=SLOW_MACHINE_S).text
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            values[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return values


def shifting_load(start: float) -> Callable[[float], float]:
    def load(t: float) -> float:
        elapsed = t - start
        return 16.0 if elapsed < 5 else 480.0 if elapsed < 16 else 8.0

    return load


def test_switches_at_the_crossover_and_back_and_metrics_match_decision(tmp_path: Path) -> None:
    manifest = tmp_path / "vllm.yaml"
    manifest.write_text(demo_manifest(MODEL, Setup(spec_tokens=3)))
    port = free_port()
    start = time.time()
    with SimulatedDeployment(
        manifest, TRUTH, load=shifting_load(start), acceptance=ACCEPTANCE, restart_gap_s=0.5
    ) as deployment:
        config = settings_file(tmp_path, manifest, deployment.url, port)
        with sidecar(config, port):
            # Conditions, not the load's clock: a busy machine can make the way back late.
            wait_until(
                lambda: went_and_came_back([label for _, label in deployment.history]),
                120,
                "never went to replay and back",
            )
            wait_until(lambda: patched(metrics(port)) >= 2, 60, "the two patches were not counted")
            scraped, after = one_step_read(port)
        labels = [label for _, label in deployment.history]
    assert labels[0] == "spec:3"
    assert any(label.startswith("replay") for label in labels), labels
    last_replay = max(i for i, label in enumerate(labels) if label.startswith("replay"))
    assert any(label.startswith("spec") for label in labels[last_replay + 1 :]), labels
    assert len(labels) - 1 <= 8  # the change budget
    made = after["decision"]
    assert isinstance(made, dict)
    assert scraped["autotuner_last_decision_id"] == made["id"]
    assert scraped["autotuner_gain"] == pytest.approx(made["gain"])
    assert scraped["autotuner_confidence"] == pytest.approx(made["confidence"])
    for label, value in made["predicted_tokens_per_s"].items():
        assert scraped[f"autotuner_predicted_tokens_per_second{{setup={label}}}"] == (
            pytest.approx(value)
        )
    # Both ways were patches; the way back is a switch, or a revert where a busy machine made
    # the simulated replay measure worse than it predicted (seen beside a CPU hog).
    assert patched(scraped) >= 2
    assert scraped["autotuner_advisory"] == 0


def test_killed_mid_verification_resumes_without_a_second_patch(tmp_path: Path) -> None:
    manifest = tmp_path / "vllm.yaml"
    manifest.write_text(demo_manifest(MODEL, Setup(spec_tokens=3)))
    port = free_port()
    start = time.time()

    def load(t: float) -> float:
        return 16.0 if t - start < 4 else 480.0

    with SimulatedDeployment(
        manifest, TRUTH, load=load, acceptance=ACCEPTANCE, restart_gap_s=0.5
    ) as deployment:
        config = settings_file(tmp_path, manifest, deployment.url, port, settle="6s")
        with sidecar(config, port) as first:
            wait_until(lambda: len(deployment.history) >= 2, 30, "no switch happened")
            wait_until(
                lambda: (decision(port).get("state") or {}).get("verification") is not None,
                10,
                "no verification in flight",
            )
            last_id = decision(port)["decision"]["id"]
            first.kill()  # no clean shutdown
            first.wait()
        switched = len(deployment.history)
        written = manifest.read_text()
        with sidecar(config, port):
            wait_until(
                lambda: "verif" in str((decision(port)["decision"] or {}).get("sentence", "")),
                15,
                "the restarted sidecar did not resume the verification",
            )
            resumed = decision(port)["decision"]
            ended = _verification_ended(port, VERIFICATION_ENDS_S)
            if not ended.startswith("verified"):  # the revert's patch reaches the deployment
                wait_until(lambda: len(deployment.history) > switched, 30, "no revert patched")
        # The switch is not patched a second time. The resumed verification keeps it, or, where
        # a busy machine disturbed the simulated measurement, reverts it: one patch back.
        switched_to = deployment.history[switched - 1][1]
        after = [label for _, label in deployment.history[switched:]]
        assert switched_to not in after, ended
        assert len(after) == (0 if ended.startswith("verified") else 1), (after, ended)
    persisted = json.loads(
        written.split("spec-autotuner.io/state: ", 1)[1].splitlines()[0].strip("'")
    )
    assert persisted["verification"] is not None
    # Decisions continue from the persisted one (a manifest is written only with a change).
    assert persisted["last_decision_id"] < resumed["id"] <= last_id + 1
