"""A blocking one-request-at-a-time exchange with a broker, for tests that
need the raw response frame (captures, header traps). The client's real
connection layer is kwire.net; this only frames bytes."""

from __future__ import annotations

import socket
import struct
from typing import Any

from kwire.protocol import encode_request


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return bytes(buf)


def exchange(host: str, port: int, request: Any, version: int, correlation_id: int = 1,
             timeout: float = 10.0) -> bytes:
    """Send ``request`` at ``version`` on a fresh connection; return the
    response frame (without its size prefix)."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(b"".join(bytes(c) for c in encode_request(request, version, correlation_id, "kwire-test")))
        (size,) = struct.unpack(">i", recv_exact(sock, 4))
        return recv_exact(sock, size)
