"""The small benchmarks' command lines: each option a number with its default (`--step-ms 20`)."""

from __future__ import annotations

import argparse


def numbers(description: str | None, **defaults: float) -> argparse.Namespace:
    """Parse `--name-with-dashes N` for each default, typed as the default is (int or float)."""
    options = argparse.ArgumentParser(description=description)
    for name, default in defaults.items():
        options.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    return options.parse_args()
