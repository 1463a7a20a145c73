"""What every command shares: how a bad input ends, the list and rate parsers, the hardware
and settings a command names, and the option types of the settings-reading commands."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from autotuner.core.predict.hardware import HardwareProfile, datasheet, load_profile
from autotuner.errors import ActuatorError, AutotunerError, InputError, RefusedByRuleError

if TYPE_CHECKING:
    from autotuner.settings import Settings

DEFAULT_MODEL = "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4"

ConfigFile = Annotated[
    Path | None, typer.Option("--config", help="YAML settings file (also AUTOTUNER_CONFIG).")
]
SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override one setting: group.field=value (repeatable)."),
]


def fail(message: str, code: int = 2) -> NoReturn:
    """One line on stderr and a non-zero exit: how every bad input ends."""
    print(f"autotuner: error: {message}", file=sys.stderr)
    raise typer.Exit(code)


def one_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if len(text) == 1 else " ".join(line.strip() for line in text)


@contextmanager
def failing_on_bad_input(*, target_code: int | None = None) -> Iterator[None]:
    """A bad input ends the command with exit 2; with `target_code`, a target that cannot be
    read or written ends it with that code."""
    try:
        yield
    except RefusedByRuleError as exc:  # refused as the build's rules refuse: a bad input
        fail(one_line(exc))
    except ActuatorError as exc:
        fail(one_line(exc), code=2 if target_code is None else target_code)
    except (AutotunerError, ValueError) as exc:
        fail(one_line(exc))


def parse_int_list(text: str, what: str, *, minimum: int = 0) -> list[int]:
    """'1,8,32' or '1..8' (inclusive) or a mix: '1..4,8'."""
    values: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if ".." in part:
                start, end = (int(x) for x in part.split("..", 1))
                if end < start:
                    raise ValueError
                values.extend(range(start, end + 1))
            elif part:
                values.append(int(part))
    except ValueError:
        raise InputError(f"{what}: cannot read {text!r}; use e.g. 1,8,32 or 1..8") from None
    if not values or min(values) < minimum:
        raise InputError(f"{what}: need values >= {minimum}, got {text!r}")
    return sorted(set(values))


def parse_rates(text: str) -> list[float]:
    try:
        rates = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"acceptance: cannot read {text!r}; use e.g. 0.9,0.8,0.7") from None
    if not rates:
        raise InputError("acceptance: no rates given")
    return rates


def resolve_hardware(gpu: str | None, profile: str | None) -> HardwareProfile:
    if gpu and profile:
        raise InputError("give --gpu or --profile, not both")
    if profile:
        return load_profile(profile)
    return datasheet(gpu or "H200")


def load_cli_settings(
    config: Path | None, overrides: list[str] | None, **flags: Any
) -> tuple[Settings, dict[str, str]]:
    """The settings layers (defaults < file < env < cli), the cli layer being the --set
    overrides and the command's own options (`flags`, by dotted field; None: not given)."""
    from autotuner.settings import cli_overrides, load_settings

    tree = cli_overrides(overrides or [])
    for dotted, value in flags.items():
        if value is None:
            continue
        node = tree
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    file = config or (
        Path(os.environ["AUTOTUNER_CONFIG"]) if os.environ.get("AUTOTUNER_CONFIG") else None
    )
    return load_settings(file, tree)


def plots_line(paths: list[Path]) -> str:
    from autotuner.plots import INSTALL_HINT

    return f"plots: {', '.join(map(str, paths))}" if paths else f"no plots: {INSTALL_HINT}"
