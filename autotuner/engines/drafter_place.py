"""Where the operator's drafter flag stood, kept while speculation is off, so that turning it
back on puts the flag back there and as it was written (pure).

Turning speculation off removes the drafter's flag (`--speculative-config JSON`), and the
engine's writer appends it when speculation returns: at the end of the args, as two words, in
its own JSON spelling. The record kept beside the companion record (key DRAFTER) holds the
word that followed the flag ("" when it stood last) and the flag's own tokens, so the flag
returns before the same word, in the same form (`--flag=JSON` as one word, `--flag JSON` as
two), with the operator's own text wherever the config it carries is the one written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autotuner.engines.commandline import Flag, find, read_json
from autotuner.errors import ArgsError

DRAFTER = "drafter"  # the companion record's key for the drafter flag's place


def _end(flag: Flag) -> int:
    """The index after the flag's last token (its value's, when written apart)."""
    return (flag.value_index if flag.value_index is not None else flag.index) + 1


def drafter_record(tokens: Sequence[str], name: str) -> list[str] | None:
    """[the word after the flag or "", *the flag's tokens] (None: no such flag)."""
    flag = find(tokens, name)
    if flag is None:
        return None
    end = _end(flag)
    return [tokens[end] if end < len(tokens) else "", *tokens[flag.index : end]]


def placed(written: Sequence[str], name: str, record: Sequence[str]) -> list[str]:
    """`written` with the drafter flag the writer put in moved to where `record` says it
    stood, in the form it had; its value keeps the operator's text where it reads the same."""
    flag = find(written, name)
    if flag is None or flag.value is None or len(record) < 2:
        return list(written)
    follower, original = record[0], find(record[1:], name)
    rest = [*written[: flag.index], *written[_end(flag) :]]
    value = flag.value
    if original is not None and original.value is not None and _same(original.value, value):
        value = original.value
    joined = original.joined if original is not None else flag.joined
    tokens = [f"{name}={value}"] if joined else [name, value]
    at = rest.index(follower) if follower and follower in rest else len(rest)
    return [*rest[:at], *tokens, *rest[at:]]


def _same(operator_text: str, written_text: str) -> bool:
    """The two values carry the same config (the operator's may be spaced or single-quoted)."""
    try:
        ours: dict[str, Any] = read_json(written_text, DRAFTER)
        theirs: dict[str, Any] = read_json(operator_text, DRAFTER)
    except ArgsError:
        return False
    return ours == theirs
