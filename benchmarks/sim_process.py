"""The simulated vLLM in its own process (as vLLM is: the load generator must not share its
interpreter lock), for the benchmarks that drive one."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def sim_server(step_ms: float) -> Iterator[str]:
    """Start `python -m autotuner.sim` with a fixed step time; yield its base URL."""
    server = subprocess.Popen(
        [sys.executable, "-m", "autotuner.sim", "--step-ms", str(step_ms)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        yield server.stdout.readline().strip()
    finally:
        server.terminate()
        server.wait(timeout=10)
