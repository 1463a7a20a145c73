"""Serve a simulated engine on loopback: `/metrics`, `/health`, the engine's own JSON endpoints
(vLLM's `/version`, SGLang's `/server_info`), and (with a CompletionsEngine) an
OpenAI-compatible `/v1/completions`.

A small asyncio HTTP/1.1 server (keep-alive, Content-Length bodies) on its own thread: hundreds
of concurrent streams cost one coroutine each, not one OS thread each.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Callable, Mapping

from autotuner.sim.completions import CompletionsEngine
from autotuner.sim.engine import SimulatedVllm

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 503: "Service Unavailable"}


def greedy_text(prompt: str, max_tokens: int) -> str:
    """What a deterministic model would answer: the same words for the same prompt."""
    seed = hashlib.sha256(prompt.encode()).digest()
    return "".join(f" w{seed[i % len(seed)]}" for i in range(max_tokens))


class SimServer:
    """A background HTTP server; use as a context manager or call `close()`."""

    def __init__(
        self,
        sim: SimulatedVllm,
        host: str = "127.0.0.1",
        port: int = 0,
        completions: CompletionsEngine | None = None,
        generate: Callable[[str, int], str] | None = None,
        on_request: Callable[[], None] | None = None,
        version: str = "0.33.0",
        routes: Mapping[str, Callable[[], object]] | None = None,
        serves_metrics: Callable[[], bool] = lambda: True,
    ) -> None:
        """`on_request`: called (on the server's thread) before each request is answered,
        e.g. a deployment looking at its manifest. `version`: what `GET /version` answers
        (the vLLM whose start-up rules the simulated engine follows). `routes`: GET paths
        answered with the JSON of what the callable returns at that moment; given, they
        replace vLLM's `/version` (another engine's own endpoints). `serves_metrics`: whether
        `/metrics` is there now (SGLang's only with `--enable-metrics`)."""
        self.sim = sim
        self.serves_metrics = serves_metrics
        vllm_routes = {"/version": lambda: {"version": version}}
        self.routes = dict(routes) if routes is not None else vllm_routes
        self.on_request = on_request
        self.completions = completions
        self.generate = generate or greedy_text
        self.lock = threading.Lock()
        self.up = True
        self.loop = asyncio.new_event_loop()
        self.server = self.loop.run_until_complete(
            asyncio.start_server(self._serve, host, port, backlog=2048)
        )
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    def close(self) -> None:
        async def stop() -> None:
            self.server.close()
            for task in asyncio.all_tasks(self.loop):
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)

    def __enter__(self) -> SimServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request_line = await reader.readline()
                if not request_line:
                    break
                method, path, *_ = request_line.decode("latin-1").split(" ")
                length = 0
                while True:
                    line = await reader.readline()
                    if line in (b"\r\n", b"\n", b""):
                        break
                    name, _, value = line.decode("latin-1").partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value.strip() or 0)
                body = await reader.readexactly(length) if length else b""
                status, payload, kind = await self._route(method, path.split("?")[0], body)
                head = (
                    f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\n"
                    f"Content-Type: {kind}\r\nContent-Length: {len(payload)}\r\n\r\n"
                )
                writer.write(head.encode() + payload)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ValueError, asyncio.CancelledError):
            pass  # the client went away, or the server is shutting down
        finally:
            writer.close()

    async def _route(self, method: str, path: str, body: bytes) -> tuple[int, bytes, str]:
        if self.on_request is not None:
            self.on_request()
        completion = method == "POST" and path == "/v1/completions"
        if completion and self.completions is not None:
            self.completions.arrived()
        if not self.up:
            return 503, b"engine restarting\n", "text/plain"
        if method == "GET" and path == "/metrics" and self.serves_metrics():
            with self.lock:
                return 200, self.sim.render(), CONTENT_TYPE
        if method == "GET" and path == "/health":
            return 200, b"", "text/plain"
        if method == "GET" and path in self.routes:
            with self.lock:
                answer = self.routes[path]()
            return 200, json.dumps(answer).encode(), "application/json"
        if completion and self.completions is not None:
            try:
                request = json.loads(body or b"{}")
                max_tokens = int(request.get("max_tokens", 16))
            except (ValueError, TypeError):
                return 400, b"bad request\n", "text/plain"
            await self.completions.submit(max_tokens)
            reply = json.dumps(
                {
                    "id": "cmpl-sim",
                    "object": "text_completion",
                    "model": self.sim.model_name,
                    "choices": [
                        {
                            "index": 0,
                            "text": self.generate(str(request.get("prompt", "")), max_tokens),
                            "finish_reason": "length",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": len(str(request.get("prompt", "")).split()),
                        "completion_tokens": max_tokens,
                    },
                }
            ).encode()
            return 200, reply, "application/json"
        return 404, b"not found\n", "text/plain"
