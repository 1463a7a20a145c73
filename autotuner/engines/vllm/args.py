"""vLLM's command line read into the core's EngineArgs (pure): its flags in both forms and both
spellings, its human-readable lengths, its `--speculative-config` JSON."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from autotuner.core.engine.args import EngineArgs, SpeculativeConfig
from autotuner.engines.commandline import (
    Flag,
    computed,
    engine_tokens,
    find,
    fraction_value,
    integer_value,
    read_json,
    truthy,
)
from autotuner.engines.vllm.flags import FlagNames
from autotuner.errors import ArgsError, InputError


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


def speculative(config: Mapping[str, Any], flag: str | None = None) -> SpeculativeConfig:
    """The operator's `--speculative-config` JSON, as far as the tuner reads it; a malformed
    integer raises ArgsError naming the flag and the key."""
    flag = flag or FlagNames().speculative_config

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
    return SpeculativeConfig(
        method=None if method is None else str(method),
        model=None if model is None else str(model),
        num_speculative_tokens=integer("num_speculative_tokens"),
        enable_adaptive_verification=None if adaptive is None else truthy(str(adaptive)),
        draft_tensor_parallel_size=integer("draft_tensor_parallel_size"),
    )


def speculative_of(config: Mapping[str, Any] | None) -> SpeculativeConfig | None:
    """A saved speculative config (TunerState.drafter), read leniently: None if unreadable."""
    if not config:
        return None
    try:
        return speculative(config)
    except InputError:
        return None


def parse(args: Sequence[str], flags: FlagNames | None = None) -> EngineArgs:
    """Read the flags the cost model needs from a vLLM argument list (both `--x v` and
    `--x=v`, dashes or underscores); a malformed value raises ArgsError naming the flag."""
    flags = flags or FlagNames()
    config = None
    spec = find_any(args, flags.speculative_config)
    if spec is not None:
        name, flag = spec
        if flag.value is None:
            raise ArgsError(f"{name} has no value")
        config = speculative(read_json(flag.value, name), name)
    max_len_text = _text(args, "--max-model-len")
    chunk_text = _text(args, BATCHED_TOKENS)
    return EngineArgs(
        tensor_parallel_size=_integer(args, "--tensor-parallel-size", "-tp", minimum=1),
        gpu_memory_utilization=_fraction(args, "--gpu-memory-utilization"),
        max_num_seqs=_integer(args, "--max-num-seqs", minimum=1),
        max_model_len=_max_model_len(max_len_text),
        max_model_len_text=max_len_text,
        kv_cache_dtype=_text(args, "--kv-cache-dtype"),
        mamba_ssm_cache_dtype=_text(args, flags.mamba_ssm_cache_dtype),
        mamba_cache_dtype=_text(args, "--mamba-cache-dtype"),
        mamba_cache_mode=_text(args, "--mamba-cache-mode"),
        enable_prefix_caching=_switch(args, "--enable-prefix-caching"),
        enforce_eager=_switch(args, "--enforce-eager"),
        speculative=config,
        kv_connector=True if _text(args, "--kv-transfer-config") else None,
        data_parallel_size=_integer(args, "--data-parallel-size", "-dp", minimum=1),
        data_parallel_computed=_computed(args, "--data-parallel-size", "-dp"),
        prefill_chunk_tokens=_batched_tokens(chunk_text),
        prefill_chunk_text=chunk_text,
        chunked_prefill=_switch(args, "--enable-chunked-prefill"),
        performance_mode=_performance_mode(_text(args, "--performance-mode")),
    )


def served_model_id(args: Sequence[str]) -> str | None:
    """The model a vLLM command line serves: `--model X`, else the positional after `serve`
    (past the words a script expands there, `vllm serve $EXTRA_ARGS MODEL`); None where the
    shell or Kubernetes computes it (`--model ${MODEL_ID}`): unknown until the engine starts."""
    hit = find_any(args, "--model")
    if hit is not None and hit[1].value:
        return None if computed(hit[1].value) else hit[1].value
    if "serve" not in args:
        return None
    for word in args[args.index("serve") + 1 :]:
        if word.startswith("-"):
            return None
        if not computed(word):
            return word
    return None


def live_args(
    command: Sequence[str], args: Sequence[str], flags: FlagNames | None = None
) -> EngineArgs:
    """What a container's command and args (or the `sh -c` line in one) tell of the run: the
    one reading of live args for the loop, the wiring and `status`."""
    flags = flags or FlagNames()
    return parse(engine_tokens(command, args, flags.managed), flags)


def _text(args: Sequence[str], *names: str) -> str | None:
    hit = find_any(args, *names)
    if hit is None:
        return None
    name, flag = hit
    if flag.value is None or flag.value == "":
        raise ArgsError(f"{name} has no value")
    return flag.value


def _integer(args: Sequence[str], *names: str, minimum: int) -> int | None:
    return integer_value(_text(args, *names), names[0], minimum=minimum)


def _computed(args: Sequence[str], *names: str) -> bool | None:
    """True where the flag's value is a word the shell computes (`$((A * B))`)."""
    text = _text(args, *names)
    return True if text is not None and computed(text) else None


def _fraction(args: Sequence[str], name: str) -> float | None:
    return fraction_value(_text(args, name), name)


_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)(k|m|g|t|K|M|G|T|Ki|Mi|Gi|Ti)?")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _max_model_len(text: str | None) -> int | None:
    """vLLM's human-readable integer (32768, 32k = 32000, 32K = 32768); `auto` or -1 (vLLM
    fits the length to memory) gives None."""
    if text is None or computed(text) or text.strip().lower() in ("auto", "-1"):
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


BATCHED_TOKENS = "--max-num-batched-tokens"
# vLLM's human_readable_int (vllm/utils/argparse_utils.py:30-74), which reads
# --max-num-batched-tokens (vllm/engine/arg_utils.py:397-410): a number with one k/m/g/t suffix
# (decimal, decimals allowed) or K/M/G/T (binary, whole numbers only), else Python's int().
_SUFFIXED_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
PERFORMANCE_MODES = ("balanced", "interactivity", "throughput")  # vllm/config/vllm.py:441


def human_readable_int(text: str, name: str) -> int:
    """A value vLLM's human_readable_int reads (8192, 8k = 8000, 8K = 8192, 2.5k = 2500);
    ArgsError naming the flag for any other."""
    value = text.strip()
    match = _SUFFIXED_INT.fullmatch(value)
    if match is None:
        try:
            return int(value)
        except ValueError:
            raise ArgsError(f"{name}: not an integer (8192, 8k, 8K): {text!r}") from None
    number, suffix = match.groups()
    if suffix in _DECIMAL:
        return int(float(number) * _DECIMAL[suffix])
    if "." in number:
        raise ArgsError(f"{name}: decimals need a decimal suffix (k, m): {text!r}")
    return int(number) * _BINARY[suffix]


def _batched_tokens(text: str | None) -> int | None:
    """--max-num-batched-tokens (None: not given, or the shell computes it); vLLM's scheduler
    refuses a budget under 1 (vllm/config/scheduler.py:48)."""
    if text is None or computed(text):
        return None
    value = human_readable_int(text, BATCHED_TOKENS)
    if value < 1:
        raise ArgsError(f"{BATCHED_TOKENS}: must be >= 1, got {text!r}")
    return value


def _performance_mode(text: str | None) -> str | None:
    if text is None or computed(text):
        return None
    if text not in PERFORMANCE_MODES:
        raise ArgsError(f"--performance-mode: one of {', '.join(PERFORMANCE_MODES)}, got {text!r}")
    return text


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
    return True if not flag.joined else truthy(flag.value or "")
