"""A Setup written into SGLang's args and read back from them (pure).

Only the managed flags change; every other argument keeps its bytes and its position. K is
`--speculative-num-steps` with the linear chain (`--speculative-eagle-topk 1`, draft tokens
K + 1, as SGLang forces at topk 1); the drafter (`--speculative-algorithm`, the draft model and
every other `--speculative-*` flag) is the operator's, kept as written and put back from the
saved copy when speculation returns: the tuner never invents one. Replay alone is
`--enable-linear-replayssm` with its companions (radix cache strategy no_buffer, overlap
scheduler off); replay under speculation is `--enable-linear-replayssm-spec`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autotuner.core.engine.builds import Companion
from autotuner.core.types import Setup, SetupKind
from autotuner.engines import companion_record
from autotuner.engines.commandline import (
    Flag,
    engine_tokens,
    find,
    remove,
    set_value,
)
from autotuner.engines.sglang import flags
from autotuner.engines.sglang.args import integer, last, speculative, switched, text
from autotuner.errors import ArgsError, EngineRuleError

DEFAULT_REPLAY_LEN = 16  # linear_replayssm_cache_len (arg_groups/fields/exec_.py:582-585)
CONTAINER_HINT = "sglang"  # among several containers, the engine's is the one named so
DRAFTER_KEY = "args"  # the saved drafter: {"args": the operator's --speculative-* tokens}
# Flags of speculation the tuner writes; every other --speculative-* flag is the drafter's.
_WRITTEN = frozenset({flags.NUM_STEPS, flags.EAGLE_TOPK, flags.NUM_DRAFT_TOKENS, flags.ADAPTIVE})
# The default adaptive tiers (adaptive_spec_params.py:28-53): from each batch up, the candidate
# steps; --speculative-num-steps must be one of their union (speculative_hook.py:1415-1421).
ADAPTIVE_TIERS = {1: (1, 3, 5, 7), 8: (0, 1, 3), 32: (0, 1), 64: (0,)}
ADAPTIVE_STEPS = frozenset(k for steps in ADAPTIVE_TIERS.values() for k in steps)
# Adaptive runs only for the EAGLE family at topk 1; elsewhere SGLang warns and runs static
# K (adaptive_spec_params.py:56-100, speculative_hook.py:1374-1389).
ADAPTIVE_ALGORITHMS = frozenset({"EAGLE", "EAGLE3", "NEXTN"})
# no_buffer refuses the overlap scheduler (mamba_hook.py:156-163) and replay refuses the
# extra_buffer strategy `auto` usually resolves to (attention_hook.py:417-423).
REPLAY_COMPANIONS = (Companion.MAMBA_RADIX_NO_BUFFER, Companion.OVERLAP_SCHEDULE_OFF)


def parse_setup(args: Sequence[str]) -> Setup:
    """The Setup the args configure."""
    spec = speculative(args)
    k = spec.num_speculative_tokens or 0 if spec is not None else 0
    adaptive = bool(spec and spec.enable_adaptive_verification) and k > 0
    length = integer(args, flags.REPLAY_LEN, minimum=1) or DEFAULT_REPLAY_LEN
    replays = switched(args, flags.REPLAY) or (switched(args, flags.REPLAY_SPEC) and k > 0)
    try:
        return Setup(spec_tokens=k, replay_window=length if replays else 0, adaptive=adaptive)
    except ValueError as exc:
        raise ArgsError(f"the args configure an invalid setup: {exc}") from None


def _speculative_spans(args: Sequence[str]) -> list[tuple[int, int]]:
    """(start, end) of each --speculative-* flag with its value (a switch: its own token)."""
    spans = []
    for i, arg in enumerate(args):
        if not arg.startswith(flags.SPECULATIVE_PREFIX):
            continue
        takes_value = "=" not in arg and arg not in flags.SWITCHES
        has_value = takes_value and i + 1 < len(args) and not args[i + 1].startswith("-")
        spans.append((i, i + 2 if has_value else i + 1))
    return spans


def drafter_tokens(args: Sequence[str]) -> list[str]:
    """The operator's drafter: every --speculative-* flag but those the tuner writes."""
    out: list[str] = []
    for start, end in _speculative_spans(args):
        if args[start].split("=", 1)[0] not in _WRITTEN:
            out.extend(args[start:end])
    return out


def speculative_config(args: Sequence[str]) -> dict[str, Any] | None:
    """The operator's drafter in the args, if any (kept to turn speculation back on)."""
    return {DRAFTER_KEY: drafter_tokens(args)} if last(args, flags.ALGORITHM) else None


