"""A simulated SGLang deployment restarts on any change of its command line, stays down when
SGLang 0.5.23 would refuse the new args (sim/sglang_startup.py), answers `/server_info` with the
live configuration, and serves `/metrics` only with `--enable-metrics`."""

from __future__ import annotations

import argparse
from pathlib import Path

import httpx

from autotuner.core.engine.workload import Workload
from autotuner.core.model.registry import load_model
from autotuner.core.predict.hardware import datasheet
from autotuner.core.types import Setup
from autotuner.sim.__main__ import sglang_server
from autotuner.sim.completions import CompletionsEngine
from autotuner.sim.deployment import SimulatedDeployment
from autotuner.sim.engine import SimSetup
from autotuner.sim.sglang import SglangServer, sglang_manifest
from autotuner.sim.truth import TruthEngine
from tests.support.clock import Clock

QWEN = load_model("Qwen/Qwen3.5-122B-A10B")
TRUTH = TruthEngine(QWEN, datasheet("H200"), Workload(tensor_parallel=4))
ACCEPTANCE = (0.8, 0.7, 0.6)


def deployment(tmp_path: Path, clock: Clock, text: str) -> SimulatedDeployment:
    manifest = tmp_path / "sglang.yaml"
    manifest.write_text(text)
    return SimulatedDeployment(
        manifest,
        TRUTH,
        load=lambda t: 300.0,
        acceptance=ACCEPTANCE,
        restart_gap_s=5.0,
        clock=clock,
        watch=False,
        kind=SglangServer(QWEN, ACCEPTANCE),
    )


def restart_with(dep: SimulatedDeployment, clock: Clock, old: str, new: str) -> None:
    dep.manifest.path.write_text(dep.manifest.path.read_text().replace(old, new))
    dep.poll()
    clock.t += 10
    dep.poll()


def info(dep: SimulatedDeployment) -> dict[str, object]:
    answer: dict[str, object] = httpx.get(f"{dep.server.url}/server_info").json()
    return answer


def test_a_change_of_args_restarts_it_and_refused_args_keep_it_down(tmp_path: Path) -> None:
    clock = Clock()
    with deployment(tmp_path, clock, sglang_manifest(QWEN.name, Setup(spec_tokens=3))) as dep:
        assert (info(dep)["speculative_num_steps"], info(dep)["max_running_requests"]) == (3, 1024)
        restart_with(dep, clock, '- "4"', '- "3"')  # draft tokens 3: resolved to K + 1 = 4
        assert dep.restarts == 1
        assert info(dep)["speculative_num_draft_tokens"] == 4
        replay = "- --enable-linear-replayssm\n            - --enable-metrics"
        restart_with(dep, clock, "- --enable-metrics", replay)  # auto: extra_buffer
        assert "requires --mamba-radix-cache-strategy no_buffer" in dep.history[-1][1]
        assert httpx.get(dep.url).status_code == 503


def test_metrics_only_with_enable_metrics(tmp_path: Path) -> None:
    clock = Clock()
    text = sglang_manifest(QWEN.name, Setup(spec_tokens=3))
    with deployment(tmp_path, clock, text.replace("            - --enable-metrics\n", "")) as dep:
        assert httpx.get(dep.url).status_code == 404
        restart_with(dep, clock, '- "1024"', '- "1024"\n            - --enable-metrics')
        clock.t += 30
        body = httpx.get(dep.url).text
        assert 'sglang:num_running_reqs{engine_type="unified",model_name="' in body
        assert "sglang:spec_verify_calls_total" in body


def test_the_standalone_simulator_serves_sglang() -> None:
    """`python -m autotuner.sim --engine sglang --spec-tokens 3`: SGLang as an operator starts
    it for K = 3, at a fixed step time."""
    options = argparse.Namespace(port=0, spec_tokens=3, model=QWEN.name, step_ms=20.0)
    setup = SimSetup(spec_tokens=3, acceptance=ACCEPTANCE)
    engine = CompletionsEngine(lambda: setup, lambda batch, s: 0.02)
    with sglang_server(options, engine) as server:
        answer = httpx.get(f"{server.url}/server_info").json()
        assert (answer["speculative_algorithm"], answer["speculative_num_steps"]) == ("EAGLE", 3)
        assert "sglang:spec_num_steps" in httpx.get(f"{server.url}/metrics").text
