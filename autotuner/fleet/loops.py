"""The fleet: one Controller loop per SpecTuner, stepped every interval, its status mirrored.

Events (from the watch) add, change and remove loops; `step_due` steps the loops whose
interval has come. A SpecTuner whose spec cannot run (an unknown kind, an invalid policy) gets
a loop without a Controller and a Degraded condition; it never stops the others. A target that
is not found for `NOT_FOUND_STEPS` steps in a row is reported and its loop parked until the
SpecTuner's spec changes: a deleted Deployment is not read every interval forever."""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from autotuner.actuators.kubeapi import NotFoundError
from autotuner.controller import Controller
from autotuner.core.decide.state import Verification
from autotuner.errors import AutotunerError
from autotuner.fleet.shards import Shard
from autotuner.fleet.spec import SpecTunerSpec, parse_spec
from autotuner.fleet.status import Health, degraded_status, same_status, status_of, verified_gain
from autotuner.settings import Settings

Obj = dict[str, Any]
Key = tuple[str, str]  # namespace, name
NOT_FOUND_STEPS = 3
# A status that changed only in its decision's sentence or gain is written at most this often
# (a setup, an action or a condition that changes is written at once): one PATCH per target
# per step would be most of the controller's API requests.
STATUS_REFRESH_S = 60.0

# (spec, its namespace) -> the settings its loop runs with (InputError when invalid).
SettingsFor = Callable[[SpecTunerSpec, str], Settings]
# (settings, key) -> its Controller (AutotunerError when it cannot be built).
Build = Callable[[Settings, Key], Controller]


def spread(key: Key, interval_s: float) -> float:
    """A loop's first step, put off by a share of one interval fixed by its name: loops
    created together (a controller's start) step spread over the interval, not at once."""
    return interval_s * (zlib.crc32("/".join(key).encode()) % 1000) / 1000


