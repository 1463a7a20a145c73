"""vLLM's Prometheus series the sources read, by what each measures (both spellings across
versions, newest first)."""

from __future__ import annotations

COUNTERS = {
    "drafts": "vllm:spec_decode_num_drafts_total",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "accepted": "vllm:spec_decode_num_accepted_tokens_total",
    "generation_tokens": "vllm:generation_tokens_total",
    "prompt_tokens": "vllm:prompt_tokens_total",
    "preemptions": "vllm:num_preemptions_total",
}
# Prefix-cache token counters (the prompt tokens looked up, and those found cached); each entry
# lists the spellings, newest first (VLLM.md renames: `gpu_prefix_cache_*` before).
PREFIX_CACHE = {
    "prefix_cache_queries": (
        "vllm:prefix_cache_queries_total",
        "vllm:gpu_prefix_cache_queries_total",
    ),
    "prefix_cache_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
}
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
# Histograms read as sum/count; each entry lists the spellings, newest first (VLLM.md renames).
HISTOGRAMS = {
    "step_time": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    "time_per_output_token": ("vllm:request_time_per_output_token_seconds",),
    "iteration_tokens": ("vllm:iteration_tokens_total",),
    "prompt_length": ("vllm:request_prompt_tokens",),
    "generation_length": ("vllm:request_generation_tokens",),
}
GAUGES = {
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
}
CACHE_CONFIG = "vllm:cache_config_info"
# A restarted engine starts its counters again at 0 and stamps a new `_created`.
RESET_MARKERS = ("vllm:generation_tokens_created", "vllm:prompt_tokens_created")
