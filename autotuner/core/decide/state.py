"""What the tuner carries between steps (and across its own restarts): the TunerState, its named
transitions, and reading a persisted state of this or an older schema.

Every change goes through a transition that says what happened (`verifying`, `reverted`,
`quarantined`, ...); the fields are validated on every change, so a misspelt name fails loudly
instead of becoming a stray attribute. The list of recent changes is kept to one day in one
place (`_changed`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, NamedTuple

from pydantic import BaseModel, BeforeValidator, ConfigDict, PlainSerializer, ValidationError

from autotuner.core.decide.estimates import AcceptanceDrift, AcceptanceMemory, BatchHistogram
from autotuner.core.decide.forecast import LoadMemory
from autotuner.core.decide.restarts import RestartCosts
from autotuner.core.predict.attribution import Attribution
from autotuner.core.types import Setup, SetupKind
from autotuner.core.vocabulary import Word

DAY = 86400.0
# 1: unversioned; 2: calibration per setup and band; 3: per kernel class; 4: the demand memory
# (trend and profile by time of day) and the restart costs learned per setup; 5: compile keys
# carry prefix caching; 6: how fast acceptance moved while measured; 7: when a load was last seen
# to go before a change settled; 8: the questions answered no, remembered past the quarantine
SCHEMA_VERSION = 8
SET_ASIDE_CHARS = 65536  # an unreadable state is kept (this much of it) for the operator


class QualityStatus(Word):
    """Where a change's quality check stands."""

    PENDING = "pending"  # the canary ran on the previous setup and must run on the new one
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"  # no comparison (the summary says why)


class Exploration(NamedTuple):
    """A setup family at one calibration band: where an exploration was asked."""

    kind: SetupKind
    band: int  # autotuner.core.predict.attribution.calibration_band

    def __str__(self) -> str:
        return f"{self.kind.value}|{self.band}"


def _exploration(value: Any) -> Any:
    """An exploration key as persisted ("family|band"), or already typed."""
    if isinstance(value, str):
        kind, _, band = value.partition("|")
        return (kind, int(band)) if band.isdigit() else value
    return value


# Persisted as its "family|band" string (JSON keys are strings; older states wrote the same).
ExplorationKey = Annotated[
    Exploration, BeforeValidator(_exploration), PlainSerializer(str, return_type=str)
]


class Answer(BaseModel):
    """An exploration answered no: when, and the first draft position's acceptance then (None:
    nothing drafted). The answer is taken to hold while acceptance stays near it, since the
    speculating families' speeds move with it; what else could change it at one load (the
    prompts' share, the engine build) is not watched, and the memory's length bounds that."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    at: float
    acceptance: float | None = None


class Pending(BaseModel):
    """Since when recent load has pointed at leaving the running setup for `target`, and how
    strongly: `evidence` is the plan's net gain over holding (a fraction, restarts charged)
    summed over the seconds it has pointed, up to `seen_at`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    target: Setup
    since: float
    seen_at: float | None = None  # the last step that saw the change pointed at (None: since)
    evidence: float = 0.0  # gain-seconds


class QualityCheck(BaseModel):
    """The quality guard's part of a verification (the canary itself runs in the controller).

    pending: the canary ran on the previous setup (`before`) and must run again on the new one;
    passed / failed: compared, `summary` says how; skipped: no comparison, `summary` says why.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: QualityStatus
    summary: str = ""
    before: dict[str, Any] | None = None  # the canary run on the previous setup, as JSON
    confidence: float | None = None  # how sure a failed verdict is (1 - smallest p-value)
    since: float | None = None  # when the check became pending (the after-run deadline)
    evidence: tuple[str, ...] = ()  # the prompts that diverged, before vs after


class Verification(BaseModel):
    """A change in flight: judged once the new setup serves a settled window."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    target: Setup
    previous: Setup
    switched_at: float
    predicted_gain: float
    baseline_rate: float | None = None  # tokens/s per engine before the change
    baseline_batch: float | None = None  # demand (running + waiting per engine) then
    quality: QualityCheck | None = None
    exploration: bool = False  # tried to measure an unchecked family, not predicted to win
    band: int | None = None  # an exploration's calibration band: where its answer counts
    first_start: bool = False  # the target's compile key had not run before (a first compile)
    seen_down: bool = False  # a step saw the engine not yet serving the target
    ready_s: float | None = None  # patch to ready, once seen serving
    # When the engine is known to have served the target: the start of the first usable window
    # that began after the patch with the target live. Settle counts from here, not the patch.
    ready_at: float | None = None
    # A K schedule is judged per region of batch (each band, and the batches around each edge
    # where K changes): the regions a settled window has measured, and how many such windows.
    regions_checked: tuple[str, ...] = ()
    windows_judged: int = 0

    @property
    def serving_since(self) -> float | None:
        """When the target was first seen served (a record written before `ready_at` existed:
        the step that saw it, from `ready_s`)."""
        if self.ready_at is not None or self.ready_s is None:
            return self.ready_at
        return self.switched_at + self.ready_s

    def with_quality(self, check: QualityCheck) -> Verification:
        return self.with_fields(quality=check)

    def with_fields(self, **fields: Any) -> Verification:
        """These fields changed, validated (an unknown name raises)."""
        return Verification.model_validate({**dict(self), **fields})


