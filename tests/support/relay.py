"""A TCP relay to a real server that a test opens when it chooses: an outage with no fault injected
into the server itself.

It listens from the start, on a loopback port of its own. While closed it accepts each connection
and closes it at once (the client sees the server go away, as during an API-server restart); once
``open()`` is called it pipes every new connection to the target, both ways, bytes untouched (TLS
passes through: the client still checks the real server's certificate).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType


class Relay:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._open = threading.Event()
        self._closed = threading.Event()
        self.refused = 0  # connections closed while the relay was shut: the client really tried
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True, name="relay-accept").start()

    def open(self) -> None:
        self._open.set()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            if not self._open.is_set():
                self.refused += 1
                conn.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                conn.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets += [conn, upstream]
            for src, dst in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=_pipe, args=(src, dst), daemon=True, name="relay-pipe").start()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    """Copy until either side ends; then end both, so the peer sees the close."""
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
    for sock in (src, dst):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
