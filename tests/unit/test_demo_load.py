"""The demo's load: the ramp, and the plateau some worlds dwell on."""

from __future__ import annotations

import numpy as np
import pytest

from autotuner.demo import PLATEAU_HOLD, PLATEAUS, describe_load, plateau, ramp, world_load


def test_the_plateau_holds_its_level_for_its_share_of_the_run() -> None:
    load = plateau(100.0, 90.0, 24.0, 0.3)
    times = np.linspace(100.0, 190.0, 9001)
    values = np.array([load(t) for t in times])
    held = np.isclose(values, 24.0)
    assert held.mean() == pytest.approx(0.3, abs=0.01)
    assert values[0] == pytest.approx(4.0)
    assert values.max() == pytest.approx(512.0, rel=1e-3)
    assert values[-1] == pytest.approx(4.0)
    # No jumps: the ramp is continuous into and out of the plateau.
    assert np.abs(np.diff(values)).max() < 1.0
    # Rising to the plateau, then on up: it is reached once, on the way up.
    first = int(np.argmax(held))
    assert (np.diff(values[:first]) >= -1e-9).all()


def test_worlds_without_a_plateau_get_the_plain_ramp() -> None:
    assert "realistic" not in PLATEAUS
    plain, realistic = ramp(0.0, 90.0), world_load("realistic", 0.0, 90.0)
    assert all(plain(t) == realistic(t) for t in np.linspace(0, 90, 91))
    assert describe_load("realistic") == "load 4 -> 512 -> 4 per engine"
    level = PLATEAUS["wrong-prior"]
    held = world_load("wrong-prior", 0.0, 90.0)
    assert sum(held(t) == level for t in np.linspace(0, 90, 901)) / 901 == pytest.approx(
        PLATEAU_HOLD, abs=0.01
    )
    assert f"held at {level:.0f}" in describe_load("wrong-prior")
