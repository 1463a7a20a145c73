"""The exec actuator: write the new vLLM args to a file and run a restart command.

For systemd units, docker compose or a local `vllm serve` supervised by the sidecar: the args
file holds one argument per line (or, with `env_var`, a shell-quoted `VAR=...` line for an env
file); the restart command runs with a timeout, and a non-zero exit is a failed change.

A change writes two files, the state and the args. A journal written first (`*.pending.json`:
the new args and the state before) makes the pair one change for a reader: until the new
args are in place, `read()` reports the state as it was, so a sidecar killed between the two
writes does not find, on restart, a state that names a setup the args never had (which it
would take for someone else's change). The next write or state save clears the journal.

The command runs in a process group of its own: at the timeout the whole group is killed, so
a `sh -c` that left a child holding its output pipe cannot keep the sidecar waiting.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import signal
import subprocess
from pathlib import Path

from autotuner.actuators.base import (
    Actuator,
    ApplyResult,
    Change,
    LiveTarget,
    RolloutStatus,
    args_diff,
    atomic_write,
    live_target,
    record_text,
)
from autotuner.engines.dialect import Dialect
from autotuner.engines.vllm.dialect import VllmDialect
from autotuner.errors import ActuatorError, RestartError


class ExecActuator(Actuator):
    def __init__(
        self,
        args_file: str | Path,
        restart_command: list[str],
        *,
        state_file: str | Path | None = None,
        env_var: str | None = None,
        timeout_s: float = 120.0,
        dialect: Dialect | None = None,
        allow_low_precision_replay: bool = False,
    ) -> None:
        if not restart_command:
            raise ActuatorError("the exec actuator needs a restart command")
        self.args_file = Path(args_file)
        self.restart_command = list(restart_command)
        self.state_file = (
            Path(state_file) if state_file else self.args_file.with_suffix(".state.json")
        )
        self.env_var = env_var
        self.timeout_s = timeout_s
        self.dialect: Dialect = dialect or VllmDialect()
        self.allow_low_precision_replay = allow_low_precision_replay
        self.events: list[tuple[str, str, bool]] = []
        self.last_output = ""

    def _args(self) -> tuple[list[str], str]:
        try:
            text = self.args_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise ActuatorError(f"{self.args_file}: cannot read ({exc.strerror})") from None
        if self.env_var:
            prefix = f"{self.env_var}="
            line = next((ln for ln in text.splitlines() if ln.startswith(prefix)), None)
            if line is None:
                raise ActuatorError(f"{self.args_file}: no {self.env_var}= line")
            return shlex.split(shlex.split(line[len(prefix) :])[0]), text
        return [ln for ln in text.splitlines() if ln.strip()], text

    @property
    def longest_call_s(self) -> float:
        return self.timeout_s  # the restart command's

    @property
    def operator_file(self) -> Path:
        """The operator's companion tokens, kept while a setup changes them."""
        return self.args_file.with_name(f"{self.args_file.name}.operator.json")

    @property
    def journal(self) -> Path:
        return self.args_file.with_name(f"{self.args_file.name}.pending.json")

    def _state(self, args_text: str) -> str | None:
        """The state record that goes with the args as they are (see the journal above)."""
        state = self.state_file.read_text(encoding="utf-8") if self.state_file.exists() else None
        try:
            pending = json.loads(self.journal.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return state  # no journal (or a torn one, written before anything else): as is
        if not isinstance(pending, dict) or pending.get("args") == args_text:
            return state  # the change is whole
        before = pending.get("state_before")
        return before if isinstance(before, str) else None

    def read(self) -> LiveTarget:
        args, text = self._args()
        state = self._state(text)
        return live_target(
            str(self.args_file),
            description=f"exec://{self.args_file}",
            command=(),
            args=args,
            annotations={},
            dialect=self.dialect,
            state=state,
            version=hashlib.sha256(text.encode()).hexdigest()[:16],
            rollout=RolloutStatus(True, None, "restart command returned"),
            operator_args=self._operator_args(),
        )

    def _operator_args(self) -> str | None:
        try:
            return self.operator_file.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ActuatorError(f"{self.operator_file}: cannot read ({exc.strerror})") from None

    @property
    def where(self) -> str:
        return str(self.args_file)

    def _read_for_apply(self) -> tuple[LiveTarget, None]:
        return self.read(), None

    def _write(self, change: Change, read: None) -> ApplyResult:
        live, args, state = change.live, change.args, change.state  # its command is the file's
        dry_run, operator_args = change.dry_run, change.operator_args
        diff = args_diff(live.args, args, str(self.args_file))
        changed = args != list(live.args)
        if dry_run:
            return ApplyResult(changed, True, live.args, tuple(args), diff, live.version)
        if not changed:
            if state is not None:
                self.save_state(state, expected_version=None)
            return ApplyResult(False, False, live.args, tuple(args), "", live.version)
        text = (
            f"{self.env_var}={shlex.quote(shlex.join(args))}\n"
            if self.env_var
            else "".join(f"{a}\n" for a in args)
        )
        atomic_write(self.journal, json.dumps({"args": text, "state_before": live.state}))
        if state is not None:
            atomic_write(self.state_file, state)
        if operator_args != live.operator_args:
            record = record_text(operator_args)
            if record is None:
                self.operator_file.unlink(missing_ok=True)
            else:
                atomic_write(self.operator_file, record)
        atomic_write(self.args_file, text)
        self.journal.unlink(missing_ok=True)
        self._restart()
        version = hashlib.sha256(text.encode()).hexdigest()[:16]
        return ApplyResult(True, False, live.args, tuple(args), diff, version)

    def _restart(self) -> None:
        environment = dict(os.environ, AUTOTUNER_ARGS_FILE=str(self.args_file))
        try:
            process = subprocess.Popen(
                self.restart_command,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=environment,
                start_new_session=True,  # its own process group, killed whole at the timeout
            )
        except OSError as exc:
            raise ActuatorError(f"restart command failed to start: {exc}") from None
        try:
            output, _ = process.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            self.last_output = _kill_group(process)
            raise RestartError(
                f"restart command timed out after {self.timeout_s:g}s (its process group was "
                f"killed): {shlex.join(self.restart_command)}"
            ) from None
        self.last_output = output[-4000:]
        if process.returncode != 0:
            raise RestartError(
                f"restart command exited {process.returncode}: {self.last_output[-400:]!r}"
            )

    def save_state(self, state: str, *, expected_version: str | None) -> str | None:
        atomic_write(self.state_file, state)
        self.journal.unlink(missing_ok=True)  # the state now goes with the args as they are
        return self.read().version

    def event(self, reason: str, message: str, *, warning: bool = False) -> None:
        self.events.append((reason, message, warning))
        self.last_output = json.dumps({"reason": reason, "message": message})


def _kill_group(process: subprocess.Popen[str], grace_s: float = 5.0) -> str:
    """Kill the command's whole process group; what it printed, as far as it can be read."""
    with contextlib.suppress(ProcessLookupError):  # the group may have ended meanwhile
        os.killpg(process.pid, signal.SIGKILL)
    try:
        output, _ = process.communicate(timeout=grace_s)
    except subprocess.TimeoutExpired:  # a descendant left the group and holds the pipe
        if process.stdout is not None:
            process.stdout.close()
        process.wait()
        return ""
    return output[-4000:]
