"""One connection to one broker: a non-blocking socket driven by a selector.

A :class:`Connection` goes through its setup (TCP connect, TLS handshake,
ApiVersions, SASL) and then carries any number of requests in flight,
matched to their responses by correlation id. It never blocks: the owner
(:class:`kwire.client.Client`) calls :meth:`Connection.on_io` when the
selector reports the socket ready and :meth:`Connection.check_timeouts` on
each turn. A connection that fails, for any reason, fails every request it
holds with a retriable :class:`ConnectionLostError` and never hangs.

The Kafka side (handshake, correlation ids, frames read in place, response
limits, KIP-219 throttles, request deadlines) is :class:`kwire.channel.Channel`,
which has no I/O; a :class:`Connection` moves its bytes over the socket.

Addresses: a broker's name is resolved at each connection attempt to every
address it has (:func:`resolve`), and the attempt goes through them in turn:
one that refuses hands on to the next at once, one that does not answer the
TCP connect within its share of ``socket_connection_setup_timeout_ms`` (the
time left divided by the addresses left) too, so that the whole attempt,
TLS and SASL included, stays within that timeout. The address that last
answered is tried first next time (the client remembers it per name). A
name that resolves to nothing fails the attempt with a retriable
:class:`ConnectionLostError` saying so; the client tries again after its
reconnect backoff. (Kafka's Java client, ``client.dns.lookup=use_all_dns_ips``,
moves on to the next address at the next attempt instead.)
"""

from __future__ import annotations

import collections
import errno
import logging
import socket
import ssl
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from kwire.channel import (CLIENT_THROTTLES_FROM, CLUSTER_CHECK_VERSION, FETCH_FRAMING, FETCH_FRAMING_PER_PARTITION, FRAME_GROWTH,
                           OFFLOAD_MIN_BYTES, READ_CHUNK, RECEIVE_MESSAGE_MAX_BYTES, Channel, ConnectionLostError,
                           MisroutedConnectionError, RequestTimedOutError, response_limit)
from kwire.errors import KwireError, without_traceback
from kwire.future import Future
from kwire.sasl import Authenticator

__all__ = ["CLUSTER_CHECK_VERSION", "Connection", "ConnectionLostError", "MisroutedConnectionError", "RequestTimedOutError", "canonical_bootstrap", "resolve", "response_limit",
           "ssl_context_from_config", "CLIENT_THROTTLES_FROM", "FETCH_FRAMING", "FETCH_FRAMING_PER_PARTITION",
           "FRAME_GROWTH", "OFFLOAD_MIN_BYTES", "READ_CHUNK", "RECEIVE_MESSAGE_MAX_BYTES", "TlsError"]

log = logging.getLogger(__name__)


def ssl_context_from_config(cfg: Dict[str, Any]) -> ssl.SSLContext:
    """An SSLContext for a client, made once when the client is: certificate
    and hostname verification on by default; the CAs of ``ssl_cafile`` or
    of Kafka's trust store (``ssl_truststore_*``), else the system's; a
    client certificate (mutual TLS) from ``ssl_certfile`` / ``ssl_keyfile``
    or Kafka's key store (``ssl_keystore_*``), its key's password
    ``ssl_password``. JKS and PKCS12 stores are converted to PEM files by
    :func:`kwire.stores.pem_files` here (cached per process). A ready
    ``ssl_context`` is used as it is. Raises :class:`ConfigError` naming
    the option whose file cannot be used."""
    from kwire.config import ConfigError, ssl_option_name   # lazy: net's imports are not this function's to change
    from kwire.stores import pem_files

    if cfg.get("ssl_context") is not None:
        return cfg["ssl_context"]
    files = pem_files(cfg)
    trust = "ssl_truststore_location" if cfg.get("ssl_truststore_location") else "ssl_cafile"
    try:
        ctx = ssl.create_default_context(cafile=files.cafile)
    except (OSError, ValueError) as e:               # ssl.SSLError is an OSError
        raise ConfigError(f"{ssl_option_name(trust)} {cfg.get(trust)!r}: cannot load the CA certificates "
                          f"({e})") from None
    ctx.check_hostname = bool(cfg.get("ssl_check_hostname", True))
    ctx.verify_mode = ssl.CERT_REQUIRED
    _revocations_and_versions(ctx, cfg)
    if files.certfile:
        keys = "ssl_keystore_location" if cfg.get("ssl_keystore_location") else "ssl_certfile"
        try:
            ctx.load_cert_chain(files.certfile, files.keyfile, files.password)
        except (OSError, ValueError) as e:
            raise ConfigError(f"{ssl_option_name(keys)} {cfg.get(keys)!r}: cannot load the client certificate "
                              f"and key ({e}; wrong {ssl_option_name('ssl_password')}?)") from None
    return ctx


