"""A SpecTuner's status from a snapshot: conditions keep their transition time while their
status stays; a status that changed only in its details is not written again at once."""

from __future__ import annotations

from autotuner.core.types import Action, Decision, Setup
from autotuner.fleet.status import Health, same_status, status_of
from autotuner.telling.snapshot import Snapshot


def snapshot(at: float, sentence: str, gain: float = 0.1) -> Snapshot:
    decision = Decision(
        id=int(at),
        at=at,
        action=Action.HOLD,
        current=Setup(spec_tokens=3),
        gain=gain,
        sentence=sentence,
    )
    return Snapshot(at=at, decision=decision)


def test_a_condition_keeps_its_transition_time_while_its_status_stays() -> None:
    first = status_of(
        snapshot(0, "hold"),
        target="Deployment/a",
        generation=1,
        health=Health(),
        verified=None,
        previous=[],
    )
    later = status_of(
        snapshot(600, "hold"),
        target="Deployment/a",
        generation=1,
        health=Health(),
        verified=None,
        previous=first["conditions"],
    )
    degraded = status_of(
        snapshot(900, "hold"),
        target="Deployment/a",
        generation=1,
        health=Health("TargetNotFound", "gone"),
        verified=None,
        previous=later["conditions"],
    )
    times = {c["type"]: c["lastTransitionTime"] for c in later["conditions"]}
    assert times == {c["type"]: c["lastTransitionTime"] for c in first["conditions"]}
    moved = {c["type"]: c for c in degraded["conditions"]}
    assert moved["Degraded"]["status"] == "True"
    assert moved["Degraded"]["lastTransitionTime"] == "1970-01-01T00:15:00Z"
    assert moved["Ready"]["lastTransitionTime"] == times["Ready"]


def test_details_alone_wait_for_the_refresh_substance_does_not() -> None:
    first = status_of(
        snapshot(0, "hold: gain 10.1%"),
        target="Deployment/a",
        generation=1,
        health=Health(),
        verified=None,
        previous=[],
    )

    def status(at: float, sentence: str, generation: int = 1) -> dict[str, object]:
        return status_of(
            snapshot(at, sentence),
            target="Deployment/a",
            generation=generation,
            health=Health(),
            verified=None,
            previous=first["conditions"],
        )

    a = first
    assert same_status(a, status(15, "hold: gain 10.2%"), details=False)
    assert not same_status(a, status(15, "hold: gain 10.2%"), details=True)
    assert same_status(a, status(15, "hold: gain 10.1%"), details=True)
    assert not same_status(a, status(15, "hold: gain 10.1%", generation=2), details=False)
    assert not same_status(None, a, details=False)
