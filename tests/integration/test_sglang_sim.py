"""The sidecar against a simulated SGLang 0.5.23 serving Qwen3.5-122B-A10B at large batch: it
reads acceptance and batch as the simulator's truth has them, proposes replay with speculation,
and writes args the simulated SGLang starts with.

SGLang 0.5.23's start-up rules the written args must pass (the simulated SGLang enforces them,
sim/sglang_startup.py; paths of the wheel under sglang/srt/):
- speculation without --max-running-requests caps the server at 48 running requests
  (arg_groups/speculative_hook.py:1086-1094): the operator's 1024 must survive the patch;
- --speculative-eagle-topk 1 forces draft tokens = steps + 1 (speculative_hook.py:1255-1266),
  and steps without a topk fail (the `> 1` checks at :1274-1276);
- --enable-linear-replayssm-spec needs a linear chain (topk in {None, 1}) and excludes
  --enable-linear-replayssm (arg_groups/attention_hook.py:450-507);
- --enable-linear-replayssm refuses the extra_buffer strategy `auto` resolves to with the
  overlap scheduler on (attention_hook.py:417-423, overrides.py:453-487), and an explicit
  no_buffer asserts --disable-overlap-schedule (arg_groups/mamba_hook.py:156-163);
- /metrics exists only with --enable-metrics (arg_groups/fields/observability.py:70).
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from autotuner.core.engine.workload import Workload
from autotuner.core.model.registry import load_model
from autotuner.core.predict.hardware import datasheet
from autotuner.core.types import Action, Setup, SetupKind
from autotuner.demo import demo_settings
from autotuner.sim.clock import EngineClock
from autotuner.sim.deployment import SimulatedDeployment
from autotuner.sim.sglang import SglangServer, sglang_manifest
from autotuner.sim.sglang_startup import start
from autotuner.sim.truth import TruthEngine
from autotuner.sources.observers import ScrapeObserver
from autotuner.telling.exporter import TunerMetrics
from autotuner.telling.logs import configure
from autotuner.wiring import build_controller

MODEL = load_model("Qwen/Qwen3.5-122B-A10B")
RATES = (0.8, 0.7, 0.6)
DEMAND = 480.0  # requests per engine: large batch, where speculation alone loses to plain
TRUTH = TruthEngine(MODEL, datasheet("H200"), Workload(tensor_parallel=4))
DAY_S = 90.0  # the demo's compressed day: its settings scale every duration to it


def test_the_sidecar_reads_sglang_and_moves_qwen35_to_replay_with_speculation(
    tmp_path: Path,
) -> None:
    manifest = tmp_path / "sglang.yaml"
    manifest.write_text(sglang_manifest(MODEL.name, Setup(spec_tokens=3)))
    settings = demo_settings(
        model_id=MODEL.name,
        gpu="H200",
        duration_s=DAY_S,
        manifest=manifest,
        tp=4,
        drafter=None,
        engine="sglang",
    )
    clock = EngineClock(time.time())
    with SimulatedDeployment(
        manifest,
        TRUTH,
        load=lambda t: DEMAND,
        acceptance=RATES,
        restart_gap_s=1.0,
        engine=settings.engine.capabilities,
        clock=clock,
        watch=False,
        kind=SglangServer(MODEL, RATES),
    ) as dep:
        source = settings.source.model_copy(update={"urls": [dep.url]})
        controller = build_controller(
            settings.model_copy(update={"source": source}),
            TunerMetrics(),
            configure("json", "warning"),
        )
        controller.clock = clock
        assert isinstance(controller.observe, ScrapeObserver)
        controller.observe.scraper.clock = clock
        switch = None
        for _ in range(400):  # 80 s of the compressed day at most
            dep.poll()
            decision = controller.step()
            dep.poll()
            observed = controller.metrics.current().observation
            if decision.action is Action.SWITCH:
                switch = decision
                break
            clock.wait(settings.loop.interval_s)
        assert switch is not None, "no switch at batch 480"
        assert observed is not None
        assert observed.acceptance is not None
        assert observed.batch is not None
        # What the simulator runs: spec:3 at its capacity, the rest waiting.
        running = dep.sim.engines[0].running
        assert observed.batch.mean == running
        assert observed.waiting_mean == DEMAND - running
        truth_tau = 1 + RATES[0] + RATES[0] * RATES[1] + RATES[0] * RATES[1] * RATES[2]
        assert abs(observed.acceptance.tau - truth_tau) < 1e-6
        assert "geometric fit" in (observed.acceptance.note or "")
        # The proposal, and args the simulated SGLang starts with.
        assert switch.target is not None
        assert switch.target.kind is SetupKind.REPLAY_SPEC
        clock.wait(2.0)
        dep.poll()
        assert dep.server.up, dep.history[-1]
        assert dep.history[-1][1].startswith("replay+spec:")
        written = start(dep.args, MODEL)  # raises StartupError where SGLang would refuse
        assert written.max_running == 1024
        info = httpx.get(f"{dep.server.url}/server_info").json()
        assert info["enable_linear_replayssm_spec"] is True
        assert info["speculative_eagle_topk"] == 1
        assert info["speculative_num_draft_tokens"] == info["speculative_num_steps"] + 1
        assert httpx.get(dep.url).status_code == 200
