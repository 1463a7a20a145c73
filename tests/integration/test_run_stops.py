"""`autotuner run` stops on SIGTERM (and a second one) while its step is wedged in a scrape of
a /metrics endpoint that answers 200 and then trickles a byte a second: exit 0 within one loop
interval plus the longest outside-call deadline."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

from tests.integration.conftest import free_port
from tests.support.run import sidecar_process

INTERVAL_S = 1.0
GRACE_S = INTERVAL_S + 1.0  # no target, quality off: the 1 s scrape is the longest call
SLOW_MACHINE_S = 20.0  # a busy 2-core machine may hold the process off the CPU for seconds


@contextmanager
def trickling_metrics() -> Iterator[str]:
    """A /metrics that sends its headers, then one byte a second until the client leaves."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "100000")
            self.end_headers()
            try:
                for _ in range(600):
                    self.wfile.write(b"#")
                    self.wfile.flush()
                    time.sleep(1.0)
            except OSError:
                return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def _up(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=SLOW_MACHINE_S).is_success
    except httpx.HTTPError:
        return False


def test_sigterm_twice_during_a_wedged_scrape_exits_0_within_the_grace(tmp_path: Path) -> None:
    port = free_port()
    with trickling_metrics() as url:
        config = tmp_path / "autotuner.yaml"
        config.write_text(
            f"""\
mode: advise
source: {{urls: ["{url}"], timeout_s: 1s}}
loop: {{interval_s: {INTERVAL_S}s, window_s: 2s}}
quality: {{enabled: false}}
exporter: {{host: 127.0.0.1, port: {port}}}
log: {{format: json}}
"""
        )
        process = sidecar_process(config, subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60
            while not _up(port):
                assert process.poll() is None, process.communicate()[0].decode()
                assert time.monotonic() < deadline, "the sidecar never answered /healthz"
                time.sleep(0.2)
            time.sleep(2 * INTERVAL_S)  # a step is in its scrape now
            asked = time.monotonic()
            process.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            process.send_signal(signal.SIGTERM)
            output, _ = process.communicate(timeout=GRACE_S + SLOW_MACHINE_S)
            took = time.monotonic() - asked
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert process.returncode == 0, output.decode()
    assert took < GRACE_S + SLOW_MACHINE_S
