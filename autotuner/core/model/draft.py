"""A separate draft model's size, read from its own config.json."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from autotuner.core.model.spec import ModelSpec


class DraftModel(BaseModel):
    """A separate draft model (`method: draft_model`), sized from its own config.json: each of
    its K passes reads all its weights and its KV, and it holds both in the engine's memory."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    params: int = Field(ge=1, description="Parameters a pass streams (all but the embedding).")
    active_params: int = Field(ge=1, description="Parameters one token multiplies (MoE: routed).")
    weight_bytes: float = Field(ge=0, description="Bytes a pass streams (all but the embedding).")
    memory_bytes: float = Field(ge=0, description="Bytes its weights hold, embedding included.")
    kv_bytes_per_token: float = Field(ge=0, description="Its KV cache per token, all layers.")
    kv_heads: int = Field(1, ge=1, description="KV heads (split across TP ranks).")
    layers: int = Field(ge=1, description="Blocks one pass launches.")
    weight_dtype: str = "bfloat16"
    tensor_parallel: int | None = Field(
        None, ge=1, description="draft_tensor_parallel_size; None: the target's."
    )

    @classmethod
    def of(cls, spec: ModelSpec, tensor_parallel: int | None = None) -> DraftModel:
        streamed = max(spec.total_params - spec.embedding_params, 1)
        active = max(spec.active_params - spec.embedding_params, 1)
        return cls(
            name=spec.name,
            params=streamed,
            active_params=active,
            weight_bytes=streamed * spec.weight_bytes_per_param,
            memory_bytes=spec.weight_bytes,
            kv_bytes_per_token=spec.kv_bytes_per_token,
            kv_heads=spec.attention.kv_heads if spec.attention else 1,
            layers=max(len(spec.layer_pattern), 1),
            weight_dtype=spec.weight_dtype,
            tensor_parallel=tensor_parallel,
        )
