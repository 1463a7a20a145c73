"""vLLM's spelling of the companion settings a setup needs (pure): writing them, and putting
back exactly what the operator had when a setup no longer needs them.

The operator's own tokens for each companion the tuner changes are kept in a record (saved on
the target by the actuator, as the operator's drafter is): `{companion: [tokens] | None}`, None
when the operator's args did not have the flag. The tuner edits an operator's flag in place and
appends a flag the operator did not have, so putting the record back restores the args
byte for byte."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from autotuner.core.engine.builds import Companion
from autotuner.engines.commandline import Flag
from autotuner.engines.dialect import Saved
from autotuner.engines.vllm.args import find_any
from autotuner.errors import ArgsError

MAMBA_BACKEND = "--mamba-backend"
PREFIX_CACHING_OFF = "--no-enable-prefix-caching"
# Every spelling that sets prefix caching (0.33 also pairs --disable-x with --enable-x).
PREFIX_CACHING = (
    "--enable-prefix-caching",
    "--no-enable-prefix-caching",
    "--disable-prefix-caching",
    "--no-disable-prefix-caching",
)
RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER=0"


def spelled(companion: Companion) -> str:
    """How a companion reads on vLLM's command line (or in its environment)."""
    return {
        Companion.MAMBA_BACKEND_FLASHINFER: f"{MAMBA_BACKEND} flashinfer",
        Companion.PREFIX_CACHING_OFF: PREFIX_CACHING_OFF,
        Companion.MODEL_RUNNER_V1: f"env {RUNNER_ENV}",
    }[companion]


def _occurrence(args: Sequence[str], companion: Companion) -> tuple[Flag, list[str]] | None:
    """The last occurrence of the companion's flag (argparse keeps the last) and its tokens."""
    if companion is Companion.MAMBA_BACKEND_FLASHINFER:
        hit = find_any(args, MAMBA_BACKEND)
        if hit is None:
            return None
        flag = hit[1]
        end = flag.value_index if flag.value_index is not None else flag.index
        return flag, list(args[flag.index : end + 1])
    hit = find_any(args, *PREFIX_CACHING)
    if hit is None:
        return None
    flag = hit[1]  # a switch: its own token only (a following word is not its value)
    return Flag(flag.index, flag.joined, None, None), [args[flag.index]]


def _replace(args: Sequence[str], companion: Companion, tokens: list[str] | None) -> list[str]:
    """The args with the companion's last occurrence replaced by `tokens` where it stands
    (appended when absent; removed when `tokens` is None)."""
    found = _occurrence(args, companion)
    if found is None:
        return [*args, *(tokens or [])]
    flag, current = found
    return [*args[: flag.index], *(tokens or []), *args[flag.index + len(current) :]]


def _wanted_tokens(companion: Companion) -> list[str]:
    if companion is Companion.MAMBA_BACKEND_FLASHINFER:
        return [MAMBA_BACKEND, "flashinfer"]
    if companion is Companion.PREFIX_CACHING_OFF:
        return [PREFIX_CACHING_OFF]
    raise ArgsError(
        f"{spelled(companion)} is an environment variable, which the tuner does not write "
        "into args: this setup cannot be written here"
    )


def render_companions(
    args: Sequence[str], wanted: Sequence[Companion], saved: Mapping[str, list[str] | None] | None
) -> tuple[list[str], Saved | None]:
    """Args with the wanted companions written and the others put back as the operator had
    them; the record of the operator's tokens to keep (None: nothing to keep)."""
    record: Saved = {k: (list(v) if v is not None else None) for k, v in (saved or {}).items()}
    out = list(args)
    for name in list(record):
        companion = _companion(name)
        if companion in wanted:
            continue
        out = _replace(out, companion, record.pop(name))
    for companion in wanted:
        if companion.value not in record:
            found = _occurrence(out, companion)
            record[companion.value] = found[1] if found is not None else None
        out = _replace(out, companion, _wanted_tokens(companion))
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


def missing(args: Sequence[str], companions: Sequence[Companion]) -> list[Companion]:
    """The companions these args do not set (as vLLM reads them: the last occurrence wins)."""
    absent = []
    for companion in companions:
        found = _occurrence(args, companion)
        if companion is Companion.MAMBA_BACKEND_FLASHINFER:
            ok = found is not None and found[1][-1].rsplit("=", 1)[-1] == "flashinfer"
        elif companion is Companion.PREFIX_CACHING_OFF:
            ok = found is not None and not _switch_on(found[1][0])
        else:
            ok = False  # the environment is not in the args
        if not ok:
            absent.append(companion)
    return absent


def _switch_on(token: str) -> bool:
    """Whether one prefix-caching token turns it on (`--no-disable-...` does, `--x=false` not)."""
    name, _, value = token.partition("=")
    on = name in ("--enable-prefix-caching", "--no-disable-prefix-caching")
    if value and value.strip().lower() in ("false", "0", "no", "off"):
        on = not on
    return on
