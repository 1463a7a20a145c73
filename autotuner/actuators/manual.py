"""`autotuner apply`: a change by hand, recorded as the loop records its own.

The state record is the one the loop persists on the target (the Kubernetes annotation, the
manifest's annotation, the exec target's state file): a manual change writes the setup it made
as the current one (so the loop resumes from it instead of calling it drift), keeps the
operator's drafter config while speculation is off (so turning it back on restores it), and
counts as a change for the loop's budget and cooldown. A paused target is refused unless
forced; a dry run writes nothing and posts nothing.
"""

from __future__ import annotations

import getpass
import socket
import time
from dataclasses import dataclass

from autotuner.actuators.base import PAUSE_ANNOTATION, Actuator, ApplyResult, LiveTarget
from autotuner.core.decide.state import TunerState, read_state
from autotuner.core.types import Setup
from autotuner.errors import ActuatorError

EVENT_REASON = "ManualApply"


@dataclass(frozen=True)
class ManualChange:
    live: LiveTarget  # the target before the change
    result: ApplyResult
    event_error: str | None = None  # the change was made but its Event was not posted


def operator() -> str:
    """Who is applying: user@host, as well as the process can tell."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def recorded_state(live: LiveTarget, wanted: Setup, now: float) -> TunerState:
    """The persisted state with `wanted` recorded as a change made at `now`."""
    read = read_state(live.state) if live.state else None
    state = read.state if read is not None and read.state is not None else TunerState()
    drafter = live.speculative_config or state.drafter
    return state.applied_by_hand(wanted, drafter, now)


def apply_by_hand(
    actuator: Actuator,
    wanted: Setup,
    *,
    dry_run: bool = False,
    force: bool = False,
    who: str | None = None,
    now: float | None = None,
) -> ManualChange:
    """Carry out `wanted` on the target with its state record and an Event."""
    live = actuator.read()
    if live.paused and not force:
        raise ActuatorError(
            f"{live.description} is paused ({PAUSE_ANNOTATION}); nothing changed "
            "(--force applies anyway)"
        )
    if live.setup == wanted:
        same = (*live.command, *live.args)
        return ManualChange(live, ApplyResult(False, dry_run, same, same, "", live.version))
    state = recorded_state(live, wanted, time.time() if now is None else now)
    result = actuator.apply(
        wanted,
        state=state.model_dump_json(),
        expected_version=live.version,
        saved_speculative_config=state.drafter,
        dry_run=dry_run,
    )
    if dry_run or not result.changed:
        return ManualChange(live, result)
    message = f"{live.setup.label} -> {wanted.label} by {who or operator()} (autotuner apply)"
    try:
        actuator.event(EVENT_REASON, message)
    except ActuatorError as exc:
        return ManualChange(live, result, event_error=str(exc))
    return ManualChange(live, result)
