"""An HTTP reverse proxy that tests put in front of a real HTTP server
(Apicurio Registry): it relays every request to the server and its answer
back, and records what passed, so a test can count the requests a client
made (its caches, its retries) and see the headers it sent (its
credentials).

When told (:meth:`HttpProxy.fail`), it answers the next requests itself
with an error status (503, 429...) instead of relaying them, then relays
again: a server that fails for a while and recovers. Nothing is ever
invented for a request that is relayed: the real server answers it.

It listens on a free loopback port (``url`` is the server's URL through
it, with the same path), one thread per connection (``ThreadingHTTPServer``,
HTTP/1.1 with keep-alive, as clients use it).
"""

from __future__ import annotations

import http.client
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional, Tuple
from urllib.parse import urlsplit

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-authorization",
              "proxy-authenticate", "host", "content-length"}


@dataclass(frozen=True)
class Seen:
    """One request that reached the proxy: its method, path (with the query) and headers."""

    method: str
    path: str
    headers: Dict[str, str] = field(repr=False)
    failed: bool = False          # answered by the proxy's own error, not relayed


class HttpProxy:
    """A reverse proxy to ``target`` (an ``http://host:port/path`` URL); see the module doc."""

    def __init__(self, target: str) -> None:
        parts = urlsplit(target)
        self._target = (parts.hostname, parts.port or 80)
        self._path = parts.path.rstrip("/")
        self._lock = threading.Lock()
        self._failures: List[Tuple[int, Dict[str, str]]] = []
        self.seen: List[Seen] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:        # quiet
                pass

            def _any(self) -> None:
                proxy._handle(self)

            do_GET = do_POST = do_PUT = do_DELETE = _any

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name=f"HttpProxy:{self.port}")
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self._path}"

    def fail(self, times: int, status: int = 503, headers: Optional[Dict[str, str]] = None) -> None:
        """Answer the next ``times`` requests with ``status`` (a Confluent-style error body) instead of relaying."""
        with self._lock:
            self._failures.extend([(status, dict(headers or {}))] * times)

    def requests(self, method: Optional[str] = None, relayed_only: bool = False) -> List[Seen]:
        with self._lock:
            return [s for s in self.seen if (method is None or s.method == method)
                    and not (relayed_only and s.failed)]

    def reset(self) -> None:
        with self._lock:
            self.seen.clear()
            self._failures.clear()

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        headers = {k: v for k, v in h.headers.items()}
        with self._lock:
            failure = self._failures.pop(0) if self._failures else None
            self.seen.append(Seen(h.command, h.path, headers, failure is not None))
        if failure is not None:
            status, extra = failure
            self._answer(h, status, {"Content-Type": "application/json", **extra},
                         json.dumps({"error_code": 50301 if status == 503 else status,
                                     "message": f"the test proxy answers {status}"}).encode())
            return
        conn = http.client.HTTPConnection(*self._target, timeout=30)
        try:
            conn.request(h.command, h.path, body=body or None,
                         headers={k: v for k, v in headers.items() if k.lower() not in HOP_BY_HOP})
            r = conn.getresponse()
            data = r.read()
            self._answer(h, r.status, {k: v for k, v in r.getheaders() if k.lower() not in HOP_BY_HOP}, data)
        finally:
            conn.close()

    @staticmethod
    def _answer(h: BaseHTTPRequestHandler, status: int, headers: Dict[str, str], data: bytes) -> None:
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "HttpProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
