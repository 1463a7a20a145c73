"""A fleet controller as the tests run it: SpecTuners in the loopback API server, watched
by the real watch code; engines simulated by the truth engine from what each target runs;
the test's own clock; steps taken when the test says."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from autotuner.actuators.kubeapi import K8sTarget, api_client
from autotuner.controller import Observer
from autotuner.core.model.registry import load_model
from autotuner.core.predict.hardware import datasheet
from autotuner.core.types import Observation
from autotuner.engines.vllm.setup import parse_setup
from autotuner.fleet.build import loop_builder
from autotuner.fleet.kube import KubeStatusWriter, SpecTunerWatch
from autotuner.fleet.loops import Fleet
from autotuner.fleet.shards import Shard
from autotuner.fleet.spec import SpecTunerSpec
from autotuner.settings import Settings, cli_overrides, load_settings
from autotuner.sim.truth import TruthEngine
from tests.support.fake_apiserver import FakeApiServer, Obj
from tests.support.settings import ACT_AT_ONCE

MODEL = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4")
H200 = datasheet("H200")
TRUTH = TruthEngine(MODEL, H200)
MTP = '{"method":"mtp","num_speculative_tokens":3}'
ARGS = ["--model", MODEL.name, "--speculative-config", MTP]
# What every test SpecTuner runs with beneath its spec: no holding back, the sim's model.
BENEATH = [p for p in ACT_AT_ONCE if not p.startswith("mode=")] + [
    f"model.id={MODEL.name}",
    "target.rollout_deadline_s=300",
    "loop.interval_s=60",
    "quality.enabled=false",
]


def spectuner(name: str, target: str, namespace: str = "llm", **spec: Any) -> Obj:
    return {
        "apiVersion": "spec-autotuner.io/v1alpha1",
        "kind": "SpecTuner",
        "metadata": {"name": name, "namespace": namespace, "generation": 1},
        "spec": {"targetRef": {"kind": "Deployment", "name": target}, **spec},
    }


def edit_spec(server: FakeApiServer, namespace: str, name: str, **changes: Any) -> None:
    """A user's `kubectl edit`: the spec changes, so the generation moves."""
    obj = server.get("SpecTuner", namespace, name)
    obj["spec"].update(changes)
    obj["metadata"]["generation"] += 1
    server.put("SpecTuner", obj)


def _deep(base: dict[str, Any], layer: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in layer.items():
        old = merged.get(key)
        merged[key] = (
            _deep(old, value) if isinstance(old, dict) and isinstance(value, Mapping) else value
        )
    return merged


def settings_for(spec: SpecTunerSpec, namespace: str) -> Settings:
    tree = _deep(cli_overrides(BENEATH), spec.layer(namespace))
    return load_settings(cli=tree)[0]


@dataclass
class Demand:
    """The batch each simulated engine sees (one value for all)."""

    batch: float = 512.0


def truth_observer(
    server: FakeApiServer, clock: list[float], demand: Demand
) -> Callable[[Settings], Observer]:
    """Each target's engine as the truth engine serves what its Deployment runs (the last
    args seen once the Deployment is gone, as a scrape of a dying pod would)."""

    def observer(settings: Settings) -> Observer:
        target = K8sTarget.parse(settings.target.uri)
        seen: list[list[str]] = [ARGS]

        def observe() -> Observation:
            try:
                obj = server.get("Deployment", target.namespace, target.name)
                seen[0] = obj["spec"]["template"]["spec"]["containers"][0]["args"]
            except KeyError:
                pass
            return TRUTH.observation(
                now=clock[0],
                window_s=60,
                setup=parse_setup(seen[0]),
                batch=demand.batch,
                rates=(0.8, 0.7, 0.6),
            )

        return observe

    return observer


@dataclass
class RunningFleet:
    fleet: Fleet
    watch: SpecTunerWatch
    clock: list[float]
    demand: Demand

    def steps(self, count: int) -> None:
        """`count` intervals of simulated time, every due loop stepped in each."""
        for _ in range(count):
            self.clock[0] += 60
            self.fleet.step_due()


def wait_for(condition: Callable[[], bool], what: str, within_s: float = 20.0) -> None:
    """Until the watch thread has delivered what the test expects (never a fixed sleep)."""
    ends = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > ends:
            raise AssertionError(f"not within {within_s}s: {what}")
        time.sleep(0.01)


@contextmanager
def running_fleet(
    server: FakeApiServer, namespace: str | None = "llm", shard: Shard | None = None
) -> Iterator[RunningFleet]:
    clock, demand = [1000.0], Demand()
    api = api_client(server.url, timeout_s=5)
    logger = logging.getLogger("test.fleet")
    build = loop_builder(
        api,
        logger,
        identity="fleet-test",
        observe=truth_observer(server, clock, demand),
        clock=lambda: clock[0],
    )
    fleet = Fleet(
        settings_for,
        build,
        KubeStatusWriter(api, 5),
        logger,
        lambda: clock[0],
        shard=shard or Shard(),
    )
    stop = threading.Event()
    watch = SpecTunerWatch(
        api, fleet, namespace, stop=stop, logger=logger, watch_s=30, backoff_s=0.05
    )
    thread = threading.Thread(target=watch.run, daemon=True)
    thread.start()
    wait_for(watch.synced.is_set, "the first list")
    try:
        yield RunningFleet(fleet, watch, clock, demand)
    finally:
        watch.close()
        server.drop_watches()
        thread.join(10)
