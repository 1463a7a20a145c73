"""How the engine runs the model: the inputs of a prediction besides model, GPU and setup."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, model_validator

from autotuner.core.model.draft import DraftModel
from autotuner.core.model.spec import DrafterKind
from autotuner.core.vocabulary import Word

GIB = float(2**30)
# How the reasons written for people name each engine kind (engines/kinds.py EngineKind values).
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}
# The flag that caps the requests each engine runs at once (Workload.max_num_seqs).
REQUEST_CAP_FLAGS = {"vLLM": "--max-num-seqs", "SGLang": "--max-running-requests"}


class MambaCacheMode(Word):
    """vLLM's --mamba-cache-mode: which SSM states it keeps for prefix caching."""

    NONE = "none"
    ALL = "all"
    ALIGN = "align"  # keeps one state slot more per request


class Workload(BaseModel):
    """How the engine is run: the inputs of a prediction besides model, GPU and setup."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    context_tokens: float = Field(4096, ge=0, description="Mean context length per request.")
    tensor_parallel: int = Field(1, ge=1, le=64, description="GPUs one replica spans (TP).")
    mamba_cache_mode: MambaCacheMode = Field(
        MambaCacheMode.NONE, description="vLLM --mamba-cache-mode."
    )
    gpu_memory_utilization: float = Field(0.90, gt=0, le=1, description="vLLM's setting.")
    activation_reserve_bytes: float = Field(
        4 * GIB, ge=0, description="Memory vLLM keeps for activations and CUDA graphs, per GPU."
    )
    drafter: DrafterKind | None = Field(
        None, description="Override the model's drafter (e.g. ngram); None keeps the model's."
    )
    draft_model: DraftModel | None = Field(
        None,
        description="The draft model's size when the drafter is draft_model; without it a "
        "draft model's passes cost nothing here (its size is unknown: say so, don't propose it).",
    )
    max_num_seqs: int | None = Field(
        None,
        ge=1,
        description="vLLM's --max-num-seqs: the scheduler runs at most this many requests at "
        "once, whatever memory allows; None: no ceiling beyond memory.",
    )
    cudagraph_capture_tokens: int = Field(
        512,
        ge=0,
        description="vLLM's max_cudagraph_capture_size: the most tokens a step may carry and "
        "still replay a captured CUDA graph. vLLM's default is min(2 x max_num_seqs x (1 + K), "
        "512) (vllm/config/vllm.py); steps with more tokens run without graphs; 0 is "
        "--enforce-eager.",
    )
    draft_expert_overlap: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Share of a draft token's routed experts already picked by the other tokens "
        "of the same request in the verify pass (0 = independent routing). Consecutive tokens "
        "of one sequence route alike; 0.5 is an assumption, not a measurement.",
    )
    prefix_hit_rate: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Share of the prompt tokens the live engine's prefix cache served "
        "(vllm:prefix_cache_hits_total over vllm:prefix_cache_queries_total); None: unknown, "
        "and a setup that turns prefix caching off is not charged for it.",
    )
    prompt_tokens: float | None = Field(
        None,
        gt=0,
        description="Mean prompt length per request (needed with the hit rate): with "
        "generation_tokens, every request's fresh prompt tokens are prefilled in the decode "
        "steps (core/predict/prefill.py); None: prefill is not charged.",
    )
    generation_tokens: float | None = Field(
        None,
        gt=0,
        description="Mean tokens generated per request (needed with the hit rate): requests "
        "finish, and their prompts are prefilled, once per this many output tokens.",
    )

    prefill_chunk_tokens: int | None = Field(
        None,
        ge=1,
        description="The step's token budget that prompts are prefilled in beside decoding: "
        "vLLM's --max-num-batched-tokens, SGLang's --chunked-prefill-size, as the live args "
        "give it. None: the engine's own default on this GPU (`chunk_budget`): vLLM 0.33 "
        "under `vllm serve` gives 16384 on GPUs of 160 GiB or more, 8192 on 70 GiB or more "
        "(not an A100), else 2048, and twice that with --performance-mode throughput "
        "(vllm/engine/arg_utils.py:2970-3006, 3166-3187); SGLang 0.5.23 gives 2048 under "
        "20 GiB, 4096 under 60 GiB, 8192 under 160 GiB, else 16384 "
        "(srt/arg_groups/memory_hook.py:90-168), each attention data-parallel rank its share.",
    )
    chunked_prefill: bool = Field(
        True,
        description="Whether the engine splits prompts into budget-sized chunks: off (vLLM's "
        "--no-enable-chunked-prefill, SGLang's --chunked-prefill-size -1) a prompt is "
        "prefilled whole in one step.",
    )
    throughput_mode: bool = Field(
        False,
        description="vLLM's --performance-mode throughput: it doubles the default budget "
        "(vllm/engine/arg_utils.py:3183-3187); a budget given in the args stays as given.",
    )
    prefill_mixed: bool = Field(
        True,
        description="Whether a prompt's chunks ride in the decode steps, sharing the budget "
        "with the batch's decode tokens (vLLM; SGLang with --enable-mixed-chunk), or run as "
        "steps of their own while decoding waits: SGLang runs a prefill batch first whenever "
        "one is ready (srt/managers/scheduler.py:3993-3995) and mixes only with "
        "--enable-mixed-chunk (:1376-1378).",
    )
    attention_data_parallel: int = Field(
        1,
        ge=1,
        description="SGLang's attention data-parallel groups (--attn-dp-size, or the older "
        "--dp-size N --enable-dp-attention): each group's scheduler gets its share of the "
        "chunked prefill size (srt/arg_groups/parallel_hook.py:39-60, 326-336).",
    )
    engine_name: str = Field(
        "vLLM",
        min_length=1,
        description="The serving engine's name, as the reasons written for people say it.",
    )

    @model_validator(mode="after")
    def _prefix_cache_inputs(self) -> Workload:
        if self.prefix_hit_rate is not None and (
            self.prompt_tokens is None or self.generation_tokens is None
        ):
            raise ValueError(
                "prefix_hit_rate needs prompt_tokens and generation_tokens (the tokens a hit "
                "saves per request, and how many output tokens a request lasts)"
            )
        return self

    @property
    def request_cap_flag(self) -> str:
        """The engine's flag for `max_num_seqs`, as the reasons written for people name it."""
        return REQUEST_CAP_FLAGS.get(self.engine_name, "--max-num-seqs")

    def chunk_budget(self, gpu_name: str, gpu_memory_bytes: float) -> int | None:
        """The tokens a step prefills a prompt in on this GPU: the live budget, else the
        engine's default for the GPU's memory; None where prompts are not chunked (a prompt
        is prefilled whole)."""
        if not self.chunked_prefill:
            return None
        if self.engine_name == ENGINE_NAMES["sglang"]:
            whole = self.prefill_chunk_tokens or sglang_default_chunk(gpu_memory_bytes)
            return max(whole // self.attention_data_parallel, 1)
        if self.prefill_chunk_tokens is not None:
            return self.prefill_chunk_tokens
        return vllm_default_chunk(gpu_name, gpu_memory_bytes, throughput=self.throughput_mode)


def vllm_default_chunk(gpu_name: str, gpu_memory_bytes: float, *, throughput: bool) -> int:
    """vLLM 0.33's max_num_batched_tokens under `vllm serve` (the OPENAI_API_SERVER usage
    context, vllm/entrypoints/cli/serve.py:191) when the args give none
    (vllm/engine/arg_utils.py:2970-3006): A100s keep the small tier (PR #17885)."""
    if gpu_memory_bytes >= 160 * GIB:
        budget = 16384
    elif gpu_memory_bytes >= 70 * GIB and "a100" not in gpu_name.lower():
        budget = 8192
    else:
        budget = 2048
    return 2 * budget if throughput else budget


# SGLang 0.5.23's --chunked-prefill-size when not given, by the GPU's memory
# (srt/arg_groups/memory_hook.py:90-168): the first tier whose bound the memory is under.
SGLANG_CHUNK_TIERS = ((20 * GIB, 2048), (60 * GIB, 4096), (160 * GIB, 8192))
SGLANG_CHUNK_LARGEST = 16384


def sglang_default_chunk(gpu_memory_bytes: float) -> int:
    """SGLang 0.5.23's chunked prefill size when the args give none."""
    for bound, budget in SGLANG_CHUNK_TIERS:
        if gpu_memory_bytes < bound:
            return budget
    return SGLANG_CHUNK_LARGEST


@dataclass(frozen=True)
class PrefixCacheReading:
    """What a usable window says about prefix caching: the Workload's `prefix_hit_rate`,
    `prompt_tokens` and `generation_tokens`, and the looked-up tokens behind the rate."""

    hit_rate: float
    prompt_tokens: float
    generation_tokens: float
    looked_up_tokens: float
