"""Fit the cost model's efficiencies to measured step times (bounded least squares in log
space, by coordinate search), and report the fit's error per setup before and after."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autotuner.core.engine.workload import Workload
from autotuner.core.model.spec import ModelSpec
from autotuner.core.predict.acceptance import from_conditional
from autotuner.core.predict.costmodel import predict
from autotuner.core.predict.hardware import HardwareProfile, KernelEfficiency
from autotuner.core.types import Setup

PARAMETERS = ("gemm", "attention", "ssm", "copies")
BOUNDS = (0.05, 1.0)


@dataclass(frozen=True)
class Measured:
    setup: Setup
    batch: int
    acceptance: tuple[float, ...]
    step_time_s: float


@dataclass(frozen=True)
class Fit:
    profile: HardwareProfile
    error_before: dict[str, float]  # setup label -> mean |log error| as a fraction
    error_after: dict[str, float]


def _errors(
    model: ModelSpec, profile: HardwareProfile, points: Sequence[Measured], workload: Workload
) -> list[tuple[str, float]]:
    out = []
    for point in points:
        accept = from_conditional(
            (list(point.acceptance) + [0.0] * point.setup.spec_tokens)[: point.setup.spec_tokens]
        )
        predicted = float(
            predict(model, profile, point.setup, [point.batch], accept, workload).step_time_s[0]
        )
        out.append((point.setup.label, math.log(predicted / point.step_time_s)))
    return out


def _loss(
    model: ModelSpec, profile: HardwareProfile, points: Sequence[Measured], workload: Workload
) -> float:
    return float(np.mean([e * e for _, e in _errors(model, profile, points, workload)]))


def _summary(errors: list[tuple[str, float]]) -> dict[str, float]:
    table: dict[str, list[float]] = {}
    for label, error in errors:
        table.setdefault(label, []).append(abs(math.expm1(error)))
    return {label: float(np.mean(values)) for label, values in sorted(table.items())}


TIME_KEYS = {"gemm": "gemm", "attention": "attention", "ssm": "ssm", "copies": "copy"}


def calibrate(
    model: ModelSpec,
    profile: HardwareProfile,
    points: Sequence[Measured],
    workload: Workload | None = None,
    iterations: int = 8,
) -> Fit:
    """Memory-bound kernel time is bytes / (peak x efficiency): linear in 1 / efficiency.
    Each iteration takes every class's time at the current efficiencies, solves the linear
    least squares (relative errors, lightly pulled towards the current values so classes the
    data does not see stay put) for the inverse efficiencies, and clips them to the bounds."""
    workload = workload or Workload()
    if not points:
        raise ValueError("no measured points to calibrate from")
    current = profile
    for _ in range(iterations):
        rows, targets = [], []
        for point in points:
            accept = from_conditional(
                (list(point.acceptance) + [0.0] * point.setup.spec_tokens)[
                    : point.setup.spec_tokens
                ]
            )
            curve = predict(model, current, point.setup, [point.batch], accept, workload)
            at_full = {
                name: float(curve.time_s[key][0]) * getattr(current.efficiency, name)
                for name, key in TIME_KEYS.items()
            }
            others = float(curve.step_time_s[0]) - sum(
                float(curve.time_s[key][0]) for key in TIME_KEYS.values()
            )
            rows.append([at_full[name] / point.step_time_s for name in PARAMETERS])
            targets.append((point.step_time_s - others) / point.step_time_s)
        prior = np.array([1 / getattr(current.efficiency, name) for name in PARAMETERS])
        weight = 1e-3
        matrix = np.vstack([np.array(rows), weight * np.eye(len(PARAMETERS))])
        vector = np.concatenate([np.array(targets), weight * prior])
        inverse, *_ = np.linalg.lstsq(matrix, vector, rcond=None)
        efficiencies = np.clip(1 / np.maximum(inverse, 1e-9), *BOUNDS)
        for name, value in zip(PARAMETERS, efficiencies, strict=True):
            current = _with(current, name, float(value))
    fitted = current.model_copy(
        update={
            "source": "calibrated",
            "notes": (*profile.notes, f"efficiencies fitted to {len(points)} measured step times"),
        }
    )
    if _loss(model, fitted, points, workload) > _loss(model, profile, points, workload):
        fitted = profile.model_copy(update={"source": "calibrated"})  # never fit worse
    return Fit(
        fitted,
        _summary(_errors(model, profile, points, workload)),
        _summary(_errors(model, fitted, points, workload)),
    )


def _with(profile: HardwareProfile, name: str, value: float) -> HardwareProfile:
    efficiency = KernelEfficiency(**{**profile.efficiency.model_dump(), name: value})
    return profile.model_copy(update={"efficiency": efficiency})
