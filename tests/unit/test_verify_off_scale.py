"""A change judged at a load that moved after the switch is judged against the previous setup's
measurement carried to the new demand along the model's curve, not against the model's own
tokens/s: on a machine the profile misses by more than calibration's bounds (a MIG slice under
a whole GPU's profile) those are off by that factor. Before, a good change judged at a fallen
load was reverted and quarantined on a machine 5x slower than its profile, and its gain was
tripled on one 5x faster."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from autotuner.core.engine.workload import Workload
from autotuner.core.types import Action, Decision, Setup
from autotuner.sim.truth import TruthEngine, realistic_error
from tests.support.policy import H200, MODEL
from tests.unit.test_settle_after_restart import Restarting, judged, switched

SCALES = (0.2, 1.0, 5.0)  # the machine's step over the profile's


def falling_after_the_switch(switched_at: dict[str, float]) -> Callable[[float], float]:
    """Demand 32, then 512 (the tuner moves), then 128 from a minute after the switch: two
    octaves under the demand the previous setup was measured at."""

    def demand(t: float) -> float:
        if "at" in switched_at and t > switched_at["at"] + 60:
            return 128.0
        return 32.0 if t < 600 else 512.0

    return demand


def verdict_on(scale: float) -> tuple[Decision, Decision]:
    switched_at: dict[str, float] = {}
    truth = TruthEngine(MODEL, H200, Workload(), lambda s, b: scale * realistic_error(s, b))
    run = Restarting(falling_after_the_switch(switched_at), truth=truth)
    switch = run.until(switched)
    switched_at["at"] = switch.at
    verdict = run.until(judged)
    print(f"machine step {scale}x the profile's: {verdict.sentence}")  # pytest -s shows them
    return switch, verdict


def measured_gain(verdict: Decision) -> float:
    found = re.search(r"\(([+-][\d.]+)%; predicted", verdict.sentence)
    assert found, verdict.sentence
    return float(found.group(1)) / 100


@pytest.mark.parametrize("scale", SCALES)
def test_a_change_judged_at_a_moved_load_is_kept_on_any_machine_speed(scale: float) -> None:
    switch, verdict = verdict_on(scale)
    assert switch.target == Setup(replay_window=16)
    assert verdict.action is Action.KEEP, verdict.sentence
    assert "at demand 128" in verdict.sentence


def test_the_measured_gain_does_not_depend_on_the_machine_speed() -> None:
    gains = [measured_gain(verdict_on(scale)[1]) for scale in SCALES]
    assert max(gains) - min(gains) < 0.02, gains
