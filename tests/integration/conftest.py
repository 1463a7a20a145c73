"""A real Prometheus server on 127.0.0.1, started per test with a temporary config and data
directory and stopped after. scripts/test.sh installs Debian's `prometheus` when missing."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import httpx
import pytest


class StartPrometheus(Protocol):
    def __call__(
        self, targets: list[str], scrape_interval: str = ..., pods: dict[str, str] | None = ...
    ) -> str:
        """Start Prometheus scraping `targets` (host:port), every series labelled
        `namespace="llm"` and, with `pods` (target -> pod name), `pod` as a kube-prometheus
        PodMonitor labels it; its URL once ready."""
        ...


PORT_TRIES = 3


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/-/ready", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _is_ours(url: str, data: Path) -> bool:
    """Whether the Prometheus answering at `url` is the one writing to `data`: until ours has
    failed to bind a taken port, another worker's server may answer there."""
    try:
        flags = httpx.get(f"{url}/api/v1/status/flags", timeout=1).json()["data"]
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return False
    return isinstance(flags, dict) and flags.get("storage.tsdb.path") == str(data)


def static_configs(targets: list[str], pods: dict[str, str] | None) -> str:
    """The scrape job's static configs: every target in one, or one per pod."""
    if pods is None:
        hosts = ", ".join(f'"{t}"' for t in targets)
        return f"{{targets: [{hosts}], labels: {{namespace: llm}}}}"
    return ", ".join(
        f'{{targets: ["{t}"], labels: {{namespace: llm, pod: {pods[t]}}}}}' for t in targets
    )


@pytest.fixture
def start_prometheus(tmp_path: Path) -> Iterator[StartPrometheus]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is not installed: ./scripts/test.sh installs it")
    processes: list[subprocess.Popen[bytes]] = []

    def start(
        targets: list[str], scrape_interval: str = "200ms", pods: dict[str, str] | None = None
    ) -> str:
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n"
            f"  scrape_interval: {scrape_interval}\n"
            f"  evaluation_interval: {scrape_interval}\n"
            "scrape_configs:\n"
            "  - job_name: vllm\n"
            f"    static_configs: [{static_configs(targets, pods)}]\n"
        )
        # A free port can be taken by another worker's server or a client's connection before
        # Prometheus binds it: on that refusal, try another.
        for _ in range(PORT_TRIES):
            url = launch(config, free_port())
            if url is not None:
                return url
        pytest.fail(f"prometheus found no free port in {PORT_TRIES} tries")

    def launch(config: Path, port: int) -> str | None:
        """Prometheus on `port`: its URL once ready, None if the port was taken meanwhile."""
        log_path = tmp_path / "prometheus.log"
        with log_path.open("wb") as out:  # the child keeps its own copy of the descriptor
            process = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tmp_path / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--web.enable-lifecycle",
                    "--storage.tsdb.retention.time=1h",
                    "--log.level=warn",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        processes.append(process)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if process.poll() is not None:
                log = log_path.read_text()
                if "address already in use" in log:
                    return None
                pytest.fail(f"prometheus exited: {log}")
            if _ready(url) and _is_ours(url, tmp_path / "data"):
                return url
            time.sleep(0.1)
        pytest.fail("prometheus did not become ready within 30 s")

    yield start
    for process in processes:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


# How long a wait on Prometheus may take before it fails. The waits end on their condition, so
# this only bounds a failure: on a busy 2-core machine a sidecar's start and scrapes that time
# out have taken more than 20 s to give 10 samples.
SAMPLES_DEADLINE_S = 90.0


def wait_for_target_down(
    prometheus: str, selector: str, timeout_s: float = SAMPLES_DEADLINE_S
) -> float:
    """Block until Prometheus has recorded a failed scrape of a target of `selector` (its `up`
    0), and return that scrape's time: every series of the target is stale from then on."""
    seen = _wait_until_at_least(prometheus, f"timestamp(up{{{selector}}} == 0)", 0.0, timeout_s)
    if seen is None:
        pytest.fail(f"prometheus recorded no failed scrape of {selector} in {timeout_s:.0f} s")
    return seen


def scraped_without_a_failure(prometheus: str, span_s: float) -> float:
    """A past time whose last `span_s` seconds every target's scrapes cover, none of them
    failed. A failed scrape marks the target's series stale, so a window read at "now" can find
    nothing; at 200 ms the scrape's timeout is missed on a busy machine."""
    span = f"{span_s:g}s"
    deadline = time.monotonic() + SAMPLES_DEADLINE_S
    while time.monotonic() < deadline:
        at = time.time() - 2.0  # every scrape before it has been recorded
        query = {"query": f"min(min_over_time(up[{span}]))", "time": f"{at:.3f}"}
        result = httpx.get(f"{prometheus}/api/v1/query", params=query, timeout=10).json()
        found = result["data"]["result"]
        if found and float(found[0]["value"][1]) == 1.0:
            return at
        time.sleep(0.2)
    pytest.fail(f"no {span} without a failed scrape in {SAMPLES_DEADLINE_S:.0f} s")


def _wait_until_at_least(
    prometheus: str, query: str, least: float, timeout_s: float
) -> float | None:
    """Prometheus's first answer to `query` once it reaches `least`, or within `timeout_s` the
    last answer seen (None: none) when it never does."""
    deadline = time.monotonic() + timeout_s
    seen: float | None = None
    while time.monotonic() < deadline:
        result = httpx.get(f"{prometheus}/api/v1/query", params={"query": query}).json()
        values = result["data"]["result"]
        if values:
            seen = float(values[0]["value"][1])
            if seen >= least:
                return seen
        time.sleep(0.2)
    return seen


def wait_for_samples(
    prometheus: str, query: str, count: int, timeout_s: float = SAMPLES_DEADLINE_S
) -> None:
    """Block until `query` has at least `count` samples in Prometheus (scrapes happened)."""
    seen = _wait_until_at_least(prometheus, f"count_over_time({query}[1m])", count, timeout_s)
    if seen is None or seen < count:
        pytest.fail(
            f"prometheus did not collect {count} samples of {query} in {timeout_s:.0f} s "
            f"(it had {seen or 0:.0f})"
        )


def wait_for_sample_after(
    prometheus: str, query: str, after: float, timeout_s: float = SAMPLES_DEADLINE_S
) -> float:
    """Block until Prometheus holds a sample of every series of `query` scraped at or after
    `after` (Unix seconds), and return the earliest of those latest scrapes: a window ending
    there is covered by scrapes to its end, however late the query that follows comes."""
    seen = _wait_until_at_least(prometheus, f"min(timestamp({query}))", after, timeout_s)
    if seen is None or seen < after:
        pytest.fail(f"prometheus took no sample of {query} after {after} in {timeout_s:.0f} s")
    return seen
