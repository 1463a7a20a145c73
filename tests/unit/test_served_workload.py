"""The workload as served: request lengths, hit rate and request rate from the engine's own
histograms, in the live loop's reading, `observe`'s words and `predict`'s options."""

from __future__ import annotations

from typing import Any

import pytest

from autotuner.core.engine.workload import PrefixCacheReading
from autotuner.core.observe.workload import served_workload, workload_reading
from autotuner.core.types import Observation
from tests.support.cli import printed, printed_json, refusal


def window(
    *,
    prompt: float | None = 8192,
    generated: float | None = 1024,
    hit_rate: float | None = None,
    usable: bool = True,
) -> Observation:
    return Observation(
        source="test",
        window_start=0.0,
        window_end=30.0,
        usable=usable,
        generation_tokens_per_s=2048.0,
        mean_prompt_tokens=prompt,
        mean_generation_tokens=generated,
        prefix_cache_hit_rate=hit_rate,
        prefix_cache_queried_tokens=None if hit_rate is None else 5000.0,
    )


def test_the_window_gives_lengths_hit_rate_and_request_rate() -> None:
    served = served_workload(window(hit_rate=0.25))
    assert served is not None
    assert served.requests_per_s == pytest.approx(2.0)  # 2,048 tokens/s, 1,024 a request
    assert served.prompt_per_output_token == pytest.approx(8.0)
    assert served.describe() == (
        "workload: 8,192 prompt and 1,024 output tokens per request (P/G 8.0, 25% cached), "
        "2.00 requests/s"
    )
    assert served_workload(window(generated=None)) is None  # no request finished
    assert served_workload(window(usable=False)) is None


def test_the_live_reading_keeps_lengths_without_lookups() -> None:
    fresh = workload_reading(window(), None)
    assert fresh == PrefixCacheReading(
        hit_rate=0.0, prompt_tokens=8192, generation_tokens=1024, looked_up_tokens=0.0
    )
    read = workload_reading(window(hit_rate=0.5), fresh)
    assert read is not None
    assert (read.hit_rate, read.looked_up_tokens) == (0.5, 5000.0)
    # A setup without prefix caching looks nothing up: the rate read before stands, the
    # lengths are the window's.
    later = workload_reading(window(prompt=4096, generated=512), read)
    assert later is not None
    assert (later.hit_rate, later.prompt_tokens, later.generation_tokens) == (0.5, 4096, 512)
    assert workload_reading(window(generated=None), read) is read


def test_predict_takes_prompt_and_output_lengths() -> None:
    args = ("predict", "--gpu", "H200", "--batch", "64", "--spec-tokens", "3", "--json")
    bare = printed_json(*args)
    served = printed_json(*args, "--prompt-tokens", "8192", "--output-tokens", "1024")
    assert served["workload"]["context_tokens"] == 8192 + 512  # derived: prompt + output / 2
    assert served["inputs"]["context_tokens"]["source"] == "--prompt-tokens + --output-tokens / 2"
    given = printed_json(
        *args, "--prompt-tokens", "8192", "--output-tokens", "1024", "--context", "2048"
    )
    assert given["workload"]["context_tokens"] == 2048

    def rows(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {p["setup"]["label"]: p for p in report["predictions"]}

    plain, spec = rows(served)["plain"], rows(served)["spec:3"]
    assert 0 < plain["prefill_share"] < 1
    assert plain["time_to_first_token_s"] > 0
    assert rows(bare)["plain"]["time_to_first_token_s"] is None
    # The prefill is paid whatever the setup: speculation's ratio to plain shrinks.
    same_context = printed_json(*args, "--context", str(8192 + 512))
    before = (
        rows(same_context)["spec:3"]["tokens_per_s"] / rows(same_context)["plain"]["tokens_per_s"]
    )
    assert 1.0 < spec["tokens_per_s"] / plain["tokens_per_s"] < before
    text = printed(
        "predict", "--gpu", "H200", "--batch", "64", "--prompt-tokens", "8192",
        "--output-tokens", "1024", env={"COLUMNS": "160"},
    )  # fmt: skip
    assert "of each second on prefill; time to first token" in text


def test_predict_refuses_half_a_workload() -> None:
    assert "--prompt-tokens and --output-tokens" in refusal("predict", "--prompt-tokens", "8192")
    assert "--prefix-hit-rate" in refusal("predict", "--prefix-hit-rate", "0.5")


def test_the_workload_names_the_engine_for_its_reasons() -> None:
    args = ("predict", "--gpu", "H200", "--batch", "8", "--json")
    assert printed_json(*args)["workload"]["engine_name"] == "vLLM"
    sglang = printed_json(*args, "--engine-kind", "sglang")
    assert sglang["workload"]["engine_name"] == "SGLang"
