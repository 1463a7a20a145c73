"""A Setup written into vLLM's args and read back from them (pure).

Only the managed flags change; every other argument keeps its bytes and its position. Values
written come from the Setup (typed settings and the policy), never from outside text: the
operator's own `--speculative-config` fields (method, draft model, ...) are kept as they are.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from autotuner.core.types import ScheduleBand, Setup
from autotuner.engines.commandline import (
    Flag,
    edit_shell,
    engine_tokens,
    find,
    read_json,
    remove,
    set_value,
    shell_tokens,
)
from autotuner.engines.vllm.args import speculative
from autotuner.engines.vllm.flags import FlagNames
from autotuner.errors import ArgsError, EngineRuleError

SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
K_KEY = "num_speculative_tokens"
ADAPTIVE_KEY = "enable_adaptive_verification"
DEFAULT_REPLAY_WINDOW = 16
CONTAINER_HINT = "vllm"  # among several containers, the engine's is the one named so


def parse_setup(args: Sequence[str], names: FlagNames | None = None) -> Setup:
    """The Setup the args configure."""
    names = names or FlagNames()
    spec = find(args, names.speculative_config)
    k, adaptive = 0, False
    schedule: tuple[ScheduleBand, ...] = ()
    if spec is not None:
        if spec.value is None:
            raise ArgsError(f"{names.speculative_config} has no value")
        config = read_json(spec.value, names.speculative_config)
        k = int(config.get(K_KEY, 0) or 0)
        adaptive = bool(speculative(config, names.speculative_config).enable_adaptive_verification)
        schedule = _schedule(config.get(SCHEDULE_KEY) or [])
    window = 0
    replay = find(args, names.use_replayssm)
    if replay is not None and _switched_on(replay):
        length = find(args, names.replayssm_buffer_len)
        window = int(length.value) if length and length.value else DEFAULT_REPLAY_WINDOW
    try:
        return Setup(
            spec_tokens=k, schedule=schedule, replay_window=window, adaptive=adaptive and k > 0
        )
    except ValueError as exc:
        raise ArgsError(f"the args configure an invalid setup: {exc}") from None


def _schedule(bands: Any) -> tuple[ScheduleBand, ...]:
    try:
        return tuple(
            ScheduleBand(start_batch=int(a), end_batch=int(b), spec_tokens=int(c))
            for a, b, c in bands
        )
    except (TypeError, ValueError) as exc:
        raise ArgsError(f"{SCHEDULE_KEY}: cannot read {bands!r} ({exc})") from None


def _switched_on(flag: Flag) -> bool:
    if not flag.joined:
        return True  # a bare switch (a following value would belong to another flag)
    return (flag.value or "").lower() not in ("false", "0", "no")


def speculative_config(
    args: Sequence[str], names: FlagNames | None = None
) -> dict[str, Any] | None:
    """The operator's speculative config in the args, if any (kept to turn speculation back on)."""
    names = names or FlagNames()
    spec = find(args, names.speculative_config)
    return read_json(spec.value, names.speculative_config) if spec and spec.value else None


def render(
    args: Sequence[str],
    setup: Setup,
    *,
    names: FlagNames | None = None,
    saved_speculative_config: dict[str, Any] | None = None,
    allow_low_precision_replay: bool = False,
    enforce_rules: bool = True,  # unused: vLLM's start-up rules are all in the build table
) -> list[str]:
    """New args that configure `setup`; untouched args keep their bytes and order.

    Turning speculation on needs the operator's drafter: the config in the args, or the one
    saved when the tuner turned speculation off. The tuner never invents a drafter.
    """
    names = names or FlagNames()
    out = list(args)
    if setup == parse_setup(out, names):
        return out
    if setup.replay_window and not allow_low_precision_replay:
        dtype = find(out, names.mamba_ssm_cache_dtype)
        if dtype and dtype.value and dtype.value not in ("float32", "auto"):
            raise EngineRuleError(
                f"refusing replay with {names.mamba_ssm_cache_dtype} {dtype.value}: a "
                "low-precision SSM state drifts under replay",
                override="--allow-low-precision-replay",
            )
    out = _render_spec(out, setup, names, saved_speculative_config)
    return _render_replay(out, setup, names)


def _render_spec(
    args: list[str], setup: Setup, names: FlagNames, saved: dict[str, Any] | None
) -> list[str]:
    spec = find(args, names.speculative_config)
    if setup.spec_tokens == 0:
        return remove(args, spec) if spec else args
    current = read_json(spec.value, names.speculative_config) if spec and spec.value else None
    base = current or saved
    if not base or not (base.get("method") or base.get("model")):
        raise ArgsError(
            "speculation needs the operator's drafter (a --speculative-config with a method); "
            "none is in the args or saved: the tuner never invents one"
        )
    config = dict(base)
    config[K_KEY] = setup.spec_tokens
    if setup.schedule:
        config[SCHEDULE_KEY] = [[b.start_batch, b.end_batch, b.spec_tokens] for b in setup.schedule]
    else:
        config.pop(SCHEDULE_KEY, None)
    if setup.adaptive:
        config[ADAPTIVE_KEY] = True
    else:
        config.pop(ADAPTIVE_KEY, None)
    value = json.dumps(config, separators=(",", ":"))
    return set_value(args, spec, names.speculative_config, value)


def _render_replay(args: list[str], setup: Setup, names: FlagNames) -> list[str]:
    out = args
    switch = find(out, names.use_replayssm)
    if not setup.replay_window:
        if switch:
            out = remove(out, switch, bare=not switch.joined)
        length = find(out, names.replayssm_buffer_len)
        return remove(out, length) if length else out
    if switch is None:
        out = [*out, names.use_replayssm]
    elif switch.joined and not _switched_on(switch):
        out = list(out)
        out[switch.index] = names.use_replayssm
    length = find(out, names.replayssm_buffer_len)
    return set_value(out, length, names.replayssm_buffer_len, str(setup.replay_window))


def render_shell(line: str, setup: Setup, **options: Any) -> str:
    """Edit a plain vLLM command line: managed tokens are rewritten in place, the rest of the
    string (spacing, quoting, other flags) keeps its bytes."""
    return edit_shell(line, lambda words: render(words, setup, **options))


def parse_shell(line: str, names: FlagNames | None = None) -> Setup:
    return parse_setup([t.value for t in shell_tokens(line)], names)


def vllm_tokens(
    command: Sequence[str], args: Sequence[str], names: FlagNames | None = None
) -> list[str]:
    """The vLLM argument list a container runs (from command or args, split out of a `sh -c`
    line)."""
    return engine_tokens(command, args, (names or FlagNames()).managed)


def container_speculative_config(
    command: Sequence[str], args: Sequence[str], names: FlagNames | None = None
) -> dict[str, Any] | None:
    return speculative_config(vllm_tokens(command, args, names), names)
