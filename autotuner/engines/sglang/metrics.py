"""SGLang's Prometheus series the sources read (sglang 0.5.23,
sglang/srt/observability/metrics_collector.py; exported only with --enable-metrics).

Labels: the scheduler's gauges carry model_name, engine_type, tp_rank, pp_rank, moe_ep_rank
(+ dp_rank, priority; :1382-1393); the tokenizer's counters model_name, engine_type, and
is_streaming on some (:1806-1821). The counters move once per finished request (:2092-2136);
the spec gauges are means over the last --decode-log-interval steps, then reset
(managers/scheduler_components/metrics_reporter.py:292-301): not rate()-able."""

from __future__ import annotations

PREFIX = "sglang:"
GAUGES = {
    "running": "sglang:num_running_reqs",  # :364
    "waiting": "sglang:num_queue_reqs",  # :370
    "kv_usage": "sglang:token_usage",  # :404
    "spec_steps": "sglang:spec_num_steps",  # :535, the K in use
    "accept_length": "sglang:spec_accept_length",  # :511, an interval mean: not rate()-able
}
COUNTERS = {
    "verify_calls": "sglang:spec_verify_calls_total",  # :1865
    "generation_tokens": "sglang:generation_tokens_total",  # :1860
    "prompt_tokens": "sglang:prompt_tokens_total",  # :1855
    "requests": "sglang:num_requests_total",  # :1940
    "cached_tokens": "sglang:cached_tokens_total",  # :1934
}
HISTOGRAMS = {
    # Per output token, not per step: each interval is split over the tokens it brought
    # (:2161-2173); the sources scale it by the tokens a verify keeps to get the step time.
    "step_time": "sglang:inter_token_latency_seconds",  # :2050
    "time_per_output_token": "sglang:request_time_per_output_token_seconds",  # :2057
    "prompt_length": "sglang:prompt_tokens_histogram",  # :1908
    "generation_length": "sglang:generation_tokens_histogram",  # :1924
}
