"""Run the real-vLLM tier several times in a row, optionally beside a CPU hog, and print the
pass counts: how the tier's determinism is measured (issue: the act tier failed 2 runs of 3).

Usage: python scripts/soak_vllm_tier.py [--runs 5] [--hog [CORES]] [--tests tests/vllm] [--log DIR]

--hog starts CORES busy-looping processes (default 1; 0: one per core) for the length of each
run (each also stops by itself after --hog-max-s, so a killed soak leaves nothing spinning).
Needs the test venv (./scripts/test.sh creates it); extra pytest arguments follow `--`.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _spin(until: float) -> None:
    while time.monotonic() < until:
        sum(i * i for i in range(10_000))


@contextmanager
def cpu_hog(cores: int | None, max_s: float) -> Iterator[None]:
    """`cores` busy loops (0: one per core; None: none) while the block runs."""
    if cores is None:
        yield
        return
    until = time.monotonic() + max_s
    workers = [
        multiprocessing.Process(target=_spin, args=(until,), daemon=True)
        for _ in range(cores or os.cpu_count() or 1)
    ]
    for worker in workers:
        worker.start()
    try:
        yield
    finally:
        for worker in workers:
            worker.terminate()
            worker.join(timeout=10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--hog",
        type=int,
        nargs="?",
        const=1,
        default=None,
        metavar="CORES",
        help="busy loops beside each run: CORES of them (default 1; 0: one per core)",
    )
    parser.add_argument("--hog-max-s", type=float, default=3600.0)
    parser.add_argument("--tests", default="tests/vllm")
    parser.add_argument("--log", type=Path, default=Path("soak-logs"))
    parser.add_argument("pytest_args", nargs="*")
    options = parser.parse_args()
    options.log.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "AUTOTUNER_REQUIRE_VLLM": "1"}
    passed = 0
    for run in range(1, options.runs + 1):
        hogged = "" if options.hog is None else f"-hog{options.hog}"
        log = options.log / f"run{run}{hogged}.log"
        started = time.monotonic()
        with cpu_hog(options.hog, options.hog_max_s), log.open("w") as out:
            # Each run's temporary folders (the tuner's and vLLM's logs) are kept beside its
            # log: pytest's own keeps only the last three runs, and other pytest runs share it.
            basetemp = options.log / f"run{run}{hogged}-tmp"
            command = [
                *(sys.executable, "-m", "pytest", "-q", "-s", f"--basetemp={basetemp}"),
                options.tests,
            ]
            result = subprocess.run(
                [*command, *options.pytest_args], stdout=out, stderr=subprocess.STDOUT, env=env
            )
        ok = result.returncode == 0
        passed += ok
        summary = log.read_text().strip().splitlines()[-1] if log.stat().st_size else ""
        print(
            f"run {run}: {'passed' if ok else 'FAILED'} in {time.monotonic() - started:.0f} s "
            f"({summary}) log: {log}",
            flush=True,
        )
    beside = "" if options.hog is None else f" beside a CPU hog of {options.hog or 'every'} core(s)"
    print(f"{passed} of {options.runs} runs passed{beside}")
    return 0 if passed == options.runs else 1


if __name__ == "__main__":
    sys.exit(main())
