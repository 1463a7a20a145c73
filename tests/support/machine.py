"""The machine to one test at a time, for the tests that measure speeds.

Under pytest-xdist every worker shares the same cores, caches and memory bandwidth. A test that
sets the engine's measured times against a probe's (tests/vllm/test_real_prefill.py) survives a
burst of contention, since it keeps each side's least disturbed run, but not contention that
lasts the whole measurement: that slows the probe's kernels and vLLM's prefill and decode each by
its own amount, and the ratio checked moves by as much as the error it is there to catch (in CI,
beside the other worker's tests, vLLM decoded 1.47x slower than the probe predicted and
prefilled 0.73x; docs/costmodel.md).

So such a test is marked `quiet_machine` and runs while no other test does. It is a
readers-writer lock over two files that every worker of one run shares: every other test holds
the machine shared for its whole run; a quiet test first takes the turnstile, so no test starts
once it has asked, then waits for the tests already running to end. Every wait has a deadline.
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

MARKER = "quiet_machine"
# A quiet test waits for the other workers' running tests (the longest run a few minutes on a
# busy 2-core machine); the others wait for the quiet test (a couple of minutes).
WAIT_S = 1200.0
POLL_S = 0.1


class MachineBusyError(TimeoutError):
    """A lock on the machine was not granted within its deadline."""


@contextmanager
def shared(folder: Path, wait_s: float = WAIT_S) -> Iterator[None]:
    """Held by every test that is not quiet, for its whole run."""
    with (folder / "machine.lock").open("a") as machine:
        # Passed through, not held: once a quiet test holds it, no other test starts.
        with (folder / "turnstile.lock").open("a") as turnstile:
            _lock(turnstile, fcntl.LOCK_SH, wait_s, "a quiet test is waiting or running")
            _lock(machine, fcntl.LOCK_SH, wait_s, "a quiet test is running")
        yield


@contextmanager
def alone(folder: Path, wait_s: float = WAIT_S) -> Iterator[None]:
    """Held by a quiet test for its whole run: no other test runs meanwhile."""
    with (
        (folder / "turnstile.lock").open("a") as turnstile,
        (folder / "machine.lock").open("a") as machine,
    ):
        _lock(turnstile, fcntl.LOCK_EX, wait_s, "another quiet test is running")
        _lock(machine, fcntl.LOCK_EX, wait_s, "other tests are still running")
        yield


def _lock(file: IO[str], kind: int, wait_s: float, waiting_for: str) -> None:
    """`flock` within a deadline; the lock lasts until `file` is closed."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(file, kind | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise MachineBusyError(f"{waiting_for} after {wait_s:g} s: {file.name}") from None
            time.sleep(POLL_S)