class Refusal(BaseModel):
    """The engine did not come up with a setup that needed a capability: until `until`, the
    policy proposes nothing that needs it (e.g. K schedules: static K instead)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    why: str
    until: float


class TunerState(BaseModel):
    """Everything that must survive a restart of the sidecar (persisted as one annotation)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = SCHEMA_VERSION
    current: Setup | None = None
    last_known_good: Setup | None = None
    acceptance: AcceptanceMemory = AcceptanceMemory()
    acceptance_drift: AcceptanceDrift = AcceptanceDrift()  # how fast it moved while measured
    batch: BatchHistogram = BatchHistogram()
    calibration: Attribution = Attribution()  # where the cost model is wrong, by kernel class
    pending: Pending | None = None
    verification: Verification | None = None
    changes: tuple[float, ...] = ()  # when changes happened (ours and drift), last day only
    quarantine: dict[str, float] = {}  # setup label -> until
    last_rate: float | None = None  # tokens/s per engine, last usable window
    last_batch: float | None = None  # its demand per engine (running + waiting)
    last_decision_id: int = 0
    drafter: dict[str, Any] | None = None  # the operator's speculative config, kept while off
    canary_baseline: dict[str, Any] | None = None  # latest canary run of `current`, as JSON
    refused: dict[str, Refusal] = {}  # capability -> why the running engine is taken to lack it
    last_quality: QualityCheck | None = None  # the latest finished quality check
    set_aside: str | None = None  # a persisted state that could not be read, kept verbatim
    explored: dict[ExplorationKey, float] = {}  # no exploration there again until
    answered_no: dict[ExplorationKey, Answer] = {}  # the latest no there (see `explored`)
    load: LoadMemory = LoadMemory()  # demand per engine: recent trend, profile by time of day
    restart_costs: RestartCosts = RestartCosts()  # learned from the restarts watched
    load_gone_at: float | None = None  # last revert of a change whose load had gone

    # ---------------------------------------------------------------- transitions

    def updated(self, **fields: Any) -> TunerState:
        """These fields changed, validated (an unknown name raises)."""
        return TunerState.model_validate({**dict(self), **fields})

    def decided(self) -> TunerState:
        """One more decision was made (its id is the new `last_decision_id`)."""
        return self.updated(last_decision_id=self.last_decision_id + 1)

    def running(self, setup: Setup) -> TunerState:
        """What the target (or the engine) says runs now."""
        return self if setup == self.current else self.updated(current=setup)

    def pending_since(self, target: Setup, now: float, gain: float = 0.0) -> TunerState:
        """Recent load favours leaving for `target` by `gain` (the plan's net gain); the dwell
        clock keeps its start while load keeps favouring a change (the best sibling may change
        meanwhile), and the evidence grows by the gain over the time since the last step."""
        before = self.pending
        if before is None:
            return self.updated(pending=Pending(target=target, since=now, seen_at=now))
        last = before.seen_at if before.seen_at is not None else before.since
        evidence = before.evidence + max(gain, 0.0) * max(now - last, 0.0)
        pending = Pending(target=target, since=before.since, seen_at=now, evidence=evidence)
        return self.updated(pending=pending)

    def not_pending(self) -> TunerState:
        return self if self.pending is None else self.updated(pending=None)

    def verifying(self, verification: Verification) -> TunerState:
        """A switch was decided: the new setup runs, the old one is the known good."""
        return self._changed(verification.switched_at).updated(
            current=verification.target,
            last_known_good=verification.previous,
            pending=None,
            verification=verification,
        )

    def load_went(self, now: float) -> TunerState:
        """A change was reverted because the load it was made for had gone before it settled."""
        return self.updated(load_gone_at=now)

    def load_went_within(self, now: float, memory_s: float) -> bool:
        """Whether a load was seen to go before a change settled less than `memory_s` ago."""
        return self.load_gone_at is not None and now - self.load_gone_at < memory_s

    def verified(self) -> TunerState:
        assert self.verification is not None
        return self.updated(verification=None, last_known_good=self.verification.target)

    def reverted(self, now: float, quarantine_until: float | None) -> TunerState:
        """Back to the previous setup; the one tried is not proposed again until then (None:
        not quarantined, e.g. an exploration that was only slower at this load)."""
        assert self.verification is not None
        tried, previous = self.verification.target, self.verification.previous
        state = self._changed(now)
        if quarantine_until is not None:
            state = state.quarantined(tried, quarantine_until)
        return state.updated(current=previous, verification=None, pending=None)

    def adopted(self, setup: Setup, now: float) -> TunerState:
        """Someone else changed the managed flags: theirs is what runs (a change all the same)."""
        return self._changed(now).updated(current=setup, verification=None, pending=None)

    def applied_by_hand(
        self, setup: Setup, drafter: dict[str, Any] | None, now: float
    ) -> TunerState:
        """`autotuner apply` changed the target: a known change (not drift) that counts for
        the budget and cooldown; the canary baseline was a run of the setup replaced."""
        return self._changed(now).updated(
            current=setup,
            drafter=drafter,
            pending=None,
            verification=None,
            canary_baseline=None,
        )

    def exploring(self, key: Exploration, until: float) -> TunerState:
        """An exploration of one family in one batch band; not asked again there until then
        (an older answer there is superseded by this question's)."""
        answers = {k: a for k, a in self.answered_no.items() if k != key}
        return self.updated(explored={**self.explored, key: until}, answered_no=answers)

    def answered(self, key: Exploration, answer: Answer, until: float) -> TunerState:
        """The question at `key` was answered no: not asked there again until `until` unless
        acceptance moves away from the answer's (core/decide/exploration.py `question_open`).
        Answers whose time has run out are let go."""
        explored = {**self.explored, key: max(until, self.explored.get(key, until))}
        answers = {k: a for k, a in self.answered_no.items() if explored.get(k, 0.0) > answer.at}
        return self.updated(explored=explored, answered_no={**answers, key: answer})

    def following(self, record: TunerState) -> TunerState:
        """Another writer's record of a change (a manual apply): its setup, changes, drafter
        and canary baseline; this state's estimates, quarantines and refusals."""
        return self.updated(
            current=record.current,
            changes=record.changes,
            drafter=record.drafter or self.drafter,
            canary_baseline=record.canary_baseline,
            pending=None,
            verification=None,
        )

    def quarantined(self, setup: Setup, until: float) -> TunerState:
        return self.updated(quarantine={**self.quarantine, setup.label: until})

    def refusing(self, capability: str, refusal: Refusal) -> TunerState:
        return self.updated(refused={**self.refused, capability: refusal})

    def checking_quality(self, check: QualityCheck) -> TunerState:
        """The verification in flight gets (or updates) its quality check; a finished or
        skipped check is also the latest one."""
        assert self.verification is not None
        fields: dict[str, Any] = {"verification": self.verification.with_quality(check)}
        if check.status is not QualityStatus.PENDING:
            fields["last_quality"] = check
        return self.updated(**fields)

    def with_canary_baseline(self, record: dict[str, Any]) -> TunerState:
        return self.updated(canary_baseline=record)

    def keeping_drafter(self, config: dict[str, Any]) -> TunerState:
        """The operator's speculative config, remembered while speculation is off."""
        return self if config == self.drafter else self.updated(drafter=config)

    def advisory(self, before: TunerState) -> TunerState:
        """Nothing was applied: keep what this step learned, not what it would have changed."""
        return self.updated(
            current=before.current,
            last_known_good=before.last_known_good,
            verification=before.verification,
            changes=before.changes,
            quarantine=before.quarantine,
        )

    def setting_aside(self, unreadable: str) -> TunerState:
        return self.updated(set_aside=unreadable[:SET_ASIDE_CHARS])

    def recent_changes(self, now: float) -> tuple[float, ...]:
        return tuple(t for t in self.changes if t > now - DAY)

    def acceptance_moved(self, now: float) -> float:
        """How far remembered acceptance may have moved since its last window, at the rate it
        moved while measured (0 while speculation measures it)."""
        return self.acceptance_drift.moved(self.acceptance.age_s(now))

    def _changed(self, now: float) -> TunerState:
        return self.updated(changes=(*self.recent_changes(now), now))


