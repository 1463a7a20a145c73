"""The simulated deployment restarts as a real one does: nothing is served while it is down, and
a setup the model or the engine build cannot run does not come up."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx

from autotuner.actuators.manifest import ManifestActuator
from autotuner.core.model.registry import load_model
from autotuner.core.predict.hardware import datasheet
from autotuner.core.types import Setup
from autotuner.engines.vllm.capabilities import FOLLOW_BUILD, UPSTREAM
from autotuner.sim.deployment import SimulatedDeployment, demo_manifest
from autotuner.sim.truth import TruthEngine
from tests.support.clock import Clock

HYBRID = "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4"
DENSE = "meta-llama/Llama-3.1-70B-Instruct-FP8"


def wait_until(check: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def deployment(
    tmp_path: Path, model_id: str, clock: Clock, **options: object
) -> SimulatedDeployment:
    manifest = tmp_path / "vllm.yaml"
    manifest.write_text(demo_manifest(model_id, Setup(spec_tokens=3)))
    truth = TruthEngine(load_model(model_id), datasheet("H100-SXM"))
    return SimulatedDeployment(
        manifest,
        truth,
        load=lambda t: 64.0,
        acceptance=(0.8, 0.7, 0.6),
        restart_gap_s=0.05,
        poll_s=0.01,
        clock=clock,
        **options,  # type: ignore[arg-type]
    )


def switch(dep: SimulatedDeployment, setup: Setup, *, companions: bool = True) -> None:
    """Write `setup` as the tuner does (with the companion flags the build needs for the
    served model), or with its own flags alone (`companions` False)."""
    actuator = ManifestActuator(dep.manifest.path)
    if companions:
        actuator.engine = FOLLOW_BUILD.serving(dep.truth.model)
    actuator.apply(
        setup, state=None, expected_version=None, saved_speculative_config={"method": "mtp"}
    )


def test_nothing_is_served_while_the_server_restarts(tmp_path: Path) -> None:
    clock = Clock()
    with deployment(tmp_path, HYBRID, clock) as dep:
        clock.t += 10
        served = dep.served()
        assert served > 0
        switch(dep, Setup(replay_window=16))
        wait_until(lambda: not dep.server.up, "the server to go down")
        down_at = dep.served()
        clock.t += 600  # a long restart: ten minutes without a token
        wait_until(lambda: dep.restarts == 1, "the restart")
        assert dep.served() == down_at
        assert dep.sim.setup.setup == Setup(replay_window=16)
        clock.t += 10
        assert dep.served() > down_at  # serving again


def test_a_dense_model_never_comes_up_with_replay(tmp_path: Path) -> None:
    clock = Clock()
    with deployment(tmp_path, DENSE, clock, engine=UPSTREAM) as dep:
        assert dep.refusal(Setup(replay_window=16)) is not None
        assert dep.refusal(Setup(spec_tokens=2, replay_window=16)) is not None
        assert dep.refusal(Setup(spec_tokens=2)) is None
        switch(dep, Setup(replay_window=16))
        wait_until(lambda: any("refused" in h for _, h in dep.history), "the refusal")
        assert not dep.server.up
        assert httpx.get(dep.url).status_code == 503
        assert dep.sim.setup.setup == Setup(spec_tokens=3)
        assert dep.restarts == 0
        switch(dep, Setup(spec_tokens=2))
        wait_until(lambda: dep.restarts == 1, "the restart with spec:2")
        assert httpx.get(dep.url).status_code == 200
        assert dep.sim.setup.setup == Setup(spec_tokens=2)


def test_the_engine_build_refuses_what_it_lacks(tmp_path: Path) -> None:
    with deployment(tmp_path, HYBRID, Clock(), engine=UPSTREAM) as dep:
        assert dep.refusal(Setup(spec_tokens=2, replay_window=16)) is not None
        assert dep.refusal(Setup(replay_window=16)) is None


def test_vllm_0_33_exits_at_start_without_the_companion_flags(tmp_path: Path) -> None:
    """On the demo's image (vLLM 0.33) replay needs FlashInfer and prefix caching off: written
    bare it never comes up (vLLM exits at start); with its companions it does."""
    with deployment(tmp_path, HYBRID, Clock()) as dep:
        switch(dep, Setup(spec_tokens=3, replay_window=16), companions=False)
        wait_until(lambda: any("refused" in h for _, h in dep.history), "the refusal")
        refused = next(h for _, h in dep.history if "refused" in h)
        assert "--mamba-backend flashinfer" in refused
        assert "--no-enable-prefix-caching" in refused
        assert dep.restarts == 0
        assert not dep.server.up
        switch(dep, Setup(spec_tokens=2, replay_window=8))
        wait_until(lambda: dep.restarts == 1, "the restart with the companions")
        assert dep.sim.setup.setup == Setup(spec_tokens=2, replay_window=8)
        switch(dep, Setup(spec_tokens=3, replay_window=32))  # L > 16 on FlashInfer
        wait_until(lambda: sum("refused" in h for _, h in dep.history) == 2, "the refusal")
        assert "<= 16" in dep.history[-1][1]


def test_prefix_caching_follows_the_args_and_stops_counting_when_off(tmp_path: Path) -> None:
    """vLLM's default for hybrids is prefix caching on; replay+spec's companions turn it off,
    and the engine then shows so in cache_config_info and looks nothing up."""
    with deployment(tmp_path, HYBRID, Clock()) as dep:

        def caching() -> bool:  # read afresh each time (the engine restarts into a new setup)
            return dep.sim.setup.prefix_caching

        assert caching()
        assert 'enable_prefix_caching="True"' in httpx.get(dep.url).text
        switch(dep, Setup(spec_tokens=2, replay_window=8))
        wait_until(lambda: dep.restarts == 1, "the restart with the companions")
        assert not caching()
        assert 'enable_prefix_caching="False"' in httpx.get(dep.url).text
        switch(dep, Setup(spec_tokens=3))
        wait_until(lambda: dep.restarts == 2, "the restart back to spec:3")
        assert caching()  # the operator's default restored
