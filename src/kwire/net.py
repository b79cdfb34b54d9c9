"""One connection to one broker: a non-blocking socket driven by a selector.

A :class:`Connection` goes through its setup (TCP connect, TLS handshake,
ApiVersions, SASL) and then carries any number of requests in flight,
matched to their responses by correlation id. It never blocks: the owner
(:class:`kwire.client.Client`) calls :meth:`Connection.on_io` when the
selector reports the socket ready and :meth:`Connection.check_timeouts` on
each turn. A connection that fails, for any reason, fails every request it
holds with a retriable :class:`ConnectionLostError` and never hangs.

Frames: each is an int32 size and that many bytes. A response larger than
the read buffer is read into a buffer of its own (``recv_into``, no copy
after), so the record data of a Fetch response is handed to the codec as
views into it. That buffer grows as the bytes arrive (doubling, and to the
declared size once a sixteenth of it came): a size prefix alone allocates
nothing, and a buffer is at most 16 times the bytes received.

Every response is bounded by what its request can legitimately get back
(:func:`response_limit`): ``receive_message_max_bytes`` (librdkafka's option
and default, 100,000,000 bytes), or for a Fetch the larger of that and the
request's ``max_bytes``, plus room for the framing. A size prefix past the
bound closes the connection with a :class:`ProtocolError` that names the
node, the size, the limit and the option to raise. The bound is not tighter
for a Fetch because of KIP-74: a broker returns the first batch of a fetch
whole even when it is larger than ``max_bytes`` or ``partition_max_bytes``
(the topic's ``max.message.bytes`` bounds it, which a client does not
know), so that a consumer always makes progress; such a batch is accepted
up to ``receive_message_max_bytes``.

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

Quotas (KIP-219): a response whose ``throttle_time_ms`` is positive, at a
version from which the broker answers at once and leaves the waiting to
the client (:data:`CLIENT_THROTTLES_FROM`), mutes the connection for that
long: requests sent meanwhile wait, in order, and go out once the time is
up (:meth:`Connection.check_timeouts`, which the client calls on each turn
and wakes up for). This is the one place kwire honours quotas: every
client (producer, consumer, admin, group, transactions) sends through it.
"""

from __future__ import annotations

import collections
import errno
import functools
import logging
import socket
import ssl
import struct
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from kwire import protocol
from kwire._codec import resize_frame
from kwire.errors import KwireError, ProtocolError, without_traceback
from kwire.future import Future, KafkaTimeoutError
from kwire.protocol.api_keys import ApiKey
from kwire.protocol.versions import apiversions_retry_version
from kwire.sasl import SaslAuthenticationError, mechanism_for

__all__ = ["Connection", "ConnectionLostError", "RequestTimedOutError", "canonical_bootstrap", "resolve", "response_limit",
           "ssl_context_from_config"]

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_CORR = struct.Struct(">i")
READ_CHUNK = 256 * 1024
FRAME_GROWTH = 16            # a frame's buffer is at most this many times the bytes that came
RECEIVE_MESSAGE_MAX_BYTES = 100_000_000     # librdkafka's receive.message.max.bytes default
FETCH_FRAMING = 64 * 1024                   # a Fetch response's room for headers, ...
FETCH_FRAMING_PER_PARTITION = 1024          # ... and per partition asked for (offsets, aborted transactions)
OFFLOAD_MIN_BYTES = 256 * 1024              # an offloadable response this large is decoded off the I/O thread



class ConnectionLostError(KwireError):
    """The connection to a broker failed or closed; what was in flight on it
    is failed with this error. Retriable: the client reconnects."""

    retriable = True


class RequestTimedOutError(KafkaTimeoutError):
    """A request got no response within ``request_timeout_ms``; its
    connection is closed (the response may still come, on a dead socket).
    A request whose time ran out before it was sent (held by setup or a
    throttle) fails alone, and the connection stays."""


class _InFlight:
    __slots__ = ("corr", "api_key", "version", "future", "timeout", "deadline", "response_class", "limit", "prepare",
                 "offload")

    def __init__(self, corr: int, api_key: int, version: int, future: Future, timeout: float, response_class: Any,
                 limit: int, prepare: Optional[Callable[[Any], Any]], offload: bool):
        self.corr = corr
        self.api_key = api_key
        self.version = version
        self.future = future
        self.timeout = timeout        # seconds it may wait for its response
        self.deadline = time.monotonic() + timeout
        self.response_class = response_class
        self.limit = limit            # the largest response frame accepted
        self.prepare = prepare        # applied to the decoded response; its result completes the future
        self.offload = offload        # a large response may be decoded (and prepared) off the I/O thread