def _key(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace", ""), meta.get("name", ""))


class StatusWriter(Protocol):
    def write(self, key: Key, status: Obj) -> None: ...


@dataclass
class TunerLoop:
    """One SpecTuner's loop: its Controller (None while its spec cannot run) and what its
    status last said."""

    key: Key
    generation: int
    target: str
    controller: Controller | None = field(repr=False)
    health: Health = field(default_factory=Health)
    due: float = 0.0
    not_found: int = 0  # steps in a row that found no target
    verifying: Verification | None = None  # the switch in flight before the latest step
    verified: float | None = None  # the latest verification's measured gain
    written: Obj | None = None  # the status as last written
    written_at: float = float("-inf")
    in_flight: bool = False  # handed to the pool, not yet stepped
    lock: threading.Lock = field(default_factory=threading.Lock)  # one step at a time

    @property
    def running(self) -> bool:
        return self.controller is not None and self.health.reason is None


@dataclass
class Fleet:
    """Every SpecTuner's loop in this process."""

    settings_for: SettingsFor
    build: Build
    status: StatusWriter
    logger: logging.Logger
    clock: Callable[[], float] = time.time
    workers: int = 1  # loops stepped at once (a step mostly waits on HTTP)
    loops: dict[Key, TunerLoop] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    wake: threading.Event = field(default_factory=threading.Event)  # a loop was added
    pool: ThreadPoolExecutor | None = None
    status_refresh_s: float = STATUS_REFRESH_S
    shard: Shard = field(default_factory=Shard)  # the SpecTuners this replica holds

    # ----------------------------------------------------------------- events

    def upsert(self, obj: Mapping[str, Any]) -> None:
        """A SpecTuner was added or changed: (re)build its loop when its spec is new; a change
        of its status alone (our own writes, as the watch echoes them) changes nothing."""
        key = _key(obj)
        generation = int((obj.get("metadata") or {}).get("generation") or 1)
        if not self.shard.holds(key):  # another replica's: its watch sees it too
            return
        with self.lock:
            old = self.loops.get(key)
        if old is not None and old.generation == generation:
            return
        loop = self._loop_for(key, generation, obj.get("spec"), old)
        with self.lock:
            self.loops[key] = loop
        self.wake.set()
        if loop.controller is None:
            self._write_degraded(loop)
        self.logger.info("spectuner %s/%s: %s", *key, loop.health.message or "loop started")

    def remove(self, key: Key) -> None:
        """A SpecTuner was deleted: its loop stops; the target stays as it is."""
        with self.lock:
            loop = self.loops.pop(key, None)
        if loop is not None:
            self.logger.info("spectuner %s/%s deleted: loop stopped, target left as is", *key)

    def resync(self, scope: str | None, objects: Iterable[Mapping[str, Any]]) -> None:
        """A fresh list of the SpecTuners in `scope` (a namespace, or None for all): loops
        no longer listed stop (deleted while no watch was open); the rest as upsert."""
        listed = [o for o in objects if self.shard.holds(_key(o))]
        keys = {_key(o) for o in listed}
        with self.lock:
            gone = [k for k in self.loops if (scope is None or k[0] == scope) and k not in keys]
        for key in gone:
            self.remove(key)
        for obj in listed:
            self.upsert(obj)

    def _loop_for(self, key: Key, generation: int, raw: Any, old: TunerLoop | None) -> TunerLoop:
        target = ""
        try:
            spec = parse_spec(raw)
            target = f"{spec.target_ref.kind}/{spec.target_ref.name}"
            settings = self.settings_for(spec, key[0])
            controller = self.build(settings, key)
        except AutotunerError as exc:
            reason = "InvalidSpec" if isinstance(exc, ValueError) else "CannotStart"
            return TunerLoop(key, generation, target, None, Health(reason, str(exc)))
        if old is not None and old.controller is not None:
            controller.state = old.controller.state  # what it learnt; the target keeps it too
        written = old.written if old is not None else None
        first = self.clock() + spread(key, controller.settings.loop.interval_s)
        return TunerLoop(key, generation, target, controller, due=first, written=written)

    # ----------------------------------------------------------------- stepping

    def due(self) -> list[TunerLoop]:
        now = self.clock()
        with self.lock:
            return [
                loop
                for loop in self.loops.values()
                if loop.running and not loop.in_flight and loop.due <= now
            ]

    def next_due(self) -> float | None:
        with self.lock:
            times = [o.due for o in self.loops.values() if o.running and not o.in_flight]
        return min(times) if times else None

    def step_due(self) -> int:
        """Step every loop whose interval has come; the number started. With one worker the
        steps are done on return; with more, they are handed to the pool and the next call
        starts the loops due meanwhile (a slow step holds up no other loop)."""
        loops = self.due()
        if self.workers == 1:
            for loop in loops:
                self.step_one(loop)
            return len(loops)
        if self.pool is None:
            self.pool = ThreadPoolExecutor(self.workers, thread_name_prefix="spectuner")
        for loop in loops:
            loop.in_flight = True
            self.pool.submit(self.step_one, loop)
        return len(loops)

    def close(self) -> None:
        """Let the steps in flight finish; start no more."""
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)

    def step_one(self, loop: TunerLoop) -> None:
        controller = loop.controller
        assert controller is not None
        with loop.lock:
            interval = controller.settings.loop.interval_s
            loop.due = max(loop.due + interval, self.clock())
            loop.verifying = controller.state.verification if controller.state else None
            try:
                controller.step()
                self._after_step(loop, controller)
            except Exception as exc:  # one bad step must not stop the fleet
                self.logger.exception("spectuner %s/%s: step failed: %s", *loop.key, exc)
            finally:
                loop.in_flight = False

    def _after_step(self, loop: TunerLoop, controller: Controller) -> None:
        if isinstance(controller.last_read_error, NotFoundError):
            loop.not_found += 1
            if loop.not_found >= NOT_FOUND_STEPS:
                loop.health = Health(
                    "TargetNotFound",
                    f"{loop.target} not found in {NOT_FOUND_STEPS} steps in a row: loop "
                    "parked until the SpecTuner changes",
                )
                self._write_degraded(loop)
                return
        else:
            loop.not_found = 0
        snapshot = controller.metrics.current()
        if snapshot.state is not None:
            gained = verified_gain(loop.verifying, snapshot.state)
            loop.verified = gained if gained is not None else loop.verified
        status = status_of(
            snapshot,
            target=loop.target,
            generation=loop.generation,
            health=loop.health,
            verified=loop.verified,
            previous=(loop.written or {}).get("conditions", []),
            paused=controller.settings.target.paused,
        )
        self._write(loop, status)

    def _write_degraded(self, loop: TunerLoop) -> None:
        status = degraded_status(
            target=loop.target,
            generation=loop.generation,
            health=loop.health,
            previous=(loop.written or {}).get("conditions", []),
            at=self.clock(),
        )
        self._write(loop, status)

    def _write(self, loop: TunerLoop, status: Obj) -> None:
        """Mirror the status when it changed in substance, or its details are older than
        `status_refresh_s` (saves API requests); a sharded replica says it holds the object."""
        if self.shard.count > 1:
            status = {**status, "shard": self.shard.label}
        now = self.clock()
        fresh = now - loop.written_at < self.status_refresh_s
        if same_status(loop.written, status, details=not fresh):
            return
        try:
            self.status.write(loop.key, status)
        except AutotunerError as exc:
            self.logger.warning("spectuner %s/%s: status not written: %s", *loop.key, exc)
            return
        loop.written, loop.written_at = status, now
