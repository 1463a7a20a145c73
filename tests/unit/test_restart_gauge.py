"""The learned restart costs, exported (telling/collectors.py RestartCostCollector)."""

from __future__ import annotations

from autotuner.core.decide.restarts import RestartCosts
from autotuner.core.decide.settings import RestartSettings
from autotuner.core.decide.state import TunerState
from autotuner.core.types import Setup
from autotuner.telling.exporter import TunerMetrics
from autotuner.telling.snapshot import Snapshot


def test_the_learned_restart_costs_are_exported_and_nothing_before() -> None:
    metrics = TunerMetrics()
    assert "autotuner_restart_seconds{" not in metrics.render().decode()
    replay = Setup(replay_window=16)
    first = RestartSettings(downtime_s=180)
    costs = RestartCosts().measured(replay, 240.0, True, first, prefix_caching=True)
    costs = costs.measured(replay, 100.0, False, RestartSettings(), prefix_caching=True)
    metrics.update(Snapshot(state=TunerState(restart_costs=costs)))
    text = metrics.render().decode()
    assert 'autotuner_restart_seconds{kind="cached",setup="replay:16"} 100.0' in text
    assert 'autotuner_restart_seconds{kind="first_compile",setup="any"} 60.0' in text
