"""The engine as its own arguments say it runs (pure): a vLLM argument list -> EngineArgs, and
EngineArgs + the settings -> the Workload a prediction runs on, the drafter that is really
deployed, and where every input came from.

The live args are the source of truth; the settings are the fallback where the args say
nothing, and vLLM's defaults after them. Each input is recorded with its source ("live args",
"settings", "observed", "default", ...) and a note when it is bounded, ignored or not modelled,
so `status`, `/decision` and `predict` can show which value came from where.

The one flag finder (`find`) and the JSON reader live here so that the core can read args
without importing an adapter; actuators/flags.py renders with the same parser.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from autotuner.core.costmodel import DraftModel, Workload
from autotuner.core.model import DrafterKind, ModelSpec
from autotuner.errors import InputError

LIVE = "live args"
SAVED = "saved speculative config"  # the operator's config, kept while the tuner turned it off
SETTINGS = "settings"
DECLARED = "declared"  # --drafter / --draft-model on predict, model.drafter in the settings
OBSERVED = "observed"
MODEL_CONFIG = "model config"
DEFAULT = "default"

SPECULATIVE_CONFIG = "--speculative-config"
NO_DRAFTER = (
    "no drafter: speculation not predicted (declare one with --drafter or deploy "
    "--speculative-config)"
)
MODELLED_METHODS = ("mtp", "eagle", "eagle3", "ngram", "suffix", "draft_model")
_METHOD_KIND = {
    "mtp": DrafterKind.MTP,
    "eagle": DrafterKind.EAGLE,
    "eagle3": DrafterKind.EAGLE,
    "ngram": DrafterKind.NGRAM,
    "ngram_gpu": DrafterKind.NGRAM,
    "suffix": DrafterKind.SUFFIX,
    "draft_model": DrafterKind.DRAFT_MODEL,
}
MAMBA_CACHE_MODES = ("none", "all", "align")


class ArgsError(InputError):
    """The args cannot be read or written safely; nothing was changed."""


# --------------------------------------------------------------------------- finding flags


@dataclass(frozen=True)
class Flag:
    """One occurrence of a flag: its index, and where its value sits."""

    index: int
    joined: bool  # --flag=value (True) or --flag value (False) or a bare switch
    value: str | None
    value_index: int | None


def find(args: Sequence[str], name: str) -> Flag | None:
    """The last occurrence of `name` (argparse keeps the last), as `--x v` or `--x=v`."""
    found = None
    for i, arg in enumerate(args):
        if arg == name:
            has_value = i + 1 < len(args) and not args[i + 1].startswith("--")
            found = Flag(i, False, args[i + 1] if has_value else None, i + 1 if has_value else None)
        elif arg.startswith(name + "="):
            found = Flag(i, True, arg[len(name) + 1 :], i)
    return found


def find_any(args: Sequence[str], *names: str) -> tuple[str, Flag] | None:
    """The last occurrence of any spelling of one flag (vLLM also takes `--max_num_seqs` for
    `--max-num-seqs`), with the spelling found."""
    spellings = {n for name in names for n in (name, _underscored(name))}
    hits = [(flag, name) for name in spellings if (flag := find(args, name)) is not None]
    if not hits:
        return None
    flag, name = max(hits, key=lambda hit: hit[0].index)
    return name, flag


def _underscored(name: str) -> str:
    dashes = len(name) - len(name.lstrip("-"))
    return name[:dashes] + name[dashes:].replace("-", "_")


def read_json(text: str, flag: str) -> dict[str, Any]:
    """A JSON object, in double quotes or (as operators write in YAML) single quotes."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            raise ArgsError(
                f"{flag}: value is not a JSON object ({error.msg} at column {error.colno}): "
                f"{text[:80]!r}"
            ) from None
    if not isinstance(value, dict):
        raise ArgsError(f"{flag}: value is not a JSON object: {text[:80]!r}")
    return value


# --------------------------------------------------------------------------- the args


