"""The load generator: exactly B concurrent streams of identical greedy requests (httpx
async), one request per stream per run; tokens/s and per-token latency from the responses.

One event loop and its connection pools live as long as the generator, so a run measures the
server, not connection set-up (the warm-up run opens the connections). Each stream has its own
small client: one httpx pool with hundreds of connections spends more CPU finding a free
connection than sending the request (measured: benchmarks/bench_overhead.py).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass

import httpx
import numpy as np


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
    ) -> None:
        self.url = f"{base_url.rstrip('/')}/v1/completions"
        self.model = model
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
        started = time.perf_counter()
        client = self.clients[(index // self.STREAMS_PER_CLIENT) % len(self.clients)]
        try:
            response = await client.post(self.url, json=body)
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        tokens = int(response.json().get("usage", {}).get("completion_tokens", 0))
        return tokens, time.perf_counter() - started

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
        started = time.perf_counter()
        results = await asyncio.gather(*(self._one(i, body) for i, body in enumerate(bodies)))
        elapsed = time.perf_counter() - started
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
