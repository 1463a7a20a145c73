"""An OpenAI-compatible completions engine for the simulator: requests really wait for
simulated decode steps, so a load generator measures the simulator's truth.

It runs on the server's event loop: one task steps the engine (every step advances each running
request, up to capacity, by the tokens a verify step keeps, then sleeps the simulated step
time); each request is a future. With an EngineClock (autotuner/sim/clock.py) it sleeps nothing:
each step moves that clock by its step time, and no step is taken while a request announced to
the clock is still on its way.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from autotuner.sim.clock import EngineClock
from autotuner.sim.engine import SimSetup

CATCH_UP_S = 2.0


@dataclass
class Request:
    max_tokens: int
    done: asyncio.Future[None]
    produced: float = 0.0
    started: float = field(default_factory=time.monotonic)


class CompletionsEngine:
    def __init__(
        self,
        setup: Callable[[], SimSetup],
        step_time: Callable[[float, SimSetup], float],
        capacity: Callable[[SimSetup], float] | None = None,
        on_step: Callable[[int, int, float], None] | None = None,
        clock: EngineClock | None = None,
    ) -> None:
        self.clock = clock  # None: steps take real time
        self.on_step = on_step  # (running, waiting, step seconds), e.g. to count metrics
        self.setup = setup
        self.step_time = step_time
        self.capacity = capacity
        self.queue: list[Request] = []
        self.steps = 0
        self.wakeup: asyncio.Event | None = None
        self.task: asyncio.Task[None] | None = None

    def running(self) -> int:
        return len(self.queue)

    async def submit(self, max_tokens: int) -> Request:
        if self.task is None:
            self.wakeup = asyncio.Event()
            self.task = asyncio.get_running_loop().create_task(self._run())
        request = Request(max_tokens=max_tokens, done=asyncio.get_running_loop().create_future())
        self.queue.append(request)
        assert self.wakeup is not None
        self.wakeup.set()
        await request.done
        return request

    def arrived(self) -> None:
        """A completions request reached the server (served or not): on an EngineClock the
        engine steps again once no announced request is on its way."""
        if self.clock is None:
            return
        self.clock.arrived()
        if self.wakeup is not None:
            self.wakeup.set()

    async def _run(self) -> None:
        assert self.wakeup is not None
        deadline = 0.0
        while True:
            if not self.queue or (self.clock is not None and self.clock.in_transit):
                self.wakeup.clear()
                await self.wakeup.wait()
                deadline = 0.0
                continue
            setup = self.setup()
            limit = int(self.capacity(setup)) if self.capacity else len(self.queue)
            active = self.queue[: max(limit, 1)]
            kept, reach = 1.0, 1.0
            for rate in list(setup.acceptance)[: setup.k_at(len(active))]:
                reach *= rate
                kept += reach
            step = self.step_time(len(active), setup)
            if self.clock is not None:
                await asyncio.sleep(0)  # the server reads and answers between steps
                self.clock.wait(step)
            else:
                # Sleep to a running deadline, not for `step`: timer overshoot would otherwise
                # add up over hundreds of short steps. A host too busy to wake us in time is
                # caught up (steps back to back) for up to CATCH_UP_S, so the simulated engine
                # serves its truth on a busy machine too; a longer stall is dropped, not burst
                # out.
                now = time.monotonic()
                deadline = max(deadline, now - CATCH_UP_S) + step if deadline else now + step
                await asyncio.sleep(max(0.0, deadline - now))
            self.steps += 1
            if self.on_step is not None:
                self.on_step(len(active), len(self.queue) - len(active), step)
            for request in active:
                request.produced += kept
                if request.produced >= request.max_tokens and not request.done.done():
                    request.done.set_result(None)
            self.queue = [r for r in self.queue if not r.done.done()]
