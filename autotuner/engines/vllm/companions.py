"""vLLM's spelling of the companion settings a setup needs (pure): where each stands in its args
and how it is written (`SPELLING`, for engines/companion_record.py, which writes them and puts
back what the operator had), and which ones an argument list lacks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autotuner.core.engine.builds import Companion
from autotuner.engines.commandline import Flag
from autotuner.engines.companion_record import with_value
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
    spellings = {
        Companion.MAMBA_BACKEND_FLASHINFER: f"{MAMBA_BACKEND} flashinfer",
        Companion.PREFIX_CACHING_OFF: PREFIX_CACHING_OFF,
        Companion.MODEL_RUNNER_V1: f"env {RUNNER_ENV}",
    }
    return spellings.get(companion, companion.value)


@dataclass(frozen=True)
class VllmSpelling:
    """Where vLLM's companion flags stand in its args, and how they are written."""

    def occurrence(
        self, args: Sequence[str], companion: Companion
    ) -> tuple[Flag, list[str]] | None:
        if companion is Companion.MAMBA_BACKEND_FLASHINFER:
            hit = find_any(args, MAMBA_BACKEND)
            return with_value(args, hit[1] if hit else None)
        hit = find_any(args, *PREFIX_CACHING)
        if hit is None:
            return None
        flag = hit[1]  # a switch: its own token only (a following word is not its value)
        return Flag(flag.index, flag.joined, None, None), [args[flag.index]]

    def wanted(self, companion: Companion) -> list[str]:
        if companion is Companion.MAMBA_BACKEND_FLASHINFER:
            return [MAMBA_BACKEND, "flashinfer"]
        if companion is Companion.PREFIX_CACHING_OFF:
            return [PREFIX_CACHING_OFF]
        if companion is Companion.MODEL_RUNNER_V1:
            raise ArgsError(
                f"{spelled(companion)} is an environment variable, which the tuner does not "
                "write into args: this setup cannot be written here"
            )
        raise ArgsError(f"{companion.value} is not a vLLM companion")


SPELLING = VllmSpelling()


def missing(args: Sequence[str], companions: Sequence[Companion]) -> list[Companion]:
    """The companions these args do not set (as vLLM reads them: the last occurrence wins)."""
    absent = []
    for companion in companions:
        found = SPELLING.occurrence(args, companion)
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
