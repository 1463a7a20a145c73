"""Which engine serves an endpoint, for `engine.kind: auto`: the prefix of the series its
/metrics answers (`sglang:` or `vllm:`), else which of GET /server_info (SGLang) and
GET /version (vLLM) it answers; and the version the engine reports. Every call has a
deadline."""

from __future__ import annotations

import json

import httpx

from autotuner.deadline import Cut, Deadline, read_body
from autotuner.engines.kinds import ENGINES, EngineKind

DETECT_DEADLINE_S = 5.0
MAX_BYTES = 16 * 2**20  # /metrics and /server_info (every resolved ServerArgs field) alike


def base_url(url: str) -> str:
    """The server's base URL from a /metrics URL or a base URL."""
    return url.rstrip("/").removesuffix("/metrics")


def get_body(url: str, deadline: Deadline) -> bytes | None:
    """The body of a 200 answer within the deadline, else None."""
    try:
        with (
            httpx.Client(timeout=deadline.timeout()) as client,
            client.stream("GET", url) as response,
        ):
            if response.status_code != 200:
                return None
            body = read_body(response, deadline, MAX_BYTES)
    except httpx.HTTPError:
        return None
    return None if isinstance(body, Cut) else body


def _by_prefix(text: str) -> EngineKind | None:
    for kind, engine in ENGINES.items():
        if text.startswith(engine.metrics_prefix) or f"\n{engine.metrics_prefix}" in text:
            return kind
    return None


def detect(url: str, deadline_s: float = DETECT_DEADLINE_S) -> EngineKind | None:
    """The engine behind `url` (a /metrics or base URL), or None when nothing says."""
    deadline = Deadline(deadline_s)
    base = base_url(url)
    body = get_body(f"{base}/metrics", deadline)
    found = _by_prefix(body.decode("utf-8", errors="replace")) if body else None
    if found is not None:
        return found
    for kind in (EngineKind.SGLANG, EngineKind.VLLM):
        if deadline.remaining() > 0 and get_body(f"{base}{ENGINES[kind].version_path}", deadline):
            return kind
    return None


def engine_version(
    url: str,
    deadline_s: float = DETECT_DEADLINE_S,
    path: str = ENGINES[EngineKind.VLLM].version_path,
) -> str | None:
    """The version the engine says at `path` (vLLM's GET /version, SGLang's GET /server_info:
    both answer {"version": ...}), or None when it does not answer in time or says something
    else."""
    body = get_body(f"{base_url(url)}{path}", Deadline(deadline_s))
    if body is None:
        return None
    try:
        version = json.loads(body).get("version")
    except (ValueError, AttributeError):
        return None
    return str(version) if version else None
