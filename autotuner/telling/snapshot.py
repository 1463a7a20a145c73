"""What the sidecar shows of its latest loop step: one Snapshot, read whole by the metrics'
collectors and written out as the /decision document."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autotuner.core.decide.state import TunerState
from autotuner.core.engine.capabilities import EngineCapabilities
from autotuner.core.predict.attribution import Factor
from autotuner.core.predict.comparisons import Crossover
from autotuner.core.types import Decision, Observation, Setup
from autotuner.settings import Mode


@dataclass
class Snapshot:
    """Everything the exporter shows about the latest loop step."""

    at: float = 0.0
    observation: Observation | None = None
    decision: Decision | None = None
    state: TunerState = field(default_factory=TunerState)
    live: Setup | None = None
    leader: bool = False
    paused: bool = False
    rollout_stuck: bool = False
    last_usable_at: float | None = None
    crossover: Crossover | None = None
    calibration: list[Factor] = field(default_factory=list)
    quick_rule_rate: float | None = None
    mode: Mode = Mode.ADVISE
    inputs: dict[str, Any] = field(default_factory=dict)  # workload inputs with their sources
    engine: EngineCapabilities | None = None  # what the build accepts, as this step saw it


def decision_document(snapshot: Snapshot) -> dict[str, Any]:
    """The /decision body: the last Decision with every number behind it."""
    obs = snapshot.observation
    return {
        "at": snapshot.at,
        "mode": snapshot.mode.value,
        "leader": snapshot.leader,
        "paused": snapshot.paused,
        "live_setup": snapshot.live.label if snapshot.live else None,
        "decision": snapshot.decision.model_dump(mode="json") if snapshot.decision else None,
        "observation": obs.model_dump(mode="json", exclude={"batch": {"values"}}) if obs else None,
        "crossover": _crossover_document(snapshot.crossover),
        "calibration": [f._asdict() for f in snapshot.calibration],
        "inputs": snapshot.inputs,
        "engine": snapshot.engine.model_dump(mode="json", exclude={"build"})
        if snapshot.engine
        else None,
        "build": build_document(snapshot.engine),
        "state": {
            "current": snapshot.state.current.label if snapshot.state.current else None,
            "verification": snapshot.state.verification.model_dump(mode="json")
            if snapshot.state.verification
            else None,
            "changes": list(snapshot.state.changes),
            "quarantine": snapshot.state.quarantine,
            "acceptance_drafts": snapshot.state.acceptance.drafts,
            "quality": snapshot.state.last_quality.model_dump(mode="json")
            if snapshot.state.last_quality
            else None,
            "refused": {k: r.model_dump(mode="json") for k, r in snapshot.state.refused.items()},
        },
    }


def build_document(engine: EngineCapabilities | None) -> dict[str, Any] | None:
    """The capability table's row in force: which build, where that came from, which row for
    the served model, and whether it decides (the `build` preset) or a preset overrides it."""
    if engine is None or engine.build is None:
        return None
    build, row = engine.build, engine.row
    return {
        "description": build.describe(),
        "version": build.version,
        "origin": build.origin.value,
        "detail": build.detail,
        "known": build.known,
        "row": row.model_dump(mode="json") if row is not None else None,
        "decides": engine.follows_build,
        "override": None if engine.follows_build else f"engine.capabilities: {engine.name}",
    }


def _crossover_document(flip: Crossover | None) -> list[object] | None:
    """[from, to, batch], as the dashboard's /decision readers expect."""
    return [flip.loser, flip.winner, flip.batch] if flip is not None else None
