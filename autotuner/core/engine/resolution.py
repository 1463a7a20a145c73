"""The live args' resolution (pure): EngineArgs + the settings -> the Workload a prediction
runs on, the drafter that is really deployed, and where every input came from.

The live args are the source of truth; the settings are the fallback where the args say
nothing, and vLLM's defaults after them. Each input is recorded with its source ("live args",
"settings", "observed", "default", ...) and a note when it is bounded, ignored or not modelled,
so `status`, `/decision` and `predict` can show which value came from where.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from autotuner.core.engine.args import EngineArgs, SpeculativeConfig
from autotuner.core.engine.builds import BuildInForce
from autotuner.core.engine.drafter import (
    DEFAULT,
    LIVE,
    MODEL_CONFIG,
    Drafter,
    DraftLoader,
    deployed_drafter,
)
from autotuner.core.engine.workload import MambaCacheMode, PrefixCacheReading, Workload
from autotuner.core.model.spec import DrafterKind, ModelSpec
from autotuner.errors import InputError

SAVED = "saved speculative config"  # the operator's config, kept while the tuner turned it off
SETTINGS = "settings"
OBSERVED = "observed"

MAMBA_CACHE_MODES = tuple(m.value for m in MambaCacheMode)


class Input(BaseModel):
    """One input of a prediction: its value, where it came from, and what was made of it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    value: str | int | float | bool | None
    source: str
    note: str = ""
    modelled: bool = True


@dataclass(frozen=True)
class Fallback:
    """What the settings say (or predict's options), used where the live args say nothing."""

    context_tokens: float = 4096
    tensor_parallel: int = 1
    drafter: DrafterKind | None = None
    draft_model: str | None = None
    context_source: str = SETTINGS
    tensor_parallel_source: str = SETTINGS
    drafter_source: str = SETTINGS


@dataclass(frozen=True)
class Resolved:
    """The workload and model a prediction runs on, the drafter, and every input's source."""

    workload: Workload
    model: ModelSpec
    drafter: Drafter
    inputs: dict[str, Input]
    build: BuildInForce | None = None  # the engine build read (None: not read)
    kv_connector: bool = False  # the live args set a KV connector (P/D, KV offload)
    data_parallel: int | None = 1  # the live args' data parallel size (None: computed)

    def table(self) -> dict[str, dict[str, Any]]:
        """The inputs as plain JSON (for /decision, status and predict --json)."""
        return {name: i.model_dump(mode="json") for name, i in self.inputs.items()}


INPUT_ORDER = (
    "tensor_parallel",
    "context_tokens",
    "max_model_len",
    "gpu_memory_utilization",
    "max_num_seqs",
    "kv_cache_dtype",
    "ssm_state_dtype",
    "mamba_cache_mode",
    "enable_prefix_caching",
    "prefix_hit_rate",
    "prompt_tokens",
    "generation_tokens",
    "cudagraph_capture_tokens",
    "prefill_chunk_tokens",
    "drafter",
    "adaptive_verification",
)

KV_CACHE_DTYPES = {
    "fp8": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "fp8_inc": "fp8",
    "fp8_ds_mla": "fp8",
    "bfloat16": "bfloat16",
    "float16": "float16",
    "half": "float16",
}


