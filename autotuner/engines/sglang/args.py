"""SGLang's command line read into the core's EngineArgs (pure): the flags the cost model needs,
and the operator's drafter as a SpeculativeConfig."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from autotuner.core.engine.args import EngineArgs, SpeculativeConfig
from autotuner.engines.commandline import (
    Flag,
    computed,
    engine_tokens,
    find,
    fraction_value,
    integer_value,
)
from autotuner.engines.sglang import flags
from autotuner.errors import ArgsError

# SGLang's algorithm names as the core's methods: NEXTN is EAGLE on the model's own MTP layer
# (speculative_hook.py:109-118), STANDALONE a separate draft model.
_METHODS = {
    "NEXTN": "mtp",
    "EAGLE": "eagle",
    "EAGLE3": "eagle3",
    "STANDALONE": "draft_model",
    "NGRAM": "ngram",
    "DFLASH": "dflash",
    "DSPARK": "dspark",
}
# Without --speculative-num-steps the EAGLE family picks (3, 1, 4) for these models
# (speculative_hook.py:1430-1461), and adaptive starts at the middle candidate, 3 with the
# default tiers (:1408-1413; adaptive_spec_params.py:28-53).
DEFAULT_STEPS = 3


def last(args: Sequence[str], *names: str) -> Flag | None:
    """The last occurrence of any spelling of one flag (argparse keeps the last)."""
    hits = [flag for name in names if (flag := find(args, name)) is not None]
    return max(hits, key=lambda flag: flag.index) if hits else None


def switched(args: Sequence[str], name: str) -> bool:
    """Whether a store_true switch is given (SGLang's bool flags take no value)."""
    return any(arg == name for arg in args)


def text(args: Sequence[str], *names: str) -> str | None:
    flag = last(args, *names)
    if flag is None:
        return None
    if not flag.value:
        raise ArgsError(f"{names[0]} has no value")
    return flag.value


def integer(args: Sequence[str], *names: str, minimum: int) -> int | None:
    return integer_value(text(args, *names), names[0], minimum=minimum)


def speculative(args: Sequence[str]) -> SpeculativeConfig | None:
    """The operator's drafter and K as the core reads them (None: no speculation)."""
    algorithm = text(args, flags.ALGORITHM)
    if algorithm is None:
        return None
    name = algorithm.upper()
    steps = integer(args, flags.NUM_STEPS, minimum=0)
    return SpeculativeConfig(
        method=_METHODS.get(name, name.lower()),
        model=text(args, flags.DRAFT_MODEL, flags.DRAFT_MODEL_ALIAS),
        num_speculative_tokens=DEFAULT_STEPS if steps is None else steps,
        enable_adaptive_verification=switched(args, flags.ADAPTIVE),
    )


def prefill_chunk(args: Sequence[str]) -> tuple[int | None, bool | None]:
    """--chunked-prefill-size: (the budget, whether prompts are chunked). A size of 0 or less
    turns chunking off (managers/scheduler.py:1372-1373; -1 is the documented way)."""
    size = integer(args, flags.CHUNKED_PREFILL_SIZE, minimum=-sys.maxsize)
    if size is None:
        return None, None
    return (size, True) if size > 0 else (None, False)


def attention_data_parallel(args: Sequence[str]) -> int | None:
    """The attention DP groups: --attn-dp-size, else the deprecated --dp-size N with
    --enable-dp-attention (arg_groups/parallel_hook.py:39-60); None: not given."""
    size = integer(args, *flags.ATTN_DP_SIZE, minimum=1)
    if size is None and switched(args, flags.DP_ATTENTION):
        size = integer(args, *flags.DP_SIZE, minimum=1)
    return size


def parse(args: Sequence[str]) -> EngineArgs:
    """Read the flags the cost model needs from an SGLang argument list (`--x v` or `--x=v`);
    a malformed value raises ArgsError naming the flag."""
    chunk, chunked = prefill_chunk(args)
    return EngineArgs(
        tensor_parallel_size=integer(args, "--tp-size", "--tensor-parallel-size", minimum=1),
        gpu_memory_utilization=fraction_value(
            text(args, "--mem-fraction-static"), "--mem-fraction-static"
        ),
        max_num_seqs=integer(args, flags.MAX_RUNNING, minimum=1),
        max_model_len=integer(args, "--context-length", minimum=1),
        max_model_len_text=text(args, "--context-length"),
        kv_cache_dtype=text(args, "--kv-cache-dtype"),
        mamba_ssm_cache_dtype=text(args, flags.SSM_DTYPE),
        enable_prefix_caching=False if switched(args, "--disable-radix-cache") else None,
        enforce_eager=True if switched(args, "--disable-cuda-graph") else None,
        speculative=speculative(args),
        prefill_chunk_tokens=chunk,
        prefill_chunk_text=text(args, flags.CHUNKED_PREFILL_SIZE),
        chunked_prefill=chunked,
        attention_data_parallel=attention_data_parallel(args),
        mixed_prefill=switched(args, flags.MIXED_CHUNK),
    )


def served_model_id(args: Sequence[str]) -> str | None:
    """The model an SGLang command line serves (`--model-path`, or its alias `--model`)."""
    flag = last(args, flags.MODEL, flags.MODEL_ALIAS)
    if flag is None or not flag.value or computed(flag.value):
        return None  # not given, or filled in when the engine starts: unknown here
    return flag.value


def live_args(command: Sequence[str], args: Sequence[str]) -> EngineArgs:
    """What a container's command and args (or the `sh -c` line in one) tell of the run."""
    return parse(engine_tokens(command, args, flags.MANAGED))