def saved_drafter(saved: dict[str, Any] | None) -> list[str]:
    """The drafter tokens a saved config holds (ArgsError if it is not one of SGLang's)."""
    if not saved:
        return []
    tokens = saved.get(DRAFTER_KEY)
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise ArgsError(f"the saved drafter is not SGLang's ({DRAFTER_KEY}: [tokens]): {saved}")
    return list(tokens)


def _without_speculation(args: Sequence[str]) -> list[str]:
    drop = {i for start, end in _speculative_spans(args) for i in range(start, end)}
    return [arg for i, arg in enumerate(args) if i not in drop]


def _switch(args: list[str], name: str, on: bool) -> list[str]:
    """A store_true switch given once (on) or not at all (off)."""
    if on:
        return args if name in args else [*args, name]
    return [arg for arg in args if arg != name]


def _set(args: list[str], name: str, value: str) -> list[str]:
    return set_value(args, find(args, name), name, value)


def _unset(args: list[str], name: str) -> list[str]:
    flag = find(args, name)
    return remove(args, flag) if flag is not None else args


def _render_spec(
    args: list[str], setup: Setup, saved: dict[str, Any] | None, *, enforce_rules: bool
) -> list[str]:
    if setup.spec_tokens == 0:
        return _without_speculation(args)
    out = args
    if last(out, flags.ALGORITHM) is None:
        drafter = saved_drafter(saved)
        if not any(t.split("=", 1)[0] == flags.ALGORITHM for t in drafter):
            raise ArgsError(
                "speculation needs the operator's drafter (a --speculative-algorithm); none is "
                "in the args or saved: the tuner never invents one"
            )
        out = [*out, *drafter]
    if enforce_rules and last(out, flags.MAX_RUNNING) is None:
        raise EngineRuleError(
            "SGLang caps a speculating server at 48 running requests unless "
            "--max-running-requests is given (speculative_hook.py:1086-1094): set it in the "
            "operator's args before the tuner turns speculation on"
        )
    k = setup.spec_tokens
    if setup.adaptive and enforce_rules:
        _check_adaptive(out, k)
    out = _set(out, flags.NUM_STEPS, str(k))
    out = _set(out, flags.EAGLE_TOPK, "1")
    out = _set(out, flags.NUM_DRAFT_TOKENS, str(k + 1))
    return _switch(out, flags.ADAPTIVE, setup.adaptive)


def _check_adaptive(args: Sequence[str], k: int) -> None:
    algorithm = (text(args, flags.ALGORITHM) or "").upper()
    if algorithm not in ADAPTIVE_ALGORITHMS:
        raise EngineRuleError(
            f"--speculative-adaptive runs only for {', '.join(sorted(ADAPTIVE_ALGORITHMS))}; "
            f"with {algorithm} SGLang falls back to a static K (speculative_hook.py:1374-1389)"
        )
    if last(args, flags.ADAPTIVE_CONFIG) is None and k not in ADAPTIVE_STEPS:
        raise EngineRuleError(
            f"--speculative-num-steps={k} is not among the default adaptive candidate steps "
            f"{sorted(ADAPTIVE_STEPS)} (speculative_hook.py:1415-1421)"
        )


def _render_replay(args: list[str], setup: Setup, *, enforce_rules: bool) -> list[str]:
    kind = setup.kind
    out = _switch(args, flags.REPLAY, kind is SetupKind.REPLAY)
    out = _switch(out, flags.REPLAY_SPEC, kind is SetupKind.REPLAY_SPEC)
    if not setup.replay_window:
        return _unset(out, flags.REPLAY_LEN)
    page = integer(out, flags.PAGE_SIZE, minimum=1)
    if enforce_rules and kind is SetupKind.REPLAY and page not in (None, 1):
        raise EngineRuleError(
            f"replay needs the no_buffer radix cache, which supports only --page-size 1 "
            f"(mamba_hook.py:157); the args set {page}"
        )
    if enforce_rules:
        _check_replay_backend(out, kind)
    return _set(out, flags.REPLAY_LEN, str(setup.replay_window))


# The linear-attention decode backends each replay runs on (arg_groups/attention_hook.py:409-438
# for replay alone: triton, or helion for KDA; :450-523 under speculation: triton, flashinfer).
REPLAY_BACKENDS = {
    SetupKind.REPLAY: ("triton", "helion"),
    SetupKind.REPLAY_SPEC: ("triton", "flashinfer"),
}