def response_limit(request: Any, cfg: Dict[str, Any]) -> int:
    """The largest response frame (bytes after the size prefix) accepted for
    ``request``: ``receive_message_max_bytes``; for a Fetch, the larger of
    that and the request's ``max_bytes`` (the consumer's ``fetch_max_bytes``
    shared among its ``max_in_flight_fetches``), plus 64 KiB and 1 KiB per
    partition asked for, for the framing. KIP-74's oversized first batch is
    accepted up to ``receive_message_max_bytes`` (see the module doc)."""
    limit = cfg.get("receive_message_max_bytes", RECEIVE_MESSAGE_MAX_BYTES)
    if request.API_KEY == ApiKey.FETCH:
        parts = sum(len(t.partitions or ()) for t in (request.topics or ()))
        limit = max(limit, request.max_bytes) + FETCH_FRAMING + FETCH_FRAMING_PER_PARTITION * parts
    return limit


#: KIP-219: the first version of each API at which a broker answers a
#: throttled request at once and the client waits out ``throttle_time_ms``
#: (before it, the broker delayed the response itself). APIs not listed are
#: newer than KIP-219: from version 0.
CLIENT_THROTTLES_FROM: Dict[int, int] = {
    ApiKey.PRODUCE: 6, ApiKey.FETCH: 8, ApiKey.LIST_OFFSETS: 3, ApiKey.METADATA: 6, ApiKey.OFFSET_COMMIT: 4,
    ApiKey.OFFSET_FETCH: 4, ApiKey.FIND_COORDINATOR: 2, ApiKey.JOIN_GROUP: 3, ApiKey.HEARTBEAT: 2,
    ApiKey.LEAVE_GROUP: 2, ApiKey.SYNC_GROUP: 2, ApiKey.DESCRIBE_GROUPS: 2, ApiKey.LIST_GROUPS: 2,
    ApiKey.API_VERSIONS: 2, ApiKey.CREATE_TOPICS: 3, ApiKey.DELETE_TOPICS: 2, ApiKey.DELETE_RECORDS: 1,
    ApiKey.INIT_PRODUCER_ID: 1, ApiKey.OFFSET_FOR_LEADER_EPOCH: 1, ApiKey.ADD_PARTITIONS_TO_TXN: 1,
    ApiKey.ADD_OFFSETS_TO_TXN: 1, ApiKey.END_TXN: 1, ApiKey.TXN_OFFSET_COMMIT: 1, ApiKey.DESCRIBE_ACLS: 1,
    ApiKey.CREATE_ACLS: 1, ApiKey.DELETE_ACLS: 1, ApiKey.DESCRIBE_CONFIGS: 2, ApiKey.CREATE_PARTITIONS: 1,
    ApiKey.DELETE_GROUPS: 1,
}


