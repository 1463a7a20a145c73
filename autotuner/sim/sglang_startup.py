"""SGLang 0.5.23 at start-up, as the simulated SGLang follows it: the command line read as its
argparse reads it, then resolved and validated in the order of its resolution pipeline
(`sglang/srt/arg_groups/pipeline.py` `run_resolution_pipeline`): the Mamba radix cache (model
hook), the linear-attention backend (ReplaySSM), then speculative decoding. Arguments SGLang
refuses raise `StartupError` with SGLang's own message; what it resolves silently (the draft
tokens, the 48-request cap of speculation, adaptive speculation falling back to static) is
resolved the same way.

Every file:line below is of the 0.5.23 wheel (`pip download --no-deps sglang==0.5.23`), relative
to `sglang/srt/`. Only the rules a tuner's flags can meet are simulated: no PD disaggregation,
no platform (SM100, ROCm) branches, no attention-DP.
"""

from __future__ import annotations

import argparse
import math
import shlex
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from autotuner.core.model.spec import ModelSpec, SsmKind
from autotuner.core.types import MAX_BATCH, ScheduleBand, Setup
from autotuner.engines.sglang.setup import ADAPTIVE_TIERS  # the tiers as read from the wheel

SGLANG_VERSION = "0.5.23"


class StartupError(Exception):
    """SGLang would not start with these arguments (the message is SGLang's own)."""


@dataclass(frozen=True)
class ServerArgs:
    """The ServerArgs fields the simulation reads, by SGLang's names and with its defaults
    (arg_groups/fields/: model.py:51, spec.py:31-69 and :237, exec_.py:490-595, memory.py:64,
    schedule.py:31/:143/:193, observability.py:70/:136, parallel.py:45, serving.py:168)."""

    model_path: str = ""
    served_model_name: str | None = None
    tp_size: int = 1
    max_running_requests: int | None = None
    speculative_algorithm: str | None = None
    speculative_draft_model_path: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    speculative_adaptive: bool = False
    enable_linear_replayssm: bool = False
    linear_replayssm_cache_len: int = 16
    enable_linear_replayssm_spec: bool = False
    mamba_radix_cache_strategy: str = "auto"
    mamba_ssm_dtype: str | None = None
    linear_attn_backend: str = "triton"
    linear_attn_decode_backend: str | None = None
    disable_radix_cache: bool = False
    disable_overlap_schedule: bool = False
    page_size: int | None = None
    enable_metrics: bool = False
    decode_log_interval: int = 40

    def fields(self) -> dict[str, Any]:
        return asdict(self)


