"""ModelSpec: the shapes of a model that decide what one decode step moves through memory.

Sizes follow vLLM's MambaStateShapeCalculator (VLLM.md, "Model config fields"). Every size is
for the whole model on one replica; the cost model divides by tensor parallelism.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field

from autotuner.core.vocabulary import Word

DTYPE_BYTES: dict[str, float] = {
    "float32": 4,
    "fp32": 4,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "fp8": 1,
    "float8": 1,
    "int8": 1,
    "nvfp4": 0.5625,  # 4-bit values plus one fp8 scale per 16 values
    "mxfp4": 0.53125,  # 4-bit values plus one e8m0 scale per 32 values
    "int4": 0.53125,  # 4-bit values plus an fp16 scale and zero per 128 values (AWQ, GPTQ)
}


class SsmKind(str, Enum):
    """The recurrent mixer family: decides state layout, ring contents and replay compute."""

    MAMBA2 = "mamba2"
    GATED_DELTANET = "gated_deltanet"
    MAMBA1 = "mamba1"


class DrafterKind(str, Enum):
    """How draft tokens are produced; decides what a draft pass costs."""

    NONE = "none"
    MTP = "mtp"  # the model's own multi-token-prediction layers (about one layer per pass)
    EAGLE = "eagle"  # a one-layer draft head
    NGRAM = "ngram"  # prompt lookup on the CPU: no GPU traffic
    SUFFIX = "suffix"  # suffix-tree lookup on the CPU: no GPU traffic
    DRAFT_MODEL = "draft_model"  # a separate small model: K passes of all its layers


class Role(Word):
    """What part of the model a weight belongs to: decides whether a step streams it, which
    quantization names select it, and its share of the bytes."""

    ATTENTION = "attention"
    SSM = "ssm"
    MLP = "mlp"
    ROUTER = "router"
    SHARED_EXPERTS = "shared_experts"
    MOE_DENSE = "moe_dense"  # a latent MoE's down and up projections around the experts
    EXPERTS = "experts"  # the routed experts: a step reads only those its tokens touch
    EMBEDDING = "embedding"  # read by row, never streamed whole
    LM_HEAD = "lm_head"


class SsmShape(BaseModel):
    """Per-layer recurrent-state shape.

    Mamba-2: state (heads, head_dim, d_state), B/C shared by `groups`.
    Gated DeltaNet: state (value heads, value dim, key dim); `groups` holds the key heads.
    Mamba-1: state (d_inner, d_state); heads = d_inner, head_dim = 1, groups = 1.
    """

    model_config = ConfigDict(frozen=True)

    kind: SsmKind
    heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    state_size: int = Field(ge=1)
    groups: int = Field(ge=1)
    conv_kernel: int = Field(ge=1)

    @property
    def state_elements(self) -> int:
        return self.heads * self.head_dim * self.state_size

    @property
    def conv_dim(self) -> int:
        if self.kind is SsmKind.GATED_DELTANET:
            return 2 * self.groups * self.state_size + self.heads * self.head_dim
        if self.kind is SsmKind.MAMBA1:
            return self.heads
        return self.heads * self.head_dim + 2 * self.groups * self.state_size

    @property
    def ring_entry_elements(self) -> tuple[int, int]:
        """(activation-dtype elements, fp32 elements) logged per token per layer.

        Mamba-2 logs x, B (activation dtype) and dt (fp32); Gated DeltaNet logs u and k
        (activation dtype) and the gates g, beta (fp32), not v (COSTMODEL.md section 3).
        """
        if self.kind is SsmKind.GATED_DELTANET:
            return self.heads * self.head_dim + self.groups * self.state_size, 2 * self.heads
        if self.kind is SsmKind.MAMBA1:
            return self.heads + self.state_size, self.heads
        return self.heads * self.head_dim + self.groups * self.state_size, self.heads


class AttentionShape(BaseModel):
    """Full-attention layer shape. `kv_lora_rank` > 0 marks MLA (latent KV cache)."""

    model_config = ConfigDict(frozen=True)

    heads: int = Field(ge=1)
    kv_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    kv_lora_rank: int = Field(default=0, ge=0)
    rope_head_dim: int = Field(default=0, ge=0)

    @property
    def kv_elements_per_token(self) -> int:
        if self.kv_lora_rank:
            return self.kv_lora_rank + self.rope_head_dim
        return 2 * self.kv_heads * self.head_dim


class MoeShape(BaseModel):
    """Routed experts of one MoE layer; shared experts are part of the dense weights."""

    model_config = ConfigDict(frozen=True)

    experts: int = Field(ge=1)
    experts_per_token: int = Field(ge=1)
    expert_params: int = Field(ge=1, description="Parameters of one routed expert in one layer.")


class WeightShare(BaseModel):
    """Parameters of one module role (attention, experts, embedding, ...) stored in one format,
    summed over layers."""

    model_config = ConfigDict(frozen=True)

    role: str
    dtype: str
    params: int = Field(ge=0)


class ModelSpec(BaseModel):
    """Everything about a model that the cost model needs, with sizes derived on demand."""

    model_config = ConfigDict(frozen=True)

    name: str
    architecture: str
    layer_pattern: str = Field(
        description="One character per layer: M Mamba-2, G Gated DeltaNet, S Mamba-1, "
        "* attention, P attention and Mamba-2 in parallel, E MoE, - MLP."
    )
    hidden_size: int = Field(ge=1)
    vocab_size: int = Field(ge=1)
    ssm_layers: int = Field(ge=0)
    attention_layers: int = Field(ge=0)
    moe_layers: int = Field(ge=0)
    ssm: SsmShape | None = None
    attention: AttentionShape | None = None
    moe: MoeShape | None = None
    dense_params: int = Field(ge=0, description="All parameters except routed experts.")
    embedding_params: int = Field(ge=0, description="Input embedding table (read by row only).")
    weight_dtype: str = Field(
        "bfloat16",
        description="The stored weight format as the source names it; 'mixed' when "
        "weight_shares differ by module.",
    )
    weight_shares: tuple[WeightShare, ...] = Field(
        (), description="Parameters by module role and format; empty: all at weight_dtype."
    )
    weight_source: str = ""
    ssm_state_dtype: str = "float32"
    ssm_state_dtype_source: str = ""
    conv_state_dtype: str = "bfloat16"
    activation_dtype: str = "bfloat16"
    kv_cache_dtype: str = "bfloat16"
    drafter: DrafterKind = DrafterKind.NONE
    drafter_dense_params: int = Field(default=0, ge=0)
    drafter_moe_layers: int = Field(default=0, ge=0)
    notes: tuple[str, ...] = ()

    @property
    def is_hybrid(self) -> bool:
        return self.ssm is not None and self.ssm_layers > 0

    @property
    def weight_bytes_per_param(self) -> float:
        """Bytes per parameter of every weight a decode step streams (all but the embedding
        table, which is read by row)."""
        return self._bytes_per_param(lambda role: role != Role.EMBEDDING)

    @property
    def dense_weight_bytes_per_param(self) -> float:
        """Bytes per parameter of the streamed weights other than routed experts."""
        return self._bytes_per_param(lambda role: role not in (Role.EMBEDDING, Role.EXPERTS))

    @property
    def expert_weight_bytes_per_param(self) -> float:
        """Bytes per parameter of the routed experts."""
        return self._bytes_per_param(lambda role: role == Role.EXPERTS)

    def _bytes_per_param(self, wanted: Callable[[str], bool]) -> float:
        shares = [s for s in self.weight_shares if wanted(s.role) and s.params]
        if not shares:
            shares = [s for s in self.weight_shares if s.role != Role.EMBEDDING and s.params]
        if not shares:
            return _bytes(self.weight_dtype)
        params = sum(s.params for s in shares)
        return sum(s.params * _bytes(s.dtype) for s in shares) / params

    @property
    def ssm_state_bytes(self) -> float:
        """S: one SSM layer's recurrent state for one request."""
        return self.ssm.state_elements * _bytes(self.ssm_state_dtype) if self.ssm else 0.0

    @property
    def ssm_state_bytes_per_request(self) -> float:
        return self.ssm_state_bytes * self.ssm_layers

    def conv_state_bytes(self, spec_tokens: int = 0) -> float:
        """One SSM layer's conv state for one request: (conv_kernel - 1 + K) rows."""
        if self.ssm is None:
            return 0.0
        rows = self.ssm.conv_kernel - 1 + spec_tokens
        return rows * self.ssm.conv_dim * _bytes(self.conv_state_dtype)

    @property
    def ring_entry_bytes(self) -> float:
        """e: one token's logged inputs for one SSM layer."""
        if self.ssm is None:
            return 0.0
        activation, fp32 = self.ssm.ring_entry_elements
        return activation * _bytes(self.activation_dtype) + fp32 * 4

    @property
    def kv_bytes_per_token(self) -> float:
        if self.attention is None:
            return 0.0
        per_layer = self.attention.kv_elements_per_token * _bytes(self.kv_cache_dtype)
        return self.attention_layers * per_layer

    @property
    def expert_params_total(self) -> int:
        return self.moe_layers * self.moe.experts * self.moe.expert_params if self.moe else 0

    @property
    def total_params(self) -> int:
        return self.dense_params + self.expert_params_total

    @property
    def active_params(self) -> int:
        if self.moe is None:
            return self.dense_params
        routed = self.moe_layers * self.moe.experts_per_token * self.moe.expert_params
        return self.dense_params + routed

    @property
    def weight_bytes(self) -> float:
        if not self.weight_shares:
            return self.total_params * _bytes(self.weight_dtype)
        return float(sum(s.params * _bytes(s.dtype) for s in self.weight_shares))

    def summary(self) -> dict[str, float | int | str]:
        """The derived sizes an operator checks first, in plain units."""
        return {
            "name": self.name,
            "architecture": self.architecture,
            "blocks": len(self.layer_pattern),
            "ssm_layers": self.ssm_layers,
            "attention_layers": self.attention_layers,
            "moe_layers": self.moe_layers,
            "total_params_b": round(self.total_params / 1e9, 2),
            "active_params_b": round(self.active_params / 1e9, 2),
            "weight_gib": round(self.weight_bytes / 2**30, 2),
            "weight_dtype": self.weight_dtype,
            "weight_source": self.weight_source,
            "ssm_state_dtype": self.ssm_state_dtype,
            "ssm_state_dtype_source": self.ssm_state_dtype_source,
            "ssm_state_mib_per_layer": round(self.ssm_state_bytes / 2**20, 3),
            "ssm_state_mib_per_request": round(self.ssm_state_bytes_per_request / 2**20, 2),
            "ring_entry_kib": round(self.ring_entry_bytes / 2**10, 2),
            "kv_kib_per_token": round(self.kv_bytes_per_token / 2**10, 2),
            "drafter": self.drafter.value,
        }


def _bytes(dtype: str) -> float:
    try:
        return DTYPE_BYTES[dtype.lower()]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}; known: {sorted(DTYPE_BYTES)}") from None