def _decode(frame: memoryview, response_class: Any, version: int, prepare: Optional[Callable[[Any], Any]],
            throttle: Optional[Callable[[int], None]] = None) -> Any:
    """The response in ``frame``, passed through ``prepare`` when given;
    its ``throttle_time_ms`` handed to ``throttle`` when the client is to
    wait it out (KIP-219)."""
    _, resp = protocol.decode_response(frame, response_class, version)
    if throttle is not None:
        ms = getattr(resp, "throttle_time_ms", 0) or 0
        if ms > 0 and version >= CLIENT_THROTTLES_FROM.get(response_class.API_KEY, 0):
            throttle(ms)
    return resp if prepare is None else prepare(resp)


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
    if files.certfile:
        keys = "ssl_keystore_location" if cfg.get("ssl_keystore_location") else "ssl_certfile"
        try:
            ctx.load_cert_chain(files.certfile, files.keyfile, files.password)
        except (OSError, ValueError) as e:
            raise ConfigError(f"{ssl_option_name(keys)} {cfg.get(keys)!r}: cannot load the client certificate "
                              f"and key ({e}; wrong {ssl_option_name('ssl_password')}?)") from None
    return ctx


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
    """A connection to broker ``node_id`` at ``host:port``.

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
    ) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        self.cfg = cfg
        self.state = "init"
        self.error: Optional[BaseException] = None
        self.versions: Dict[int, int] = {}
        self.broker_ranges: Dict[int, Tuple[int, int]] = {}
        self.sock: Optional[socket.socket] = None
        self.sockaddr: Any = None                       # the address being connected to, or connected
        self.resolved: Optional[Tuple[Any, ...]] = None  # that address as :func:`resolve` gave it
        self._prefer = prefer                           # an address of ``resolve``'s to try first
        self._addrs: Deque[Tuple[Any, ...]] = collections.deque()   # addresses not tried yet
        self._addr_failures: List[str] = []
        self._addr_started = self._addr_deadline = 0.0
        self._ssl_context = ssl_context
        self._on_state = on_state
        self._offload = offload
        self._client_id = cfg.get("client_id", "kwire")
        self._timeout = cfg.get("request_timeout_ms", 30000) / 1000.0
        self._setup_deadline = 0.0
        self._corr = 0
        self._in_flight: Dict[int, _InFlight] = {}
        self._out: Deque[memoryview] = collections.deque()
        self._out_bytes = 0
        self._waiting: List[Tuple[Any, ...]] = []   # send()'s arguments, queued until ready
        self._rbuf = bytearray(READ_CHUNK)
        self._rview = memoryview(self._rbuf)
        self._rlen = 0
        self._frame: Optional[bytearray] = None          # a large frame read in place, grown as it arrives
        self._frame_size = 0                             # its declared size
        self._frame_got = 0
        self.last_activity = time.monotonic()
        self.throttled_until = 0.0                       # KIP-219: nothing is sent before this (monotonic)

    # ------------------------------------------------------------- public
    def __repr__(self) -> str:
        return f"<Connection node={self.node_id} {self.host}:{self.port} {self.state}>"

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    @property
    def closed(self) -> bool:
        return self.state == "closed"

    def in_flight_count(self) -> int:
        return len(self._in_flight)

    def waited(self, now: float) -> float:
        """Seconds the oldest request in flight has waited for its response (0: none in flight)."""
        return max((now - (inf.deadline - inf.timeout) for inf in self._in_flight.values()), default=0.0)

    def idle(self) -> bool:
        """Ready with nothing in flight, waiting or unwritten."""
        return self.state == "ready" and not self._in_flight and not self._waiting and not self._out and \
            self._frame is None and not self._rlen

    def wants_write(self) -> bool:
        return bool(self._out) or self.state in ("connecting",) or (self.state == "tls" and self._tls_wants_write)

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
        owner takes it out of its selector, the setup requests (ApiVersions,
        SASL: nothing else is sent before ``ready``) are dropped with what
        was read or unwritten. The requests waiting for ``ready`` stay."""
        self._set_state("connecting")
        try:
            self.sock.close()
        except OSError:
            pass
        self.sock = None
        setup = [inf.future for inf in self._in_flight.values()]
        self._in_flight.clear()
        self._out.clear()
        self._out_bytes = 0
        self._rlen = 0
        self._frame = None
        self._frame_size = self._frame_got = 0
        self._tls_wants_write = False
        self.versions, self.broker_ranges = {}, {}
        for fut in setup:            # their callbacks see a failure and do nothing
            if not fut.done():
                fut.set_exception(ConnectionLostError(f"address of {self.host}:{self.port} given up"))

    def _address_failed(self, what: str) -> None:
        """The address being connected to refused or timed out: the next
        one, or the connection fails."""
        self._addr_failures.append(f"{_show(self.sockaddr)}: {what}")
        self._next_address(time.monotonic())

    def send(self, request: Any, version: Optional[int] = None, *, expect_response: bool = True,
             flush: bool = True, prepare: Optional[Callable[[Any], Any]] = None, offload: bool = False,
             timeout: Optional[float] = None) -> Future:
        """Queue ``request`` (a generated message object) and return the
        future of its response (of None when ``expect_response`` is false,
        as for a Produce with acks=0). The version is the negotiated one
        unless given. With ``flush`` false the request waits for
        :meth:`flush` (or the selector), so that several go out in one
        write. ``timeout``: seconds the response may take (default
        ``request_timeout_ms``; a JoinGroup may wait out a rebalance).

        ``prepare``, when given, is applied to the decoded response and its
        result completes the future. With ``offload``, a response of
        ``OFFLOAD_MIN_BYTES`` or more is handed, undecoded, to the owner's
        ``offload`` hook (the client decodes and prepares it on a helper
        thread and completes the future on its I/O thread): ``prepare`` must
        then touch no state the I/O thread changes."""
        fut: Future = Future()
        if self.state == "closed":
            fut.set_exception(self.error or ConnectionLostError(f"connection to node {self.node_id} is closed"))
            return fut
        if self.state == "ready" and self._waiting:
            self._release(time.monotonic())
        if self.state != "ready" or self._waiting or self.throttled_until > time.monotonic():
            # the deadline runs from now: a request held by setup or a throttle still answers within its timeout
            deadline = time.monotonic() + (self._timeout if timeout is None else timeout)
            self._waiting.append((request, -1 if version is None else version, fut, expect_response, prepare,
                                  offload, deadline))
            return fut
        self._send_now(request, version, fut, expect_response, flush, prepare, offload, timeout)
        return fut

    def throttle_left(self, now: float) -> Optional[float]:
        """Seconds until requests held by a throttle (KIP-219) may go, or
        the first of them times out; None when none is held."""
        if self.state != "ready" or not self._waiting:
            return None
        return max(0.0, min(self.throttled_until, min(w[6] for w in self._waiting)) - now)

    def _throttle(self, ms: int) -> None:
        """The broker said to wait ``ms`` before sending more (any thread:
        a large response is decoded off the I/O thread)."""
        until = time.monotonic() + ms / 1000.0
        if until > self.throttled_until:
            self.throttled_until = until
        log.debug("node %s: throttled for %d ms (quota)", self.node_id, ms)

    def _release(self, now: float) -> None:
        """Send the requests that waited for setup or a throttle, once
        ready and the throttle is over."""
        if self.state != "ready" or self.throttled_until > now:
            return
        self._expire_waiting(now)     # sent with no time left, one would close the connection at once
        waiting, self._waiting = self._waiting, []
        for request, version, fut, expect, prepare, offload, deadline in waiting:
            if not fut.done():
                self._send_now(request, None if version < 0 else version, fut, expect, True, prepare, offload,
                               max(0.0, deadline - now))

    def _expire_waiting(self, now: float) -> None:
        """Fail the requests whose timeout ran out while setup or a throttle
        (KIP-219) held them; the connection goes on (nothing of theirs was
        sent)."""
        keep = []
        for w in self._waiting:
            if now >= w[6] and not w[2].done():
                w[2].set_exception(RequestTimedOutError(
                    f"request {protocol.api_name(w[0].API_KEY)} to node {self.node_id} waited for the connection's "
                    f"setup or the broker's throttle (quota) until its timeout ran out; it was not sent"))
            elif not w[2].done():
                keep.append(w)
        self._waiting = keep

    def flush(self) -> None:
        """Write what is queued, as far as the socket takes it now."""
        if self.state in ("ready", "handshake") and self._out:
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
            if writable and self._out:
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
        for inf in self._in_flight.values():     # a few; their timeouts may differ (JoinGroup)
            if now > inf.deadline:
                self.close(RequestTimedOutError(
                    f"request {protocol.api_name(inf.api_key)} v{inf.version} to node {self.node_id} got no "
                    f"response within {inf.timeout:.1f} s"))
                return
        if self._waiting:
            self._release(now)        # a throttle (KIP-219) that is over
        if self._waiting and self.state == "ready":
            self._expire_waiting(now)

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
        self._frame = None
        self._frame_size = self._frame_got = 0
        self._rbuf = bytearray()
        self._rview = memoryview(self._rbuf)
        self._rlen = 0
        self._set_state("closed")
        pending = [inf.future for inf in self._in_flight.values()]
        pending += [w[2] for w in self._waiting]
        self._in_flight.clear()
        self._waiting.clear()
        self._out.clear()
        for fut in pending:
            if not fut.done():
                fut.set_exception(self.error)

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
        self._api_versions(protocol.max_version(ApiKey.API_VERSIONS))

    def _api_versions(self, version: int) -> None:
        req = protocol.message("ApiVersionsRequest")(
            client_software_name="kwire", client_software_version=_kwire_version())
        fut: Future = Future()
        self._send_now(req, version, fut, True)
        fut.add_done_callback(lambda f: self._on_api_versions(f, version))

    def _on_api_versions(self, fut: Future, version: int) -> None:
        if fut.failed():
            return                                   # the connection is already closing
        resp = fut.value
        ranges = {k.api_key: (k.min_version, k.max_version) for k in (resp.api_keys or [])}
        retry = apiversions_retry_version(resp.error_code, ranges, version)
        if retry is not None:
            self._api_versions(retry)
            return
        if resp.error_code:
            self.close(protocol.error_for(resp.error_code, api="ApiVersions"))
            return
        self.broker_ranges = ranges
        self.versions = protocol.negotiate(ranges)
        if self.cfg.get("security_protocol", "PLAINTEXT") in ("SASL_PLAINTEXT", "SASL_SSL"):
            self._sasl_start()
        else:
            self._become_ready()

    def _sasl_start(self) -> None:
        mech_name = self.cfg.get("sasl_mechanism", "PLAIN")
        try:
            self._mech = mechanism_for(mech_name, self.cfg.get("sasl_plain_username"), self.cfg.get("sasl_plain_password"))
        except SaslAuthenticationError as e:
            self.close(e)
            return
        fut: Future = Future()
        self._send_now(protocol.message("SaslHandshakeRequest")(mechanism=mech_name),
                       min(1, self.versions.get(ApiKey.SASL_HANDSHAKE, 1)), fut, True)
        fut.add_done_callback(self._on_sasl_handshake)

    def _on_sasl_handshake(self, fut: Future) -> None:
        if fut.failed():
            return
        resp = fut.value
        if resp.error_code:
            offered = ", ".join(resp.mechanisms or []) or "none"
            self.close(SaslAuthenticationError(
                f"node {self.node_id} does not offer SASL mechanism {self._mech.name} (it offers: {offered})"))
            return
        self._sasl_send(self._mech.first())

    def _sasl_send(self, token: bytes) -> None:
        fut: Future = Future()
        self._send_now(protocol.message("SaslAuthenticateRequest")(auth_bytes=token),
                       self.versions.get(ApiKey.SASL_AUTHENTICATE, 0), fut, True)
        fut.add_done_callback(self._on_sasl_auth)

    def _on_sasl_auth(self, fut: Future) -> None:
        if fut.failed():
            return
        resp = fut.value
        if resp.error_code:
            msg = resp.error_message or "authentication failed"
            self.close(SaslAuthenticationError(f"node {self.node_id} refused SASL {self._mech.name}: {msg}"))
            return
        try:
            nxt = self._mech.step(bytes(resp.auth_bytes or b""))
        except SaslAuthenticationError as e:
            self.close(e)
            return
        if nxt is None:
            self._become_ready()
        else:
            self._sasl_send(nxt)

    def _become_ready(self) -> None:
        self._addrs.clear()           # the other addresses are not wanted now
        self._set_state("ready")
        self._release(time.monotonic())

    # ---------------------------------------------------------- sending
    def _send_now(self, request: Any, version: Optional[int], fut: Future, expect_response: bool,
                  flush: bool = True, prepare: Optional[Callable[[Any], Any]] = None, offload: bool = False,
                  timeout: Optional[float] = None) -> None:
        api_key = request.API_KEY
        if version is None:
            version = self.versions.get(api_key)
            if version is None:
                fut.set_exception(protocol.no_common_version(api_key, self.broker_ranges.get(api_key)))
                return
        self._corr = (self._corr + 1) & 0x7FFFFFFF
        corr = self._corr
        try:
            chunks = protocol.encode_request(request, version, corr, self._client_id)
        except Exception as e:   # a request we cannot encode fails alone; the connection goes on
            fut.set_exception(e)
            return
        for c in chunks:
            mv = memoryview(c).cast("B")
            self._out.append(mv)
            self._out_bytes += len(mv)
        if expect_response:
            wait = self._timeout if timeout is None else timeout
            self._in_flight[corr] = _InFlight(corr, api_key, version, fut, wait,
                                              protocol.response_class(api_key), response_limit(request, self.cfg),
                                              prepare, offload)
        else:
            fut.set_result(None)
        if flush:
            self.flush()

    def _flush(self) -> None:
        sock = self.sock
        assert sock is not None
        plain = not isinstance(sock, ssl.SSLSocket)
        while self._out:
            try:
                if plain:
                    sent = sock.sendmsg(list(self._out)[:64])
                else:
                    sent = sock.send(self._out[0][:65536])
            except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                return
            self._out_bytes -= sent
            while sent:
                head = self._out[0]
                if sent >= len(head):
                    sent -= len(head)
                    self._out.popleft()
                else:
                    self._out[0] = head[sent:]
                    sent = 0
        self.last_activity = time.monotonic()

    # ---------------------------------------------------------- reading
    def _read(self) -> None:
        sock = self.sock
        assert sock is not None
        while self.state != "closed":
            if self._frame is not None:
                if self._frame_got == len(self._frame):
                    self._grow_frame()
                view = memoryview(self._frame)[self._frame_got:]
                try:
                    n = sock.recv_into(view)
                except (BlockingIOError, ssl.SSLWantReadError):
                    return
                finally:
                    view.release()      # the frame may grow only while nothing views it
                if n == 0:
                    raise ConnectionLostError(f"node {self.node_id} closed the connection mid-response")
                self._frame_got += n
                self.last_activity = time.monotonic()
                if self._frame_got == self._frame_size:
                    frame, self._frame = self._frame, None
                    self._on_frame(memoryview(frame))
                continue
            try:
                n = sock.recv_into(self._rview[self._rlen:])
            except (BlockingIOError, ssl.SSLWantReadError):
                return
            if n == 0:
                raise ConnectionLostError(f"node {self.node_id} closed the connection")
            self._rlen += n
            self.last_activity = time.monotonic()
            self._take_frames()

    def _grow_frame(self) -> None:
        """Room for more of the frame being read in place: double what it
        holds (at least one read chunk more), never past its declared size,
        so memory follows the bytes that actually came; once a sixteenth of
        the frame is in, the rest at once (each growth may copy what came,
        and a usual Fetch of a few MiB then grows once)."""
        frame = self._frame
        assert frame is not None
        have = len(frame)
        size = self._frame_size
        resize_frame(frame, size if have * FRAME_GROWTH >= size else min(size, max(2 * have, have + READ_CHUNK)))

    def _take_frames(self) -> None:
        """Hand on every complete frame in the read buffer; a frame that
        does not fit moves into a buffer of its own, read in place. A frame
        is checked against its request's limit as soon as its size and
        correlation id are in."""
        pos = 0
        buf, view = self._rbuf, self._rview
        while self._rlen - pos >= 4 and self.state != "closed":
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 4:
                raise ProtocolError(f"node {self.node_id} sent a frame of impossible size {size}")
            if self._rlen - pos < 8:
                break
            (corr,) = _CORR.unpack_from(buf, pos + 4)
            self._check_frame(size, corr)
            if self._rlen - pos - 4 >= size:
                self._on_frame(memoryview(bytes(view[pos + 4:pos + 4 + size])))
                pos += 4 + size
                continue
            # incomplete: a big frame gets its own buffer; a small one waits
            if 4 + size > len(buf):
                self._frame = bytearray(view[pos + 4:self._rlen])
                self._frame_size = size
                self._frame_got = self._rlen - pos - 4
                pos = self._rlen
            break
        if pos and self.state != "closed":
            rest = self._rlen - pos
            if rest:
                buf[:rest] = view[pos:self._rlen]
            self._rlen = rest

    def _check_frame(self, size: int, corr: int) -> None:
        """Refuse a response no request is waiting for, or one larger than
        its request can legitimately get back (:func:`response_limit`)."""
        inf = self._in_flight.get(corr)
        if inf is None:
            raise ProtocolError(f"node {self.node_id} answered correlation id {corr}, which no request has")
        if size > inf.limit:
            option = "receive_message_max_bytes" if inf.api_key != ApiKey.FETCH else \
                "receive_message_max_bytes (a Fetch may also be as large as fetch_max_bytes / max_in_flight_fetches)"
            raise ProtocolError(
                f"node {self.node_id} ({self.host}:{self.port}) declared a response of {size} bytes, more than "
                f"the limit of {inf.limit} bytes for this request; raise {option} if the broker legitimately "
                "sends responses this large", protocol.api_name(inf.api_key), inf.version)

    def _on_frame(self, frame: memoryview) -> None:
        (corr,) = _CORR.unpack_from(frame, 0)
        inf = self._in_flight.pop(corr, None)
        if inf is None:
            raise ProtocolError(f"node {self.node_id} answered correlation id {corr}, which no request has")
        job = functools.partial(_decode, frame, inf.response_class, inf.version, inf.prepare, self._throttle)
        if inf.offload and self._offload is not None and len(frame) >= OFFLOAD_MIN_BYTES:
            self._offload(job, inf.future)
            return
        try:
            value = job()
        except ProtocolError as e:
            inf.future.set_exception(e)
            raise
        inf.future.set_result(value)


class TlsError(ConnectionLostError):
    """The TLS handshake failed (certificate refused, wrong name, no client
    certificate when the broker wants one). Not retriable: the same
    configuration fails the same way."""

    retriable = False


def _kwire_version() -> str:
    from kwire import __version__

    return __version__