class SpeculativeConfig(BaseModel):
    """The operator's --speculative-config, as far as the tuner reads it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: str | None = None  # as written
    model: str | None = None
    num_speculative_tokens: int | None = None
    enable_adaptive_verification: bool | None = None  # recorded; K is then a ceiling
    draft_tensor_parallel_size: int | None = None

    @classmethod
    def of(cls, config: Mapping[str, Any], flag: str = SPECULATIVE_CONFIG) -> SpeculativeConfig:
        def integer(key: str) -> int | None:
            value = config.get(key)
            if value is None:
                return None
            if isinstance(value, bool) or not isinstance(value, (int, str)):
                raise ArgsError(f"{flag}: {key} must be an integer, got {value!r}")
            try:
                return int(value)
            except ValueError:
                raise ArgsError(f"{flag}: {key} must be an integer, got {value!r}") from None

        method, model = config.get("method"), config.get("model")
        adaptive = config.get("enable_adaptive_verification")
        return cls(
            method=None if method is None else str(method),
            model=None if model is None else str(model),
            num_speculative_tokens=integer("num_speculative_tokens"),
            enable_adaptive_verification=None if adaptive is None else _truthy(str(adaptive)),
            draft_tensor_parallel_size=integer("draft_tensor_parallel_size"),
        )

    @property
    def resolved_method(self) -> str | None:
        """The method vLLM runs (vllm/config/speculative.py): model-specific MTP names are
        `mtp`; without a method, `ngram` as the model is ngram and a named model is placed by
        its name (eagle-, eagle3, dflash, dspark), else it is a draft_model."""
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
    """What a vLLM command line says about the run; None where it says nothing (vLLM's default
    then runs)."""

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

    def given(self) -> dict[str, Any]:
        """Every value the args set, by field name."""
        return {k: v for k, v in self.model_dump(mode="json").items() if v is not None}


def parse(
    args: Sequence[str],
    *,
    speculative_flag: str = SPECULATIVE_CONFIG,
    mamba_ssm_flag: str = "--mamba-ssm-cache-dtype",
) -> EngineArgs:
    """Read the flags the cost model needs from a vLLM argument list (both `--x v` and
    `--x=v`, dashes or underscores); a malformed value raises ArgsError naming the flag."""
    speculative = None
    spec = find_any(args, speculative_flag)
    if spec is not None:
        name, flag = spec
        if flag.value is None:
            raise ArgsError(f"{name} has no value")
        speculative = SpeculativeConfig.of(read_json(flag.value, name), name)
    max_len_text = _text(args, "--max-model-len")
    return EngineArgs(
        tensor_parallel_size=_integer(args, "--tensor-parallel-size", "-tp", minimum=1),
        gpu_memory_utilization=_fraction(args, "--gpu-memory-utilization"),
        max_num_seqs=_integer(args, "--max-num-seqs", minimum=1),
        max_model_len=_max_model_len(max_len_text),
        max_model_len_text=max_len_text,
        kv_cache_dtype=_text(args, "--kv-cache-dtype"),
        mamba_ssm_cache_dtype=_text(args, mamba_ssm_flag),
        mamba_cache_dtype=_text(args, "--mamba-cache-dtype"),
        mamba_cache_mode=_text(args, "--mamba-cache-mode"),
        enable_prefix_caching=_switch(args, "--enable-prefix-caching"),
        enforce_eager=_switch(args, "--enforce-eager"),
        speculative=speculative,
    )


def _text(args: Sequence[str], *names: str) -> str | None:
    hit = find_any(args, *names)
    if hit is None:
        return None
    name, flag = hit
    if flag.value is None or flag.value == "":
        raise ArgsError(f"{name} has no value")
    return flag.value


def _integer(args: Sequence[str], *names: str, minimum: int) -> int | None:
    text = _text(args, *names)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ArgsError(f"{names[0]}: not an integer: {text!r}") from None
    if value < minimum:
        raise ArgsError(f"{names[0]}: must be >= {minimum}, got {value}")
    return value


def _fraction(args: Sequence[str], name: str) -> float | None:
    text = _text(args, name)
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ArgsError(f"{name}: not a number: {text!r}") from None
    if not 0 < value <= 1:
        raise ArgsError(f"{name}: must lie in (0, 1], got {value}")
    return value


_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)(k|m|g|t|K|M|G|T|Ki|Mi|Gi|Ti)?")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _max_model_len(text: str | None) -> int | None:
    """vLLM's human-readable integer (32768, 32k = 32000, 32K = 32768); `auto` or -1 (vLLM
    fits the length to memory) gives None."""
    if text is None or text.strip().lower() in ("auto", "-1"):
        return None
    match = _HUMAN_INT.fullmatch(text.strip())
    if not match:
        raise ArgsError(f"--max-model-len: not a length: {text!r}")
    number, suffix = match.groups()
    if suffix in _DECIMAL:
        value = int(float(number) * _DECIMAL[suffix])
    elif "." in number:
        raise ArgsError(f"--max-model-len: decimals need a decimal suffix (k, m): {text!r}")
    else:
        value = int(number) * _BINARY.get((suffix or "")[:1], 1)
    if value < 1:
        raise ArgsError(f"--max-model-len: must be >= 1, got {text!r}")
    return value


def _switch(args: Sequence[str], name: str) -> bool | None:
    """A BooleanOptionalAction flag: `--x`, `--no-x`, or `--x=false`; the last one wins."""
    negative = "--no-" + name.removeprefix("--")
    on, off = find_any(args, name), find_any(args, negative)
    if on is None and off is None:
        return None
    if off is not None and (on is None or off[1].index > on[1].index):
        return False
    assert on is not None
    flag = on[1]
    return True if not flag.joined else _truthy(flag.value or "")


def _truthy(text: str) -> bool:
    return text.strip().lower() not in ("false", "0", "no", "off")


# --------------------------------------------------------------------------- the drafter


DraftLoader = Callable[[str], DraftModel]  # raises InputError when the model cannot be sized


class Drafter(BaseModel):
    """The drafter speculation would run with, where it came from, and whether its cost and
    acceptance can be predicted (`problem` says why not)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: DrafterKind
    source: str
    method: str | None = None
    model: str | None = None
    spec_tokens: int | None = None
    adaptive_verification: bool | None = None
    draft: DraftModel | None = None
    problem: str | None = None  # speculation not predicted, and why
    notes: tuple[str, ...] = ()

    @property
    def predictable(self) -> bool:
        return self.problem is None

    @property
    def acceptance_is_the_workloads(self) -> bool:
        """ngram and suffix: acceptance depends on the text served, never assumed."""
        return self.kind in (DrafterKind.NGRAM, DrafterKind.SUFFIX)

    def describe(self) -> str:
        if self.kind is DrafterKind.NONE:
            return "none"
        parts = [self.method or self.kind.value]
        if self.model:
            size = f", {self.draft.params / 1e9:.2f}B params" if self.draft else ""
            parts.append(f"({self.model}{size})")
        if self.spec_tokens:
            parts.append(f"K={self.spec_tokens}")
        if self.adaptive_verification:
            parts.append("adaptive verification")
        return " ".join(parts)


