"""The test Prometheus (conftest.py) starts on another port when the free one it was handed is
taken before it binds (another worker's server, a client's connection)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import httpx
import pytest

from tests.integration import conftest
from tests.integration.conftest import StartPrometheus


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_prometheus_starts_on_another_port_when_its_first_is_taken(
    start_prometheus: StartPrometheus, taken_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    handed = iter([taken_port, conftest.free_port()])
    monkeypatch.setattr(conftest, "free_port", lambda: next(handed))
    url = start_prometheus(["127.0.0.1:9"])
    assert not url.endswith(f":{taken_port}")
    assert httpx.get(f"{url}/-/ready", timeout=5).status_code == 200
