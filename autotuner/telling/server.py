"""The sidecar's HTTP endpoints: /metrics, /healthz (the loop is alive), /readyz (profile
loaded and data fresh) and /decision (the latest step as JSON)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol

from autotuner.telling.snapshot import Snapshot, decision_document

Alive = Callable[[], bool]
Ready = Callable[[], tuple[bool, str]]
Reply = tuple[int, bytes, str]  # status, body, content type


class Exported(Protocol):
    """What the endpoints serve: a sidecar's TunerMetrics, or the fleet's."""

    def render(self) -> bytes: ...

    def current(self) -> Snapshot: ...


TEXT = "text/plain"
METRICS = "text/plain; version=0.0.4; charset=utf-8"


def answer(path: str, metrics: Exported, alive: Alive, ready: Ready) -> Reply:
    """The reply to a GET of `path` (its query aside)."""
    path = path.split("?")[0]
    if path == "/metrics":
        return 200, metrics.render(), METRICS
    if path == "/healthz":
        ok = bool(alive())
        return (200, b"ok\n", TEXT) if ok else (503, b"loop stalled\n", TEXT)
    if path == "/readyz":
        ready_now, why = ready()
        return 200 if ready_now else 503, f"{why}\n".encode(), TEXT
    if path == "/decision":
        body = json.dumps(decision_document(metrics.current()), indent=2)
        return 200, body.encode(), "application/json"
    return 404, b"not found\n", TEXT


class ExporterServer:
    """The endpoints on a thread of their own (`port` 0 takes a free one)."""

    def __init__(
        self, metrics: Exported, *, host: str, port: int, alive: Alive, ready: Ready
    ) -> None:
        self.metrics = metrics

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                return

            def do_GET(self) -> None:
                status, body, kind = answer(self.path, metrics, alive, ready)
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
