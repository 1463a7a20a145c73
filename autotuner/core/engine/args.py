"""What an engine's command line says about the run (pure, engine-neutral): EngineArgs and the
operator's SpeculativeConfig, which each engine's reader in autotuner/engines fills."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from autotuner.core.model.spec import DrafterKind

_METHOD_KIND = {
    "mtp": DrafterKind.MTP,
    "eagle": DrafterKind.EAGLE,
    "eagle3": DrafterKind.EAGLE,
    "ngram": DrafterKind.NGRAM,
    "ngram_gpu": DrafterKind.NGRAM,
    "suffix": DrafterKind.SUFFIX,
    "draft_model": DrafterKind.DRAFT_MODEL,
}


class SpeculativeConfig(BaseModel):
    """The operator's speculative config, as far as the tuner reads it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: str | None = None  # as written
    model: str | None = None
    num_speculative_tokens: int | None = None
    enable_adaptive_verification: bool | None = None  # recorded; K is then a ceiling
    draft_tensor_parallel_size: int | None = None

    @property
    def resolved_method(self) -> str | None:
        """The method the engine runs (vllm/config/speculative.py): model-specific MTP names
        are `mtp`; without a method, `ngram` as the model is ngram and a named model is placed
        by its name (eagle-, eagle3, dflash, dspark), else it is a draft_model."""
        method = (self.method or "").strip().lower()
        if method:
            if method == "mtp" or method.endswith("_mtp"):
                return "mtp"
            return "ngram" if method == "[ngram]" else method
        if self.model is None:
            return None  # vLLM refuses K without a method or a model
        name = self.model.lower()
        if name in ("ngram", "[ngram]"):
            return "ngram"
        for marker, placed in (("eagle-", "eagle"), ("eagle3", "eagle3")):
            if marker in name:
                return placed
        for marker in ("dflash", "dspark"):
            if marker in name:
                return marker
        return "draft_model"

    @property
    def kind(self) -> DrafterKind | None:
        """The drafter kind the cost model charges; None: a method it does not model."""
        return _METHOD_KIND.get(self.resolved_method or "")


class EngineArgs(BaseModel):
    """What an engine's command line says about the run; None where it says nothing (the
    engine's default then runs)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tensor_parallel_size: int | None = None
    gpu_memory_utilization: float | None = None
    max_num_seqs: int | None = None
    max_model_len: int | None = None
    max_model_len_text: str | None = None  # as written (e.g. 32k, auto)
    kv_cache_dtype: str | None = None
    mamba_ssm_cache_dtype: str | None = None
    mamba_cache_dtype: str | None = None
    mamba_cache_mode: str | None = None
    enable_prefix_caching: bool | None = None
    enforce_eager: bool | None = None
    speculative: SpeculativeConfig | None = None
    kv_connector: bool | None = None  # a KV connector (P/D disaggregation, KV offload) is set
    data_parallel_size: int | None = None
    data_parallel_computed: bool | None = None  # the shell computes it when the engine starts
    # The step's prefill budget (vLLM --max-num-batched-tokens, SGLang --chunked-prefill-size)
    # and its text as written (a value the shell computes reads as text without a number).
    prefill_chunk_tokens: int | None = None
    prefill_chunk_text: str | None = None
    chunked_prefill: bool | None = None  # False: prompts are prefilled whole
    performance_mode: str | None = None  # vLLM's; throughput doubles the default budget
    attention_data_parallel: int | None = None  # SGLang's attention DP groups
    mixed_prefill: bool | None = None  # SGLang --enable-mixed-chunk (vLLM always mixes)

    @property
    def data_parallel(self) -> int | None:
        """The data parallel size the engine runs: 1 when not given, None when the shell
        computes it (unknown until the engine starts)."""
        if self.data_parallel_size is not None:
            return self.data_parallel_size
        return None if self.data_parallel_computed else 1

    def given(self) -> dict[str, Any]:
        """Every value the args set, by field name."""
        return {k: v for k, v in self.model_dump(mode="json").items() if v is not None}
