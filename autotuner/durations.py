"""Durations as operators write them: 500ms, 30s, 5m, 1h, 1d, or plain seconds."""

from __future__ import annotations

import re

from autotuner.errors import InputError

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*")


def parse_duration(text: str | float, *, allow_zero: bool = False) -> float:
    """Seconds from '500ms', '30s', '5m', '1.5h', '2d' or a bare number of seconds.

    `allow_zero`: a settings field checks its own bound (some are `>= 0`, most `> 0`), so
    only the settings reader passes it; a command's option must be positive."""
    if isinstance(text, int | float):
        seconds = float(text)
    else:
        match = _DURATION.fullmatch(text)
        if match is None:
            raise InputError(f"cannot read duration {text!r}; use e.g. 500ms, 30s, 5m, 1h")
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise InputError(f"duration must be positive, got {text!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """The other way round, for sentences: 45s, 15m, 6h, 1.5d."""
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.3g}{unit}"
    return f"{seconds:.3g}s"
