"""Render a Setup into vLLM args and parse args back into a Setup (pure).

Only the managed flags change; every other argument keeps its bytes and its position. Values
written come from the Setup (typed settings and the policy), never from outside text: the
operator's own `--speculative-config` fields (method, draft model, ...) are kept as they are.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any

from autotuner.core.engine.args import Flag, SpeculativeConfig, find, read_json
from autotuner.core.types import ScheduleBand, Setup

# One parser for the whole package: the core reads the same args (core/engine_args.py).
from autotuner.errors import ArgsError
from autotuner.settings import FlagNames

__all__ = ["ArgsError", "Flag", "find", "read_json"]

FLAG_TABLE: dict[str, FlagNames] = {"default": FlagNames()}

SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
K_KEY = "num_speculative_tokens"
ADAPTIVE_KEY = "enable_adaptive_verification"
DEFAULT_REPLAY_WINDOW = 16


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
        read = SpeculativeConfig.of(config, names.speculative_config)
        adaptive = bool(read.enable_adaptive_verification)
        bands = config.get(SCHEDULE_KEY) or []
        try:
            schedule = tuple(
                ScheduleBand(start_batch=int(a), end_batch=int(b), spec_tokens=int(c))
                for a, b, c in bands
            )
        except (TypeError, ValueError) as exc:
            raise ArgsError(f"{SCHEDULE_KEY}: cannot read {bands!r} ({exc})") from None
    window = 0
    replay = find(args, names.use_replayssm)
    if replay is not None and _truthy(replay):
        length = find(args, names.replayssm_buffer_len)
        window = int(length.value) if length and length.value else DEFAULT_REPLAY_WINDOW
    try:
        return Setup(
            spec_tokens=k, schedule=schedule, replay_window=window, adaptive=adaptive and k > 0
        )
    except ValueError as exc:
        raise ArgsError(f"the args configure an invalid setup: {exc}") from None


def _truthy(flag: Flag) -> bool:
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
            raise ArgsError(
                f"refusing replay with {names.mamba_ssm_cache_dtype} {dtype.value}: a "
                "low-precision SSM state drifts under replay"
            )
    out = _render_spec(out, setup, names, saved_speculative_config)
    return _render_replay(out, setup, names)


def _render_spec(
    args: list[str], setup: Setup, names: FlagNames, saved: dict[str, Any] | None
) -> list[str]:
    spec = find(args, names.speculative_config)
    if setup.spec_tokens == 0:
        return _remove(args, spec) if spec else args
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
    return _set_value(args, spec, names.speculative_config, value)


def _render_replay(args: list[str], setup: Setup, names: FlagNames) -> list[str]:
    out = args
    switch = find(out, names.use_replayssm)
    if not setup.replay_window:
        if switch:
            out = _remove(out, switch, bare=not switch.joined)
        length = find(out, names.replayssm_buffer_len)
        return _remove(out, length) if length else out
    if switch is None:
        out = [*out, names.use_replayssm]
    elif switch.joined and not _truthy(switch):
        out = list(out)
        out[switch.index] = names.use_replayssm
    length = find(out, names.replayssm_buffer_len)
    return _set_value(out, length, names.replayssm_buffer_len, str(setup.replay_window))


def _set_value(args: Sequence[str], flag: Flag | None, name: str, value: str) -> list[str]:
    """Give `name` this value where it stands (`--x=v` or `--x v`), or append it."""
    if flag is None:
        return [*args, name, value]
    out = list(args)
    if flag.joined:
        out[flag.index] = f"{name}={value}"
    elif flag.value_index is not None:
        out[flag.value_index] = value
    else:
        out.insert(flag.index + 1, value)
    return out


def _remove(args: Sequence[str], flag: Flag, *, bare: bool = False) -> list[str]:
    drop = {flag.index}
    if not bare and not flag.joined and flag.value_index is not None:
        drop.add(flag.value_index)
    return [a for i, a in enumerate(args) if i not in drop]


# --------------------------------------------------------------------------- shell strings

_SHELL_SYNTAX = re.compile(r"[;&|<>`$()\n]|\{\s")


@dataclass(frozen=True)
class Token:
    value: str
    start: int
    end: int


def shell_tokens(line: str) -> list[Token]:
    """Split a plain command line like a POSIX shell, keeping each token's span.

    Refuses anything beyond words and quotes (pipes, &&, redirections, substitutions): the
    tuner edits only command lines it fully understands.
    """
    tokens: list[Token] = []
    i, n = 0, len(line)
    while i < n:
        while i < n and line[i] in " \t":
            i += 1
        if i >= n:
            break
        start, value = i, []
        while i < n and line[i] not in " \t":
            char = line[i]
            if char == "'":
                end = line.find("'", i + 1)
                if end < 0:
                    raise ArgsError("unterminated single quote in the command line")
                value.append(line[i + 1 : end])
                i = end + 1
            elif char == '"':
                i += 1
                while i < n and line[i] != '"':
                    if line[i] == "\\" and i + 1 < n and line[i + 1] in '"\\$`':
                        i += 1
                    elif line[i] in "$`":
                        raise ArgsError("shell substitution in the command line: refused")
                    value.append(line[i])
                    i += 1
                if i >= n:
                    raise ArgsError("unterminated double quote in the command line")
                i += 1
            elif char == "\\" and i + 1 < n:
                value.append(line[i + 1])
                i += 2
            elif _SHELL_SYNTAX.match(char):
                raise ArgsError(
                    f"the command line uses shell syntax ({char!r}): only a plain command line "
                    "can be edited safely"
                )
            else:
                value.append(char)
                i += 1
        tokens.append(Token("".join(value), start, i))
    return tokens


def quote(value: str) -> str:
    """Single-quote a value for a shell unless it is a plain word."""
    if value and re.fullmatch(r"[A-Za-z0-9_@%+=:,./-]+", value):
        return value
    return "'" + value.replace("'", "'\"'\"'") + "'"


def render_shell(line: str, setup: Setup, **options: Any) -> str:
    """Edit a plain command line: managed tokens are rewritten in place, the rest of the string
    (spacing, quoting, other flags) keeps its bytes."""
    tokens = shell_tokens(line)
    words = [t.value for t in tokens]
    new = render(words, setup, **options)
    if new == words:
        return line
    pieces: list[str] = []
    cursor = 0
    for tag, i1, i2, j1, j2 in SequenceMatcher(a=words, b=new, autojunk=False).get_opcodes():
        if tag == "equal":
            end = tokens[i2 - 1].end
            pieces.append(line[cursor:end])
            cursor = end
            continue
        if i2 > i1:  # dropped or replaced words go, with the blank before them
            cursor = tokens[i2 - 1].end
        pieces.extend(" " + quote(word) for word in new[j1:j2])
    pieces.append(line[cursor:])
    return "".join(pieces)


def parse_shell(line: str, names: FlagNames | None = None) -> Setup:
    return parse_setup([t.value for t in shell_tokens(line)], names)


# --------------------------------------------------------------------------- containers


def _shell_index(values: Sequence[str]) -> int | None:
    """Index of a `sh -c "<command line>"` string in a command/args list, if any."""
    for i in range(2, len(values)):
        if values[i - 1] == "-c" and values[i - 2].rsplit("/", 1)[-1] in ("sh", "bash", "dash"):
            return i
    return None


def _managed(values: Sequence[str], names: FlagNames) -> bool:
    flags = (names.speculative_config, names.use_replayssm, names.replayssm_buffer_len)
    return any(v.split("=", 1)[0] in flags for v in values)


def _where(command: Sequence[str], args: Sequence[str], names: FlagNames) -> str:
    """Which list holds the vLLM command line: 'command', 'args' or a shell string in one."""
    for label, values in (("command", command), ("args", args)):
        shell = _shell_index(values)
        if shell is not None:
            return f"{label}-shell"
    in_command, in_args = _managed(command, names), _managed(args, names)
    if in_command and in_args:
        raise ArgsError("managed flags appear in both command and args: refusing to guess")
    return "command" if in_command or (not args and command) else "args"


def _vllm_tokens(command: Sequence[str], args: Sequence[str], names: FlagNames) -> Sequence[str]:
    """The tokens that carry vLLM's flags: command or args, split when it is a `sh -c` line."""
    where = _where(command, args, names)
    values = command if where.startswith("command") else args
    if where.endswith("shell"):
        index = _shell_index(values)
        assert index is not None
        return [t.value for t in shell_tokens(values[index])]
    return values