def resolve(
    model: ModelSpec,
    args: EngineArgs | None,
    fallback: Fallback | None = None,
    *,
    base: Workload | None = None,
    observed_context: float | None = None,
    observed_prefix: PrefixCacheReading | None = None,
    saved: SpeculativeConfig | None = None,
    load_draft: DraftLoader | None = None,
) -> Resolved:
    """The live args over the fallback over vLLM's defaults. `args` None: the target is not
    known (every value from the fallback). `saved` is the operator's speculative config kept
    while the tuner runs without speculation. `base` carries the Workload fields the args do
    not set (reserve, capture size, ...). `observed_prefix`: the prefix cache's hits and the
    request lengths a window showed, which price a setup that turns prefix caching off."""
    fallback = fallback or Fallback()
    live = args or EngineArgs()
    workload = base or Workload()
    inputs: dict[str, Input] = {}
    update: dict[str, Any] = {}

    def pick(name: str, value: Any, fallback_value: Any, fallback_source: str) -> Any:
        if value is not None:
            note = ""
            if fallback_source != DEFAULT and fallback_value not in (None, value):
                note = f"{fallback_source}: {fallback_value}; the live args win"
            inputs[name] = Input(value=value, source=LIVE, note=note)
            update[name] = value
            return value
        inputs[name] = Input(value=fallback_value, source=fallback_source)
        return fallback_value

    update["tensor_parallel"] = pick(
        "tensor_parallel",
        live.tensor_parallel_size,
        fallback.tensor_parallel,
        fallback.tensor_parallel_source,
    )
    pick(
        "gpu_memory_utilization",
        live.gpu_memory_utilization,
        workload.gpu_memory_utilization,
        DEFAULT,
    )
    _mamba_cache_mode(live, workload, inputs, update)
    _max_num_seqs(live, workload.engine_name, inputs, update)
    _context(live, fallback, observed_context, inputs, update)
    _eager(live, workload, inputs, update)
    _prefill_chunk(live, workload.engine_name, inputs, update)
    inputs["enable_prefix_caching"] = Input(
        value=live.enable_prefix_caching,
        source=LIVE if live.enable_prefix_caching is not None else DEFAULT,
        note="a setup that turns it off pays its hits in recomputed prefill",
    )
    _prefix_cache(observed_prefix, inputs, update)
    served = _kv_cache_dtype(model, live, inputs)
    _ssm_dtype(served, live, inputs)
    drafter = _drafter(served, live, fallback, saved, load_draft, inputs, update)
    order = {name: i for i, name in enumerate(INPUT_ORDER)}
    inputs = dict(sorted(inputs.items(), key=lambda item: order.get(item[0], len(order))))
    try:  # validated: a bad value (TP 0, ...) is refused, not carried
        resolved = Workload.model_validate({**dict(workload), **update})
    except ValueError as exc:
        raise InputError(f"the workload cannot be built: {exc}") from None
    return Resolved(
        resolved,
        served,
        drafter,
        inputs,
        kv_connector=bool(live.kv_connector),
        data_parallel=live.data_parallel,
    )


def _drafter(
    served: ModelSpec,
    live: EngineArgs,
    fallback: Fallback,
    saved: SpeculativeConfig | None,
    load_draft: DraftLoader | None,
    inputs: dict[str, Input],
    update: dict[str, Any],
) -> Drafter:
    """The drafter the engine runs (live config, else the saved one, else a declared one)."""
    speculative, spec_source = (
        (live.speculative, LIVE) if live.speculative is not None else (saved, SAVED)
    )
    drafter = deployed_drafter(
        served,
        speculative,
        fallback.drafter,
        source=spec_source,
        declared_source=fallback.drafter_source,
        draft_model=fallback.draft_model,
        load_draft=load_draft,
    )
    update["drafter"] = drafter.kind if drafter.kind is not DrafterKind.NONE else None
    update["draft_model"] = drafter.draft
    inputs["drafter"] = Input(
        value=drafter.describe(),
        source=drafter.source,
        note="; ".join(filter(None, (drafter.problem, *drafter.notes))),
    )
    if drafter.adaptive_verification is not None:
        inputs["adaptive_verification"] = Input(
            value=drafter.adaptive_verification,
            source=drafter.source,
            note="K is the ceiling: the setup is spec:K@adaptive",
        )
    return drafter


def _mamba_cache_mode(
    live: EngineArgs, workload: Workload, inputs: dict[str, Input], update: dict[str, Any]
) -> None:
    mode = live.mamba_cache_mode
    if mode is None:
        inputs["mamba_cache_mode"] = Input(value=workload.mamba_cache_mode, source=DEFAULT)
    elif mode.lower() in MAMBA_CACHE_MODES:
        update["mamba_cache_mode"] = mode.lower()
        note = "align keeps 2 + K state slots per request" if mode.lower() == "align" else ""
        inputs["mamba_cache_mode"] = Input(value=mode.lower(), source=LIVE, note=note)
    else:
        inputs["mamba_cache_mode"] = Input(
            value=mode,
            source=LIVE,
            note=f"not a mode this model knows ({', '.join(MAMBA_CACHE_MODES)}): "
            f"{workload.mamba_cache_mode} used",
            modelled=False,
        )


