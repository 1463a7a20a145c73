"""What every family reader shares: reading config fields, and the one builder that turns a
family's layers and blocks into a ModelSpec.

Field names are the public ones (VLLM.md, "Model config fields"). A reader collects every
missing required field before failing, so one error names them all. It describes the model as
layers of block characters (the characters of `ModelSpec.layer_pattern`) and each block's
parameters by module role; `build` derives the layer counts, the dense and embedding
parameters, the MTP drafter and the `Inventory` from that description alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotuner.core.model.spec import (
    AttentionShape,
    DrafterKind,
    ModelSpec,
    MoeShape,
    Role,
    SsmShape,
)
from autotuner.core.model.weights import Inventory
from autotuner.errors import ModelConfigError

Config = Mapping[str, Any]
Blocks = dict[str, dict[Role, int]]
Read = tuple[ModelSpec, Inventory]
EXPERTS = "E"  # the block character of a layer that routes to experts, in every family

MODEL_TYPES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "deepseek_v3": "DeepseekV3ForCausalLM",
    "nemotron_h": "NemotronHForCausalLM",
    "qwen3_next": "Qwen3NextForCausalLM",
    "qwen3_5": "Qwen3_5ForConditionalGeneration",
    "qwen3_5_moe": "Qwen3_5MoeForConditionalGeneration",
    "qwen3_5_text": "Qwen3_5ForCausalLM",
    "qwen3_5_moe_text": "Qwen3_5MoeForCausalLM",
    "granitemoehybrid": "GraniteMoeHybridForCausalLM",
    "bamba": "BambaForCausalLM",
    "falcon_h1": "FalconH1ForCausalLM",
    "jamba": "JambaForCausalLM",
    "mamba2": "Mamba2ForCausalLM",
}


class Fields:
    """Reads fields from a config, remembering every required one that is absent."""

    def __init__(self, raw: Config, family: str) -> None:
        self.raw = raw
        self.family = family
        self.missing: list[str] = []

    def req(self, *names: str) -> Any:
        for name in names:
            if self.raw.get(name) is not None:
                return self.raw[name]
        self.missing.append(" or ".join(names))
        return 0

    def opt(self, name: str, default: Any) -> Any:
        value = self.raw.get(name)
        return default if value is None else value

    def stack(self) -> tuple[Any, Any, Any, Any, Any]:
        """(layers, hidden size, vocabulary, attention heads, KV heads), required and spelled
        alike by every family with attention layers."""
        count = self.req("num_hidden_layers")
        hidden, vocab = self.req("hidden_size"), self.req("vocab_size")
        heads, kv_heads = self.req("num_attention_heads"), self.req("num_key_value_heads")
        return count, hidden, vocab, heads, kv_heads

    def check(self) -> None:
        if self.missing:
            raise ModelConfigError(
                f"{self.family} config.json is missing required field(s): "
                + ", ".join(self.missing)
            )


def first_architecture(raw: Config) -> str:
    """The config's first listed architecture, else the one its model_type stands for."""
    architectures = raw.get("architectures") or []
    if architectures:
        return str(architectures[0])
    return MODEL_TYPES.get(str(raw.get("model_type", "")), "unknown")


def dense(block: Mapping[Role, int]) -> int:
    """A block's parameters other than routed experts."""
    return sum(params for role, params in block.items() if role != Role.EXPERTS)


@dataclass(frozen=True)
class Body:
    """A model as a reader describes it: its layers, each a string of block characters, and
    each block's parameters by module role."""

    hidden: int
    vocab: int
    tied: bool  # the LM head shares the embedding table, so a step reads no separate head
    layers: Sequence[str]
    blocks: Blocks

    def count(self, role: Role) -> int:
        """Layers with a block that has `role` (ssm, attention, experts)."""
        return sum(any(role in self.blocks[c] for c in layer) for layer in self.layers)


def build(
    name: str,
    architecture: str,
    body: Body,
    *,
    ssm: SsmShape | None = None,
    attention: AttentionShape | None = None,
    moe: MoeShape | None = None,
    mtp: str = "",
) -> Read:
    """The ModelSpec and Inventory of a described model; `mtp` lists the block characters of
    its multi-token-prediction layers (empty: no MTP drafter)."""
    table = body.vocab * body.hidden
    head = 0 if body.tied else table
    layers = tuple(body.layers)
    blocks = body.blocks
    spec = ModelSpec(
        name=name,
        architecture=architecture,
        layer_pattern="".join(layers),
        hidden_size=body.hidden,
        vocab_size=body.vocab,
        ssm_layers=body.count(Role.SSM),
        attention_layers=body.count(Role.ATTENTION),
        moe_layers=body.count(Role.EXPERTS),
        ssm=ssm,
        attention=attention,
        moe=moe,
        dense_params=sum(dense(blocks[c]) for chars in layers for c in chars) + head + table,
        embedding_params=table,
        drafter=DrafterKind.MTP if mtp else DrafterKind.NONE,
        drafter_dense_params=sum(dense(blocks[c]) for c in mtp if c in blocks),
        drafter_moe_layers=mtp.count(EXPERTS),
    )
    return spec, Inventory(layers=layers, blocks=blocks, embedding=table, lm_head=head)
