"""Wiring: the parts the settings name, put together into a Controller."""

from __future__ import annotations

import logging
import os
import socket
from typing import TYPE_CHECKING, Any

from autotuner.controller import GUARD_DISABLED, Controller, Observer
from autotuner.core.engine.args import EngineArgs
from autotuner.core.model.registry import load_model
from autotuner.core.model.spec import ModelSpec
from autotuner.core.predict.hardware import HardwareProfile, datasheet, load_profile
from autotuner.engines.kinds import EngineKind, kind_of_command
from autotuner.errors import ActuatorError, ArgsError, AutotunerError, InputError
from autotuner.settings import Settings
from autotuner.sources.detect import detect
from autotuner.sources.observers import PrometheusObserver, ScrapeObserver
from autotuner.telling.exporter import TunerMetrics
from autotuner.telling.logs import event

if TYPE_CHECKING:
    from autotuner.actuators.base import Actuator
    from autotuner.actuators.lease import LeaseElector
    from autotuner.canary.guard import QualityGuard


def build_controller(
    settings: Settings, metrics: TunerMetrics, logger: logging.Logger
) -> Controller:
    """Wire the parts the settings name (`engine.kind: auto`: the engine detected first)."""
    settings = settled_engine(settings)
    profile = settings.model.profile
    hardware = load_profile(profile) if profile else datasheet(settings.model.gpu)
    observe: Observer = (
        ScrapeObserver(settings) if settings.source.direct else PrometheusObserver(settings)
    )
    target = settings.target
    identity = target.identity or os.environ.get("POD_NAME") or socket.gethostname()
    uri = target.uri or _own_workload(settings)
    actuator = _actuator(settings, uri, identity) if uri else None
    quality, quality_off = quality_guard(settings)
    return controller_for(
        settings,
        (served_model(settings, actuator), hardware),
        observe,
        actuator,
        metrics=metrics,
        logger=logger,
        elector=_elector(settings, uri, identity) if uri.startswith("k8s://") else None,
        quality=quality,
        quality_off=quality_off,
    )


def controller_for(
    settings: Settings,
    served: tuple[ModelSpec, HardwareProfile],
    observe: Observer,
    actuator: Actuator | None,
    *,
    metrics: TunerMetrics,
    logger: logging.Logger,
    **parts: Any,
) -> Controller:
    """The loop over `actuator` for `served` (model, GPU), the actuator told the companion
    flags each setup needs on the target's build; `parts`: the Controller's optional fields
    (Lease elector, quality guard, clock)."""
    model, hardware = served
    for caution in settings.policy.cautions():
        event(logger, caution, logging.WARNING, setting="policy")
    if actuator is not None:
        actuator.engine = settings.engine.capabilities.serving(model)
        actuator.declared_build = settings.engine.build
    return Controller(
        settings=settings,
        model=model,
        hardware=hardware,
        observe=observe,
        actuator=actuator,
        metrics=metrics,
        logger=logger,
        **parts,
    )


def settled_engine(settings: Settings) -> Settings:
    """The settings with `engine.kind: auto` replaced by the engine the first source URL
    serves, else (an engine still loading its weights answers nothing) the one the target's
    command line starts; InputError when neither says which."""
    if settings.engine.kind is not EngineKind.AUTO:
        return settings
    source = settings.source
    if not source.direct or not source.urls:
        raise InputError(
            "engine.kind auto reads the engine from its own /metrics: with a Prometheus "
            "source, set engine.kind (vllm or sglang)"
        )
    found = detect(source.urls[0], deadline_s=source.timeout_s) or _started_by_target(settings)
    if found is None:
        raise InputError(
            f"engine.kind auto: {source.urls[0]} shows neither vllm: nor sglang: series and "
            "answers neither GET /server_info nor GET /version, and the target's command line "
            "names neither; set engine.kind"
        )
    return settings.detected(found)


def _started_by_target(settings: Settings) -> EngineKind | None:
    """The engine the target's command line starts (None: no target, or it cannot be read)."""
    from autotuner.actuators.targets import open_target

    try:
        uri = settings.target.uri or _own_workload(settings)
        if not uri:
            return None
        live = open_target(
            uri,
            kube_server=settings.target.kube_server,
            timeout_s=settings.target.request_timeout_s,
            deadline_s=settings.target.call_deadline_s,
        ).read()
    except AutotunerError:
        return None
    return kind_of_command(live.command, live.args)


def served_model(settings: Settings, actuator: Actuator | None) -> ModelSpec:
    """The model as the engine runs it: the settings' overrides first, else the dtypes the
    target's live command line gives (--mamba-ssm-cache-dtype, --mamba-cache-dtype, in args,
    command or an `sh -c` line), else the files."""
    live = _live_args(actuator, settings)
    return load_model(
        settings.model.id,
        weights=settings.model.weights,
        ssm_state_dtype=settings.model.ssm_state_dtype or live.mamba_ssm_cache_dtype,
        mamba_cache_dtype=live.mamba_cache_dtype,
    )


def _live_args(actuator: Actuator | None, settings: Settings) -> EngineArgs:
    if actuator is None:
        return EngineArgs()
    try:
        live = actuator.read()
        return settings.engine.dialect.live_args(live.command, live.args)
    except (ActuatorError, ArgsError):
        return EngineArgs()  # the loop says so at its first step; the files' dtypes meanwhile


def _own_workload(settings: Settings) -> str:
    """In a pod with no target set: the Deployment (or StatefulSet) that owns this pod."""
    pod, namespace = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
    if not (pod and namespace):
        return ""
    from autotuner.actuators.kubeapi import api_client, discover_target

    client = api_client(settings.target.kube_server, timeout_s=settings.target.request_timeout_s)
    return str(discover_target(client, namespace, pod))


def _actuator(settings: Settings, uri: str, identity: str) -> Actuator:
    from autotuner.actuators.targets import open_target

    return open_target(
        uri,
        kube_server=settings.target.kube_server,
        dialect=settings.engine.dialect,
        allow_surge=settings.target.allow_surge,
        allow_low_precision_replay=settings.target.allow_low_precision_replay,
        identity=identity,
        timeout_s=settings.target.request_timeout_s,
        deadline_s=settings.target.call_deadline_s,
        write_managed=settings.target.write_managed,
        canary=settings.target.canary,
    )


def _elector(settings: Settings, uri: str, identity: str) -> LeaseElector:
    from autotuner.actuators.kubeapi import K8sTarget, api_client
    from autotuner.actuators.lease import LeaseElector

    target, parsed = settings.target, K8sTarget.parse(uri)
    return LeaseElector(
        api_client(target.kube_server, timeout_s=target.request_timeout_s),
        namespace=parsed.namespace,
        name=target.lease_name or f"spec-autotuner-{parsed.name}",
        identity=identity,
        lease_duration_s=target.lease_duration_s,
    )


def quality_guard(settings: Settings) -> tuple[QualityGuard | None, str]:
    """The canary guard the settings ask for, or why there is none."""
    from autotuner.canary.guard import QualityGuard

    quality = settings.quality
    if not quality.enabled:
        return None, GUARD_DISABLED
    url = quality.url
    if not url and settings.source.direct:
        url = settings.source.urls[0].removesuffix("/").removesuffix("/metrics")
    if not url:
        return None, "no canary URL: set quality.url to a replica's OpenAI-compatible base URL"
    return QualityGuard(quality, url), ""
