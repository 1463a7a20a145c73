"""A loopback HTTP server whose answers misbehave on purpose: trickle, hang, reset, overflow.

Each accepted connection reads one request and hands the socket to the behaviour the test
set for that path; a behaviour waits on the server's stop event (never a bare sleep), so
`close()` ends every connection at once. 127.0.0.1 only.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections.abc import Callable
from contextlib import closing, suppress
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: bytes


Behaviour = Callable[[socket.socket, Request, threading.Event], None]


def head(status: int, headers: dict[str, str] | None = None, length: int | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status} X", "Connection: close"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def answer(
    body: bytes | str, status: int = 200, headers: dict[str, str] | None = None
) -> Behaviour:
    data = body.encode() if isinstance(body, str) else body

    def send(sock: socket.socket, request: Request, stop: threading.Event) -> None:
        sock.sendall(head(status, headers, len(data)) + data)

    return send


def json_answer(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Behaviour:
    return answer(json.dumps(body), status, {"Content-Type": "application/json", **(headers or {})})


def trickle(body: bytes | str, every_s: float, *, then_hang_after: int | None = None) -> Behaviour:
    """Headers at once, then the body one byte per `every_s` (forever, however long the
    body claims to be); with `then_hang_after`, silence after that many bytes."""
    data = body.encode() if isinstance(body, str) else body

    def send(sock: socket.socket, request: Request, stop: threading.Event) -> None:
        sock.sendall(head(200, {"Content-Type": "text/plain"}, len(data) * 1000))
        sent = 0
        while not stop.is_set():
            if then_hang_after is not None and sent >= then_hang_after:
                stop.wait()
                return
            sock.sendall(data[sent % len(data) : sent % len(data) + 1])
            sent += 1
            stop.wait(every_s)

    return send


def reset_mid_body(body: bytes | str) -> Behaviour:
    """Half of the body, then a TCP reset (SO_LINGER 0)."""
    data = body.encode() if isinstance(body, str) else body

    def send(sock: socket.socket, request: Request, stop: threading.Event) -> None:
        sock.sendall(head(200, {"Content-Type": "text/plain"}, len(data)) + data[: len(data) // 2])
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()

    return send


def endless(total_bytes: int, chunk: bytes = b"0" * 65536) -> Behaviour:
    """A 200 whose body goes on for `total_bytes` (no length given), as fast as it is read."""

    def send(sock: socket.socket, request: Request, stop: threading.Event) -> None:
        sock.sendall(head(200, {"Content-Type": "application/json"}))
        sent = 0
        while sent < total_bytes and not stop.is_set():
            sock.sendall(chunk)
            sent += len(chunk)

    return send


class FaultServer:
    """Serves `routes[path]` (a list of behaviours used in turn, the last one repeated)."""

    def __init__(self) -> None:
        self.routes: dict[str, list[Behaviour]] = {}
        self.requests: list[Request] = []
        self.stop = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.open: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def route(self, path: str, *behaviours: Behaviour) -> None:
        self.routes[path] = list(behaviours)

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                sock, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.open.append(sock)
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        try:
            request = _read_request(sock)
            self.requests.append(request)
            queue = self.routes.get(request.path)
            if not queue:
                sock.sendall(head(404, length=0))
                return
            behaviour = queue.pop(0) if len(queue) > 1 else queue[0]
            behaviour(sock, request, self.stop)
        except OSError:
            pass  # the client went away: that is its right
        finally:
            with suppress(OSError):
                sock.close()

    def close(self) -> None:
        self.stop.set()
        self.listener.close()
        for sock in self.open:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self.thread.join(timeout=5)


def _read_request(sock: socket.socket) -> Request:
    sock.settimeout(30)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise OSError("client closed before its request was whole")
        data += chunk
    header, _, body = data.partition(b"\r\n\r\n")
    lines = header.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    parts = urlsplit(target)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    return Request(method, parts.path, query, body)


def fault_server() -> closing[FaultServer]:
    """A FaultServer on a free port, closed when the `with` block ends."""
    return closing(FaultServer())
