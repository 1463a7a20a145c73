"""How `autotuner run` stops: SIGTERM (or SIGINT, once or again) asks the loop to stop after
the step in flight, and the process waits for that step no longer than the loop interval plus
the longest deadline of an outside call, then exits 0.

The step in flight is never cut short by the signal itself: a patch either completes or is
never sent, and the loop saves the state as it stops. Only a step still running when the grace
has passed (an outside call past its own deadline) is left behind: its writes are single
requests (a Kubernetes patch) or a rename (a manifest), so none is ever half-written.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

from autotuner.telling.logs import event

if TYPE_CHECKING:
    from autotuner.actuators.base import Actuator
    from autotuner.settings import Settings

POLL_S = 0.5  # how often the main thread looks at the worker and the signals


def stop_grace_s(settings: Settings, actuator: Actuator | None = None) -> float:
    """The longest a stop may take: one interval and the longest outside call of the step in
    flight (a scrape, a canary completion, a Kubernetes request or the exec target's restart
    command, whose deadline the target keeps)."""
    target_s = actuator.longest_call_s if actuator is not None else 0.0
    deadlines = [settings.source.timeout_s, target_s]
    if settings.quality.enabled:
        deadlines.append(settings.quality.timeout_s)
    return settings.loop.interval_s + max(deadlines)


class Stopper:
    """The signals' side of a stop. The handler only records and sets events (it runs between
    two bytecodes of the main thread, which may hold the logging lock); `wait` says it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.asked_at: float | None = None
        self.signals = 0
        self.events: list[threading.Event] = []

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self.handle)
        signal.signal(signal.SIGINT, self.handle)

    def handle(self, signum: int, frame: FrameType | None) -> None:
        self.signals += 1
        if self.asked_at is None:
            self.asked_at = self.clock()
        for stop in self.events:
            stop.set()

    def stops(self, stop: threading.Event) -> None:
        """Set `stop` on a signal (at once, if one came already)."""
        self.events.append(stop)
        if self.asked_at is not None:
            stop.set()

    def wait(self, worker: threading.Thread, grace_s: float, logger: logging.Logger) -> bool:
        """Wait for `worker` to end; after a signal, `grace_s` at most. False: it did not end
        in time and is left behind."""
        told = 0
        while worker.is_alive():
            worker.join(timeout=POLL_S)
            if self.asked_at is None or not worker.is_alive():
                continue
            left = grace_s - (self.clock() - self.asked_at)
            if told < self.signals:
                told = self.signals
                again = " again" if told > 1 else ""
                event(logger, f"asked to stop{again}: the step in flight ends within {left:.0f}s")
            if left <= 0:
                event(
                    logger,
                    f"the step in flight did not end within {grace_s:.0f}s of the stop: "
                    "exiting without it",
                    logging.ERROR,
                )
                return False
        return True
