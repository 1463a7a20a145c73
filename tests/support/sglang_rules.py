"""SGLang 0.5.23's start-up checks on the flags the tuner writes, restated from the wheel
(`pip download --no-deps sglang==0.5.23`; paths under sglang/srt/, lines of that wheel) for
a model of the Gated DeltaNet family (Qwen3.5, Qwen3-Next: a `_MAMBA_RADIX_CACHE_ARCHS` model
with radix cache on). `broken(args)` lists each rule the args break, in SGLang's words."""

from __future__ import annotations

from collections.abc import Sequence

from autotuner.engines.sglang.args import integer, last, switched, text

# Every bool field is a store_true switch (arg_groups/arg_utils.py:393-398): `--x=v` is an error.
SWITCHES = (
    "--enable-linear-replayssm",
    "--enable-linear-replayssm-spec",
    "--speculative-adaptive",
    "--disable-overlap-schedule",
    "--enable-metrics",
    "--disable-radix-cache",
)
RADIX_CHOICES = (
    "auto",
    "no_buffer",
    "extra_buffer",
    "extra_buffer_lazy",
)  # fields/exec_.py:512-519
ADAPTIVE_CANDIDATES = (0, 1, 3, 5, 7)  # speculative/adaptive_spec_params.py:28-53, 142-150


def _strategy(args: Sequence[str]) -> str:
    """The resolved --mamba-radix-cache-strategy: `auto` is extra_buffer while the overlap
    scheduler is on (arg_groups/overrides.py:477-486; Qwen3.5 supports extra_buffer)."""
    written = text(args, "--mamba-radix-cache-strategy") or "auto"
    if written != "auto":
        return written
    return "no_buffer" if switched(args, "--disable-overlap-schedule") else "extra_buffer"


def _replay_rules(args: Sequence[str]) -> list[str]:
    broken = []
    extra_buffer = not switched(args, "--disable-radix-cache") and _strategy(args) in (
        "extra_buffer",
        "extra_buffer_lazy",
    )
    decode = text(args, "--linear-attn-decode-backend") or text(args, "--linear-attn-backend")
    decode = decode or "triton"  # fields/exec_.py:542-555: linear_attn_backend defaults to triton
    if switched(args, "--enable-linear-replayssm"):
        if decode not in ("triton", "helion"):  # arg_groups/attention_hook.py:409-416
            broken.append("--enable-linear-replayssm requires Triton, or Helion for KDA")
        if extra_buffer:  # arg_groups/attention_hook.py:417-423 (mamba_extra_buffer_of,
            # arg_groups/model_override_base.py:260-265)
            broken.append(
                "--enable-linear-replayssm requires --mamba-radix-cache-strategy no_buffer"
            )
        if (integer(args, "--linear-replayssm-cache-len", minimum=0) or 16) < 1:  # :433-437
            broken.append("--linear-replayssm-cache-len must be >= 1")
    if switched(args, "--enable-linear-replayssm-spec"):
        topk = integer(args, "--speculative-eagle-topk", minimum=0)
        if topk not in (None, 1):  # arg_groups/attention_hook.py:451-458
            broken.append("--enable-linear-replayssm-spec requires a linear draft chain")
        if decode not in ("triton", "flashinfer"):  # :459-466
            broken.append("--enable-linear-replayssm-spec requires triton or flashinfer")
        if switched(args, "--enable-linear-replayssm"):  # :495-501
            broken.append(
                "--enable-linear-replayssm-spec and --enable-linear-replayssm are "
                "mutually exclusive"
            )
    if not switched(args, "--disable-radix-cache") and not extra_buffer:
        # model_hook.py:1076 -> arg_groups/mamba_hook.py:156-163 (validate_mamba_no_buffer)
        if integer(args, "--page-size", minimum=0) not in (1, None):
            broken.append("no_buffer only supports page_size=1.")
        if not switched(args, "--disable-overlap-schedule"):
            broken.append("no_buffer do not support overlap schedule.")
    return broken


def _speculative_rules(args: Sequence[str]) -> list[str]:
    if last(args, "--speculative-algorithm") is None:
        return []
    broken = []
    steps = integer(args, "--speculative-num-steps", minimum=0)
    adaptive = switched(args, "--speculative-adaptive")
    if (
        not adaptive
        and steps is None
        and (  # arg_groups/speculative_hook.py:1159-1163
            last(args, "--speculative-eagle-topk") or last(args, "--speculative-num-draft-tokens")
        )
    ):
        broken.append("assert speculative_eagle_topk is None and num_draft_tokens is None")
    if adaptive and (3 if steps is None else steps) not in ADAPTIVE_CANDIDATES:
        broken.append("--speculative-num-steps is not in the adaptive config candidate_steps")
        # arg_groups/speculative_hook.py:1415-1421
    if last(args, "--max-running-requests") is None:  # speculative_hook.py:1086-1094: not a
        # refusal, a silent cap at 48 running requests the tuner must never cause
        broken.append("Max running requests is reset to 48 for speculative decoding.")
    topk = integer(args, "--speculative-eagle-topk", minimum=0)
    drafts = integer(args, "--speculative-num-draft-tokens", minimum=0)
    if topk == 1 and steps is not None and drafts != steps + 1:  # :1255-1266, adjusted: the
        # tuner writes what SGLang would run
        broken.append("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1")
    return broken


def broken(args: Sequence[str]) -> list[str]:
    """Every rule the args break (empty: SGLang 0.5.23 starts with them)."""
    found = [
        f"{a}: a store_true switch takes no value"
        for a in args
        if a.split("=", 1)[0] in SWITCHES and "=" in a
    ]
    strategy = text(args, "--mamba-radix-cache-strategy")
    if strategy is not None and strategy not in RADIX_CHOICES:
        found.append(f"--mamba-radix-cache-strategy: invalid choice {strategy!r}")
    return found + _replay_rules(args) + _speculative_rules(args)
