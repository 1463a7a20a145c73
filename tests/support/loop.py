"""The sidecar's loop as the tests build it: a Controller with a private metrics registry, the
"test" logger and the test's own clock."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from autotuner.actuators.base import Actuator
from autotuner.controller import Controller, Observer
from autotuner.core.model.spec import ModelSpec
from autotuner.core.predict.hardware import HardwareProfile
from autotuner.settings import Settings
from autotuner.telling.exporter import TunerMetrics


def wired(
    settings: Settings,
    served: tuple[ModelSpec, HardwareProfile],
    observe: Observer,
    actuator: Actuator,
    clock: Callable[[], float],
    **parts: Any,
) -> Controller:
    """The loop over `actuator`, for `served` (model, GPU); `parts`: a Lease elector, a quality
    guard and what else the test wires."""
    model, hardware = served
    actuator.engine = settings.engine.capabilities.serving(model)  # as wiring does
    actuator.declared_build = settings.engine.build
    return Controller(
        settings=settings,
        model=model,
        hardware=hardware,
        observe=observe,
        actuator=actuator,
        metrics=TunerMetrics(),
        logger=logging.getLogger("test"),
        clock=clock,
        **parts,
    )
