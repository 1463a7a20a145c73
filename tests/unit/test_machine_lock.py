"""The lock that gives a speed-measuring test the machine to itself (tests/support/machine.py),
driven from threads: flock's locks belong to an open file, so two threads that each open the
lock file contend as two xdist workers do."""

from __future__ import annotations

import fcntl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from tests.support.machine import MachineBusyError, alone, shared

DEADLINE_S = 60.0  # how long a condition below is waited for at most
REFUSED_S = 0.2  # a lock that cannot be granted is refused after this


@contextmanager
def quiet_test_in_thread(folder: Path) -> Iterator[threading.Event]:
    """A quiet test asking for the machine from another thread; the event is set while it
    runs, and it ends when the block does."""
    running, ended = threading.Event(), threading.Event()

    def run() -> None:
        with alone(folder, wait_s=DEADLINE_S):
            running.set()
            ended.wait(DEADLINE_S)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        yield running
    finally:
        ended.set()
        thread.join(DEADLINE_S)


def has_asked(folder: Path) -> bool:
    """Whether a quiet test holds the turnstile, so that no other test may start."""
    with (folder / "turnstile.lock").open("a") as turnstile:
        try:
            fcntl.flock(turnstile, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        return False


def wait_for(condition: Callable[[], bool], message: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, message
        time.sleep(0.01)


def test_tests_that_share_the_machine_run_together(tmp_path: Path) -> None:
    with shared(tmp_path, wait_s=0.0), shared(tmp_path, wait_s=0.0):
        assert not has_asked(tmp_path)


def test_a_quiet_test_waits_for_the_running_ones_and_no_test_starts_beside_it(
    tmp_path: Path,
) -> None:
    running_test = ExitStack()
    running_test.enter_context(shared(tmp_path))
    with quiet_test_in_thread(tmp_path) as quiet_running:
        wait_for(lambda: has_asked(tmp_path), "the quiet test never asked for the machine")
        # It cannot hold the machine while a running test shares it...
        assert not quiet_running.is_set()
        # ...and once it has asked, a test that starts waits for it.
        with (
            pytest.raises(MachineBusyError, match="a quiet test is waiting or running"),
            shared(tmp_path, wait_s=REFUSED_S),
        ):
            pass
        running_test.close()
        assert quiet_running.wait(DEADLINE_S), "the quiet test never ran after the others ended"
        with (
            pytest.raises(MachineBusyError, match="a quiet test is waiting or running"),
            shared(tmp_path, wait_s=REFUSED_S),
        ):
            pass
    # Once it has ended, a test starts at once.
    with shared(tmp_path, wait_s=0.0):
        assert not has_asked(tmp_path)


def test_a_quiet_test_refused_by_its_deadline_says_why_and_holds_nothing(tmp_path: Path) -> None:
    with shared(tmp_path):
        with (
            pytest.raises(MachineBusyError, match=r"other tests are still running after 0\.2 s"),
            alone(tmp_path, wait_s=REFUSED_S),
        ):
            pass
        assert not has_asked(tmp_path)
    with alone(tmp_path, wait_s=0.0):
        assert has_asked(tmp_path)
