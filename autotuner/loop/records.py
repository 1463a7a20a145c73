"""The TunerState as persisted on the target: resumed at start (migrated, or set aside when it
cannot be read), followed while another writer records a change, saved now and then."""

from __future__ import annotations

import logging

from autotuner.actuators.base import Actuator, LiveTarget
from autotuner.core.decide.state import TunerState, read_state
from autotuner.core.decide.step import Notice, NoticeKind
from autotuner.errors import ActuatorError
from autotuner.telling.counting import ErrorKind
from autotuner.telling.notifier import Notifier


class StateRecords:
    """Reads and writes the state record on the target; remembers what it last wrote (so a
    record written by someone else is told apart) and when."""

    def __init__(
        self, actuator: Actuator | None, notifier: Notifier, save_interval_s: float
    ) -> None:
        self.actuator, self.notifier, self.save_interval_s = actuator, notifier, save_interval_s
        self.written: str | None = None  # the record we last wrote
        self.saved_at = 0.0
        self.set_aside_told: str | None = None  # an unreadable record, told once

    def resume(self, state: TunerState | None, live: LiveTarget | None, leader: bool) -> TunerState:
        """Resume from the target's annotation at start, and follow it while not leading
        (so a new leader continues a verification instead of deciding afresh)."""
        if (state is None or not leader) and live is not None and live.state:
            state = self._restored(live.state, state) or state
        elif state is not None and live is not None and live.state not in (None, self.written):
            state = self._recorded_by_hand(state, live)
        state = state or TunerState()
        if live is not None and live.speculative_config:
            state = state.keeping_drafter(live.speculative_config)
        return state

    def _recorded_by_hand(self, state: TunerState, live: LiveTarget) -> TunerState:
        """Someone else wrote the state record while we lead (`autotuner apply` records its
        change there): when it names what runs, take its change, keep our estimates."""
        record = read_state(live.state or "").state
        if record is None or record.current != live.setup or record.current == state.current:
            return state
        self.notifier.log(f"a change recorded on the target: {record.current.label} runs")
        return state.following(record)

    def _restored(self, text: str, state: TunerState | None) -> TunerState | None:
        """The persisted state (migrated when older); an unreadable one is kept aside in the
        new state, and said loudly once, instead of being dropped."""
        read = read_state(text)
        if read.state is not None:
            if state is None:
                migrated = (
                    f" (migrated from schema {read.written_as}"
                    + "".join(f"; not carried over: {what}" for what in read.dropped)
                    + ")"
                )
                self.notifier.log(
                    "resumed from the persisted state" + (migrated if read.migrated else ""),
                    decision_id=read.state.last_decision_id,
                    verifying=read.state.verification is not None,
                )
            return read.state
        if text == self.set_aside_told:
            return None
        self.set_aside_told = text
        message = (
            f"the persisted state cannot be read ({read.problem}): starting with fresh "
            "estimates; the unreadable record is kept in the state's set_aside field"
        )
        self.notifier.tell(Notice(NoticeKind.STATE_SET_ASIDE, message))
        return (state or TunerState()).setting_aside(text)

    def applied(self, record: str, now: float) -> None:
        """A change was written with this record (one guarded patch)."""
        self.written, self.saved_at = record, now

    def save_periodically(self, state: TunerState, live: LiveTarget | None, now: float) -> None:
        """Persist what was learned now and then (a change writes its state with its patch)."""
        due = now - self.saved_at >= self.save_interval_s
        if not due or not self._keeps_learning():
            return
        if self.save(state, version=live.version if live else None):
            self.saved_at = now

    def save(self, state: TunerState, *, version: str | None) -> bool:
        assert self.actuator is not None
        record = state.model_dump_json()
        try:
            self.actuator.save_state(record, expected_version=version)
        except ActuatorError as exc:
            self.notifier.failed(ErrorKind.STATE, f"state not saved: {exc}")
            return False
        self.written = record
        return True

    def flush(self, state: TunerState) -> None:
        """Write the state whatever the version (at shutdown, while still leading), where the
        target keeps what is learned between changes (a GitOps file does not)."""
        if not self._keeps_learning():
            return
        assert self.actuator is not None
        try:
            self.actuator.save_state(state.model_dump_json(), expected_version=None)
        except ActuatorError as exc:
            self.notifier.log(f"state not flushed at shutdown: {exc}", logging.WARNING)

    def _keeps_learning(self) -> bool:
        return self.actuator is not None and self.actuator.periodic_state
