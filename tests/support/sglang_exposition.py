"""SGLang /metrics answers for tests, built from the metric definitions in the sglang 0.5.23
wheel (sglang/srt/observability/metrics_collector.py: names, types, labels); no capture of a
real SGLang /metrics exists here. Scheduler gauges carry model_name, engine_type, tp_rank,
pp_rank, moe_ep_rank (:1382-1393) and every tensor-parallel rank exports them; tokenizer
counters carry model_name, engine_type (:1806-1821) and, on some, is_streaming (:1855-1944)."""

from __future__ import annotations

from dataclasses import dataclass

MODEL = "Qwen/Qwen3.5-122B-A10B"


@dataclass(frozen=True)
class Server:
    """One SGLang server's series at one moment."""

    running: float = 0.0
    queued: float = 0.0
    token_usage: float = 0.0
    spec_steps: float = 0.0
    accept_length: float = 0.0  # the interval-mean gauge, which the reader must not use
    verify_calls: float = 0.0
    generation_tokens: float = 0.0
    prompt_tokens: float = 0.0
    cached_tokens: float = 0.0
    requests: float = 0.0
    itl_sum: float = 0.0
    itl_count: float = 0.0
    tp_size: int = 2


def _scheduler(rank: int) -> str:
    return (
        f'model_name="{MODEL}",engine_type="unified",tp_rank="{rank}",pp_rank="0",moe_ep_rank="0"'
    )


_TOKENIZER = f'model_name="{MODEL}",engine_type="unified"'


def exposition(server: Server) -> str:
    """The text an SGLang server with `--enable-metrics` answers on /metrics."""
    lines: list[str] = []
    gauges = {
        "sglang:num_running_reqs": server.running,
        "sglang:num_queue_reqs": server.queued,
        "sglang:token_usage": server.token_usage,
        "sglang:spec_num_steps": server.spec_steps,
        "sglang:spec_accept_length": server.accept_length,
    }
    for name, value in gauges.items():
        lines += [f"# HELP {name} gauge", f"# TYPE {name} gauge"]
        lines += [f"{name}{{{_scheduler(rank)}}} {value}" for rank in range(server.tp_size)]
    # Streaming and non-streaming requests split the is_streaming counters: 1/4 streamed here.
    split = {
        "sglang:generation_tokens_total": server.generation_tokens,
        "sglang:prompt_tokens_total": server.prompt_tokens,
        "sglang:num_requests_total": server.requests,
    }
    for name, value in split.items():
        lines += [f"# HELP {name} counter", f"# TYPE {name} counter"]
        lines.append(f'{name}{{{_TOKENIZER},is_streaming="true"}} {value / 4}')
        lines.append(f'{name}{{{_TOKENIZER},is_streaming="false"}} {value * 3 / 4}')
    lines += ["# TYPE sglang:spec_verify_calls_total counter"]
    lines.append(f"sglang:spec_verify_calls_total{{{_TOKENIZER}}} {server.verify_calls}")
    lines += ["# TYPE sglang:cached_tokens_total counter"]
    lines.append(
        f'sglang:cached_tokens_total{{{_TOKENIZER},cache_source="device"}} {server.cached_tokens}'
    )
    itl = "sglang:inter_token_latency_seconds"
    lines += [f"# TYPE {itl} histogram"]
    lines.append(f'{itl}_bucket{{{_TOKENIZER},le="+Inf"}} {server.itl_count}')
    lines.append(f"{itl}_sum{{{_TOKENIZER}}} {server.itl_sum}")
    lines.append(f"{itl}_count{{{_TOKENIZER}}} {server.itl_count}")
    return "\n".join(lines) + "\n"
