"""The parts of one SpecTuner's loop, as `autotuner run` wires them, except what the fleet
shares: one API client (its connection pool) for every target, and no Lease per target
(leadership is the process's)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from kubernetes import client as k8s

from autotuner.actuators.kubeapi import K8sTarget
from autotuner.actuators.kubernetes import KubernetesActuator
from autotuner.controller import Controller, Observer
from autotuner.core.predict.hardware import datasheet, load_profile
from autotuner.fleet.loops import Key
from autotuner.settings import Settings
from autotuner.sources.observers import PrometheusObserver, ScrapeObserver
from autotuner.sources.shared_prometheus import SharedSources
from autotuner.telling.exporter import TunerMetrics
from autotuner.wiring import controller_for, quality_guard, served_model, settled_engine

ObserverFor = Callable[[Settings], Observer]


def observer_for(settings: Settings) -> Observer:
    """The engine's own /metrics, or the Prometheus server, as the settings say."""
    if settings.source.direct:
        return ScrapeObserver(settings)
    return PrometheusObserver(settings)


def shared_observer(sources: SharedSources) -> ObserverFor:
    """As `observer_for`, but every Prometheus target reads through the fleet's shared
    sources: one batched query per metric and step for all of them (sources/shared_prometheus)."""

    def observe(settings: Settings) -> Observer:
        source = settings.source
        if source.direct:
            return ScrapeObserver(settings)
        view = sources.view(
            source.urls[0],
            source.selector,
            engine=settings.engine.engine.kind.value,
            scrape_interval_s=source.scrape_interval_s,
            timeout_s=source.timeout_s,
            pod_label=source.pod_label,
        )
        return PrometheusObserver(settings, view)

    return observe


def loop_builder(
    api: k8s.ApiClient,
    logger: logging.Logger,
    *,
    identity: str,
    observe: ObserverFor = observer_for,
    clock: Callable[[], float] | None = None,
) -> Callable[[Settings, Key], Controller]:
    """A builder of one SpecTuner's Controller over the shared API client."""

    def build(settings: Settings, key: Key) -> Controller:
        settings = settled_engine(settings)
        profile = settings.model.profile
        hardware = load_profile(profile) if profile else datasheet(settings.model.gpu)
        target = settings.target
        actuator = KubernetesActuator(
            K8sTarget.parse(target.uri),
            api,
            dialect=settings.engine.dialect,
            allow_surge=target.allow_surge,
            allow_low_precision_replay=target.allow_low_precision_replay,
            identity=identity,
            timeout_s=target.request_timeout_s,
            deadline_s=target.call_deadline_s,
            write_managed=target.write_managed,
            canary=target.canary,
        )
        quality, quality_off = quality_guard(settings)
        parts = {} if clock is None else {"clock": clock}
        return controller_for(
            settings,
            (served_model(settings, actuator), hardware),
            observe(settings),
            actuator,
            metrics=TunerMetrics(),
            logger=logger.getChild(f"{key[0]}.{key[1]}"),
            quality=quality,
            quality_off=quality_off,
            **parts,
        )

    return build
