"""The load generator: exactly B concurrent streams of identical greedy requests (httpx
async), one request per stream per run; tokens/s and per-token latency from the responses.

One event loop and its connection pools live as long as the generator, so a run measures the
server, not connection set-up (the warm-up run opens the connections). Each stream has its own
small client: one httpx pool with hundreds of connections spends more CPU finding a free
connection than sending the request (measured: benchmarks/bench_overhead.py).

Runs are timed by a Clock: the wall clock by default (a real server); a simulated engine's own
clock in tests (autotuner/sim/clock.py), so that tokens/s is tokens per simulated second and the
same on any machine however busy.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass
from typing import Protocol

import httpx
import numpy as np


class Clock(Protocol):
    """What runs and waits are timed by: `clock()` is seconds on a monotonic scale,
    `wait(s)` lets s of them pass, and `sending(n)` says n requests are leaving for the
    server (a simulated clock holds still until they have arrived; the wall clock ignores it)."""

    def __call__(self) -> float: ...

    def wait(self, seconds: float) -> None: ...

    def sending(self, requests: int) -> None: ...


class WallClock:
    """Real time: a real server, measured as it serves."""

    def __call__(self) -> float:
        return time.perf_counter()

    def wait(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    def sending(self, requests: int) -> None:
        pass


@dataclass(frozen=True)
class RunResult:
    streams: int
    tokens: int
    seconds: float
    time_per_token_p50_s: float
    time_per_token_p90_s: float
    failures: int

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


class LoadGenerator:
    STREAMS_PER_CLIENT = 1

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        timeout_s: float = 600.0,
        max_streams: int = 1024,
        clock: Clock | None = None,
    ) -> None:
        self.url = f"{base_url.rstrip('/')}/v1/completions"
        self.model = model
        self.clock: Clock = clock or WallClock()
        self.loop = asyncio.new_event_loop()
        per = self.STREAMS_PER_CLIENT
        limits = httpx.Limits(max_connections=per, max_keepalive_connections=per)
        # One TLS context for all clients: building one per client took 20 ms each (21 s for
        # 1024 streams before the first request).
        tls = ssl.create_default_context()
        self.clients = [
            self.loop.run_until_complete(self._client(timeout_s, limits, tls))
            for _ in range(-(-max_streams // per))
        ]

    @staticmethod
    async def _client(
        timeout_s: float, limits: httpx.Limits, tls: ssl.SSLContext
    ) -> httpx.AsyncClient:
        return httpx.AsyncClient(timeout=timeout_s, limits=limits, verify=tls)

    async def _one(self, index: int, body: dict[str, object]) -> tuple[int, float] | None:
        started = self.clock()
        client = self.clients[(index // self.STREAMS_PER_CLIENT) % len(self.clients)]
        try:
            response = await client.post(self.url, json=body)
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        tokens = int(response.json().get("usage", {}).get("completion_tokens", 0))
        return tokens, self.clock() - started

    async def _run(self, streams: int, prompts: list[str], output_len: int) -> RunResult:
        bodies = [
            {
                "prompt": prompts[i % len(prompts)],
                "max_tokens": output_len,
                "temperature": 0.0,
                "seed": 0,
                "ignore_eos": True,
                **({"model": self.model} if self.model else {}),
            }
            for i in range(streams)
        ]
        started = self.clock()
        self.clock.sending(streams)
        results = await asyncio.gather(*(self._one(i, body) for i, body in enumerate(bodies)))
        elapsed = self.clock() - started
        done = [r for r in results if r is not None]
        per_token = np.array([s / max(t, 1) for t, s in done]) if done else np.array([0.0])
        return RunResult(
            streams=streams,
            tokens=sum(t for t, _ in done),
            seconds=elapsed,
            time_per_token_p50_s=float(np.percentile(per_token, 50)),
            time_per_token_p90_s=float(np.percentile(per_token, 90)),
            failures=len(results) - len(done),
        )

    def run(self, streams: int, prompts: list[str], output_len: int) -> RunResult:
        return self.loop.run_until_complete(self._run(streams, prompts, output_len))

    def close(self) -> None:
        for client in self.clients:
            self.loop.run_until_complete(client.aclose())
        self.loop.close()

    def __enter__(self) -> LoadGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
