"""The exporter's endpoints on a live controller, and the demo end to end (short)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from typer.testing import CliRunner

from autotuner.cli.main import app
from autotuner.settings import cli_overrides, load_settings
from autotuner.sim.engine import SimSetup, SimulatedVllm
from autotuner.sim.server import SimServer
from autotuner.telling.exporter import TunerMetrics
from autotuner.telling.server import ExporterServer
from autotuner.wiring import build_controller

EXPORTED = (
    "autotuner_build_info",
    "autotuner_tau",
    "autotuner_quick_rule",
    "autotuner_blocked",
    "autotuner_predicted_tokens_per_second",
    "autotuner_decisions_total",
    "autotuner_data_staleness_seconds",
)
EXPORTED_DEADLINE_S = 60.0  # a busy 2-core machine; the wait ends on its condition


def stepped_until_exported(step: Callable[[], object], base: str) -> str:
    """Step the loop until /metrics shows every series a usable window with drafts exports
    (the simulated engine's first full window comes when it comes), or fail at the deadline;
    the last /metrics text."""
    deadline = time.monotonic() + EXPORTED_DEADLINE_S
    text = ""
    while time.monotonic() < deadline:
        step()
        text = httpx.get(f"{base}/metrics").text
        if all(name in text for name in EXPORTED):
            return text
        time.sleep(0.2)
    return text


def test_healthz_readyz_decision_and_metrics() -> None:
    sim = SimulatedVllm(setup=SimSetup(), load=lambda t: 64.0, step_time=lambda b, s: 0.02)
    with SimServer(sim) as server:
        settings, _ = load_settings(
            None,
            cli_overrides(
                [
                    f"source.urls=[{server.url}/metrics]",
                    "loop.window_s=1",
                    "limits.min_drafts=10",
                    "limits.min_batch_samples=2",
                    "policy.estimates.min_batch_weight=2",
                ]
            ),
        )
        metrics = TunerMetrics()
        controller = build_controller(settings, metrics, logging.getLogger("test"))
        exporter = ExporterServer(
            metrics, host="127.0.0.1", port=0, alive=controller.alive, ready=controller.ready
        )
        base = f"http://127.0.0.1:{exporter.port}"
        try:
            assert httpx.get(f"{base}/readyz").status_code == 503  # no observation yet
            text = stepped_until_exported(controller.step, base)
            for name in EXPORTED:
                assert name in text, name
            assert httpx.get(f"{base}/healthz").status_code == 200
            assert httpx.get(f"{base}/readyz").status_code == 200
            document = httpx.get(f"{base}/decision").json()
            assert document["decision"]["sentence"]
            assert document["mode"] == "advise"
            assert httpx.get(f"{base}/nothing").status_code == 404
        finally:
            exporter.close()


def test_demo_runs_and_writes_its_summary(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["demo", "--duration", "20s", "--no-live", "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    assert "Tokens served over the run" in result.stdout
    assert "static plain" in result.stdout
    summary = json.loads((tmp_path / "demo.json").read_text())
    assert summary["tokens"] > 0
    assert {"plain", "spec:1", "spec:2", "spec:3", "replay:16", "replay:8"} <= set(
        summary["statics"]
    )
    assert (tmp_path / "demo.png").read_bytes().startswith(b"\x89PNG")
    assert "matplotlib" in (tmp_path / "demo.svg").read_text().lower()
    assert f"plots: {tmp_path / 'demo.png'}" in result.stdout
    # No spike after a restart: what was served never outruns the fastest static setup by
    # more than the tuner can gain (the gap's tokens used to arrive in one step after it).
    assert summary["restarts"] >= 1
    series = summary["series"]
    served = [r for r in series["tuned_tokens_per_s"] if r is not None]
    fastest = max(
        max(r for r in rates if r is not None) for rates in series["static_tokens_per_s"].values()
    )
    assert max(served) < 1.3 * fastest


def test_a_dense_model_demo_compares_only_what_it_can_run(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "demo",
            "--model",
            "meta-llama/Llama-3.1-70B-Instruct-FP8",
            "--gpu",
            "H100-SXM",
            "--tp",
            "8",
            "--drafter",
            "eagle",
            "--duration",
            "10s",
            "--no-live",
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "replay" not in result.stdout
    summary = json.loads((tmp_path / "demo.json").read_text())
    assert set(summary["statics"]) == {"plain", "spec:1", "spec:2", "spec:3"}
    assert not any("replay" in label for label in summary["series"]["setup"])
    assert not any(d["target"]["replay_window"] for d in summary["decisions"])
