"""`autotuner controller` as a process: the watches, the stepping thread, the exporter and
(optionally) one Lease for the whole process, as controller-runtime's managers hold one."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client as k8s

from autotuner.actuators.lease import LeaseElector
from autotuner.fleet.build import loop_builder, shared_observer
from autotuner.fleet.kube import KubeStatusWriter, SpecTunerWatch
from autotuner.fleet.loops import Fleet
from autotuner.fleet.shards import Shard
from autotuner.fleet.spec import SpecTunerSpec, settings_for
from autotuner.settings import Settings
from autotuner.sources.shared_prometheus import SharedSources
from autotuner.telling.exporter import TunerMetrics
from autotuner.telling.fleet_metrics import FleetMetrics

STEPS_THREAD = "fleet-steps"
MAX_IDLE_S = 1.0  # the stepping thread looks for new loops at least this often


@dataclass
class FleetProcess:
    """The parts of one controller process, started by `start` and stopped by `stop`."""

    fleet: Fleet
    watches: list[SpecTunerWatch]
    elector: LeaseElector | None
    sources: SharedSources = field(default_factory=SharedSources)  # Prometheus, shared
    stop_event: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        for watch in self.watches:
            self._thread(watch.run, f"watch-{watch.namespace or 'all'}")
        self._thread(self.step_forever, STEPS_THREAD)

    def _thread(self, run: object, name: str) -> None:
        thread = threading.Thread(target=run, name=name, daemon=True)  # type: ignore[arg-type]
        thread.start()
        self.threads.append(thread)

    def step_forever(self) -> None:
        """Step the due loops (while leading), then sleep until the next is due."""
        while not self.stop_event.is_set():
            if self.elector is None or self.elector.try_acquire_or_renew():
                self.fleet.step_due()
            upcoming = self.fleet.next_due()
            idle = MAX_IDLE_S if upcoming is None else upcoming - self.fleet.clock()
            self.fleet.wake.wait(min(max(idle, 0.0), MAX_IDLE_S))
            self.fleet.wake.clear()

    def stop(self, grace_s: float) -> None:
        self.stop_event.set()
        for watch in self.watches:
            watch.close()
        # The stepping thread finishes its step; a watch blocked on its stream is a daemon
        # thread that ends with the process (nothing of it needs flushing).
        for thread in self.threads:
            if thread.name == STEPS_THREAD:
                thread.join(grace_s)
        self.fleet.close()
        self.sources.close()
        if self.elector is not None:
            self.elector.release()

    def metrics(self) -> FleetMetrics:
        return FleetMetrics(self._tuner_metrics)

    def _tuner_metrics(self) -> Mapping[str, TunerMetrics]:
        with self.fleet.lock:
            loops = list(self.fleet.loops.values())
        return {
            f"{loop.key[0]}/{loop.key[1]}": loop.controller.metrics
            for loop in loops
            if loop.controller is not None
        }

    def alive(self) -> bool:
        return all(thread.is_alive() for thread in self.threads)

    def ready(self) -> tuple[bool, str]:
        waiting = [w.namespace or "all" for w in self.watches if not w.synced.is_set()]
        if waiting:
            return False, f"SpecTuners not listed yet in {', '.join(waiting)}"
        return True, "ready"


def fleet_process(
    api: k8s.ApiClient,
    base: Settings,
    config: Path | None,
    *,
    namespaces: list[str],
    identity: str,
    logger: logging.Logger,
    workers: int,
    lease_namespace: str | None,
    shard: Shard | None = None,
) -> FleetProcess:
    """The process's parts: one watch per namespace (one for all when none is named); with
    a `shard`, only the SpecTuners it holds get loops, and the Lease is the shard's own."""
    shard = shard or Shard()

    def spec_settings(spec: SpecTunerSpec, namespace: str) -> Settings:
        return settings_for(spec, namespace, config)

    target = base.target
    sources = SharedSources()
    fleet = Fleet(
        spec_settings,
        loop_builder(api, logger, identity=identity, observe=shared_observer(sources)),
        KubeStatusWriter(api, target.request_timeout_s),
        logger,
        workers=workers,
        shard=shard,
    )
    stop = threading.Event()
    scopes: list[str | None] = [*namespaces] or [None]
    watches = [
        SpecTunerWatch(
            api, fleet, namespace, stop=stop, logger=logger, timeout_s=target.request_timeout_s
        )
        for namespace in scopes
    ]
    elector = None
    if lease_namespace:
        elector = LeaseElector(
            api,
            namespace=lease_namespace,
            name=shard.lease_name(target.lease_name or "spec-autotuner-controller"),
            identity=identity,
            lease_duration_s=target.lease_duration_s,
        )
    return FleetProcess(fleet, watches, elector, sources, stop_event=stop)
