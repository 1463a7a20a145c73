"""Timing the fault suite's calls: how long one took (or that it had not ended when the test
gave up on it), and waiting on a condition."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def timed(call: Callable[[], Any], limit_s: float) -> tuple[Any, float]:
    """(what `call` returned or raised, seconds it took); a call still running after
    `limit_s` is reported as such (the test's server ends it when the test stops it)."""
    outcome: list[Any] = []
    started = time.monotonic()

    def run() -> None:
        try:
            outcome.append(call())
        except Exception as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=limit_s)
    elapsed = time.monotonic() - started
    if worker.is_alive():
        return StillRunning(limit_s), elapsed
    return outcome[0], elapsed


@dataclass(frozen=True)
class StillRunning:
    """The call had not returned after `after_s` seconds."""

    after_s: float


def wait_for(check: Callable[[], object], timeout_s: float, what: str) -> float:
    """Seconds until `check()` holds; an AssertionError naming `what` after `timeout_s`."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if check():
            return time.monotonic() - started
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout_s:g}s")
