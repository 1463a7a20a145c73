"""A decision-quality run's summary rows kept as JSON, and set against an earlier run's.

    python -m benchmarks.decision_quality --save rows.json
    python -m benchmarks.decision_quality --against benchmarks/baselines/before-issue-42.json

A row is worse than its baseline where it serves fewer tokens against the oracle (as printed,
to three decimals), restarts more in its worst 24 hours, or meets fewer of the same targets:
issue 42's "no row worse than today", read by a command rather than by hand. Rows only one
side ran are listed apart: a world added since has no baseline to be worse than.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError

PRINTED = 3  # decimals of tokens/oracle in the summary: a change under this is not read


class RowsError(ValueError):
    """A rows file that cannot be read or does not hold decision-quality rows."""


class Row(BaseModel):
    """One world on one engine, as the summary prints it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    world: str
    engine: str
    truth: Literal["published", "model"]  # whose numbers the world's speeds are
    tokens_oracle: float = Field(ge=0)
    tokens_static: float = Field(ge=0)  # against the static setup that serves the most
    gap_won: float | None  # None: a static setup is the oracle (no gap)
    time_efficiency: float = Field(ge=0)
    restarts_per_day: float = Field(ge=0)
    worst_day: int = Field(ge=0)  # the most restarts in any 24 hours
    targets_met: int = Field(ge=0)
    targets: int = Field(ge=0)

    @property
    def key(self) -> tuple[str, str]:
        return self.world, self.engine

    def worse_than(self, before: Row) -> list[str]:
        """What this row does worse than `before` (empty: nothing)."""
        found = []
        if round(self.tokens_oracle, PRINTED) < round(before.tokens_oracle, PRINTED):
            found.append(f"tokens/oracle {before.tokens_oracle:.3f} -> {self.tokens_oracle:.3f}")
        if self.worst_day > before.worst_day:
            found.append(f"worst day {before.worst_day} -> {self.worst_day} restarts")
        if self.targets == before.targets and self.targets_met < before.targets_met:
            found.append(
                f"targets {before.targets_met}/{before.targets} -> "
                f"{self.targets_met}/{self.targets}"
            )
        return found

    def cells(self) -> str:
        gap = "nan" if self.gap_won is None else f"{self.gap_won:.2f}"
        return (
            f"{self.tokens_oracle:.3f} oracle, gap {gap}, worst day {self.worst_day}, "
            f"{self.targets_met}/{self.targets} met"
        )


class Rows(BaseModel):
    """A run's rows and the command (and tree) that printed them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str = Field(min_length=1)
    rows: tuple[Row, ...]

    def save(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=1) + "\n")

    @staticmethod
    def load(path: Path) -> Rows:
        try:
            return Rows.model_validate_json(path.read_text())
        except OSError as error:
            raise RowsError(f"cannot read rows from {path}: {error.strerror}") from error
        except ValidationError as error:
            raise RowsError(f"{path} does not hold decision-quality rows: {error}") from error


class Moved(NamedTuple):
    """A row in both runs whose printed cells differ, and what it does worse (empty: it moved
    and is not worse)."""

    before: Row
    after: Row
    worse: tuple[str, ...]


@dataclass(frozen=True)
class Comparison:
    """A run's rows against a baseline's: the rows in both that moved, how many did not, and
    the rows only one side has."""

    moved: tuple[Moved, ...]
    unchanged: int
    new: tuple[Row, ...]
    gone: tuple[Row, ...]

    @property
    def worse(self) -> tuple[Moved, ...]:
        return tuple(m for m in self.moved if m.worse)


def compare(before: Rows, after: Rows) -> Comparison:
    old = {row.key: row for row in before.rows}
    new = {row.key: row for row in after.rows}
    moved, unchanged = [], 0
    for key, row in new.items():
        if key not in old:
            continue
        if row.cells() == old[key].cells():
            unchanged += 1
        else:
            moved.append(Moved(old[key], row, tuple(row.worse_than(old[key]))))
    return Comparison(
        moved=tuple(moved),
        unchanged=unchanged,
        new=tuple(row for key, row in new.items() if key not in old),
        gone=tuple(row for key, row in old.items() if key not in new),
    )


def describe(comparison: Comparison, baseline: Rows) -> list[str]:
    """The comparison as the run prints it under its summary."""
    lines = [f"against {baseline.source}:"]
    worse = comparison.worse
    lines.append(
        f"  {len(worse)} row(s) worse, {len(comparison.moved) - len(worse)} moved and not "
        f"worse, {comparison.unchanged} the same as printed"
    )
    # The worse rows first: they are what the comparison is run for.
    for before, after, why in sorted(comparison.moved, key=lambda m: not m.worse):
        verdict = "WORSE: " + "; ".join(why) if why else "not worse"
        lines.append(f"  {after.world:17} {after.engine:13} {verdict}")
        lines.append(f"      before {before.cells()}")
        lines.append(f"      after  {after.cells()}")
    lines += [f"  new (no baseline): {r.world} {r.engine}: {r.cells()}" for r in comparison.new]
    if comparison.gone:
        names = ", ".join(f"{r.world} {r.engine}" for r in comparison.gone)
        lines.append(f"  not run here ({len(comparison.gone)}): {names}")
    return lines