def _revocations_and_versions(ctx: ssl.SSLContext, cfg: Dict[str, Any]) -> None:
    """``ssl_crlfile``: the broker's certificate checked against that
    revocation list (as kafka-python does); ``ssl_enabled_protocols``: the
    lowest to the highest TLS version listed."""
    from kwire.config import ConfigError

    crl = cfg.get("ssl_crlfile")
    if crl:
        try:
            ctx.load_verify_locations(cafile=crl)
        except (OSError, ValueError) as e:
            raise ConfigError(f"ssl_crlfile (ssl.crl.location) {crl!r}: cannot load the revocation list ({e})") \
                from None
        ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    versions = cfg.get("ssl_enabled_protocols")
    if versions:
        chosen = [ssl.TLSVersion[v.replace(".", "_")] for v in versions]      # TLSv1.2: TLSVersion.TLSv1_2
        ctx.minimum_version, ctx.maximum_version = min(chosen), max(chosen)


def resolve(host: str, port: int) -> List[Tuple[Any, ...]]:
    """Every TCP address ``host`` resolves to, in the resolver's order,
    without repeats, as ``(family, type, proto, sockaddr)``. Raises the
    resolver's OSError (``socket.gaierror``) when it resolves to none."""
    out: List[Tuple[Any, ...]] = []
    for family, stype, proto, _, addr in socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM):
        entry = (family, stype, proto, addr)
        if entry not in out:
            out.append(entry)
    return out


def canonical_bootstrap(servers: List[Tuple[str, int]]) -> List[Tuple[str, int]]:
    """``client_dns_lookup="resolve_canonical_bootstrap_servers_only"``: each
    bootstrap name resolved to its addresses, each address replaced by its
    canonical name (a reverse lookup; the address itself when it has none),
    as Kafka's Java client does (Kerberos and TLS want the hosts' own names
    behind an alias). A name that does not resolve now is kept as given
    (logged once): its connections resolve it again later."""
    out: List[Tuple[str, int]] = []
    for host, port in servers:
        try:
            addrs = resolve(host, port)
        except OSError as e:
            log.warning("bootstrap server %s:%s does not resolve (%s); kept as given, resolved again at each "
                        "connection attempt", host, port, e)
            addrs = []
        if not addrs:
            names = [host]
        else:
            names = []
            for _, _, _, addr in addrs:
                try:
                    name = socket.getnameinfo(addr[:2], socket.NI_NAMEREQD)[0]
                except OSError:
                    name = addr[0]
                names.append(name)
        for name in names:
            if (name, port) not in out:
                out.append((name, port))
    return out


def _show(addr: Any) -> str:
    """A socket address as text: ``[::1]:9092``, ``127.0.0.1:9092``."""
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"[{addr[0]}]:{addr[1]}" if ":" in str(addr[0]) else f"{addr[0]}:{addr[1]}"
    return str(addr)


