"""A SpecTuner's status from its loop's latest step: pure functions, no I/O.

Conditions follow the Kubernetes convention (metav1.Condition): one entry per type, a
lastTransitionTime that moves only when the status does, a CamelCase reason and a message."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from autotuner.core.decide.state import TunerState, Verification
from autotuner.telling.snapshot import Snapshot

Obj = dict[str, Any]
CONDITION_TYPES = ("Ready", "Paused", "Verifying", "Degraded")
DAY_S = 86400.0


@dataclass(frozen=True)
class Health:
    """What the fleet knows of a loop beside its snapshot: why it cannot run (None: it runs),
    as a CamelCase reason and a sentence."""

    reason: str | None = None
    message: str = ""


def timestamp(at: float) -> str:
    return datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def percent(gain: float | None) -> str | None:
    return None if gain is None else f"{gain:+.1%}"


def verified_gain(before: Verification | None, state: TunerState) -> float | None:
    """The gain a verification just measured: the rate on the new setup against the baseline
    it was judged against (None: no verification closed on this step, or no rates)."""
    if before is None or state.verification is not None or state.current != before.target:
        return None
    if not before.baseline_rate or state.last_rate is None:
        return None
    return state.last_rate / before.baseline_rate - 1.0


def status_of(
    snapshot: Snapshot,
    *,
    target: str,
    generation: int,
    health: Health,
    verified: float | None,
    previous: Sequence[Mapping[str, Any]],
    paused: bool = False,
) -> Obj:
    """The whole status: the latest decision, the setup, the gains, the conditions; `paused`:
    the spec (or the settings) pause the loop, as the target's annotation does."""
    state, decision = snapshot.state, snapshot.decision
    running = snapshot.live or state.current
    status: Obj = {
        "observedGeneration": generation,
        "target": target,
        "currentSetup": running.label if running else None,
        "predictedGain": percent(decision.gain) if decision else None,
        "verifiedGain": percent(verified),
        "crossoverBatch": snapshot.crossover.batch if snapshot.crossover else None,
        "restartsToday": sum(1 for t in state.changes if snapshot.at - t < DAY_S),
    }
    if decision is not None:
        status["lastDecision"] = {
            "id": decision.id,
            "at": timestamp(decision.at),
            "action": decision.action.value,
            "target": decision.target.label if decision.target else None,
            "blockedBy": decision.blocked_by.value if decision.blocked_by else None,
            "sentence": decision.sentence,
        }
    status["conditions"] = conditions(
        _condition_values(snapshot, health, paused), previous, generation, snapshot.at
    )
    return status


def degraded_status(
    *,
    target: str,
    generation: int,
    health: Health,
    previous: Sequence[Mapping[str, Any]],
    at: float,
) -> Obj:
    """The status of a SpecTuner whose loop cannot run (a bad spec, a target gone)."""
    values = {
        "Ready": ("False", health.reason or "NotRunning", health.message),
        "Paused": ("False", "NotRunning", ""),
        "Verifying": ("False", "NotRunning", ""),
        "Degraded": ("True", health.reason or "Unknown", health.message),
    }
    return {
        "observedGeneration": generation,
        "target": target,
        "conditions": conditions(values, previous, generation, at),
    }


def _condition_values(
    snapshot: Snapshot, health: Health, paused: bool
) -> dict[str, tuple[str, str, str]]:
    """type -> (status, reason, message) of each condition after a step."""
    observation = snapshot.observation
    usable = observation is not None and observation.usable
    why_not = observation.reason.value if observation and observation.reason else "NoData"
    verification = snapshot.state.verification
    return {
        "Ready": ("True", "Observing", "") if usable else ("False", _camel(why_not), ""),
        "Paused": ("True", "Paused", "patching stopped")
        if snapshot.paused or paused
        else ("False", "Running", ""),
        "Verifying": (
            ("True", "SwitchInFlight", f"verifying {verification.target.label}")
            if verification
            else ("False", "Settled", "")
        ),
        "Degraded": ("True", health.reason, health.message)
        if health.reason
        else ("False", "AsExpected", ""),
    }


def conditions(
    values: Mapping[str, tuple[str, str, str]],
    previous: Sequence[Mapping[str, Any]],
    generation: int,
    at: float,
) -> list[Obj]:
    """One condition per type; its lastTransitionTime kept while its status stays."""
    before = {c.get("type"): c for c in previous}
    out = []
    for kind in CONDITION_TYPES:
        status, reason, message = values[kind]
        old = before.get(kind) or {}
        since = old.get("lastTransitionTime") if old.get("status") == status else None
        out.append(
            {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastTransitionTime": since or timestamp(at),
                "observedGeneration": generation,
            }
        )
    return out


def _camel(word: str) -> str:
    return "".join(part.capitalize() for part in word.split("_"))


def same_status(a: Mapping[str, Any] | None, b: Mapping[str, Any], *, details: bool) -> bool:
    """Equal in substance: the setup, the conditions, the decision's action, target and block
    (and, with `details`, its sentence and the gains too). The decision's id and time never
    count: a step that changed nothing writes nothing."""
    if a is None:
        return False
    return bool(_substance(a, details) == _substance(b, details))


DETAILS = ("sentence",)
GAINS = ("predictedGain", "verifiedGain", "crossoverBatch")


def _substance(status: Mapping[str, Any], details: bool) -> dict[str, Any]:
    shape = dict(status)
    decision = shape.get("lastDecision")
    if isinstance(decision, dict):
        skip = {"at", "id"} if details else {"at", "id", *DETAILS}
        shape["lastDecision"] = {k: v for k, v in decision.items() if k not in skip}
    if not details:
        for key in GAINS:
            shape.pop(key, None)
    return shape