def deployed_drafter(
    model: ModelSpec,
    speculative: SpeculativeConfig | None,
    declared: DrafterKind | None = None,
    *,
    source: str = LIVE,
    declared_source: str = DECLARED,
    draft_model: str | None = None,
    load_draft: DraftLoader | None = None,
) -> Drafter:
    """The drafter the operator deployed (the speculative config), else the one declared,
    else the model's own MTP layers, else none. The tuner never invents one: without a drafter,
    or with one it cannot cost, speculation is not predicted."""
    if speculative is not None:
        return _configured(model, speculative, declared, source, load_draft)
    if declared is not None and declared is not DrafterKind.NONE:
        return _kind_only(model, declared, declared_source, draft_model, load_draft)
    if declared is None and model.drafter is not DrafterKind.NONE:
        return Drafter(kind=model.drafter, source=MODEL_CONFIG, method=model.drafter.value)
    return Drafter(
        kind=DrafterKind.NONE, source=declared_source if declared else DEFAULT, problem=NO_DRAFTER
    )


def _configured(
    model: ModelSpec,
    spec: SpeculativeConfig,
    declared: DrafterKind | None,
    source: str,
    load_draft: DraftLoader | None,
) -> Drafter:
    method = spec.resolved_method
    kind = spec.kind
    base: dict[str, Any] = {
        "source": source,
        "method": method,
        "model": spec.model,
        "spec_tokens": spec.num_speculative_tokens,
        "adaptive_verification": spec.enable_adaptive_verification,
    }
    notes: list[str] = []
    if declared is not None and kind is not None and declared is not kind:
        notes.append(f"the settings declare {declared.value}; the {source} say {method}: used")
    if spec.enable_adaptive_verification:
        notes.append(
            "adaptive verification is on: the engine verifies up to K drafts per step by its "
            "own start-up profile; predicted as spec:K@adaptive (at each batch the verified "
            "count its cost favours, the drafter running K passes)"
        )
    if kind is None:
        what = f"method {method}" if method else "no method and no draft model"
        return Drafter(
            kind=DrafterKind.NONE,
            problem=f"{what} in {SPECULATIVE_CONFIG} is not modelled (modelled: "
            f"{', '.join(MODELLED_METHODS)}): speculation not predicted",
            notes=tuple(notes),
            **base,
        )
    drafter = _kind_only(model, kind, source, spec.model, load_draft, spec)
    return drafter.model_copy(update={**base, "notes": (*notes, *drafter.notes)})


