"""The decision trace prints what the policy saw in the benchmark's own run, beside the world."""

import numpy as np
import pytest

from autotuner.core.types import PLAIN
from benchmarks.decision_quality import (
    ENGINES,
    TRACE_GPU,
    TRACE_MODEL,
    benchmark_settings,
    build_world,
    run_policy,
)
from benchmarks.decision_trace import INTERVAL_S, trace
from tests.support.run import python_module

WORLD, ENGINE = "measured", "gdn-replay"


def _lines(hours: list[float]) -> list[tuple[float, tuple[str, ...]]]:
    return [(m.at, m.lines) for m in trace(WORLD, ENGINE, hours)]


def test_each_hour_shows_the_window_ending_there_as_the_benchmark_ran_it() -> None:
    (at, lines), (later, _) = _lines([0.5, 1.0])
    assert (at, later) == (0.5 * 3600, 3600.0)
    world = build_world(WORLD, TRACE_MODEL, TRACE_GPU)
    times = np.arange(0.0, 3600.0, INTERVAL_S)
    engine = ENGINES[ENGINE].serving(world.prior.model)
    run = run_policy(world, engine, benchmark_settings(), times, INTERVAL_S)
    step = int(at / INTERVAL_S) - 1  # the step whose window ends at `at`
    assert lines[0].startswith(f"0.50 h: running {run.used[step].label};")
    assert lines[-1] == f"  decision: {run.decisions[step].sentence}"
    # What the world serves is its truth now, which the policy never sees.
    plain = next(line for line in lines if line.startswith("  plain "))
    assert plain.split()[-1] == f"{world.tokens_per_s(PLAIN, at):,.0f}"
    assert any(line.startswith("  calibration at batch ") for line in lines)


def test_an_hour_outside_the_day_is_refused() -> None:
    with pytest.raises(ValueError, match="hours must lie in"):
        trace(WORLD, ENGINE, [30.0])
    with pytest.raises(ValueError, match="hours must lie in"):
        trace(WORLD, ENGINE, [])


def test_the_command_line_names_the_engines_a_world_runs_on() -> None:
    result = python_module(
        "benchmarks.decision_trace", WORLD, "--engine", "sglang-0.5.23", "--at", "1", timeout_s=120
    )
    assert result.returncode != 0
    assert "runs on ['gdn-replay', 'replay-spec']" in result.stderr
