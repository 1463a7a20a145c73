"""What every actuator reports and returns, and the one error family they raise."""

from __future__ import annotations

import difflib
import json
import os
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from autotuner.actuators.sites import Site
from autotuner.core.engine.builds import BuildInForce, Companion
from autotuner.core.engine.capabilities import EngineCapabilities
from autotuner.core.types import Setup
from autotuner.engines.build_table import AUTO
from autotuner.engines.companion_record import Saved, saved_record
from autotuner.engines.dialect import Dialect, Rendered
from autotuner.errors import (
    ActuatorError,
    AdviceOnlyError,
    ArgsError,
    ConflictError,
    EngineRuleError,
    RefusedByRuleError,
)
from autotuner.sources.scope import MetricsScope

STATE_ANNOTATION = "spec-autotuner.io/state"
PAUSE_ANNOTATION = "spec-autotuner.io/paused"
# The operator's own tokens for the companion flags a setup made the tuner change (JSON).
OPERATOR_ANNOTATION = "spec-autotuner.io/operator-args"
LOCAL_CALL_S = 10.0  # a target on the local disk: a read and a rename


@dataclass(frozen=True)
class RolloutStatus:
    done: bool
    stuck: str | None = None  # e.g. "ProgressDeadlineExceeded: 0/1 nodes ... nvidia.com/gpu"
    detail: str = ""


@dataclass(frozen=True)
class LiveTarget:
    """The target as it is now: the vLLM command line, what it configures, and our state."""

    description: str
    command: tuple[str, ...]
    args: tuple[str, ...]
    setup: Setup
    speculative_config: dict[str, Any] | None
    state: str | None  # the persisted TunerState JSON, if any
    paused: bool
    version: str | None  # resourceVersion (Kubernetes) or a content hash
    rollout: RolloutStatus
    image: str | None = None  # the engine container's image (its tag names the build)
    operator_args: Saved | None = None  # the operator's companion tokens, kept while changed
    advice: str | None = None  # why the tuner only advises here (it writes nothing), if so
    canary_held: bool = False  # a canary holds the rest back (a LeaderWorkerSet's partition)
    # The canary's pods while one is held: the window that verifies the change reads them alone.
    scope: MetricsScope | None = None


@dataclass(frozen=True)
class ApplyResult:
    changed: bool
    dry_run: bool
    before: tuple[str, ...]
    after: tuple[str, ...]
    diff: str
    version: str | None = None


def args_diff(before: Sequence[str], after: Sequence[str], label: str) -> str:
    return "".join(
        difflib.unified_diff(
            [f"{a}\n" for a in before],
            [f"{a}\n" for a in after],
            fromfile=f"{label} (before)",
            tofile=f"{label} (after)",
        )
    )


def live_target(
    where: str,
    *,
    description: str,
    command: Sequence[str],
    args: Sequence[str],
    annotations: dict[str, Any],
    dialect: Dialect,
    version: str | None,
    rollout: RolloutStatus,
    state: str | None = None,
    image: str | None = None,
    operator_args: str | None = None,
) -> LiveTarget:
    """What every actuator reports, read from a command line and its annotations."""
    try:
        setup = dialect.setup_of(command, args)
        drafter = dialect.speculative_config(command, args)
        record = annotations.get(OPERATOR_ANNOTATION, operator_args)
        saved = saved_record(json.loads(record)) if record else None
    except ArgsError as exc:
        raise ActuatorError(f"{where}: {exc}") from None
    except ValueError as exc:
        raise ActuatorError(f"{where}: {OPERATOR_ANNOTATION} is not JSON ({exc})") from None
    paused = str(annotations.get(PAUSE_ANNOTATION, "")).lower() in ("true", "1", "yes")
    return LiveTarget(
        description=description,
        command=tuple(command),
        args=tuple(args),
        setup=setup,
        speculative_config=drafter,
        state=annotations.get(STATE_ANNOTATION, state),
        paused=paused,
        version=version,
        rollout=rollout,
        image=image,
        operator_args=saved,
    )


