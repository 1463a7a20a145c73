"""How `autotuner run` stops: a signal sets the loop's stop event, and the wait for the step in
flight is bounded by the grace (one interval plus the longest outside-call deadline)."""

from __future__ import annotations

import logging
import signal
import threading
import time
from pathlib import Path

import pytest

from autotuner.actuators.exec import ExecActuator
from autotuner.cli.stopping import Stopper, stop_grace_s
from autotuner.settings import cli_overrides, load_settings


def _loop(stop: threading.Event) -> threading.Thread:
    """A worker that ends once asked to (a loop between two steps)."""
    worker = threading.Thread(target=stop.wait, daemon=True)
    worker.start()
    return worker


def test_a_signal_stops_the_loop_and_the_wait_ends_with_it() -> None:
    stopper, stop = Stopper(), threading.Event()
    stopper.stops(stop)
    worker = _loop(stop)
    stopper.handle(signal.SIGTERM, None)
    assert stop.is_set()
    assert stopper.wait(worker, grace_s=10.0, logger=logging.getLogger("test"))
    assert not worker.is_alive()


def test_a_signal_before_the_loop_exists_stops_it_at_once() -> None:
    stopper, stop = Stopper(), threading.Event()
    stopper.handle(signal.SIGTERM, None)
    stopper.stops(stop)
    assert stop.is_set()


def test_a_wedged_step_is_left_behind_after_the_grace_even_when_signalled_twice(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stopper, wedged = Stopper(), threading.Event()
    worker = threading.Thread(target=wedged.wait, daemon=True)  # never set: a wedged call
    worker.start()
    stopper.handle(signal.SIGTERM, None)
    stopper.handle(signal.SIGTERM, None)
    logger = logging.getLogger("test.stop")
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="test.stop"):
        assert not stopper.wait(worker, grace_s=0.3, logger=logger)
    assert time.monotonic() - started < 5.0
    assert "asked to stop again" in caplog.text
    assert "did not end within" in caplog.text
    wedged.set()


def test_without_a_signal_the_wait_lasts_as_long_as_the_loop() -> None:
    stopper, done = Stopper(), threading.Event()
    worker = threading.Thread(target=lambda: done.wait(0.6), daemon=True)
    worker.start()
    assert stopper.wait(worker, grace_s=0.0, logger=logging.getLogger("test"))


def test_the_grace_is_one_interval_plus_the_longest_outside_call_deadline() -> None:
    settings, _ = load_settings(
        None, cli_overrides(["loop.interval_s=15s", "source.timeout_s=5s", "quality.timeout_s=30s"])
    )
    assert stop_grace_s(settings) == 15.0 + 30.0
    quiet, _ = load_settings(
        None, cli_overrides(["loop.interval_s=2s", "source.timeout_s=1s", "quality.enabled=false"])
    )
    assert stop_grace_s(quiet) == 2.0 + 1.0  # no target: the scrape is the longest call
    restart = ExecActuator(Path("vllm.args"), ["true"], timeout_s=120.0)  # its restart command
    assert stop_grace_s(quiet, restart) == 2.0 + 120.0
