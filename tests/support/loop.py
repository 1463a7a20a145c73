"""The sidecar's loop as the tests build it: a Controller with a private metrics registry, the
"test" logger and the test's own clock, put together as wiring puts the sidecar's."""

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
from autotuner.wiring import controller_for


def wired(
    settings: Settings,
    served: tuple[ModelSpec, HardwareProfile],
    observe: Observer,
    actuator: Actuator | None,
    clock: Callable[[], float],
    **parts: Any,
) -> Controller:
    """The loop over `actuator`, for `served` (model, GPU); `parts`: a Lease elector, a quality
    guard and what else the test wires."""
    return controller_for(
        settings,
        served,
        observe,
        actuator,
        metrics=TunerMetrics(),
        logger=logging.getLogger("test"),
        clock=clock,
        **parts,
    )
