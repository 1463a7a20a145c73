"""The companion flags a setup needs, written and put back (pure), whichever engine spells them.

The operator's own tokens for each companion the tuner changes are kept in a record (saved on
the target by the actuator, as the operator's drafter is): `{companion: [tokens] | None}`, None
when the operator's args did not have the flag. The tuner edits an operator's flag in place and
appends a flag the operator did not have, so putting the record back restores the args byte for
byte. Each engine says where a companion stands in its args and how it writes it (`Spelling`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from autotuner.core.engine.builds import Companion
from autotuner.engines.commandline import Flag
from autotuner.errors import ArgsError

# The operator's own tokens for the companion flags a setup made the tuner change.
Saved = dict[str, list[str] | None]


class Spelling(Protocol):
    """How one engine reads and writes its companion flags."""

    def occurrence(
        self, args: Sequence[str], companion: Companion
    ) -> tuple[Flag, list[str]] | None:
        """The last occurrence of the companion's flag (argparse keeps the last), its tokens."""

    def wanted(self, companion: Companion) -> list[str]:
        """The tokens that turn the companion on (ArgsError where args cannot carry it)."""


def with_value(args: Sequence[str], flag: Flag | None) -> tuple[Flag, list[str]] | None:
    """A companion flag's occurrence and its tokens: the flag and its value, if it has one."""
    if flag is None:
        return None
    end = flag.value_index if flag.value_index is not None else flag.index
    return flag, list(args[flag.index : end + 1])


def _replace(
    args: Sequence[str], companion: Companion, tokens: list[str] | None, spelling: Spelling
) -> list[str]:
    """The args with the companion's last occurrence replaced by `tokens` where it stands
    (appended when absent; removed when `tokens` is None)."""
    found = spelling.occurrence(args, companion)
    if found is None:
        return [*args, *(tokens or [])]
    flag, current = found
    return [*args[: flag.index], *(tokens or []), *args[flag.index + len(current) :]]


def render_companions(
    args: Sequence[str],
    wanted: Sequence[Companion],
    saved: Mapping[str, list[str] | None] | None,
    spelling: Spelling,
) -> tuple[list[str], Saved | None]:
    """Args with the wanted companions written and the others put back as the operator had
    them; the record of the operator's tokens to keep (None: nothing to keep)."""
    record: Saved = {k: (list(v) if v is not None else None) for k, v in (saved or {}).items()}
    out = list(args)
    for name in list(record):
        companion = _companion(name)
        if companion in wanted:
            continue
        out = _replace(out, companion, record.pop(name), spelling)
    for companion in wanted:
        if companion.value not in record:
            found = spelling.occurrence(out, companion)
            record[companion.value] = found[1] if found is not None else None
        out = _replace(out, companion, spelling.wanted(companion), spelling)
    return out, record or None


def _companion(name: str) -> Companion:
    try:
        return Companion(name)
    except ValueError:
        raise ArgsError(f"the saved operator args name an unknown companion {name!r}") from None


def saved_record(value: object) -> Saved | None:
    """A record read back from the target; a malformed one raises ArgsError."""
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
        (isinstance(v, list) and all(isinstance(t, str) for t in v)) or v is None
        for v in value.values()
    ):
        raise ArgsError(f"the saved operator args are not a companion record: {value!r}")
    return {str(k): v for k, v in value.items()}