@dataclass(frozen=True)
class StateRead:
    """A persisted state as read: the state (None when unreadable), the schema it was written
    in, and what went wrong or was dropped."""

    state: TunerState | None
    written_as: int | None = None
    problem: str | None = None
    dropped: tuple[str, ...] = ()  # what a migration could not carry over (said on resume)

    @property
    def migrated(self) -> bool:
        return self.state is not None and self.written_as != SCHEMA_VERSION


def read_state(text: str) -> StateRead:
    """Parse a persisted state of this or an older schema (migrated, never dropped)."""
    try:
        record = json.loads(text)
    except ValueError as exc:
        return StateRead(None, problem=f"not JSON: {exc}")
    if not isinstance(record, dict):
        return StateRead(None, problem="not a JSON object")
    version = record.get("schema_version", 1)
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        return StateRead(
            None, written_as=None, problem=f"schema {version!r} is newer than this sidecar's"
        )
    migrated, dropped = _MIGRATIONS[version](record) if version < SCHEMA_VERSION else (record, ())
    try:
        return StateRead(TunerState.model_validate(migrated), written_as=version, dropped=dropped)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return StateRead(None, written_as=version, problem=f"{where}: {first['msg']}")


def _from_v1(record: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The unversioned state: schema 2's fields, no version."""
    return _from_v2(record)


def _from_v2(record: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Schema 2 calibrated per (setup, band); schema 3 attributes errors to kernel classes.
    One factor per setup cannot be split into classes: it is relearned (a window per setup)."""
    dropped: tuple[str, ...] = ()
    if (record.get("calibration") or {}).get("entries"):
        dropped = ("the per-setup calibration (relearned per kernel class)",)
    migrated = {**record, "schema_version": SCHEMA_VERSION, "calibration": {}}
    return migrated, dropped


def _from_v3(record: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Schema 4 adds the demand memory and the learned restart costs: both start empty."""
    return {**record, "schema_version": SCHEMA_VERSION}, ()


def _from_v4(record: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Schema 5's compile keys say whether prefix caching was on, which a schema 4 key does
    not: the keys are dropped (each configuration's next start is charged one first compile
    again); the learned restart durations are kept."""
    costs = dict(record.get("restart_costs") or {})
    dropped: tuple[str, ...] = ()
    if costs.pop("compiled", None):
        dropped = ("the compile keys of the configurations run (relearned at their next start)",)
    return {**record, "schema_version": SCHEMA_VERSION, "restart_costs": costs}, dropped


def _from_v5(record: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Schema 6 adds the acceptance's drift: it starts empty (no drift until measured)."""
    return {**record, "schema_version": SCHEMA_VERSION}, ()


def _from_v6(record: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Schema 7 remembers when a load was last seen to go before a change settled: never yet."""
    return {**record, "schema_version": SCHEMA_VERSION}, ()


def _from_v7(record: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Schema 8 remembers the questions answered no past their quarantine: none yet (the
    explored bands' quarantines are kept)."""
    return {**record, "schema_version": SCHEMA_VERSION}, ()


_MIGRATIONS = {
    1: _from_v1,
    2: _from_v2,
    3: _from_v3,
    4: _from_v4,
    5: _from_v5,
    6: _from_v6,
    7: _from_v7,
}
