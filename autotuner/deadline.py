"""A total deadline on one outside call: what remains of it, and an HTTP body read within it.

httpx's timeouts bound each socket read, not the whole request: a server that answers 200 and
then trickles one byte a second never trips a read timeout. Here each request gets what is left
of its deadline as its timeout, the body is read chunk by chunk against a monotonic clock, and
a watchdog shuts the connection's socket at the deadline so that a read blocked in the kernel
returns too.
"""

from __future__ import annotations

import contextlib
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import Enum

import httpx

MIN_TIMEOUT_S = 0.001  # a request is never sent with no time at all (httpx reads 0 as "none")


class Cut(str, Enum):
    """Why a body read stopped before its end."""

    DEADLINE = "deadline"
    TOO_LARGE = "too_large"


class Deadline:
    """A point on the monotonic clock that a call must finish by."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.clock = clock
        self.ends = clock() + seconds

    def remaining(self) -> float:
        return max(self.ends - self.clock(), 0.0)

    @property
    def expired(self) -> bool:
        return self.clock() >= self.ends

    def cap(self, seconds: float) -> float:
        """`seconds`, or what is left of the deadline when that is less (never zero)."""
        return max(min(seconds, self.remaining()), MIN_TIMEOUT_S)

    def timeout(self) -> httpx.Timeout:
        """An httpx timeout where no phase (connect, write, wait for headers) outlives it."""
        return httpx.Timeout(self.cap(self.seconds))

    def sleep(self, seconds: float, stop: threading.Event | None = None) -> bool:
        """Sleep `seconds` if the deadline leaves room for it (True), else do not (False)."""
        if seconds > self.remaining():
            return False
        if stop is not None:
            return not stop.wait(seconds)
        time.sleep(seconds)
        return True


def backoff_s(attempt: int, *, base_s: float = 0.05, ceiling_s: float = 2.0) -> float:
    """Full-jitter exponential backoff (as client-go's retry.DefaultBackoff, jittered)."""
    return random.uniform(0.5, 1.0) * min(ceiling_s, base_s * 2.0**attempt)


def retry_after_s(response: httpx.Response) -> float | None:
    """The server's Retry-After in seconds (the delta form; a date is not trusted)."""
    value = response.headers.get("retry-after", "").strip()
    try:
        return max(float(value), 0.0) if value else None
    except ValueError:
        return None


def read_body(response: httpx.Response, deadline: Deadline, max_bytes: int) -> bytes | Cut:
    """The whole body of a streamed response, or why it was cut: past the deadline (however
    slowly the bytes come) or past `max_bytes`. Other transport errors propagate."""
    body = bytearray()
    with _watchdog(response, deadline):
        try:
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > max_bytes:
                    return Cut.TOO_LARGE
                if deadline.expired:
                    return Cut.DEADLINE
        except httpx.HTTPError:
            if deadline.expired:
                return Cut.DEADLINE  # the watchdog shut the socket
            raise
    return bytes(body)


@contextmanager
def _watchdog(response: httpx.Response, deadline: Deadline) -> Iterator[None]:
    """Shut the response's socket when the deadline passes while the body is being read."""
    sock = _socket(response)
    if sock is None:
        yield  # no socket (a mock transport): the chunk loop's own check is the bound
        return
    timer = threading.Timer(deadline.remaining(), _shut, (sock,))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _socket(response: httpx.Response) -> socket.socket | None:
    stream = response.extensions.get("network_stream")
    if stream is None:
        return None
    sock = stream.get_extra_info("socket")
    return sock if isinstance(sock, socket.socket) else None


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed: the read has ended on its own
        sock.shutdown(socket.SHUT_RDWR)