def _check_replay_backend(args: Sequence[str], kind: SetupKind) -> None:
    """Refuse replay on a decode backend SGLang refuses it on (unset: triton, the default)."""
    backend = text(args, flags.LINEAR_ATTN_DECODE_BACKEND) or text(args, flags.LINEAR_ATTN_BACKEND)
    allowed = REPLAY_BACKENDS[kind]
    if backend is not None and backend not in allowed:
        raise EngineRuleError(
            f"{kind.value} runs on the {' or '.join(allowed)} linear-attn decode backend "
            f"(attention_hook.py:409-523); the args set {backend}"
        )


def render(
    args: Sequence[str],
    setup: Setup,
    *,
    saved_speculative_config: dict[str, Any] | None = None,
    allow_low_precision_replay: bool = False,
    enforce_rules: bool = True,
) -> list[str]:
    """New args that configure `setup` (with --enable-metrics, which the tuner reads);
    untouched args keep their bytes and order. A setup SGLang would refuse at start on these
    args raises EngineRuleError naming the rule (`enforce_rules=False`: written anyway)."""
    out = list(args)
    if setup == parse_setup(out):
        return out
    if setup.schedule:
        raise ArgsError("SGLang has no per-batch K schedule (its tiers are --speculative-adaptive)")
    dtype = text(out, flags.SSM_DTYPE)
    if setup.replay_window and not allow_low_precision_replay and dtype not in (None, "float32"):
        raise EngineRuleError(
            f"refusing replay with {flags.SSM_DTYPE} {dtype}: a low-precision SSM state drifts "
            "under replay",
            override="--allow-low-precision-replay",
        )
    out = _render_spec(out, setup, saved_speculative_config, enforce_rules=enforce_rules)
    out = _render_replay(out, setup, enforce_rules=enforce_rules)
    return _switch(out, flags.METRICS, True)


@dataclass(frozen=True)
class SglangSpelling:
    """Where SGLang's companion flags stand in its args, and how they are written."""

    def occurrence(
        self, args: Sequence[str], companion: Companion
    ) -> tuple[Flag, list[str]] | None:
        if companion is Companion.MAMBA_RADIX_NO_BUFFER:
            return companion_record.with_value(args, find(args, flags.RADIX_STRATEGY))
        if companion is Companion.OVERLAP_SCHEDULE_OFF:
            where = [i for i, arg in enumerate(args) if arg == flags.OVERLAP_OFF]
            return (Flag(where[-1], False, None, None), [flags.OVERLAP_OFF]) if where else None
        raise ArgsError(f"{companion.value} is not an SGLang companion")

    def wanted(self, companion: Companion) -> list[str]:
        if companion is Companion.MAMBA_RADIX_NO_BUFFER:
            return [flags.RADIX_STRATEGY, "no_buffer"]
        if companion is Companion.OVERLAP_SCHEDULE_OFF:
            return [flags.OVERLAP_OFF]
        raise ArgsError(f"{companion.value} is not an SGLang companion")


SPELLING = SglangSpelling()


def companions_for(setup: Setup, companions: Sequence[Companion]) -> tuple[Companion, ...]:
    """The companions to write: the row's, and always replay's own (SGLang refuses replay
    without them whatever preset the operator declared)."""
    needed = [c for c in companions if c in REPLAY_COMPANIONS]
    if setup.kind is SetupKind.REPLAY:
        needed.extend(c for c in REPLAY_COMPANIONS if c not in needed)
    return tuple(needed)


def setup_flags(setup: Setup, companions: Sequence[Companion]) -> list[str]:
    """A setup's flags as `render` writes them beside the operator's drafter (for reports)."""
    own = []
    k = setup.spec_tokens
    if k:
        speculation = f"{flags.NUM_STEPS} {k} {flags.EAGLE_TOPK} 1 {flags.NUM_DRAFT_TOKENS} {k + 1}"
        own.append(speculation + (f" {flags.ADAPTIVE}" if setup.adaptive else ""))
    if setup.replay_window:
        switch = flags.REPLAY_SPEC if k else flags.REPLAY
        own.append(f"{switch} {flags.REPLAY_LEN} {setup.replay_window}")
    wanted = companions_for(setup, companions)
    return own + [" ".join(SPELLING.wanted(c)) for c in wanted]


def sglang_tokens(command: Sequence[str], args: Sequence[str]) -> list[str]:
    """The SGLang argument list a container runs (command, args or a `sh -c` line)."""
    return engine_tokens(command, args, flags.MANAGED)
