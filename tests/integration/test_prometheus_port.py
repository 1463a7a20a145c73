"""The test Prometheus (conftest.py) starts on another port when the free one it was handed is
taken before it binds, and never returns the server that took it (another worker's, which
answers as a ready Prometheus would)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import httpx
import pytest

from tests.integration import conftest
from tests.integration.conftest import StartPrometheus


class _Ready(BaseHTTPRequestHandler):
    """Another server on the port: it answers 200 to anything, as a ready Prometheus would."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ready")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def taken_port() -> Iterator[int]:
    server = HTTPServer(("127.0.0.1", 0), _Ready)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_prometheus_starts_on_another_port_when_its_first_is_taken(
    start_prometheus: StartPrometheus, taken_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    free_port, handed = conftest.free_port, iter([taken_port])
    monkeypatch.setattr(conftest, "free_port", lambda: next(handed, None) or free_port())
    url = start_prometheus(["127.0.0.1:9"])
    assert not url.endswith(f":{taken_port}")
    flags = httpx.get(f"{url}/api/v1/status/flags", timeout=5).json()["data"]
    assert flags["web.listen-address"] == url.removeprefix("http://")
