"""Builds a ModelSpec from a Hugging Face config.json: the family's reader for the shapes, then
the stored weight formats and the SSM state dtype as vLLM will resolve them.

The weight formats come from an override, a built-in variant, quantization_config,
hf_quant_config.json or torch_dtype (weights.py); the SSM state dtype from the live flag, the
config's own field or vLLM's default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from autotuner.core.model.readers.attention import read_attention
from autotuner.core.model.readers.base import MODEL_TYPES, Config, Read
from autotuner.core.model.readers.falcon_h1 import read_falcon_h1
from autotuner.core.model.readers.granite import read_granite_hybrid
from autotuner.core.model.readers.jamba import read_jamba
from autotuner.core.model.readers.mamba2 import read_mamba2
from autotuner.core.model.readers.nemotron_h import read_nemotron_h
from autotuner.core.model.readers.qwen_gdn import read_qwen_gdn
from autotuner.core.model.spec import ModelSpec
from autotuner.core.model.weights import (
    UNQUANTIZED,
    Scheme,
    describe,
    plan,
    scheme_of,
    uniform,
    weight_format,
)
from autotuner.errors import ModelConfigError

READERS: dict[str, Callable[[Config, str], Read]] = {
    "LlamaForCausalLM": read_attention,
    "MistralForCausalLM": read_attention,
    "Qwen2ForCausalLM": read_attention,
    "Qwen3ForCausalLM": read_attention,
    "Qwen3MoeForCausalLM": read_attention,
    "MixtralForCausalLM": read_attention,
    "DeepseekV3ForCausalLM": read_attention,
    "NemotronHForCausalLM": read_nemotron_h,
    "Qwen3NextForCausalLM": read_qwen_gdn,
    "Qwen3_5ForCausalLM": read_qwen_gdn,
    "Qwen3_5MoeForCausalLM": read_qwen_gdn,
    "Qwen3_5ForConditionalGeneration": read_qwen_gdn,
    "Qwen3_5MoeForConditionalGeneration": read_qwen_gdn,
    "GraniteMoeHybridForCausalLM": read_granite_hybrid,
    "BambaForCausalLM": read_granite_hybrid,
    "FalconH1ForCausalLM": read_falcon_h1,
    "JambaForCausalLM": read_jamba,
    "Mamba2ForCausalLM": read_mamba2,
}


def _reader(raw: Config) -> Callable[[Config, str], Read]:
    """The reader for a config, or a refusal naming the architecture and what is modelled."""
    modelled = ", ".join(sorted(READERS))
    architectures = raw.get("architectures") or []
    if architectures:
        named = str(architectures[0])
        if named not in READERS:
            raise ModelConfigError(f"architecture {named} is not modelled; modelled: {modelled}")
        return READERS[named]
    model_type = raw.get("model_type")
    if str(model_type) in MODEL_TYPES:
        return READERS[MODEL_TYPES[str(model_type)]]
    raise ModelConfigError(
        f"config.json names no modelled architecture: 'architectures' is missing and model_type "
        f"{model_type!r} is not one of {', '.join(MODEL_TYPES)}; modelled: {modelled}"
    )


def _stored_dtype(raw: Config) -> str:
    """The checkpoint's unquantized dtype (torch_dtype / dtype, also inside text_config)."""
    text = raw.get("text_config") or {}
    for config in (text, raw):
        value = str(config.get("torch_dtype") or config.get("dtype") or "").lower()
        value = value.removeprefix("torch.")
        if value in UNQUANTIZED:
            return value
    return "bfloat16"


def _served_dtype(stored: str) -> str:
    """The dtype vLLM computes in under `--dtype auto`: float32 checkpoints are cast to bf16."""
    return "float16" if stored == "float16" else "bfloat16"


def _file_scheme(
    raw: Config, quantization: Mapping[str, Any] | None, source: str, stored: str
) -> tuple[Scheme, list[str]]:
    """What the files say: config.json's quantization_config first (as vLLM reads it), then the
    quantization beside it (hf_quant_config.json, or a built-in variant), then torch_dtype."""
    text = raw.get("text_config") or {}
    embedded = raw.get("quantization_config") or text.get("quantization_config")
    if embedded:
        notes = []
        if quantization is not None:
            notes.append(
                f"weights: {source} not read: config.json has its own quantization_config, "
                "which vLLM reads first"
            )
        return scheme_of(embedded, "config.json quantization_config", stored), notes
    if quantization is not None:
        return scheme_of(quantization, source, stored), []
    return uniform(stored, "config.json torch_dtype"), []


def _given(
    raw: Config, quantization: Mapping[str, Any] | None, source: str, built_in: str | None
) -> tuple[Scheme, list[str]]:
    """What the files (or the built-in variant standing for them) say."""
    if built_in:
        return uniform(weight_format(built_in), source), []
    return _file_scheme(raw, quantization, source, _stored_dtype(raw))


def _weights(
    raw: Config,
    weights: str | None,
    quantization: Mapping[str, Any] | None,
    source: str,
    built_in: str | None,
) -> tuple[Scheme, list[str]]:
    """(scheme, notes): an override wins over the files and the variant, and says so."""
    if not weights:
        return _given(raw, quantization, source, built_in)
    fmt = weight_format(weights)
    try:
        files, _ = _given(raw, quantization, source, built_in)
        said = f"{files.label} ({files.source})"
    except ModelConfigError as exc:
        said = f"nothing readable ({exc})"
    return uniform(fmt, "override"), [f"weights: {fmt} given as an override; before it, {said}"]