class Connection:
    """A connection to broker ``node_id`` at ``host:port``: a non-blocking
    socket, and the :class:`~kwire.channel.Channel` it carries.

    States: ``connecting`` -> (``tls``) -> ``handshake`` (ApiVersions, SASL)
    -> ``ready``; ``closed`` at the end. Requests sent before ``ready`` wait
    in order and go out once setup is done. ``versions`` maps api_key to the
    version negotiated with this broker (the highest both support).
    """

    def __init__(
        self,
        node_id: int,
        host: str,
        port: int,
        cfg: Dict[str, Any],
        *,
        ssl_context: Optional[ssl.SSLContext] = None,
        on_state: Optional[Callable[["Connection"], None]] = None,
        offload: Optional[Callable[[Callable[[], Any], Future], None]] = None,
        prefer: Optional[Tuple[Any, ...]] = None,
        auth: Optional[Authenticator] = None,
        cluster_id: Optional[str] = None,
    ) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        self.cfg = cfg
        self.state = "init"
        self.error: Optional[BaseException] = None
        self.sock: Optional[socket.socket] = None
        self.sockaddr: Any = None                       # the address being connected to, or connected
        self.resolved: Optional[Tuple[Any, ...]] = None  # that address as :func:`resolve` gave it
        self._prefer = prefer                           # an address of ``resolve``'s to try first
        self._addrs: Deque[Tuple[Any, ...]] = collections.deque()   # addresses not tried yet
        self._addr_failures: List[str] = []
        self._addr_started = self._addr_deadline = 0.0
        self._ssl_context = ssl_context
        self._on_state = on_state
        self._setup_deadline = 0.0
        self.channel = Channel(node_id, host, port, cfg, on_ready=self._channel_ready, on_output=self.flush,
                               on_fail=self.close, offload=offload, auth=auth, cluster_id=cluster_id)
        self.last_activity = time.monotonic()

    # ------------------------------------------------------------- public
    def __repr__(self) -> str:
        return f"<Connection node={self.node_id} {self.host}:{self.port} {self.state}>"

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    @property
    def closed(self) -> bool:
        return self.state == "closed"

    @property
    def versions(self) -> Dict[int, int]:
        return self.channel.versions

    @property
    def broker_ranges(self) -> Dict[int, Tuple[int, int]]:
        return self.channel.broker_ranges

    def in_flight_count(self) -> int:
        return self.channel.in_flight_count()

    def waited(self, now: float) -> float:
        """Seconds the oldest request in flight has waited for its response (0: none in flight)."""
        return self.channel.waited(now)

    def idle(self) -> bool:
        """Ready with nothing in flight, waiting or unwritten."""
        return self.state == "ready" and self.channel.idle()

    def wants_write(self) -> bool:
        return bool(self.channel.out) or self.state in ("connecting",) or (self.state == "tls" and self._tls_wants_write)

    def fileno(self) -> int:
        return self.sock.fileno() if self.sock is not None else -1

    def connect(self) -> None:
        """Start connecting (non-blocking): resolve the name (every address
        it has, :func:`resolve`) and connect to the first address, going on
        to the next one as each fails (see :meth:`_next_address`)."""
        if self.state != "init":
            raise RuntimeError("connect() twice")
        now = time.monotonic()
        self._setup_deadline = now + self.cfg.get("socket_connection_setup_timeout_ms", 10000) / 1000.0
        try:
            addrs = resolve(self.host, self.port)
        except OSError as e:
            self._set_state("connecting")
            self.close(ConnectionLostError(f"cannot resolve {self.host}:{self.port} (node {self.node_id}): {e}"))
            return
        if self._prefer in addrs:               # the address that answered last time first
            addrs.remove(self._prefer)
            addrs.insert(0, self._prefer)
        self._addrs = collections.deque(addrs)
        self._addr_failures = []
        self._next_address(now)

    def _next_address(self, now: float) -> None:
        """Connect to the next address the name resolved to, closing the
        socket of the one before (refused, or its share of the setup time
        gone). Each address gets an equal share of the setup time left
        (``socket_connection_setup_timeout_ms``), so that the whole attempt
        stays within it; one that refuses hands its share to the rest at
        once. With none left the connection closes, naming what each
        address did."""
        while self._addrs:
            entry = self._addrs.popleft()
            family, stype, proto, addr = entry
            self._addr_started = now
            self._addr_deadline = now + max(0.0, self._setup_deadline - now) / (1 + len(self._addrs))
            if self.sock is not None:
                self._drop_socket()
            try:
                sock = socket.socket(family, stype, proto)
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                for opt, key in ((socket.SO_SNDBUF, "socket_send_buffer_bytes"),
                                 (socket.SO_RCVBUF, "socket_receive_buffer_bytes")):
                    size = self.cfg.get(key)
                    if size and size > 0:
                        sock.setsockopt(socket.SOL_SOCKET, opt, size)
            except OSError as e:
                self._addr_failures.append(f"{_show(addr)}: {e}")
                continue
            self.sock = sock
            self.sockaddr, self.resolved = addr, entry
            self._set_state("connecting")
            rc = sock.connect_ex(addr)
            if rc in (0, errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY):
                return
            self._addr_failures.append(f"{_show(addr)}: {errno.errorcode.get(rc, rc)}")
        if self.state == "init":
            self._set_state("connecting")
        self.close(ConnectionLostError(f"connect to {self.host}:{self.port} (node {self.node_id}) failed: "
                                       + "; ".join(self._addr_failures)))

    def _drop_socket(self) -> None:
        """Let go of the socket of an address that failed during setup: the
        owner takes it out of its selector, and the channel drops the setup
        requests with what was read or unwritten (the requests waiting for
        ``ready`` stay)."""
        self._set_state("connecting")
        if self.sock is not None:     # None: an owner took it over (kwire.aio's pending transport)
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = None
        self._tls_wants_write = False
        self.channel.reset(ConnectionLostError(f"address of {self.host}:{self.port} given up"))

    def _address_failed(self, what: str) -> None:
        """The address being connected to refused or timed out: the next
        one, or the connection fails."""
        self._addr_failures.append(f"{_show(self.sockaddr)}: {what}")
        self._next_address(time.monotonic())

    def send(self, request: Any, version: Optional[int] = None, *, expect_response: bool = True,
             flush: bool = True, prepare: Optional[Callable[[Any], Any]] = None, offload: bool = False,
             timeout: Optional[float] = None) -> Future:
        """Queue ``request`` and return the future of its response:
        :meth:`kwire.channel.Channel.send`."""
        return self.channel.send(request, version, expect_response=expect_response, flush=flush, prepare=prepare,
                                 offload=offload, timeout=timeout)

    def throttle_left(self, now: float) -> Optional[float]:
        """Seconds until requests held by a throttle (KIP-219) may go, or
        the first of them times out; None when none is held."""
        return self.channel.throttle_left(now)

    def flush(self) -> None:
        """Write what is queued, as far as the socket takes it now."""
        if self.state in ("ready", "handshake") and self.channel.out:
            try:
                self._flush()
            except OSError as e:      # the requests' futures fail with the rest
                self._io_failed(e)

    def on_io(self, readable: bool, writable: bool) -> None:
        """The selector found the socket ready."""
        try:
            if self.state == "connecting":
                if writable or readable:
                    self._finish_connect()
                return
            if self.state == "tls":
                self._tls_step()
                return
            if writable and self.channel.out:
                self._flush()
            if readable:
                self._read()
        except (OSError, KwireError) as e:      # ssl.SSLError is an OSError
            self._io_failed(e)

    def _io_failed(self, e: BaseException) -> None:
        """Close the connection for the I/O error ``e``, failing what is in flight;
        during setup, a network error (not a TLS or protocol one) moves on to
        the next address when there is one."""
        if self._addrs and self.state in ("connecting", "tls", "handshake") and not isinstance(e, ssl.SSLError) \
                and (isinstance(e, OSError) or type(e) is ConnectionLostError):
            self._address_failed(str(e))
            return
        if isinstance(e, ssl.SSLError):
            if self.state == "handshake":    # refused right after the TLS handshake: TLS 1.3 reports a
                self.close(TlsError(         # missing or refused client certificate this way
                    f"TLS to {self.host}:{self.port}: the broker ended the connection during setup ({e}); "
                    "it may require a client certificate (ssl_certfile / ssl_keyfile)"))
            else:
                self.close(ConnectionLostError(f"TLS connection to {self.host}:{self.port} (node {self.node_id}) "
                                               f"failed: {e}"))
        elif isinstance(e, OSError):
            self.close(ConnectionLostError(f"connection to {self.host}:{self.port} (node {self.node_id}) failed: {e}"))
        else:
            self.close(e)

    def check_timeouts(self, now: float) -> None:
        """Close the connection if setup or a request is overdue; an
        address whose share of the setup time is gone (no TCP connection,
        or no answer to TLS or ApiVersions) hands on to the next one
        (:meth:`_next_address`)."""
        if self._addrs and self.state in ("connecting", "tls", "handshake") and now > self._addr_deadline:
            self._address_failed(f"setup not done within {self._addr_deadline - self._addr_started:.1f} s "
                                 f"({'no TCP connection' if self.state == 'connecting' else 'stuck in ' + self.state})")
            return
        if self.state in ("connecting", "tls", "handshake") and now > self._setup_deadline:
            before = f" (after {'; '.join(self._addr_failures)})" if self._addr_failures else ""
            self.close(ConnectionLostError(
                f"connection setup to {self.host}:{self.port} (node {self.node_id}) timed out in state "
                f"{self.state}{before}"))
            return
        if self.state != "closed":
            overdue = self.channel.check_timeouts(now)
            if overdue is not None:
                self.close(overdue)

    def close(self, error: Optional[BaseException] = None, *, quiet: bool = False) -> None:
        """Close the socket and fail what is in flight or waiting with
        ``error`` (logged unless ``quiet``: an orderly close, which
        :attr:`orderly` then says). The read buffers are freed at once."""
        if self.state == "closed":
            return
        self.error = without_traceback(error or ConnectionLostError(f"connection to node {self.node_id} closed"))
        self.orderly = quiet
        if error is not None and not quiet:
            log.debug("node %s (%s:%s): %s", self.node_id, self.host, self.port, error)
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        self._set_state("closed")
        self.channel.fail_all(self.error)

    orderly = False      # closed by its owner (idle, or the client closing), not by a failure

    # ------------------------------------------------------------ setup
    def _set_state(self, state: str) -> None:
        self.state = state
        if self._on_state is not None:
            self._on_state(self)

    def _finish_connect(self) -> None:
        assert self.sock is not None
        err = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            self._address_failed(errno.errorcode.get(err, str(err)))
            return
        if self._ssl_context is not None:
            self.sock = self._ssl_context.wrap_socket(
                self.sock, server_hostname=self.host, do_handshake_on_connect=False)
            self._tls_wants_write = True
            self._set_state("tls")
            self._tls_step()
        else:
            self._start_handshake()

    _tls_wants_write = False

    def _tls_step(self) -> None:
        assert isinstance(self.sock, ssl.SSLSocket)
        try:
            self.sock.do_handshake()
        except ssl.SSLWantReadError:
            self._tls_wants_write = False
            return
        except ssl.SSLWantWriteError:
            self._tls_wants_write = True
            return
        except ssl.SSLCertVerificationError as e:
            raise TlsError(f"TLS to {self.host}:{self.port}: the broker's certificate was refused: "
                           f"{e.verify_message or e}") from None
        except ssl.SSLError as e:
            raise TlsError(f"TLS handshake with {self.host}:{self.port} failed: {e}") from None
        self._tls_wants_write = False
        self._start_handshake()

    def _start_handshake(self) -> None:
        self._set_state("handshake")
        self.channel.start()

    def _channel_ready(self) -> None:
        self._addrs.clear()           # the other addresses are not wanted now
        self._set_state("ready")

    # ---------------------------------------------------------- the socket
    def _flush(self) -> None:
        sock = self.sock
        assert sock is not None
        out = self.channel.out
        plain = not isinstance(sock, ssl.SSLSocket)
        while out:
            try:
                if plain:
                    sent = sock.sendmsg(list(out)[:64])
                else:
                    sent = sock.send(out[0][:65536])
            except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                return
            self.channel.wrote(sent)
        self.last_activity = time.monotonic()

    def _read(self) -> None:
        sock = self.sock
        assert sock is not None
        channel = self.channel
        while self.state != "closed":
            view = channel.read_buffer()
            try:
                n = sock.recv_into(view)
            except (BlockingIOError, ssl.SSLWantReadError):
                return
            finally:
                view.release()      # a frame read in place may grow only while nothing views it
            if n == 0:
                raise ConnectionLostError(f"node {self.node_id} closed the connection"
                                          + (" mid-response" if channel.mid_frame else ""))
            self.last_activity = time.monotonic()
            channel.received(n)


class TlsError(ConnectionLostError):
    """The TLS handshake failed (certificate refused, wrong name, no client
    certificate when the broker wants one). Not retriable: the same
    configuration fails the same way."""

    retriable = False

