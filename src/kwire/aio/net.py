"""One connection to a broker on an asyncio event loop: the asyncio side of
:class:`kwire.net.Connection`.

Everything Kafka-side is the same object as the blocking client's (the
:class:`kwire.channel.Channel`: handshake, framing, requests in flight,
deadlines, throttles), and so is the connection's life (its states, the
addresses a name resolves to, each address's share of
``socket_connection_setup_timeout_ms``, the errors it closes with). What
differs is who does the I/O:

- the TCP connect of each address is watched with ``loop.add_writer``;
- the connected socket then becomes an asyncio transport
  (``loop.create_connection(sock=...)``), TLS included (asyncio does the TLS
  handshake, bounded by the address's share of the setup time);
- reads go straight into the channel's frame buffer: :class:`_Protocol` is
  an ``asyncio.BufferedProtocol`` whose ``get_buffer`` is
  :meth:`~kwire.channel.Channel.read_buffer` and whose ``buffer_updated``
  is :meth:`~kwire.channel.Channel.received`, so a response is read in place
  as in the blocking client;
- writes hand the channel's queued chunks to the transport.

Name resolution runs in the loop's default executor (an address literal is
taken as it is), so a slow DNS server does not stall the loop.

Works on asyncio's default loop and on uvloop.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import ipaddress
import socket
import ssl
import time
from typing import Any, Callable, List, Optional, Tuple

from kwire.errors import KwireError
from kwire.net import Connection, ConnectionLostError, TlsError, resolve

__all__ = ["AioConnection"]

#: Seconds asyncio's TLS handshake timeout allows beyond the address's share
#: of the setup time: the tick closes an overdue setup first.
_HANDSHAKE_BACKSTOP = 1.0


def _literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


class _Protocol(asyncio.BufferedProtocol):
    """The transport's events, handed to the connection.

    A frame read in place may grow only while nothing views it, so the view
    given to the transport is released before the bytes are handed on.
    asyncio's loop has let go of it by ``buffer_updated``; uvloop holds its
    own hold until ``buffer_updated`` returns, and releasing ours then
    raises ``BufferError``: ours goes with the object, and uvloop's right
    after. Handing the bytes on meanwhile is safe: it never resizes the
    buffer they were read into (a frame grows only in ``get_buffer``, by
    then released by both)."""

    __slots__ = ("conn", "view")

    def __init__(self, conn: "AioConnection") -> None:
        self.conn = conn
        self.view: Optional[memoryview] = None

    def get_buffer(self, sizehint: int) -> memoryview:
        self.view = view = self.conn.channel.read_buffer()
        return view

    def buffer_updated(self, nbytes: int) -> None:
        view, self.view = self.view, None
        if view is not None:
            try:
                view.release()
            except BufferError:      # uvloop's hold: released when this returns
                pass
            del view
        self.conn._received(nbytes)

    def eof_received(self) -> bool:
        conn = self.conn
        conn._io_failed(ConnectionLostError(f"node {conn.node_id} closed the connection"
                                            + (" mid-response" if conn.channel.mid_frame else "")))
        return False

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        conn = self.conn
        if conn.state != "closed" and conn._transport is not None:
            conn._io_failed(exc if isinstance(exc, OSError) else
                            ConnectionLostError(f"node {conn.node_id} closed the connection"
                                                + (f": {exc}" if exc is not None else "")))


class AioConnection(Connection):
    """:class:`kwire.net.Connection` with its I/O on ``loop``; ``on_event``
    is called after anything happened on it (bytes read, a state changed),
    so the client can run what follows I/O once per loop turn."""

    def __init__(self, node_id: int, host: str, port: int, cfg: Any, *, loop: asyncio.AbstractEventLoop,
                 on_event: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(node_id, host, port, cfg, **kwargs)
        self._loop = loop
        self._on_event = on_event
        self._transport: Optional[asyncio.Transport] = None
        self._protocol = _Protocol(self)
        self._watching: Optional[int] = None       # the fd add_writer watches while the TCP connect runs
        self._task: Optional[asyncio.Task] = None  # resolving, or making the transport (TLS)

    # ------------------------------------------------------------- setup
    def connect(self) -> None:
        """Start connecting: resolve the name (off the loop, unless it is
        an address), then connect to each address in turn as the blocking
        connection does."""
        if self.state != "init":
            raise RuntimeError("connect() twice")
        if _literal(self.host):
            super().connect()
            return
        self._setup_deadline = time.monotonic() + self.cfg.get("socket_connection_setup_timeout_ms", 10000) / 1000.0
        self._set_state("connecting")
        self._task = self._loop.create_task(self._resolve())

    async def _resolve(self) -> None:
        try:
            addrs = await self._loop.run_in_executor(None, resolve, self.host, self.port)
        except OSError as e:
            self._task = None
            self.close(ConnectionLostError(f"cannot resolve {self.host}:{self.port} (node {self.node_id}): {e}"))
            self._on_event()
            return
        self._task = None
        if self.state == "closed":
            return
        self._addresses(addrs)
        self._on_event()

    def _addresses(self, addrs: List[Tuple[Any, ...]]) -> None:
        if self._prefer in addrs:
            addrs.remove(self._prefer)
            addrs.insert(0, self._prefer)
        self._addrs = collections.deque(addrs)
        self._addr_failures = []
        self.state = "init"           # _next_address sets "connecting" again, with a socket
        self._next_address(time.monotonic())

    def _next_address(self, now: float) -> None:
        super()._next_address(now)
        if self.state == "connecting" and self.sock is not None:
            self._watching = fd = self.sock.fileno()
            self._loop.add_writer(fd, self._connected)

    def _unwatch(self) -> None:
        if self._watching is not None:
            self._loop.remove_writer(self._watching)
            self._watching = None

    def _connected(self) -> None:
        """The TCP connect of the address being tried finished (or failed)."""
        self._unwatch()
        if self.state != "connecting" or self.sock is None:
            return
        err = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            self._address_failed(errno.errorcode.get(err, str(err)))
        else:
            if self._ssl_context is not None:
                self._set_state("tls")
            self._start_transport(self.sock)
        self._on_event()

    def _start_transport(self, sock: socket.socket) -> None:
        """Make ``sock`` a transport in a task. Once the task runs, asyncio
        owns the socket: the transport exists from its first step, its reader
        is registered a loop turn later, and a cancelled task closes it. So a
        connection given up meanwhile lets go of the socket without closing
        it (:meth:`_release_socket`), else the fd, closed or already reused
        by another connection, would be registered under this transport.
        Only a task cancelled before it ran leaves the socket to close here."""
        started: List[bool] = []
        self._task = task = self._loop.create_task(self._make_transport(sock, started))
        task.add_done_callback(lambda _: None if started else sock.close())

    def _release_socket(self) -> None:
        if self._task is not None and self.sock is not None:
            self.sock = None          # the pending transport task owns it (see _start_transport)

    async def _make_transport(self, sock: socket.socket, started: List[bool]) -> None:
        started.append(True)
        ctx = self._ssl_context
        share = max(0.1, self._addr_deadline - time.monotonic()) if self._addrs else \
            max(0.1, self._setup_deadline - time.monotonic())
        try:
            if ctx is not None:
                # the setup deadline is the tick's (check_timeouts, as in the blocking client): asyncio's own
                # handshake timeout is only a backstop, later, so that a slow handshake fails the same way
                transport, _ = await self._loop.create_connection(
                    lambda: self._protocol, sock=sock, ssl=ctx, server_hostname=self.host,
                    ssl_handshake_timeout=share + _HANDSHAKE_BACKSTOP)
            else:
                transport, _ = await self._loop.create_connection(lambda: self._protocol, sock=sock)
        except asyncio.CancelledError:
            raise
        except ssl.SSLCertVerificationError as e:
            self._task = None
            self._io_failed(TlsError(f"TLS to {self.host}:{self.port}: the broker's certificate was refused: "
                                     f"{e.verify_message or e}"))
            self._on_event()
            return
        except ssl.SSLError as e:
            self._task = None
            self._io_failed(TlsError(f"TLS handshake with {self.host}:{self.port} failed: {e}"))
            self._on_event()
            return
        except (OSError, asyncio.TimeoutError) as e:
            self._task = None
            if ctx is not None and type(e) is ConnectionResetError and e.errno is None:
                # asyncio's word (and uvloop's) for an EOF during the TLS handshake, where the blocking
                # client's do_handshake raises SSLEOFError: the same TlsError (not retriable)
                self._io_failed(TlsError(f"TLS handshake with {self.host}:{self.port} failed: "
                                         "EOF occurred in violation of protocol"))
            else:
                self._io_failed(e if isinstance(e, OSError) else ConnectionLostError(
                    f"connection setup to {self.host}:{self.port} (node {self.node_id}) timed out in state tls"))
            self._on_event()
            return
        self._task = None
        if self.sock is not sock or self.state == "closed":     # given up meanwhile
            transport.abort()
            return
        self._transport = transport
        self._start_handshake()
        self._on_event()

    def _io_failed(self, e: BaseException) -> None:
        if isinstance(e, (ConnectionResetError, BrokenPipeError)) and self._ssl_context is not None \
                and self.state == "handshake" and not self.channel.versions:
            # TLS 1.3: a broker refusing the client's certificate (none given, or one it does not trust) says so
            # with an alert after the client's handshake is done, and closes. The blocking client sends ApiVersions
            # at once and reads the alert (an SSLError: TlsError); here the write comes a loop turn later, lands on
            # the closed connection and the reset wins over the unread alert. The same TlsError, not a retry.
            e = ssl.SSLError(f"{e.strerror or e}; no TLS alert read")
        super()._io_failed(e)

    def _drop_socket(self) -> None:
        self._unwatch()
        self._release_socket()
        self._cancel_task()
        transport, self._transport = self._transport, None
        if transport is not None:
            self.sock = None          # the transport owns it now
            transport.abort()
            self._set_state("connecting")
            self.channel.reset(ConnectionLostError(f"address of {self.host}:{self.port} given up"))
            return
        super()._drop_socket()

    def _cancel_task(self) -> None:
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task(self._loop):
            task.cancel()

    # --------------------------------------------------------------- I/O
    def wants_write(self) -> bool:
        return False          # the transport buffers what it cannot write yet

    def on_io(self, readable: bool, writable: bool) -> None:     # pragma: no cover - no selector here
        raise KwireError("an asyncio connection has no selector events")

    def flush(self) -> None:
        """Hand what the channel queued to the transport."""
        transport = self._transport
        out = self.channel.out
        if transport is None or not out or self.state not in ("ready", "handshake"):
            return
        if transport.is_closing():
            self._io_failed(ConnectionLostError(f"connection to {self.host}:{self.port} (node {self.node_id}) "
                                                "closed while writing"))
            return
        n = 0
        if len(out) == 1:
            chunk = out[0]
            transport.write(chunk)
            n = len(chunk) if not isinstance(chunk, memoryview) else chunk.nbytes
        else:
            chunks = list(out)
            transport.writelines(chunks)
            n = sum(c.nbytes if isinstance(c, memoryview) else len(c) for c in chunks)
        self.channel.wrote(n)
        self.last_activity = time.monotonic()

    def _received(self, n: int) -> None:
        if self.state == "closed":
            return
        self.last_activity = time.monotonic()
        try:
            self.channel.received(n)
        except (OSError, KwireError) as e:
            self._io_failed(e)
        self._on_event()

    def close(self, error: Optional[BaseException] = None, *, quiet: bool = False) -> None:
        if self.state == "closed":
            return
        self._unwatch()
        self._release_socket()
        self._cancel_task()
        transport, self._transport = self._transport, None
        if transport is not None:
            self.sock = None          # the transport owns it: aborting it closes it
            transport.abort()
        super().close(error, quiet=quiet)
        self._on_event()
