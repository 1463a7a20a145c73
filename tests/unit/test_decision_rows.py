"""A decision-quality run's rows kept and set against a baseline's: what counts as worse,
the file's round trip, and a bad file or folder refused before any world runs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from autotuner.sim.worlds import PUBLISHED
from benchmarks.decision_quality import Outcome, Result, load_baselines, summary_row
from benchmarks.decision_rows import Row, Rows, RowsError, compare, describe
from tests.support.run import python_module


def row(
    world: str = "combined",
    tokens: float = 0.987,
    worst: int = 4,
    met: int = 4,
    targets: int = 4,
    gap: float | None = 0.3,
) -> Row:
    return Row(
        world=world,
        engine="replay-spec",
        truth="model",
        tokens_oracle=tokens,
        tokens_static=1.02,
        gap_won=gap,
        time_efficiency=0.96,
        restarts_per_day=4.0,
        worst_day=worst,
        targets_met=met,
        targets=targets,
    )


def rows(*found: Row) -> Rows:
    return Rows(source="a test", rows=found)


@pytest.mark.parametrize(
    ("after", "worse"),
    [
        (row(tokens=0.976), ["tokens/oracle 0.987 -> 0.976"]),
        (row(worst=5), ["worst day 4 -> 5 restarts"]),
        (row(met=3), ["targets 4/4 -> 3/4"]),
        (row(tokens=0.9866), []),  # under what the summary prints: the same 0.987
        (row(tokens=0.990, worst=3), []),
        (row(met=4, targets=5), []),  # other targets: not set against each other
    ],
)
def test_a_row_is_worse_by_printed_tokens_worst_day_restarts_or_targets_met(
    after: Row, worse: list[str]
) -> None:
    assert after.worse_than(row()) == worse


def test_the_comparison_lists_the_worse_the_moved_and_the_rows_one_side_ran() -> None:
    before = rows(row(), row("step"), row("bursts"))
    after = rows(row("step", tokens=0.990), row(tokens=0.976), row("chat"))
    comparison = compare(before, after)
    assert [m.after.world for m in comparison.worse] == ["combined"]
    assert [m.after.world for m in comparison.moved] == ["step", "combined"]
    assert [r.world for r in comparison.new] == ["chat"]
    assert [r.world for r in comparison.gone] == ["bursts"]
    said = "\n".join(describe(comparison, before))
    assert "1 row(s) worse, 1 moved and not worse, 0 the same as printed" in said
    assert "WORSE: tokens/oracle 0.987 -> 0.976" in said
    assert "not run here (1): bursts replay-spec" in said
    named = [line.split()[0] for line in said.splitlines() if line.startswith(("  step", "  comb"))]
    assert named == ["combined", "step"]  # the worse rows come first


def test_rows_keep_a_gap_of_none_through_the_file(tmp_path: Path) -> None:
    path = tmp_path / "rows.json"
    kept = rows(row(gap=None), row("step"))
    kept.save(path)
    assert Rows.load(path) == kept
    assert compare(kept, Rows.load(path)).unchanged == 2


def test_a_result_without_a_gap_is_kept_as_none() -> None:
    outcomes = {
        "policy": Outcome(99.9, 0.9, 1.0),
        "oracle": Outcome(100.0, 1.0, 0.0),
        "oracle, <= 4 restarts": Outcome(100.0, 1.0, 0.0),
    }
    best = ("replay:16", Outcome(100.0, 0.95, 0.0))
    result = Result("w", "e", PUBLISHED, outcomes, best, best, 0, 0, [], [])
    kept = summary_row(result)
    assert math.isnan(result.gap_won())
    assert kept.gap_won is None
    assert kept.tokens_oracle == pytest.approx(0.999)
    assert (kept.targets_met, kept.targets) == (
        sum(result.targets().values()),
        len(result.targets()),
    )


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"source": "x", "rows": [{"world": "w"}]}', "does not hold decision-quality rows"),
        ("not json", "does not hold decision-quality rows"),
    ],
)
def test_a_bad_rows_file_is_refused_with_its_path(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "rows.json"
    path.write_text(text)
    with pytest.raises(SystemExit, match=said):
        load_baselines([path])
    with pytest.raises(RowsError, match="cannot read rows from"):
        Rows.load(tmp_path / "missing.json")


def test_a_missing_folder_for_save_is_refused_before_any_world_runs(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "rows.json"
    result = python_module(
        "benchmarks.decision_quality", "--worlds", "step", "--save", str(missing), timeout_s=120
    )
    assert result.returncode != 0
    assert f"no folder {missing.parent}" in result.stderr
    assert "interval" not in result.stdout  # refused before the run began


def test_a_saved_run_set_against_itself_twice_has_no_row_worse(tmp_path: Path) -> None:
    saved = tmp_path / "rows.json"
    quick = ("--quick", "--hours", "6", "--worlds", "step", "--jobs", "1")
    first = python_module("benchmarks.decision_quality", *quick, "--save", str(saved))
    assert first.returncode == 0, first.stderr
    kept = Rows.load(saved)
    assert {r.key for r in kept.rows} == {("step", "gdn-replay"), ("step", "replay-spec")}
    assert "benchmarks.decision_quality --quick" in kept.source
    twice = ("--against", str(saved), "--against", str(saved))
    again = python_module("benchmarks.decision_quality", *quick, *twice)
    assert again.returncode == 0, again.stderr
    same = "0 row(s) worse, 0 moved and not worse, 2 the same as printed"
    assert again.stdout.count(same) == 2, "one comparison for each --against"