def _kind_only(
    model: ModelSpec,
    kind: DrafterKind,
    source: str,
    draft_model: str | None,
    load_draft: DraftLoader | None,
    spec: SpeculativeConfig | None = None,
) -> Drafter:
    base: dict[str, Any] = {"kind": kind, "source": source, "method": kind.value}
    if draft_model:
        base["model"] = draft_model
    if kind is DrafterKind.MTP and model.drafter is not DrafterKind.MTP:
        return Drafter(
            problem="method mtp, but the model's config has no MTP layers: speculation not "
            "predicted",
            **base,
        )
    if kind in (DrafterKind.NGRAM, DrafterKind.SUFFIX):
        return Drafter(
            notes=(
                f"{kind.value} drafts on the CPU (no GPU passes), but its acceptance is the "
                "workload's: speculation is predicted only from measured acceptance",
            ),
            **base,
        )
    if kind is DrafterKind.EAGLE:
        return Drafter(
            notes=("an EAGLE head is costed as one decoder layer of the target's width",),
            **base,
        )
    if kind is DrafterKind.DRAFT_MODEL:
        return _sized(base, draft_model, load_draft, spec)
    return Drafter(**base)


def _sized(
    base: dict[str, Any],
    name: str | None,
    load_draft: DraftLoader | None,
    spec: SpeculativeConfig | None,
) -> Drafter:
    if not name:
        return Drafter(
            problem="draft_model without a model: its size is unknown, speculation not "
            "predicted (give --draft-model, or the model in the speculative config)",
            **base,
        )
    if load_draft is None:
        return Drafter(
            problem=f"draft model {name}: size unknown, speculation not predicted", **base
        )
    try:
        draft = load_draft(name)
    except InputError as exc:
        return Drafter(
            problem=f"draft model {name}: size unknown ({exc}), speculation not predicted",
            **base,
        )
    tp = spec.draft_tensor_parallel_size if spec is not None else None
    draft = draft.model_copy(update={"tensor_parallel": tp})
    return Drafter(
        draft=draft,
        notes=(
            f"draft model {name}: {draft.params / 1e9:.2f}B params, "
            f"{draft.weight_bytes / 2**30:.2f} GiB read per pass, {draft.layers} blocks",
        ),
        **base,
    )


# --------------------------------------------------------------------------- the workload


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
    "cudagraph_capture_tokens",
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
    saved: SpeculativeConfig | None = None,
    load_draft: DraftLoader | None = None,
) -> Resolved:
    """The live args over the fallback over vLLM's defaults. `args` None: the target is not
    known (every value from the fallback). `saved` is the operator's speculative config kept
    while the tuner runs without speculation. `base` carries the Workload fields the args do
    not set (reserve, capture size, ...)."""
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
    _max_num_seqs(live, inputs, update)
    _context(live, fallback, observed_context, inputs, update)
    _eager(live, workload, inputs, update)
    inputs["enable_prefix_caching"] = Input(
        value=live.enable_prefix_caching,
        source=LIVE if live.enable_prefix_caching is not None else DEFAULT,
        note="recorded, not modelled: the cost model predicts decode steps, prefix-cache hits "
        "change prefill",
        modelled=False,
    )
    served = _kv_cache_dtype(model, live, inputs)
    _ssm_dtype(served, live, inputs)
    drafter = _drafter(served, live, fallback, saved, load_draft, inputs, update)
    order = {name: i for i, name in enumerate(INPUT_ORDER)}
    inputs = dict(sorted(inputs.items(), key=lambda item: order.get(item[0], len(order))))
    try:  # validated: a bad value (TP 0, ...) is refused, not carried
        resolved = Workload.model_validate({**dict(workload), **update})
    except ValueError as exc:
        raise InputError(f"the workload cannot be built: {exc}") from None
    return Resolved(resolved, served, drafter, inputs)


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


def _max_num_seqs(live: EngineArgs, inputs: dict[str, Input], update: dict[str, Any]) -> None:
    if live.max_num_seqs is None:
        inputs["max_num_seqs"] = Input(
            value=None,
            source=DEFAULT,
            note="not given: vLLM's default (it depends on the build and GPU) is not taken as "
            "a ceiling; memory bounds the batch",
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
    core/registry.py load_model)."""
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
    reads, from the live args or left to vLLM's default."""
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
    }
    table: dict[str, Input] = {}
    for name, note in modelled.items():
        value = getattr(args, name)
        if name == "max_model_len" and value is None:
            value = args.max_model_len_text
        table[name] = Input(
            value=value,
            source=LIVE if value is not None else DEFAULT,
            note=note if value is not None else "not in the args: vLLM's default",
            modelled=name != "enable_prefix_caching",
        )
    return table


def speculative_of(config: Mapping[str, Any] | None) -> SpeculativeConfig | None:
    """A saved speculative config (TunerState.drafter), read leniently: None if unreadable."""
    if not config:
        return None
    try:
        return SpeculativeConfig.of(config)
    except InputError:
        return None
