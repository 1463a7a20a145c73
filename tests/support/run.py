"""Running a module of this repository as its users do: `python -m module args`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[2]


def python_module(
    module: str, *args: str, timeout_s: float = 120
) -> subprocess.CompletedProcess[str]:
    """`python -m module args` from the repository root, its output captured as text (the
    caller checks the return code, so a failure shows what it printed)."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def sidecar_process(
    config: Path, out: int | IO[bytes] | None = subprocess.DEVNULL
) -> subprocess.Popen[bytes]:
    """`autotuner run --config config` in a process of its own, unbuffered; what it prints
    (stdout and stderr together) goes to `out` (default: nowhere)."""
    return subprocess.Popen(
        [sys.executable, "-m", "autotuner.cli", "run", "--config", str(config)],
        stdout=out,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
