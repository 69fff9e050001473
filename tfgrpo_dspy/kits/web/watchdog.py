"""A deadline for a whole HTTP request, however slowly the server answers.

httpx's timeouts bound each read, not the request; `Watchdog` shuts the request's connection when its time is up,
wherever the request is. `tfgrpo_dspy.kits.web.fetch` runs every request under one.
"""

from __future__ import annotations

import socket
import threading


class Watchdog:
    """Shuts a request's connection once its time is up, wherever the request is (connect, TLS, headers, body).

    httpx's timeouts bound each read, not the request: a server sending a header byte every 0.3 s would hold a
    fetch forever. httpcore's trace hook hands over each new connection's socket; a timer shuts it at the deadline,
    so the blocked read returns at once and the fetch fails with a time out.
    """

    def __init__(self, seconds: float):
        self.fired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def __enter__(self) -> Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def trace(self, event: str, info: dict) -> None:
        if event != "connection.connect_tcp.complete":
            return
        sock = info["return_value"].get_extra_info("socket")
        with self._lock:
            self._sockets.append(sock)
            if self.fired:  # connected just after the deadline
                _shut(sock)

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed
