"""The decision trace prints what the policy saw in the benchmark's own run, beside the world."""

import numpy as np
import pytest

from autotuner.core.decide.policy import situation_after
from autotuner.core.decide.valuation import evaluate
from autotuner.core.types import PLAIN
from benchmarks.decision_quality import (
    ENGINES,
    INTERVAL_S,
    TRACE_GPU,
    TRACE_MODEL,
    PolicyRun,
    StepSeen,
    Watch,
    benchmark_settings,
    build_world,
    run_policy,
)
from benchmarks.decision_trace import HoursError, trace
from tests.support.run import python_module

WORLD, ENGINE = "measured", "gdn-replay"


def _run(hours: float, watch: Watch | None = None) -> PolicyRun:
    world = build_world(WORLD, TRACE_MODEL, TRACE_GPU)
    times = np.arange(0.0, hours * 3600, INTERVAL_S)
    engine = ENGINES[ENGINE].serving(world.prior.model)
    return run_policy(world, engine, benchmark_settings(), times, INTERVAL_S, watch=watch)


def test_each_hour_shows_the_window_ending_there_as_the_benchmark_ran_it() -> None:
    moments = trace(WORLD, ENGINE, [0.5, 1.0], top=3)
    assert [m.at for m in moments] == [0.5 * 3600, 3600.0]
    lines, at = moments[0].lines, moments[0].at
    run = _run(1.0)
    step = int(at / INTERVAL_S) - 1  # the step whose window ends at `at`
    assert lines[0].startswith(f"0.50 h: running {run.used[step].label};")
    assert lines[-1] == f"  decision: {run.decisions[step].sentence}"
    assert not any(line.startswith("  (") for line in lines)  # the step decided on this ranking


def test_the_rows_are_the_steps_ranking_beside_the_worlds_truth() -> None:
    seen: list[StepSeen] = []
    _run(0.5, seen.append)
    (moment,) = trace(WORLD, ENGINE, [0.5], top=3)
    lines = moment.lines
    start = next(i for i, line in enumerate(lines) if "horizon" in line) + 1
    end = next(i for i, line in enumerate(lines) if line.startswith("  calibration"))
    rows = [line.split() for line in lines[start:end]]
    labels = [row[0] for row in rows]
    ranked = [s.label for s in seen[-1].ranked]
    assert labels[:3] == ranked[:3]  # the best three, in the step's own order
    assert "plain" in labels  # plain and each family's best are shown below them
    world = build_world(WORLD, TRACE_MODEL, TRACE_GPU)
    by_label = {s.label: s for s in seen[-1].ranked}
    for row in rows:  # the last column is the world's truth at the window's end
        assert row[-1] == f"{world.tokens_per_s(by_label[row[0]], moment.at):,.0f}"
    assert by_label["plain"] == PLAIN


def test_watching_a_run_leaves_its_decisions_as_they_were() -> None:
    settings = benchmark_settings()

    def look(seen: StepSeen) -> None:  # what the trace does at every step
        evaluate(situation_after(seen.state, seen.observation, seen.ctx, settings), PLAIN)

    alone, watched = _run(2.0), _run(2.0, look)
    assert [d.sentence for d in watched.decisions] == [d.sentence for d in alone.decisions]
    assert watched.used == alone.used


def test_hours_in_one_window_share_its_moment() -> None:
    assert [m.at for m in trace(WORLD, ENGINE, [0.45, 0.5])] == [0.5 * 3600]


@pytest.mark.parametrize("hours", [[30.0], [], [-1.0], [float("nan")]])
def test_an_hour_outside_the_run_is_refused(hours: list[float]) -> None:
    with pytest.raises(HoursError, match="hours must lie in"):
        trace(WORLD, ENGINE, hours)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--engine", "sglang-0.5.23", "--at", "1"], "runs on ['gdn-replay', 'replay-spec']"),
        (["--at", "one"], "hours are numbers"),
        (["--at", "1", "--top", "0"], "show at least one candidate"),
        (["--at", "99"], "hours must lie in"),
        (["--at", "1", "--set", "policy.nope=1"], "--set"),
    ],
)
def test_the_command_line_refuses_what_it_cannot_trace(args: list[str], said: str) -> None:
    result = python_module("benchmarks.decision_trace", WORLD, *args, timeout_s=120)
    assert result.returncode != 0
    assert said in result.stderr


def test_an_unknown_world_is_named() -> None:
    result = python_module("benchmarks.decision_trace", "nowhere", "--at", "1", timeout_s=120)
    assert result.returncode != 0
    assert "invalid choice: 'nowhere'" in result.stderr


def _leads(line: str, part: str) -> list[float]:
    """The percentages of one part of an unmeasured family's line ("at the load now", ...)."""
    text = line.split(part, 1)[1].split(";")[0]
    return [float(cell.split()[1].rstrip("%")) / 100 for cell in text.split(",") if cell.strip()]


@pytest.mark.parametrize(
    ("world", "hour", "asked"), [("measured", 3.25, True), ("replay-gain", 3.08, False)]
)
def test_an_unmeasured_familys_line_shows_what_holds_a_question_back(
    world: str, hour: float, asked: bool
) -> None:
    # Replay:16 on two rising mornings, more than 5% behind spec:3 at the load now. Where the
    # forecast's levels in the band bring it within 5%, the question waits for the load; where
    # none does, it is asked.
    (moment,) = trace(world, "gdn-replay", [hour], top=3)
    (line,) = [ln for ln in moment.lines if ln.startswith("  replay:16 (not measured here)")]
    assert _leads(line, "at the load now")[0] < -0.05
    assert (max(_leads(line, "at the forecast's levels in the band")) >= -0.05) is not asked
    assert moment.lines[-1].startswith("  decision: explore spec:3 -> replay:16") is asked


def test_a_setting_changed_with_set_is_the_one_the_traced_run_decides_with() -> None:
    # measured's question at 3.25 h (above), traced with questions turned off.
    (moment,) = trace(
        "measured", "gdn-replay", [3.25], top=3, overrides=["policy.exploration.enabled=false"]
    )
    assert not moment.lines[-1].startswith("  decision: explore")


def test_the_question_line_shows_the_band_ahead_and_the_restarts_a_question_needs() -> None:
    # replay-gain at 5.83 h: the load (217) in band 64-255, the hours ahead priced above 255,
    # and one restart (3.75 h) in the day: no question, whatever the reserve.
    (moment,) = trace("replay-gain", "gdn-replay", [5.83], top=2)
    (line,) = [ln for ln in moment.lines if ln.startswith("  a question:")]
    now, ahead = line.split("), the hours ahead priced at ")
    assert now.endswith("(band 64-255")
    assert ahead.split(" (")[1].startswith("band 256 and up)")
    assert "1 restart(s) in the last 24 h, and a question needs 6 more within the 6 a day" in line
    assert not moment.lines[-1].startswith("  decision: explore")
