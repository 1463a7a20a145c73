"""Built-in prompts: code-completion-like and chat-like (acceptance differs), no downloads."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from autotuner.errors import InputError

BUILT_IN: tuple[str, ...] = (
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n    if n < 2:\n',
    "for i in range(10):\n    for j in range(10):\n        print(i * j, end=' ')\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n",
    "SELECT customer_id, SUM(amount) FROM orders WHERE created_at > '2026-01-01' GROUP BY",
    "Explain to a new engineer why a Kubernetes rollout with maxSurge 1 can hang on GPUs.",
    "Write a short note to the on-call team about tonight's maintenance window.",
    "Summarise the trade-offs between speculative decoding and larger batches in serving.",
    "List three checks to run before changing the flags of a production inference server.",
)


def load_prompts(path: str | None) -> list[str]:
    """One prompt per line (or a JSON list) from a file, else the built-in set."""
    if path is None:
        return list(BUILT_IN)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"prompts file {path}: {exc.strerror}") from None
    if text.lstrip().startswith("["):
        try:
            prompts = [str(p) for p in json.loads(text)]
        except json.JSONDecodeError as exc:
            raise InputError(f"prompts file {path}: not a JSON list ({exc})") from None
    else:
        prompts = [line for line in text.splitlines() if line.strip()]
    if not prompts:
        raise InputError(f"prompts file {path}: no prompts")
    return prompts


def prompts_hash(prompts: list[str]) -> str:
    return hashlib.sha256("\n\0".join(prompts).encode()).hexdigest()[:12]