def vllm_tokens(
    command: Sequence[str], args: Sequence[str], names: FlagNames | None = None
) -> list[str]:
    """The vLLM argument list a container runs (from command or args, split out of a `sh -c`
    line): what core/engine_args.py parses."""
    return list(_vllm_tokens(command, args, names or FlagNames()))


def container_setup(
    command: Sequence[str], args: Sequence[str], names: FlagNames | None = None
) -> Setup:
    """The Setup a container's command and args configure."""
    names = names or FlagNames()
    return parse_setup(_vllm_tokens(command, args, names), names)


def container_speculative_config(
    command: Sequence[str], args: Sequence[str], names: FlagNames | None = None
) -> dict[str, Any] | None:
    names = names or FlagNames()
    return speculative_config(_vllm_tokens(command, args, names), names)


def render_container(
    command: Sequence[str], args: Sequence[str], setup: Setup, **options: Any
) -> tuple[list[str], list[str]]:
    """New (command, args) for `setup`; the list without vLLM flags is returned unchanged."""
    names = options.get("names") or FlagNames()
    where = _where(command, args, names)
    new_command, new_args = list(command), list(args)
    target = new_command if where.startswith("command") else new_args
    if where.endswith("shell"):
        index = _shell_index(target)
        assert index is not None
        target[index] = render_shell(target[index], setup, **options)
    else:
        target[:] = render(target, setup, **options)
    return new_command, new_args
