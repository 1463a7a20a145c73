"""The engine as its own arguments say it runs (pure): a vLLM argument list -> EngineArgs.

The one flag finder (`find`) and the JSON reader live here so that the core can read args
without importing an adapter; actuators/flags.py renders with the same parser.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from autotuner.core.model.spec import DrafterKind
from autotuner.errors import ArgsError

SPECULATIVE_CONFIG = "--speculative-config"
_METHOD_KIND = {
    "mtp": DrafterKind.MTP,
    "eagle": DrafterKind.EAGLE,
    "eagle3": DrafterKind.EAGLE,
    "ngram": DrafterKind.NGRAM,
    "ngram_gpu": DrafterKind.NGRAM,
    "suffix": DrafterKind.SUFFIX,
    "draft_model": DrafterKind.DRAFT_MODEL,
}


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