def _prefix_cache(
    reading: PrefixCacheReading | None, inputs: dict[str, Input], update: dict[str, Any]
) -> None:
    if reading is None:
        inputs["prefix_hit_rate"] = Input(
            value=None,
            source=DEFAULT,
            note="unknown: turning prefix caching off is not charged",
            modelled=False,
        )
        return
    update.update(
        prefix_hit_rate=reading.hit_rate,
        prompt_tokens=reading.prompt_tokens,
        generation_tokens=reading.generation_tokens,
    )
    inputs["prefix_hit_rate"] = Input(
        value=round(reading.hit_rate, 3),
        source=OBSERVED,
        note=f"{reading.looked_up_tokens:,.0f} prompt tokens looked up in the window",
    )
    inputs["prompt_tokens"] = Input(value=round(reading.prompt_tokens, 1), source=OBSERVED)
    inputs["generation_tokens"] = Input(value=round(reading.generation_tokens, 1), source=OBSERVED)


def _max_num_seqs(
    live: EngineArgs, engine: str, inputs: dict[str, Input], update: dict[str, Any]
) -> None:
    if live.max_num_seqs is None:
        inputs["max_num_seqs"] = Input(
            value=None,
            source=DEFAULT,
            note=f"not given: {engine}'s default (it depends on the build and GPU) is not taken "
            "as a ceiling; memory bounds the batch",
        )
        return
    update["max_num_seqs"] = live.max_num_seqs
    inputs["max_num_seqs"] = Input(
        value=live.max_num_seqs, source=LIVE, note="the running batch's ceiling"
    )


def _context(
    live: EngineArgs,
    fallback: Fallback,
    observed: float | None,
    inputs: dict[str, Input],
    update: dict[str, Any],
) -> None:
    context, source = fallback.context_tokens, fallback.context_source
    if observed:
        context, source = observed, OBSERVED
    note = ""
    limit = live.max_model_len
    if limit is not None and context > limit:
        note = f"bounded by --max-model-len {live.max_model_len_text} (was {context:.0f})"
        context = float(limit)
    update["context_tokens"] = context
    inputs["context_tokens"] = Input(value=round(float(context), 1), source=source, note=note)
    inputs["max_model_len"] = Input(
        value=limit if limit is not None else live.max_model_len_text,
        source=LIVE if live.max_model_len_text is not None else DEFAULT,
        note="auto: vLLM fits it to memory" if live.max_model_len_text and limit is None else "",
    )


def _eager(
    live: EngineArgs, workload: Workload, inputs: dict[str, Input], update: dict[str, Any]
) -> None:
    if live.enforce_eager:
        update["cudagraph_capture_tokens"] = 0
        inputs["cudagraph_capture_tokens"] = Input(
            value=0, source=LIVE, note="--enforce-eager: no CUDA graphs"
        )
    else:
        inputs["cudagraph_capture_tokens"] = Input(
            value=workload.cudagraph_capture_tokens, source=DEFAULT
        )


# Where each engine's default prefill budget comes from, for the input's note.
CHUNK_DEFAULTS = {
    "vLLM": "vLLM's default on this GPU: 16384 from 160 GiB, 8192 from 70 GiB (not an A100), "
    "else 2048 (vllm/engine/arg_utils.py:2970-3006)",
    "SGLang": "SGLang's default on this GPU: 16384 from 160 GiB, 8192 from 60 GiB, 4096 from "
    "20 GiB, else 2048 (srt/arg_groups/memory_hook.py:90-168)",
}