# vLLM's per-architecture hooks (vllm/model_executor/models/config.py): with
# --mamba-ssm-cache-dtype auto, NemotronH takes the config's mamba_ssm_cache_dtype or float32;
# Qwen3.5 takes its text config's mamba_ssm_dtype when given. Other models follow
# --mamba-cache-dtype, whose auto is the model dtype.
_SSM_HOOKS: dict[str, tuple[str, str | None]] = {
    "NemotronHForCausalLM": ("mamba_ssm_cache_dtype", "float32"),
    "Qwen3_5ForConditionalGeneration": ("mamba_ssm_dtype", None),
    "Qwen3_5MoeForConditionalGeneration": ("mamba_ssm_dtype", None),
}
STATE_DTYPES = ("auto", "float32", "bfloat16", "float16")


def state_dtype(value: str, what: str = "SSM state dtype") -> str:
    """`fp32`, `torch.bfloat16`, `auto`, ... -> float32 / bfloat16 / float16 / auto."""
    text = str(value).strip().lower()
    if text == "auto":
        return text
    try:
        dtype = weight_format(text)
    except ModelConfigError:
        dtype = ""
    if dtype not in UNQUANTIZED:
        raise ModelConfigError(f"unknown {what} {value!r}; known: {', '.join(STATE_DTYPES)}")
    return dtype


def _ssm_dtype(
    raw: Config, architecture: str, live: str | None, cache: str | None
) -> tuple[str, str]:
    """(dtype, where it came from) as vLLM resolves the SSM state dtype."""
    if live and state_dtype(live) != "auto":
        return state_dtype(live), f"--mamba-ssm-cache-dtype {live}"
    if architecture in _SSM_HOOKS:
        field, default = _SSM_HOOKS[architecture]
        value = (raw.get("text_config") or raw).get(field)
        if value and state_dtype(str(value)) != "auto":
            return state_dtype(str(value)), f"config.json {field}"
        if default:
            return default, f"vLLM's {architecture} default (no {field} in config.json)"
    if cache and state_dtype(cache, "mamba cache dtype") != "auto":
        return state_dtype(cache), f"--mamba-cache-dtype {cache} (--mamba-ssm-cache-dtype auto)"
    served = _served_dtype(_stored_dtype(raw))
    return served, f"vLLM's default: auto follows the model dtype ({served})"


def _conv_dtype(raw: Config, cache: str | None) -> str:
    if cache and state_dtype(cache, "mamba cache dtype") != "auto":
        return state_dtype(cache)
    return _served_dtype(_stored_dtype(raw))


def _state_note(spec: ModelSpec) -> list[str]:
    if not spec.is_hybrid or spec.ssm_state_dtype == "float32":
        return []
    return [
        f"SSM state is {spec.ssm_state_dtype}, not float32 ({spec.ssm_state_dtype_source}): a "
        "low-precision state accumulates error, most under replay; vLLM's "
        "--mamba-ssm-cache-dtype float32 keeps it exact at twice the state memory"
    ]


def from_hf_config(
    raw: Config,
    *,
    name: str = "model",
    weights: str | None = None,
    quantization: Mapping[str, Any] | None = None,
    quantization_source: str = "hf_quant_config.json",
    built_in: str | None = None,
    ssm_state_dtype: str | None = None,
    mamba_cache_dtype: str | None = None,
) -> ModelSpec:
    """Build a ModelSpec from a parsed config.json.

    The stored weight format comes from `weights` (an override), else `built_in` (a registry
    variant's format, every weight in it), else config.json's `quantization_config`, else
    `quantization` (the `quantization` object of an hf_quant_config.json beside config.json),
    else torch_dtype. `ssm_state_dtype` and `mamba_cache_dtype` are vLLM's live
    `--mamba-ssm-cache-dtype` and `--mamba-cache-dtype` (None or `auto`: resolved as vLLM
    does)."""
    if not isinstance(raw, Mapping):
        raise ModelConfigError("config.json must hold a JSON object")
    for what, value in (
        ("SSM state dtype", ssm_state_dtype),
        ("mamba cache dtype", mamba_cache_dtype),
    ):
        if value:
            state_dtype(value, what)
    spec, inventory = _reader(raw)(raw, name)
    scheme, notes = _weights(raw, weights, quantization, quantization_source, built_in)
    shares, name_notes = plan(inventory, scheme, _stored_dtype(raw))
    update: dict[str, Any] = {
        "weight_dtype": scheme.label,
        "weight_shares": shares,
        "weight_source": scheme.source,
    }
    if spec.ssm is not None:
        dtype, source = _ssm_dtype(raw, spec.architecture, ssm_state_dtype, mamba_cache_dtype)
        update |= {
            "ssm_state_dtype": dtype,
            "ssm_state_dtype_source": source,
            "conv_state_dtype": _conv_dtype(raw, mamba_cache_dtype),
        }
    spec = spec.model_copy(update=update)
    if scheme.label not in UNQUANTIZED or weights:
        notes.insert(0, f"weights from {scheme.source}: {describe(shares)}")
    notes += name_notes + _state_note(spec)
    return spec.model_copy(update={"notes": (*spec.notes, *notes)})
