"""What every engine's command line shares (pure): argparse's flag forms, JSON values, plain shell
words, and where in a container's command and args the engine's own args sit."""

from __future__ import annotations

import ast
import json
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any, TypeVar

from autotuner.engines import shell
from autotuner.errors import ArgsError

Edit = Callable[[list[str]], list[str]]  # an engine's argument list -> the new one
Number = TypeVar("Number", int, float)


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


def computed(text: str) -> bool:
    """A value the shell or Kubernetes fills in when the engine starts (`$X`, `${X:-0}`,
    `$((A * B))`, `$(VAR)`): unknown to a reading of the command line."""
    return "$" in text


def truthy(text: str) -> bool:
    """A switch's written value: anything but false, 0, no, off is on."""
    return text.strip().lower() not in ("false", "0", "no", "off")


def _number(text: str | None, name: str, read: Callable[[str], Number], kind: str) -> Number | None:
    """A flag's value read as a number of this kind (None: not given, or computed when the
    engine starts: `$TP_SIZE`); ArgsError naming the flag if it is not one."""
    if text is None or computed(text):
        return None
    try:
        return read(text)
    except ValueError:
        raise ArgsError(f"{name}: not {kind}: {text!r}") from None


def integer_value(text: str | None, name: str, *, minimum: int) -> int | None:
    """A flag's integer value (None: not given); ArgsError naming the flag if it is not one."""
    value = _number(text, name, int, "an integer")
    if value is not None and value < minimum:
        raise ArgsError(f"{name}: must be >= {minimum}, got {value}")
    return value


def fraction_value(text: str | None, name: str) -> float | None:
    """A flag's value in (0, 1] (None: not given); ArgsError naming the flag otherwise."""
    value = _number(text, name, float, "a number")
    if value is not None and not 0 < value <= 1:
        raise ArgsError(f"{name}: must lie in (0, 1], got {value}")
    return value


def set_value(args: Sequence[str], flag: Flag | None, name: str, value: str) -> list[str]:
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


def remove(args: Sequence[str], flag: Flag, *, bare: bool = False) -> list[str]:
    """The args without this occurrence (and its value, unless it is a bare switch)."""
    drop = {flag.index}
    if not bare and not flag.joined and flag.value_index is not None:
        drop.add(flag.value_index)
    return [a for i, a in enumerate(args) if i not in drop]


# --------------------------------------------------------------------------- shell strings


@dataclass(frozen=True)
class Token:
    value: str
    start: int
    end: int


def shell_tokens(line: str) -> list[Token]:
    """Split a plain command line (an env var's args, a one-command script) with the shell
    reader (shell.py), keeping each word's span.

    Refuses anything beyond words and quotes (pipes, &&, redirections, expansions): such a
    string is edited only as the engine's command of a script, where the reader knows what
    the shell computes.
    """
    return [Token(w.value, w.start, w.end) for w in shell.plain_words(line)]


quote = shell.quote


def edit_shell(line: str, edit: Edit) -> str:
    """Edit a plain command line: the words `edit` changes are rewritten in place, the rest of
    the string (spacing, quoting, other flags) keeps its bytes."""
    script = shell.parse(line)
    words = shell.plain_words(line)
    command = shell.Command(tuple(words), 0, len(line), substituted=False)
    return shell.rewrite(script, command, edit([w.value for w in words]), program=False)


# --------------------------------------------------------------------------- containers


def engine_tokens(
    command: Sequence[str], args: Sequence[str], managed: Collection[str]
) -> list[str]:
    """The engine's argument list a container runs: its command and args as Kubernetes joins
    them (`command: [vllm, serve]`, `args: [MODEL, ...]`), or the words of the engine's command
    in a `sh -c` script (shell.py); empty for a script that starts no engine."""
    joined = [*command, *args]
    index = shell.script_index(joined)
    if index is None or index >= len(joined):
        return joined
    script = shell.parse(joined[index])
    found = shell.engine_command(script, managed)
    if found is None:
        return []
    refusal = shell.substitution_refusal(found)
    if refusal is not None:
        raise ArgsError(f"{refusal}: refused")
    return found.values


def edit_container(
    command: Sequence[str], args: Sequence[str], managed: Collection[str], edit: Edit
) -> tuple[list[str], list[str]]:
    """New (command, args) with the engine's argument list edited: in a `sh -c` script only
    the engine command's changed words (every other byte kept), else each word where it stood
    (new words after the last, in args when the container has args)."""
    joined = [*command, *args]
    index = shell.script_index(joined)
    if index is None or index >= len(joined):
        return split(command, args, edit(list(joined)))
    script = shell.parse(joined[index])
    found = shell.engine_command(script, managed)
    if found is None:
        raise ArgsError("the shell script starts no engine: nothing to edit")
    new = edit(found.values)
    joined[index] = shell.rewrite(script, found, new)
    return joined[: len(command)], joined[len(command) :]


def split(
    command: Sequence[str], args: Sequence[str], new: Sequence[str]
) -> tuple[list[str], list[str]]:
    """An edited argument list back into (command, args): a word stays in the list the word it
    replaces or follows stood in."""
    old, size = [*command, *args], len(command)
    out: tuple[list[str], list[str]] = ([], [])
    for tag, i1, i2, j1, j2 in SequenceMatcher(a=old, b=list(new), autojunk=False).get_opcodes():
        if tag == "equal":
            for k in range(i2 - i1):
                out[i1 + k >= size].append(old[i1 + k])
            continue
        into_args = i1 > size or (i1 == size and bool(args))
        out[into_args].extend(new[j1:j2])
    return out