def _prefill_chunk(
    live: EngineArgs, engine: str, inputs: dict[str, Input], update: dict[str, Any]
) -> None:
    """The step's prefill budget, which sets the time to first token: the live args' value,
    else the engine's default on the GPU (core/engine/workload.py Workload.chunk_budget)."""
    notes = []
    if engine == "SGLang" and not live.mixed_prefill:
        update["prefill_mixed"] = False
        notes.append("SGLang runs prompt chunks before decoding (no --enable-mixed-chunk)")
    if live.performance_mode == "throughput":
        update["throughput_mode"] = True
        notes.append("--performance-mode throughput doubles the default")
    if live.attention_data_parallel is not None and live.attention_data_parallel > 1:
        update["attention_data_parallel"] = live.attention_data_parallel
        notes.append(f"each of {live.attention_data_parallel} attention DP groups takes its share")
    if live.chunked_prefill is False:
        update["chunked_prefill"] = False
        inputs["prefill_chunk_tokens"] = Input(
            value=None, source=LIVE, note="chunked prefill off: a prompt is prefilled whole"
        )
        return
    default = CHUNK_DEFAULTS.get(engine, CHUNK_DEFAULTS["vLLM"])
    value: int | str | None
    if live.prefill_chunk_tokens is not None:
        update["prefill_chunk_tokens"] = live.prefill_chunk_tokens
        source, value = LIVE, live.prefill_chunk_tokens
        notes.insert(0, "the step's prefill budget: sets the time to first token")
    elif live.prefill_chunk_text is not None:
        source, value = LIVE, live.prefill_chunk_text
        notes.insert(0, f"the shell computes it: {default} is assumed")
    else:
        source, value = DEFAULT, None
        notes.insert(0, default)
    inputs["prefill_chunk_tokens"] = Input(
        value=value,
        source=source,
        note="; ".join(notes),
        modelled=live.prefill_chunk_text is None or live.prefill_chunk_tokens is not None,
    )


def _kv_cache_dtype(model: ModelSpec, live: EngineArgs, inputs: dict[str, Input]) -> ModelSpec:
    text = live.kv_cache_dtype
    if text is None or text.lower() == "auto":
        inputs["kv_cache_dtype"] = Input(
            value=model.kv_cache_dtype,
            source=LIVE if text else DEFAULT,
            note="auto: the model's dtype",
        )
        return model
    dtype = KV_CACHE_DTYPES.get(text.lower())
    if dtype is None:
        inputs["kv_cache_dtype"] = Input(
            value=text,
            source=LIVE,
            note=f"unknown KV cache dtype: {model.kv_cache_dtype} used",
            modelled=False,
        )
        return model
    inputs["kv_cache_dtype"] = Input(value=dtype, source=LIVE)
    if model.attention is None or dtype == model.kv_cache_dtype:
        return model
    return model.model_copy(update={"kv_cache_dtype": dtype})


def _ssm_dtype(model: ModelSpec, live: EngineArgs, inputs: dict[str, Input]) -> None:
    """The SSM state dtype is the model's (read with the live flag when the model was loaded:
    core/model/registry.py load_model)."""
    if not model.is_hybrid:
        return
    from_args = live.mamba_ssm_cache_dtype not in (None, "auto")
    inputs["ssm_state_dtype"] = Input(
        value=model.ssm_state_dtype,
        source=LIVE if from_args else MODEL_CONFIG,
        note=model.ssm_state_dtype_source,
    )


def args_table(args: EngineArgs) -> dict[str, Input]:
    """What the args alone say (status reads no settings and no model): each flag the cost model
    reads, from the live args or left to the engine's default."""
    modelled = {
        "tensor_parallel_size": "",
        "gpu_memory_utilization": "",
        "max_num_seqs": "the running batch's ceiling",
        "max_model_len": "bounds the mean context",
        "kv_cache_dtype": "",
        "mamba_ssm_cache_dtype": "",
        "mamba_cache_dtype": "",
        "mamba_cache_mode": "",
        "enable_prefix_caching": "recorded, not modelled",
        "enforce_eager": "",
        "prefill_chunk_tokens": "the step's prefill budget: sets the time to first token",
    }
    table: dict[str, Input] = {}
    for name, note in modelled.items():
        value = getattr(args, name)
        if name == "max_model_len" and value is None:
            value = args.max_model_len_text
        table[name] = Input(
            value=value,
            source=LIVE if value is not None else DEFAULT,
            note=note if value is not None else "not in the args: the engine's default",
            modelled=name != "enable_prefix_caching",
        )
    return table