def record_text(record: Saved | None) -> str | None:
    """The operator's companion record as it is stored on the target (None: none kept)."""
    return json.dumps(record, separators=(",", ":"), sort_keys=True) if record else None


def rendered(
    where: str,
    live: LiveTarget,
    setup: Setup,
    *,
    dialect: Dialect,
    saved_speculative_config: dict[str, Any] | None,
    allow_low_precision_replay: bool,
    companions: tuple[Companion, ...] = (),
    enforce_rules: bool = True,
) -> Rendered:
    """The (command, args) that configure `setup` with the companions it needs, and the
    operator's companion record to keep, or an ActuatorError naming `where` (a
    RefusedByRuleError for a rule the setup breaks; an AdviceOnlyError naming where the args
    live when they cannot be rendered here)."""
    try:
        return dialect.render(
            live.command,
            live.args,
            setup,
            saved_speculative_config=saved_speculative_config or live.speculative_config,
            allow_low_precision_replay=allow_low_precision_replay,
            companions=companions,
            saved_companions=live.operator_args,
            enforce_rules=enforce_rules,
        )
    except EngineRuleError as exc:
        raise RefusedByRuleError(
            f"{where}: refused: {exc}; nothing changed ({exc.override} writes it anyway)"
        ) from None
    except ArgsError as exc:
        if live.advice:  # the args live elsewhere (a shell variable, a ConfigMap): say where
            raise AdviceOnlyError(f"{where}: not written: {live.advice} ({exc})") from None
        raise ActuatorError(f"{where}: {exc}") from None


# Engine containers by the names serving stacks give them: llm-d's model server, and the
# `main` container of Dynamo and KServe pods.
ENGINE_CONTAINERS = ("modelserver", "main")


def select_container(containers: Sequence[Any], wanted: str | None, where: str, hint: str) -> Any:
    """The engine's container of a pod template: the one named, else the only one, else the
    only one whose name holds `hint` (the dialect's container hint), else the one a serving
    stack names its engine's (ENGINE_CONTAINERS)."""
    names = [str(c.get("name")) for c in containers]
    if wanted is not None:
        for container, name in zip(containers, names, strict=True):
            if name == wanted:
                return container
        raise ActuatorError(f"{where}: no container named {wanted!r}")
    if len(containers) == 1:
        return containers[0]
    hinted = [c for c, name in zip(containers, names, strict=True) if hint in name]
    if len(hinted) == 1:
        return hinted[0]
    for known in ENGINE_CONTAINERS:
        if names.count(known) == 1:
            return containers[names.index(known)]
    raise ActuatorError(
        f"{where}: several containers ({', '.join(names)}); name the engine's one in the "
        "target: file://PATH?container=NAME for a file, k8s://NS/KIND/OBJECT/NAME in a cluster"
    )


@dataclass(frozen=True)
class Wanted:
    """What one apply asks for."""

    setup: Setup
    state: str | None  # the state record to write with it (None: leave the record)
    expected_version: str | None  # the target must still be as read at this version
    saved_speculative_config: dict[str, Any] | None
    dry_run: bool  # only say what would change


@dataclass(frozen=True)
class Change:
    """One apply's rendered change, as every target's writer takes it."""

    live: LiveTarget  # the target as read for this apply
    command: list[str]
    args: list[str]
    state: str | None  # the state record written with it (None: leave the record)
    dry_run: bool  # only say what would change
    wanted: Wanted  # what the apply asked for (to render the target's other engines alike)
    operator_args: Saved | None = None  # the operator's values of the companion flags

    def annotations(self) -> dict[str, str | None]:
        """The tuner's records on an object target this change writes (None: remove it): the
        state, and the operator's companion record where it changed."""
        written: dict[str, str | None] = {}
        if self.state is not None:
            written[STATE_ANNOTATION] = self.state
        if self.operator_args != self.live.operator_args:
            written[OPERATOR_ANNOTATION] = record_text(self.operator_args)
        return written


