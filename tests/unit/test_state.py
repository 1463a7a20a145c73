"""The TunerState's named transitions, and reading persisted states: this schema, the
unversioned one (migrated), and records that cannot be read (said, never silently dropped)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from autotuner.core.decide.forecast import LoadMemory
from autotuner.core.decide.restarts import RestartCosts
from autotuner.core.decide.settings import ForecastSettings, RestartSettings
from autotuner.core.decide.state import (
    DAY,
    SCHEMA_VERSION,
    Answer,
    Exploration,
    QualityCheck,
    QualityStatus,
    Refusal,
    TunerState,
    Verification,
    read_state,
)
from autotuner.core.types import Setup, SetupKind

V1 = Path(__file__).parent / "data" / "tuner_state_v1.json"  # an unversioned state, as written
SPEC3, REPLAY, PLAIN = Setup(spec_tokens=3), Setup(replay_window=16), Setup()
NOW = 200_000.0


def switched(at: float = NOW) -> TunerState:
    verification = Verification(target=REPLAY, previous=SPEC3, switched_at=at, predicted_gain=0.2)
    return TunerState(current=SPEC3).verifying(verification)


def test_verifying_runs_the_target_and_records_one_change() -> None:
    state = TunerState(current=SPEC3, changes=(NOW - 2 * DAY, NOW - 60)).pending_since(REPLAY, 1)
    after = state.verifying(
        Verification(target=REPLAY, previous=SPEC3, switched_at=NOW, predicted_gain=0.2)
    )
    assert after.current == REPLAY
    assert after.last_known_good == SPEC3
    assert after.pending is None
    assert after.verification is not None
    assert after.changes == (NOW - 60, NOW)  # older than a day pruned, in the one place


def test_verified_keeps_the_target_as_known_good() -> None:
    after = switched().verified()
    assert after.verification is None
    assert after.last_known_good == REPLAY
    assert after.current == REPLAY


def test_reverted_goes_back_and_quarantines_the_tried_setup() -> None:
    after = switched(NOW - 600).reverted(NOW, NOW + 3600)
    assert after.current == SPEC3
    assert after.verification is None
    assert after.quarantine == {REPLAY.label: NOW + 3600}
    assert after.changes == (NOW - 600, NOW)


def test_adopted_drift_is_a_change_and_ends_a_verification() -> None:
    after = switched(NOW - 600).adopted(PLAIN, NOW)
    assert after.current == PLAIN
    assert after.verification is None
    assert after.changes[-1] == NOW


def test_pending_keeps_its_start_while_a_change_is_favoured() -> None:
    state = TunerState().pending_since(REPLAY, 10.0).pending_since(SPEC3, 20.0)
    assert state.pending is not None
    assert (state.pending.target, state.pending.since) == (SPEC3, 10.0)
    assert state.not_pending().pending is None


def test_quality_checks_attach_to_the_verification_and_finished_ones_are_the_latest() -> None:
    pending = switched().checking_quality(QualityCheck(status="pending", since=NOW))
    assert pending.verification is not None
    assert pending.verification.quality is not None
    assert pending.last_quality is None
    failed = pending.checking_quality(QualityCheck(status="failed", summary="worse: 0/12"))
    assert failed.last_quality is not None
    assert failed.last_quality.status == "failed"


def test_refusing_and_quarantined_add_without_losing_others() -> None:
    state = TunerState().quarantined(SPEC3, 5.0).quarantined(REPLAY, 6.0)
    state = state.refusing("spec_schedule", Refusal(why="exit 1", until=7.0))
    assert state.quarantine == {SPEC3.label: 5.0, REPLAY.label: 6.0}
    assert set(state.refused) == {"spec_schedule"}


def test_advisory_keeps_what_was_learned_and_nothing_it_would_change() -> None:
    before = TunerState(current=SPEC3, last_decision_id=4)
    would = switched().updated(last_decision_id=5, last_rate=123.0)
    after = would.advisory(before)
    assert after.current == SPEC3
    assert after.verification is None
    assert after.changes == ()
    assert after.last_rate == 123.0
    assert after.last_decision_id == 5


def test_applied_by_hand_is_a_known_change_that_drops_the_old_canary() -> None:
    state = TunerState(current=SPEC3, canary_baseline={"setup": "spec:3"})
    after = state.applied_by_hand(PLAIN, {"method": "mtp"}, NOW)
    assert after.current == PLAIN
    assert after.drafter == {"method": "mtp"}
    assert after.canary_baseline is None
    assert after.changes == (NOW,)


def test_a_misspelt_field_is_an_error_not_a_stray_attribute() -> None:
    with pytest.raises(ValidationError):
        TunerState().updated(quarantined={"x": 1.0})
    with pytest.raises(ValidationError):
        TunerState().updated(current="spec:3")


def test_this_schema_round_trips() -> None:
    state = switched().quarantined(SPEC3, 1.0)
    read = read_state(state.model_dump_json())
    assert read.state == state
    assert read.written_as == SCHEMA_VERSION
    assert not read.migrated


def test_explorations_are_typed_and_persisted_as_family_and_band() -> None:
    state = TunerState().exploring(Exploration(SetupKind.REPLAY, 2), NOW)
    record = json.loads(state.model_dump_json())
    assert record["explored"] == {"replay|2": NOW}
    assert read_state(json.dumps(record)).state == state


def test_a_question_answered_no_is_remembered_where_it_was_asked_and_persisted() -> None:
    """Where it was asked, even beside an answer another band still remembers longer; an
    answer whose time has run out is let go."""
    asked, other, lapsed = (Exploration(SetupKind.REPLAY, band) for band in (2, 3, 1))
    state = (
        TunerState()
        .exploring(lapsed, NOW - DAY)
        .answered(lapsed, Answer(at=NOW - 2 * DAY, acceptance=0.7), NOW - DAY)
        .exploring(other, NOW)
        .answered(other, Answer(at=NOW - 1, acceptance=0.8), NOW + 3 * DAY)
        .exploring(asked, NOW + 3600)
        .answered(asked, Answer(at=NOW, acceptance=0.6), NOW + DAY)
    )
    assert state.explored == {lapsed: NOW - DAY, other: NOW + 3 * DAY, asked: NOW + DAY}
    assert set(state.answered_no) == {other, asked}
    record = json.loads(state.model_dump_json())
    assert record["answered_no"]["replay|2"] == {"at": NOW, "acceptance": 0.6}
    assert read_state(json.dumps(record)).state == state


def test_asking_again_supersedes_the_answer_there() -> None:
    asked = Exploration(SetupKind.SPEC, 1)
    state = (
        TunerState()
        .exploring(asked, NOW)
        .answered(asked, Answer(at=NOW, acceptance=0.8), NOW + 3 * DAY)
        .exploring(asked, NOW + 4 * DAY)
    )
    assert state.answered_no == {}
    assert state.explored == {asked: NOW + 4 * DAY}


def test_a_state_written_with_string_keys_and_statuses_reads_typed() -> None:
    """A schema-3 record as the sidecar wrote it before the keys and statuses were typed."""
    record = json.loads(switched().model_dump_json())
    record["explored"] = {"replay+spec|4": NOW, "spec|0": NOW - 1}
    record["last_quality"] = {"status": "passed", "summary": "identical: 12/12"}
    read = read_state(json.dumps(record))
    assert read.state is not None
    assert not read.migrated
    assert read.state.explored == {
        Exploration(SetupKind.REPLAY_SPEC, 4): NOW,
        Exploration(SetupKind.SPEC, 0): NOW - 1,
    }
    assert read.state.last_quality is not None
    assert read.state.last_quality.status is QualityStatus.PASSED


def test_the_unversioned_state_is_migrated_with_everything_in_it() -> None:
    read = read_state(V1.read_text())
    assert read.problem is None
    assert read.migrated
    assert read.written_as == 1
    state = read.state
    assert state is not None
    assert state.schema_version == SCHEMA_VERSION
    assert state.verification is not None
    assert state.verification.quality is not None
    assert state.verification.quality.status == "pending"
    assert state.quarantine == {"spec:1": 9000.0}
    assert state.refused["spec_schedule"].until == 90000.0
    assert state.drafter == {"method": "mtp", "num_speculative_tokens": 3}
    assert state.last_decision_id == 42


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        (json.dumps({"schema_version": SCHEMA_VERSION + 1}), "newer than this sidecar's"),
        (json.dumps({"current": {"spec_tokens": -1}}), "current.spec_tokens"),
        (json.dumps({"quarantine": {"spec:3": "soon"}}), "quarantine.spec:3"),
    ],
    ids=["not json", "not an object", "newer schema", "bad setup", "bad quarantine"],
)
def test_an_unreadable_state_says_why(text: str, problem: str) -> None:
    read = read_state(text)
    assert read.state is None
    assert read.problem is not None
    assert problem in read.problem


def test_an_unreadable_state_is_kept_aside() -> None:
    state = TunerState().setting_aside("{not json" * 10)
    assert state.set_aside is not None
    assert state.set_aside.startswith("{not json")
    assert read_state(state.model_dump_json()).state == state


def test_a_schema_2_calibration_is_said_to_be_relearned_and_the_rest_kept() -> None:
    record = json.loads(switched().model_dump_json())
    record["schema_version"] = 2
    record["calibration"] = {
        "entries": {"spec:3|4": {"log_factor": 0.1, "weight": 3.0, "updated_at": 5.0}}
    }
    read = read_state(json.dumps(record))
    assert read.state is not None
    assert read.migrated
    assert read.dropped == ("the per-setup calibration (relearned per kernel class)",)
    assert read.state.calibration.entries == {}
    assert read.state.verification == switched().verification


def test_a_schema_3_state_reads_with_an_empty_demand_memory_and_no_learned_restarts() -> None:
    record = json.loads(switched().model_dump_json())
    record["schema_version"] = 3
    del record["load"], record["restart_costs"]
    read = read_state(json.dumps(record))
    assert read.state is not None
    assert read.migrated
    assert read.written_as == 3
    assert read.dropped == ()
    assert read.state.load.recent == ()
    assert read.state.restart_costs.cached == {}
    assert read.state.current == switched().current


def test_a_schema_4_state_keeps_its_restart_durations_and_drops_its_compile_keys() -> None:
    """Schema 4's compile keys do not say whether prefix caching was on: they are dropped
    (one first compile charged again per configuration), the durations kept."""
    record = json.loads(switched().model_dump_json())
    record["schema_version"] = 4
    record["restart_costs"] = {"cached": {"spec:3": {"seconds": 42.0}}, "compiled": ["replay16/q4"]}
    read = read_state(json.dumps(record))
    assert read.state is not None
    assert read.written_as == 4
    assert read.dropped == (
        "the compile keys of the configurations run (relearned at their next start)",
    )
    assert read.state.restart_costs.compiled == ()
    assert read.state.restart_costs.cached["spec:3"].seconds == 42.0


# A field each schema added: an older record, written without it, reads as it started (no
# acceptance drift measured yet; no load seen to go before a change settled; no question
# answered no).
ADDED_FIELDS = {5: "acceptance_drift", 6: "load_gone_at", 7: "answered_no"}


@pytest.mark.parametrize(("version", "added"), ADDED_FIELDS.items())
def test_an_older_state_reads_with_what_its_schema_lacked_as_it_starts(
    version: int, added: str
) -> None:
    asked = Exploration(SetupKind.REPLAY, 2)
    state = switched().updated(
        load_gone_at=NOW, explored={asked: NOW}, answered_no={asked: Answer(at=NOW, acceptance=0.8)}
    )
    record = json.loads(state.model_dump_json())
    record["schema_version"] = version
    del record[added]
    read = read_state(json.dumps(record))
    assert read.state is not None
    assert read.written_as == version
    assert read.dropped == ()
    assert getattr(read.state, added) == getattr(TunerState(), added)
    assert read.state.current == switched().current


def test_the_demand_memory_and_the_restart_costs_persist() -> None:
    settings = ForecastSettings()
    load = LoadMemory().add(40.0, NOW, settings).add(60.0, NOW + 300, settings)
    costs = RestartCosts().measured(SPEC3, 170.0, False, RestartSettings(), prefix_caching=True)
    state = switched().updated(load=load, restart_costs=costs)
    read = read_state(state.model_dump_json())
    assert read.state == state
