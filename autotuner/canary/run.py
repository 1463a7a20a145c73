"""The canary set and one greedy run of it against an OpenAI-compatible `/v1/completions`.

Each completion's whole answer is bounded by `timeout_s` (a server that trickles its reply is
cut at the deadline, not at each read's timeout), and so is its size."""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from autotuner.deadline import Cut, Deadline, read_body
from autotuner.errors import CanaryError, InputError

_NUMBER = re.compile(r"-?\d+")
MAX_REPLY_BYTES = 4 * 2**20  # a canary completion is a few dozen tokens


@dataclass(frozen=True, kw_only=True)
class CanaryPrompt:
    name: str
    prompt: str
    answer: str | None = None  # known answer: the first integer of the output must equal it

    def correct(self, output: str) -> bool | None:
        if self.answer is None:
            return None
        found = _NUMBER.search(output)
        return found is not None and found.group() == self.answer.strip()


BUILT_IN: tuple[CanaryPrompt, ...] = (
    CanaryPrompt(name="code-fib", prompt="def fibonacci(n):\n    if n < 2:\n        return n\n"),
    CanaryPrompt(name="code-sort", prompt="def insertion_sort(items):\n    for i in range(1,"),
    CanaryPrompt(name="code-sql", prompt="SELECT name, COUNT(*) FROM users GROUP BY"),
    CanaryPrompt(name="code-json", prompt='{"replicas": 3, "image": "vllm/vllm-openai", "args": ['),
    CanaryPrompt(name="add", prompt="Q: What is 17 + 25?\nA:", answer="42"),
    CanaryPrompt(name="mul", prompt="Q: What is 12 * 12?\nA:", answer="144"),
    CanaryPrompt(name="sub", prompt="Q: What is 100 - 37?\nA:", answer="63"),
    CanaryPrompt(name="div", prompt="Q: What is 81 / 9?\nA:", answer="9"),
    CanaryPrompt(name="count", prompt="Q: How many legs do three spiders have?\nA:", answer="24"),
    CanaryPrompt(name="chat-rollout", prompt="User: Why can a GPU rollout hang?\nAssistant:"),
    CanaryPrompt(name="chat-oncall", prompt="User: Write a one-line on-call note.\nAssistant:"),
    CanaryPrompt(name="chat-cache", prompt="User: What is a KV cache?\nAssistant:"),
)


def _read_json(path: str, what: str) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"{what} {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{what} {path}: not JSON ({exc})") from None


def load_canary(path: str | None) -> list[CanaryPrompt]:
    """A JSON list of {name, prompt, answer?} objects or strings, else the built-in set."""
    if path is None:
        return list(BUILT_IN)
    items = _read_json(path, "canary file")
    if not isinstance(items, list) or not items:
        raise InputError(f"canary file {path}: expected a non-empty JSON list")
    prompts = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            item = {"name": f"p{i}", "prompt": item}
        if not isinstance(item, dict) or not isinstance(item.get("prompt"), str):
            raise InputError(f"canary file {path}: item {i} has no string 'prompt'")
        answer = item.get("answer")
        prompts.append(
            CanaryPrompt(
                name=str(item.get("name", f"p{i}")),
                prompt=item["prompt"],
                answer=None if answer is None else str(answer),
            )
        )
    return prompts


def prompts_hash(prompts: list[CanaryPrompt]) -> str:
    text = json.dumps([asdict(p) for p in prompts], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass(frozen=True, kw_only=True)
class CanaryRun:
    """One greedy pass over the canary set; saved as JSON to compare later."""

    url: str
    model: str
    setup: str | None  # the live setup label, when the caller knows it
    prompts: tuple[CanaryPrompt, ...]
    outputs: tuple[str, ...]
    max_tokens: int
    seed: int
    completion_tokens: int
    duration_s: float
    at: float = field(default_factory=time.time)

    @property
    def prompts_hash(self) -> str:
        return prompts_hash(list(self.prompts))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CanaryRun:
        try:
            prompts = tuple(CanaryPrompt(**p) for p in data["prompts"])
            fields = {k: v for k, v in data.items() if k != "prompts"}
            fields["outputs"] = tuple(str(o) for o in fields["outputs"])
            run = cls(prompts=prompts, **fields)
        except (KeyError, TypeError) as exc:
            raise InputError(f"not a canary run: {exc}") from None
        if len(run.outputs) != len(run.prompts):
            raise InputError("not a canary run: outputs and prompts differ in number")
        return run

    def to_record(self) -> dict[str, Any]:
        """Compact JSON for the TunerState: the prompts by hash, not by text."""
        record = {k: v for k, v in asdict(self).items() if k != "prompts"}
        record["prompts_hash"] = self.prompts_hash
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any], prompts: list[CanaryPrompt]) -> CanaryRun:
        """Back from `to_record`, given the same canary set (refused when it changed)."""
        if record.get("prompts_hash") != prompts_hash(prompts):
            raise InputError("the canary set changed since this run")
        data = {k: v for k, v in record.items() if k != "prompts_hash"}
        data["prompts"] = [asdict(p) for p in prompts]
        return cls.from_json(data)

    @classmethod
    def load(cls, path: str) -> CanaryRun:
        data = _read_json(path, "canary run")
        if not isinstance(data, dict):
            raise InputError(f"canary run {path}: expected a JSON object")
        return cls.from_json(data)