# A flag is "--" + the field name with "-" (arg_groups/arg_utils.py:288-290); bool fields are
# store_true (:393-398), so there are no --no-... forms. Aliases: model.py:55, spec.py:40,
# parallel.py:49.
ALIASES = {
    "model_path": ["--model"],
    "speculative_draft_model_path": ["--speculative-draft-model"],
    "tp_size": ["--tensor-parallel-size"],
}
CHOICES = {
    "mamba_radix_cache_strategy": ["auto", "no_buffer", "extra_buffer", "extra_buffer_lazy"],
    "mamba_ssm_dtype": ["float32", "bfloat16", "float16"],
}
INTEGERS = {
    "tp_size",
    "max_running_requests",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "linear_replayssm_cache_len",
    "page_size",
    "decode_log_interval",
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sglang.launch_server", exit_on_error=False)
    for name, default in ServerArgs().fields().items():
        flags = ["--" + name.replace("_", "-"), *ALIASES.get(name, [])]
        if isinstance(default, bool):
            parser.add_argument(*flags, dest=name, action="store_true")
        else:
            kind = int if name in INTEGERS else str
            parser.add_argument(*flags, dest=name, type=kind, choices=CHOICES.get(name))
    return parser


def read_args(tokens: Sequence[str]) -> ServerArgs:
    """The fields a command line sets (flags the simulation does not read are ignored); a
    value argparse refuses (a bad choice, a non-integer) is a refusal."""
    try:
        parsed, _ = _parser().parse_known_args(list(tokens))
    except argparse.ArgumentError as exc:
        raise StartupError(f"sglang.launch_server: error: {exc}") from None
    given = {k: v for k, v in vars(parsed).items() if v is not None and v is not False}
    return replace(ServerArgs(), **given)


@dataclass(frozen=True)
class Started:
    """A server that came up: its resolved arguments and what it runs."""

    args: ServerArgs
    setup: Setup  # the speeds it runs at (the truth's setup)
    max_running: float  # requests it runs at once at most (the rest queue)
    launch_command: str  # what it was asked for (`/server_info`'s "launch_command")


def start(tokens: Sequence[str], model: ModelSpec) -> Started:
    """SGLang's start-up with this command line for this model, or `StartupError`."""
    args = _mamba_radix_cache(read_args(tokens), model)
    args = _linear_attention(args)
    args = _speculation(args)
    cap = float(args.max_running_requests or math.inf)
    return Started(args, running_setup(args, model), cap, shlex.join(tokens))


def _mamba_radix_cache(args: ServerArgs, model: ModelSpec) -> ServerArgs:
    """model_hook.py:1048-1076 `handle_mamba_radix_cache`: the `auto` strategy resolved
    (overrides.py:453-487: `extra_buffer` when the overlap scheduler is on or pages are larger
    than one token, for the hybrids that support it with the Triton linear-attention backend,
    overrides.py:400-430 and :440-450; else `no_buffer`, turning the overlap scheduler off),
    then `no_buffer` validated (mamba_hook.py:156-163) or `extra_buffer` (mamba_hook.py:115-119).
    Every hybrid the registry holds is in `_MAMBA_RADIX_CACHE_ARCHS` (overrides.py:369-394)."""
    if not model.is_hybrid or args.disable_radix_cache:
        return args
    strategy, overlap_off = args.mamba_radix_cache_strategy, args.disable_overlap_schedule
    extra_supported = args.linear_attn_backend == "triton"
    if strategy == "auto":
        wants = not overlap_off or (args.page_size or 1) > 1
        strategy = "extra_buffer" if wants and extra_supported else "no_buffer"
        overlap_off = overlap_off or strategy == "no_buffer"
    if strategy in ("extra_buffer", "extra_buffer_lazy"):
        if not extra_supported:
            raise StartupError(
                f"AssertionError: extra_buffer is not supported for {model.architecture}; "
                "use no_buffer."
            )
    else:
        if args.page_size not in (1, None):
            raise StartupError("AssertionError: no_buffer only supports page_size=1.")
        if not overlap_off:
            raise StartupError(
                "AssertionError: no_buffer do not support overlap schedule. Try to set "
                "disable_overlap_schedule=True."
            )
    return replace(args, mamba_radix_cache_strategy=strategy, disable_overlap_schedule=overlap_off)


def _linear_attention(args: ServerArgs) -> ServerArgs:
    """arg_groups/attention_hook.py:409-438 (`--enable-linear-replayssm`) and :450-523
    (`--enable-linear-replayssm-spec`), in `handle_linear_attn_backend`."""
    decode = args.linear_attn_decode_backend or args.linear_attn_backend
    extra_buffer = not args.disable_radix_cache and args.mamba_radix_cache_strategy in (
        "extra_buffer",
        "extra_buffer_lazy",
    )  # model_override_base.py:260-265 `mamba_extra_buffer_of`
    if args.enable_linear_replayssm:
        if decode not in ("triton", "helion"):
            raise StartupError(
                "--enable-linear-replayssm requires Triton, or Helion for KDA, as the "
                f"linear-attn decode backend; got --linear-attn-decode-backend={decode!r}."
            )
        if extra_buffer:
            raise StartupError(
                "--enable-linear-replayssm requires --mamba-radix-cache-strategy no_buffer "
                "(the default); the extra_buffer ping-pong donation path is not yet supported "
                "(follow-up). Got "
                f"--mamba-radix-cache-strategy={args.mamba_radix_cache_strategy!r}."
            )
        if args.linear_replayssm_cache_len < 1:
            raise StartupError(
                f"--linear-replayssm-cache-len must be >= 1, got {args.linear_replayssm_cache_len}."
            )
    if not args.enable_linear_replayssm_spec:
        return args
    if args.speculative_eagle_topk not in (None, 1):
        raise StartupError(
            "--enable-linear-replayssm-spec requires a linear draft chain "
            "(--speculative-eagle-topk in {None, 1}); the chunked verify kernel uses a "
            "strictly-lower causal mask and is invalid for EAGLE tree verify. Got "
            f"--speculative-eagle-topk={args.speculative_eagle_topk!r}."
        )
    if decode not in ("triton", "flashinfer"):
        raise StartupError(
            "--enable-linear-replayssm-spec requires the triton or flashinfer linear-attn "
            f"decode backend, got --linear-attn-decode-backend={decode!r}."
        )
    if args.enable_linear_replayssm:
        raise StartupError(
            "--enable-linear-replayssm-spec and --enable-linear-replayssm are mutually "
            "exclusive: they share the ring storage but drive it with incompatible cursor "
            "protocols (per-decode-forward vs per-verify-commit advance)."
        )
    return replace(args, mamba_ssm_dtype=args.mamba_ssm_dtype or "float32")


# speculative/spec_info.py:36-47 and the NEXTN alias (:60-61).
ALGORITHMS = {"DFLASH", "UNO", "DSPARK", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "STANDALONE"}
ALGORITHMS |= {"NGRAM", "NEXTN"}
SPECULATION_CAP = 48  # speculative_hook.py:1086-1094


def _speculation(args: ServerArgs) -> ServerArgs:
    """arg_groups/speculative_hook.py `handle_speculative_decoding` (:121-264) and the EAGLE
    family's handler (:1072-1266)."""
    if args.speculative_algorithm is None:
        return args
    name = args.speculative_algorithm.upper()  # :139-143
    if name not in ALGORITHMS:
        raise StartupError(f"Unknown speculative algorithm name: {args.speculative_algorithm}")
    name = "EAGLE" if name == "NEXTN" else name  # :109-118
    args = replace(args, speculative_algorithm=name)
    if args.max_running_requests is None:
        # "Max running requests is reset to 48 for speculative decoding."
        args = replace(args, max_running_requests=SPECULATION_CAP)
    if args.speculative_adaptive:
        args = _adaptive(args)
    if not args.speculative_adaptive and args.speculative_num_steps is None:
        if args.speculative_eagle_topk is not None or args.speculative_num_draft_tokens:
            raise StartupError("AssertionError")  # :1159-1163, an assert without a message
        # :1165-1174, `_auto_choose_speculative_params` (:1430-1461): (3, 1, 4) for these models
        args = replace(
            args, speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4
        )
    if name in ("EAGLE", "EAGLE3", "STANDALONE") and args.speculative_eagle_topk is None:
        # Steps given without a topk: the EAGLE family's `speculative_eagle_topk > 1` checks
        # (:1274-1276, before any default is declared) compare None with 1.
        raise StartupError("TypeError: '>' not supported between instances of 'NoneType' and 'int'")
    steps = args.speculative_num_steps or 0
    if args.speculative_eagle_topk == 1 and args.speculative_num_draft_tokens != steps + 1:
        args = replace(args, speculative_num_draft_tokens=steps + 1)  # :1255-1266
    return args


def _adaptive(args: ServerArgs) -> ServerArgs:
    """`_maybe_disable_adaptive` (:1374-1389: only EAGLE/EAGLE3 with topk 1, else a warning
    and static parameters, adaptive_spec_params.py:56-100), then
    `_init_adaptive_speculative_params` (:1392-1427)."""
    topk = args.speculative_eagle_topk
    if args.speculative_algorithm not in ("EAGLE", "EAGLE3") or topk not in (None, 1):
        return replace(args, speculative_adaptive=False)
    candidates = sorted({k for steps in ADAPTIVE_TIERS.values() for k in steps})
    steps = args.speculative_num_steps
    if steps is None:
        steps = candidates[len(candidates) // 2]
    if steps not in candidates:
        raise StartupError(
            f"--speculative-num-steps={steps} is not in the adaptive config candidate_steps "
            f"{candidates}. Pass one of those values."
        )
    return replace(
        args,
        speculative_eagle_topk=1,
        speculative_num_steps=steps,
        speculative_num_draft_tokens=steps + 1,
    )


def running_setup(args: ServerArgs, model: ModelSpec) -> Setup:
    """The setup whose speeds a started server runs at. The ReplaySSM rings are consumed only
    by the Gated DeltaNet and KDA backends (layers/attention/linear/gdn_backend.py,
    kda_backend.py): on a Mamba-2 model the flags start a server that runs as without them.
    Replay alone under speculation (the decode-forward ring; verify forwards take the recurrent
    path) runs as speculation alone."""
    k = (args.speculative_num_steps or 0) if args.speculative_algorithm else 0
    gdn = model.ssm is not None and model.ssm.kind is SsmKind.GATED_DELTANET
    window = 0
    if gdn and k and args.enable_linear_replayssm_spec:
        window = k + 1  # as_run: the draft maximum
    elif gdn and not k and args.enable_linear_replayssm and args.linear_replayssm_cache_len > 1:
        window = args.linear_replayssm_cache_len
    adaptive = bool(k) and args.speculative_adaptive
    return as_run(Setup(spec_tokens=k, replay_window=window, adaptive=adaptive))


def as_run(setup: Setup) -> Setup:
    """How SGLang runs a setup: replay with speculation verifies through a window of the draft
    maximum on Gated DeltaNet (exec_.py:586-591: K + 1 whatever `--linear-replayssm-cache-len`
    says), and `--speculative-adaptive` runs its batch tiers."""
    k = setup.spec_tokens
    window = k + 1 if k and setup.replay_window else setup.replay_window
    schedule = adaptive_schedule(k) if setup.adaptive else setup.schedule
    return Setup(spec_tokens=k, replay_window=window, schedule=schedule)


def run_at(setup: Setup, batch: float) -> Setup:
    """The static setup SGLang runs at this batch (`as_run` at the batch's K): a step that
    drafts nothing (a tier at K = 0) decodes without the verify ring, as plain decoding."""
    run = as_run(setup)
    k = int(run.spec_tokens_at([max(round(batch), 1)])[0])
    if not setup.spec_tokens:
        return run
    return Setup(spec_tokens=k, replay_window=k + 1 if k and run.replay_window else 0)


def adaptive_schedule(k: int) -> tuple[ScheduleBand, ...]:
    """`--speculative-adaptive`'s tiers as a K schedule: each tier (a batch routed to the
    largest tier key at or below it, adaptive_spec_params.py:341-358) at its largest candidate
    not above the K started with. Not simulated: the EMA that moves K inside a tier
    (:160-263) and the padding of a batch to its CUDA-graph size."""
    keys = sorted(ADAPTIVE_TIERS)
    ends = [*(start - 1 for start in keys[1:]), MAX_BATCH]
    return tuple(
        ScheduleBand(
            start_batch=start,
            end_batch=end,
            spec_tokens=max((c for c in ADAPTIVE_TIERS[start] if c <= k), default=0),
        )
        for start, end in zip(keys, ends, strict=True)
    )
