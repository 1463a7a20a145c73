"""A simulated engine's own time, for measuring it exactly on any machine however busy.

Time moves only by `wait`, by exactly what is waited (also the clock of `autotuner demo
--fast`). The completions engine's steps move it by their step times instead of
sleeping them; the bench's waits (for a restarted server) by what they wait. A load generator
and a bench sweep given this clock (autotuner/bench/load.py `Clock`) measure tokens per
simulated second: the simulator's truth, whatever the host's load.

Requests take no simulated time to arrive, so the clock holds still while any is on its way: a
load generator says how many it sends (`sending`), the server counts each one that arrives
(`arrived`), and the engine takes no step while `in_transit`. A run's B streams then start in
one step, as on a server that received them at once, whatever the host's scheduling did to them.
"""

from __future__ import annotations

import threading


class EngineClock:
    def __init__(self, start: float = 1_000.0) -> None:
        self._now = start
        self._in_transit = 0
        self._lock = threading.Lock()  # the engine's thread and the caller's both use it

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def wait(self, seconds: float) -> None:
        with self._lock:
            self._now += max(0.0, seconds)

    def sending(self, requests: int) -> None:
        with self._lock:
            self._in_transit += max(0, requests)

    def arrived(self) -> None:
        """One request reached the server (one nobody announced changes nothing)."""
        with self._lock:
            self._in_transit = max(0, self._in_transit - 1)

    @property
    def in_transit(self) -> int:
        with self._lock:
            return self._in_transit