class Actuator(ABC):
    """Reads the live vLLM setup and carries out changes; it never decides. What every target
    shares is here: an apply reads the target, checks it is as it was read, renders the args
    for the setup, and hands them to the target's own writer."""

    dialect: Dialect
    allow_low_precision_replay: bool
    periodic_state: bool = True  # the learned state is written between changes too
    # The served model's capabilities (set by whoever knows the model: the wiring, `apply`):
    # which companion flags a setup needs on the build the target's image names.
    engine: EngineCapabilities | None = None
    declared_build: str = AUTO  # engine.build: a version that overrides the image tag
    # Off only for `apply --force`: a setup the engine would refuse at start is written anyway.
    enforce_rules: bool = True

    def build_of(self, live: LiveTarget) -> BuildInForce:
        """The build the target runs: the declared version, else its image's tag."""
        return self.dialect.build_in_force(self.declared_build, image=live.image)

    def companions(self, live: LiveTarget, setup: Setup) -> tuple[Companion, ...]:
        """What the build needs besides `setup`'s own flags (none without a known model)."""
        if self.engine is None:
            return ()
        return self.engine.running_on(self.build_of(live)).companions(setup)

    @property
    def longest_call_s(self) -> float:
        """The longest one call to this target may take (its deadline, retries included): how
        long a stop may wait for a step in flight."""
        return LOCAL_CALL_S

    @abstractmethod
    def read(self) -> LiveTarget:
        """The live args, setup, pause, rollout and persisted state."""

    @abstractmethod
    def save_state(self, state: str, *, expected_version: str | None) -> str | None:
        """Write the state record alone; the new version when the target has one."""

    @abstractmethod
    def event(self, reason: str, message: str, *, warning: bool = False) -> None:
        """Tell the operator (a Kubernetes Event where there is one)."""

    @property
    @abstractmethod
    def where(self) -> str:
        """The target, as errors and diffs name it."""

    @abstractmethod
    def _read_for_apply(self) -> tuple[LiveTarget, Any]:
        """The live target and what the writer needs of the same read (one read per apply)."""

    @abstractmethod
    def _write(
        self,
        change: Change,
        read: Any,
    ) -> ApplyResult:
        """Write the change (its command and args, the state record and the operator's
        companion record), or only say what would change (dry run); `read` is what the writer
        needs of the same read."""

    def apply(
        self,
        setup: Setup,
        *,
        state: str | None,
        expected_version: str | None,
        saved_speculative_config: dict[str, Any] | None = None,
        dry_run: bool = False,
    ) -> ApplyResult:
        """Write `setup` (and `state`) on the target as read at `expected_version`."""
        return self._apply(
            Wanted(setup, state, expected_version, saved_speculative_config, dry_run)
        )

    def _apply(self, wanted: Wanted) -> ApplyResult:
        """Every target's apply: read it, check it is as it was read (else ConflictError,
        nothing written), render the args for the setup and hand them to its writer."""
        live, read = self._read_for_apply()
        if wanted.expected_version is not None and live.version != wanted.expected_version:
            raise ConflictError(
                f"{self.where} changed since it was read "
                f"({wanted.expected_version} -> {live.version})"
            )
        command, args, record = self.render_for(live, wanted)
        change = Change(live, command, args, wanted.state, wanted.dry_run, wanted, record)
        return self._write(change, read)

    def render_for(self, live: LiveTarget, wanted: Wanted) -> Rendered:
        """The (command, args) that configure the wanted setup on `live`'s command line, with
        the companions the build needs, and the operator's companion record to keep."""
        return rendered(
            self.where,
            live,
            wanted.setup,
            dialect=self.dialect,
            saved_speculative_config=wanted.saved_speculative_config,
            allow_low_precision_replay=self.allow_low_precision_replay,
            companions=self.companions(live, wanted.setup),
            enforce_rules=self.enforce_rules,
        )

    def render_other(self, change: Change, site: Site) -> Rendered:
        """Another engine container of the target (a worker), rendered like the first."""
        live = replace(change.live, command=site.command, args=site.args)
        return self.render_for(live, change.wanted)

    def release_canary(self) -> bool:
        """Let the rest of the target roll once no canary is being verified; False when no
        canary holds it back (only a partitioned target has one)."""
        return False


def atomic_write(path: Path, text: str) -> None:
    """Write via a temporary file in the same folder and a rename: readers never see half."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
