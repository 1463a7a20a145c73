"""What the sidecar counts, in one table: each kind of event or error named once with the
counter it moves and the labels it moves it by."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from autotuner.core.decide.step import NoticeKind
from autotuner.core.types import Action
from autotuner.errors import UnusableReason


class ErrorKind(str, Enum):
    """What failed (the `kind` label of autotuner_errors_total)."""

    READ = "read"  # reading the target
    PATCH = "patch"  # writing it
    CONFLICT = "conflict"  # it changed between read and write
    STATE = "state"  # the persisted state: unreadable, or not saved
    EVENT = "event"  # posting an Event
    LEASE = "lease"  # renewing the Lease
    STEP = "step"  # a loop step raised


class CanaryStage(str, Enum):
    """When the quality canary ran (the `phase` label of autotuner_canary_runs_total)."""

    BASELINE = "baseline"  # the running setup's, refreshed while the server is quiet
    BEFORE = "before"  # the one a switch is judged against
    AFTER = "after"  # on the new setup, once it serves


class CanaryRunOutcome(str, Enum):
    """How a canary run ended (the `outcome` label of autotuner_canary_runs_total)."""

    OK = "ok"
    SKIPPED = "skipped"
    ERROR = "error"


class Counted(str, Enum):
    """The sidecar's counters (each exported as autotuner_<value>_total)."""

    DECISIONS = "decisions"
    PATCHES = "patches"
    REVERTS = "reverts"
    ERRORS = "errors"
    UNUSABLE = "unusable_windows"
    DRIFT = "drift"
    CANARY_RUNS = "canary_runs"
    QUALITY_REGRESSIONS = "quality_regressions"


@dataclass(frozen=True)
class CounterSpec:
    documentation: str
    labels: tuple[str, ...] = ()


COUNTERS: dict[Counted, CounterSpec] = {
    Counted.DECISIONS: CounterSpec("Decisions by action.", ("action",)),
    Counted.PATCHES: CounterSpec("Changes written to the target, by kind.", ("kind",)),
    Counted.REVERTS: CounterSpec(
        "Changes reverted (a regression, a stuck rollout, a refused restart)."
    ),
    Counted.ERRORS: CounterSpec("Errors by kind.", ("kind",)),
    Counted.UNUSABLE: CounterSpec("Unusable windows by reason.", ("reason",)),
    Counted.DRIFT: CounterSpec("Managed flags changed by someone else."),
    Counted.CANARY_RUNS: CounterSpec(
        "Quality canary runs by phase (baseline, before, after) and outcome.",
        ("phase", "outcome"),
    ),
    Counted.QUALITY_REGRESSIONS: CounterSpec(
        "Switches the quality canary judged worse (then reverted)."
    ),
}

Countable = NoticeKind | ErrorKind | UnusableReason | Action


@dataclass(frozen=True)
class Increment:
    """One counter moved by one, at these label values."""

    counter: Counted
    labels: tuple[str, ...] = ()


def _table() -> dict[Countable, tuple[Increment, ...]]:
    table: dict[Countable, tuple[Increment, ...]] = {
        NoticeKind.DRIFT: (Increment(Counted.DRIFT),),
        NoticeKind.SWITCHED: (Increment(Counted.PATCHES, ("switch",)),),
        NoticeKind.REVERTED: (Increment(Counted.PATCHES, ("revert",)), Increment(Counted.REVERTS)),
        NoticeKind.PATCH_FAILED: (Increment(Counted.ERRORS, (ErrorKind.PATCH.value,)),),
        NoticeKind.QUALITY_REGRESSION: (Increment(Counted.QUALITY_REGRESSIONS),),
        NoticeKind.STATE_SET_ASIDE: (Increment(Counted.ERRORS, (ErrorKind.STATE.value,)),),
    }
    table.update({kind: (Increment(Counted.ERRORS, (kind.value,)),) for kind in ErrorKind})
    table.update({r: (Increment(Counted.UNUSABLE, (r.value,)),) for r in UnusableReason})
    table.update({a: (Increment(Counted.DECISIONS, (a.value,)),) for a in Action})
    return table


COUNTS = _table()  # a notice kind not in it is told, not counted


def canary_increment(stage: CanaryStage, outcome: CanaryRunOutcome) -> Increment:
    return Increment(Counted.CANARY_RUNS, (stage.value, outcome.value))


def every_labelled_increment() -> list[Increment]:
    """Every label value a counter can take, so that rate() and alerts see a 0 from the
    start, not nothing."""
    labelled = [i for increments in COUNTS.values() for i in increments if i.labels]
    labelled += [canary_increment(s, o) for s in CanaryStage for o in CanaryRunOutcome]
    return labelled
