"""Serve a SimulatedVllm's `/metrics` (and `/health`) over HTTP on loopback."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from autotuner.sim.engine import SimulatedVllm

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class SimServer:
    """A background HTTP server; use as a context manager or call `close()`."""

    def __init__(self, sim: SimulatedVllm, host: str = "127.0.0.1", port: int = 0) -> None:
        self.sim = sim
        self.lock = threading.Lock()
        self.up = True
        handler = _handler(self)
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> SimServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _handler(server: SimServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if not server.up:
                self.send_error(503, "engine restarting")
                return
            if self.path.split("?")[0] == "/metrics":
                with server.lock:
                    body = server.sim.render()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
            elif self.path == "/health":
                body = b""
                self.send_response(200)
            else:
                self.send_error(404)
                return
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    return Handler