def _complete(
    http: httpx.Client, url: str, body: dict[str, Any], timeout_s: float
) -> tuple[str, int, str]:
    """One completion within `timeout_s`: (text, completion tokens, the model the server
    names)."""
    deadline = Deadline(timeout_s)
    try:
        with http.stream("POST", url, json=body, timeout=deadline.timeout()) as response:
            raw = read_body(response, deadline, MAX_REPLY_BYTES)
    except httpx.TimeoutException:
        raw = Cut.DEADLINE
    except httpx.HTTPError as exc:
        raise CanaryError(f"{url}: {type(exc).__name__}: {exc}") from None
    if raw is Cut.DEADLINE:
        raise CanaryError(f"{url}: no whole answer within {timeout_s:g}s")
    if raw is Cut.TOO_LARGE:
        raise CanaryError(f"{url}: answer exceeds {MAX_REPLY_BYTES} bytes")
    if response.status_code != 200:
        text = raw.decode("utf-8", errors="replace")
        raise CanaryError(f"{url}: HTTP {response.status_code}: {text[:200]}")
    try:
        reply = json.loads(raw)
        text = str(reply["choices"][0]["text"])
        return (
            text,
            int(reply.get("usage", {}).get("completion_tokens", 0)),
            str(reply.get("model", "")),
        )
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise CanaryError(f"{url}: not an OpenAI completions reply ({exc})") from None


def run_canary(
    base_url: str,
    prompts: list[CanaryPrompt],
    *,
    model: str | None = None,
    max_tokens: int = 32,
    seed: int = 0,
    setup: str | None = None,
    timeout_s: float = 60.0,
    run_deadline_s: float | None = None,
    priority: int | None = None,
    client: httpx.Client | None = None,
) -> CanaryRun:
    """Send each prompt once, one at a time (the canary must stay a small cost), greedy;
    each completion's whole answer within `timeout_s`, all of them within `run_deadline_s`
    when given. `priority` (vLLM's, higher = later) is sent only when given: servers without
    priority scheduling reject any value but 0."""
    if not prompts:
        raise InputError("the canary set is empty")
    if max_tokens < 1:
        raise InputError("max_tokens must be at least 1")
    own = client is None
    http = client or httpx.Client(timeout=timeout_s)
    url = base_url.rstrip("/") + "/v1/completions"
    started = time.monotonic()
    outputs: list[str] = []
    tokens = 0
    served_model = model or ""
    run = Deadline(run_deadline_s if run_deadline_s is not None else timeout_s * len(prompts))
    try:
        for prompt in prompts:
            body: dict[str, Any] = {
                "prompt": prompt.prompt,
                "max_tokens": max_tokens,
                "temperature": 0.0,
                "seed": seed,
            }
            if served_model:
                body["model"] = served_model
            if priority is not None:
                body["priority"] = priority
            if run.expired:
                raise CanaryError(f"{url}: the canary run passed its {run.seconds:g}s deadline")
            text, used, replied_model = _complete(http, url, body, run.cap(timeout_s))
            outputs.append(text)
            tokens += used
            served_model = served_model or replied_model
    finally:
        if own:
            http.close()
    return CanaryRun(
        url=base_url,
        model=served_model,
        setup=setup,
        prompts=tuple(prompts),
        outputs=tuple(outputs),
        max_tokens=max_tokens,
        seed=seed,
        completion_tokens=tokens,
        duration_s=time.monotonic() - started,
    )
