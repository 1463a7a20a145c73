"""The exec actuator's restart command for the real-vLLM tier: stop the vLLM this script
started last (pid file), start a new one with the args file, wait until it is healthy.

Usage: restart_vllm.py ARGS_FILE PID_FILE PORT LOG  (VLLM_PYTHON names the vLLM venv's python)
Exit 1 when the server does not come up (the actuator then reports a failed change), with the
engine's own reason (the last exception line it logged) on stdout, as an operator's restart
script would show it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HEALTHY_WITHIN_S = 480  # ~25 s on a quiet 2-core machine; a busy one may take several times that
# An exception line of a Python traceback ("ValueError: ..."), bare or behind vLLM's log prefix.
EXCEPTION_LINE = re.compile(r"(?:^|\] )((?:\w+\.)*\w+(?:Error|Exception): .*)$")
# vLLM's wrappers around the root cause it logged just before (at start, at a request).
WRAPPERS = ("Engine core initialization failed", "EngineDeadError")


def reason(log_text: str) -> str:
    """The engine's own reason for exiting: the last exception line of its log that is not
    the wrapper vLLM raises around it ("" when there is none)."""
    found = [m.group(1) for line in log_text.splitlines() if (m := EXCEPTION_LINE.search(line))]
    causes = [line for line in found if not any(w in line for w in WRAPPERS)]
    return causes[-1] if causes else ""


def stop(pid_file: Path, wait_s: float = 10.0) -> None:
    """SIGTERM the process group the pid file names, wait until it is gone (SIGKILL after
    `wait_s`)."""
    pid = int(pid_file.read_text().strip() or 0) if pid_file.exists() else 0
    if pid <= 1:
        return  # never signal our own process group (pid 0) or init
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.killpg(pid, signal.SIGKILL)


def start(args_file: Path, pid_file: Path, port: int, log: Path) -> int:
    args = [line for line in args_file.read_text().splitlines() if line.strip()]
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1"}
    logged_before = log.stat().st_size if log.exists() else 0
    with log.open("ab") as out:
        process = subprocess.Popen(
            [os.environ["VLLM_PYTHON"], "-m", "vllm.entrypoints.openai.api_server", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    pid_file.write_text(str(process.pid))
    deadline = time.monotonic() + HEALTHY_WITHIN_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            with log.open("rb") as written:
                written.seek(logged_before)
                why = reason(written.read().decode(errors="replace"))
            print(
                f"vLLM exited with {process.returncode}: {why or 'no exception logged'}; see {log}"
            )
            return 1
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as reply:
                if reply.status == 200:
                    return 0
        except OSError:
            pass
        time.sleep(0.5)
    print(f"vLLM did not become healthy in {HEALTHY_WITHIN_S} s")
    return 1


def main() -> int:
    args_file, pid_file, port, log = (
        Path(sys.argv[1]),
        Path(sys.argv[2]),
        int(sys.argv[3]),
        Path(sys.argv[4]),
    )
    stop(pid_file)
    return start(args_file, pid_file, port, log)


if __name__ == "__main__":
    sys.exit(main())
