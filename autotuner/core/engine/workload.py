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

    prefill_chunk_tokens: int = Field(
        8192,
        ge=1,
        description="The step's token budget that prompts are prefilled in beside decoding: "
        "vLLM's --max-num-batched-tokens, SGLang's --chunked-prefill-size (8192 is an "
        "assumption: set the engine's). Sets the time to first token.",
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


@dataclass(frozen=True)
class PrefixCacheReading:
    """What a usable window says about prefix caching: the Workload's `prefix_hit_rate`,
    `prompt_tokens` and `generation_tokens`, and the looked-up tokens behind the rate."""

    hit_rate: float
    prompt_tokens: float
    generation_tokens: float
    looked_up_tokens: float
