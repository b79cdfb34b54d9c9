"""The Kafka protocol of one broker connection, without its I/O.

A :class:`Channel` is what a connection says and hears once its transport
is up: the handshake (ApiVersions, with the version retry, then SASL),
requests numbered by correlation id and matched to their responses, each
response bounded before it is read (:func:`response_limit`) and decoded
(on the owner's helper thread when large), requests held while setup or a
quota throttle (KIP-219) lasts, and every deadline. It touches no socket
and no clock of its own beyond ``time.monotonic`` for deadlines: bytes come
in through :meth:`Channel.read_buffer` and :meth:`Channel.received`, go
out through :attr:`Channel.out` and :meth:`Channel.wrote`, and the owner
calls :meth:`Channel.check_timeouts` on each turn. The selector's
:class:`kwire.net.Connection` drives one over a non-blocking socket.

Frames: each is an int32 size and that many bytes. A response larger than
the read buffer is read into a buffer of its own, in place, so the record
data of a Fetch response is handed to the codec as views into it. That
buffer grows as the bytes arrive (doubling, and to the declared size once a
sixteenth of it came): a size prefix alone allocates nothing, and a buffer
is at most 16 times the bytes received.

Every response is bounded by what its request can legitimately get back
(:func:`response_limit`): ``receive_message_max_bytes`` (librdkafka's option
and default, 100,000,000 bytes), or for a Fetch the larger of that and the
request's ``max_bytes``, plus room for the framing. A size prefix past the
bound fails the connection with a :class:`ProtocolError` that names the
node, the size, the limit and the option to raise. The bound is not tighter
for a Fetch because of KIP-74: a broker returns the first batch of a fetch
whole even when it is larger than ``max_bytes`` or ``partition_max_bytes``
(the topic's ``max.message.bytes`` bounds it, which a client does not
know), so that a consumer always makes progress; such a batch is accepted
up to ``receive_message_max_bytes``.

Quotas (KIP-219): a response whose ``throttle_time_ms`` is positive, at a
version from which the broker answers at once and leaves the waiting to
the client (:data:`CLIENT_THROTTLES_FROM`), mutes the channel for that
long: requests sent meanwhile wait, in order, and go out once the time is
up (:meth:`Channel.check_timeouts`). This is the one place kwire honours
quotas: every client (producer, consumer, admin, group, transactions)
sends through it.

SASL re-authentication (KIP-368): when the broker's SaslAuthenticate
response names a session lifetime (its ``connections.max.reauth.ms``, or a
token's expiry), the channel authenticates again on the same connection at
a random point between 80% and 90% of it (:data:`REAUTH_WINDOW`), on the
first turn or send past that point. Meanwhile requests in flight stay in
flight (the broker answers them first: it reads one request at a time) and
new ones wait, as during setup, with their timeouts running; the mechanism
is a fresh one from the client's :class:`kwire.sasl.Authenticator` (a
refreshed token, a new Kerberos service ticket). A broker reads a request
that comes after the session's end, a SaslHandshake too, as a reason to
close the connection, so a channel whose session ran out while it was idle
(no turn came) is closed quietly before anything is sent on it: its
requests fail as for any lost connection and are retried. A credential
that expires (a token: OAUTHBEARER, a SCRAM delegation token) always gives
a session that ends with it; a broker that names no lifetime for one holds
it expired (Kafka completes such an exchange, then closes the connection at
the first request), so the handshake fails with a
:class:`~kwire.sasl.SaslAuthenticationError` saying so.
"""

from __future__ import annotations

import collections
import functools
import logging
import random
import struct
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from kwire import protocol
from kwire._codec import resize_frame
from kwire.errors import KwireError, ProtocolError
from kwire.future import Future, KafkaTimeoutError
from kwire.metrics.network import NetworkMetrics
from kwire.protocol.api_keys import ApiKey, ErrorCode
from kwire.protocol.versions import apiversions_retry_version
from kwire.sasl import Authenticator, Mechanism, SaslAuthenticationError

__all__ = ["Channel", "CLUSTER_CHECK_VERSION", "ConnectionLostError", "MisroutedConnectionError", "RequestTimedOutError", "response_limit", "CLIENT_THROTTLES_FROM",
           "READ_CHUNK", "FRAME_GROWTH", "RECEIVE_MESSAGE_MAX_BYTES", "FETCH_FRAMING", "FETCH_FRAMING_PER_PARTITION",
           "OFFLOAD_MIN_BYTES"]

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_CORR = struct.Struct(">i")
READ_CHUNK = 256 * 1024
FRAME_GROWTH = 16            # a frame's buffer is at most this many times the bytes that came
RECEIVE_MESSAGE_MAX_BYTES = 100_000_000     # librdkafka's receive.message.max.bytes default
FETCH_FRAMING = 64 * 1024                   # a Fetch response's room for headers, ...
FETCH_FRAMING_PER_PARTITION = 1024          # ... and per partition asked for (offsets, aborted transactions)
OFFLOAD_MIN_BYTES = 256 * 1024              # an offloadable response this large is decoded off the I/O thread
REAUTH_WINDOW = (0.80, 0.90)                # KIP-368: re-authenticate between these fractions of a session


class ConnectionLostError(KwireError):
    """The connection to a broker failed or closed; what was in flight on it
    is failed with this error. Retriable: the client reconnects."""

    retriable = True


#: ApiVersions' first version with KIP-1242's cluster check. A channel sends
#: it only with a check to make, the version before it otherwise: a broker
#: that does not know a version may close the connection rather than answer
#: with the versions it speaks (Tansu does).
CLUSTER_CHECK_VERSION = 5


class MisroutedConnectionError(ConnectionLostError):
    """The broker at a known node's address is not that node of the cluster
    the client knows: it answered the cluster check of ApiVersions v5
    (KIP-1242) with REBOOTSTRAP_REQUIRED, as a broker of a replaced cluster
    reached at an old address does. The client goes back to its bootstrap
    servers (``metadata_recovery_strategy="rebootstrap"``); what was in
    flight on the connection fails with it, retriable."""


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


class Channel:
    """The Kafka side of the connection to broker ``node_id`` at
    ``host:port`` (see the module docstring).

    States: ``setup`` (the transport is not up yet) -> ``handshake``
    (:meth:`start`: ApiVersions, SASL) -> ``ready``; ``closed`` at the end
    (:meth:`fail_all`). Requests sent before ``ready`` wait in order and go
    out once setup is done. ``versions`` maps api_key to the version
    negotiated with this broker (the highest both support).

    The owner's hooks: ``on_ready()`` once the handshake is done,
    ``on_output()`` when bytes were queued to go out now, ``on_fail(error)``
    when the broker's answers end the connection (a refused handshake), and
    ``offload(job, future)`` to decode a large response elsewhere.

    ``cluster_id``: the cluster a known node (``node_id`` >= 0) belongs to,
    for the broker to check (ApiVersions v5, KIP-1242; None: no check). A
    broker that is not that node of that cluster answers
    REBOOTSTRAP_REQUIRED: the channel fails with
    :class:`MisroutedConnectionError`.
    """

    def __init__(self, node_id: int, host: str, port: int, cfg: Dict[str, Any], *,
                 on_ready: Callable[[], None], on_output: Callable[[], None],
                 on_fail: Callable[[BaseException], None],
                 offload: Optional[Callable[[Callable[[], Any], Future], None]] = None,
                 auth: Optional[Authenticator] = None, cluster_id: Optional[str] = None) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id if node_id >= 0 else None     # what ApiVersions asks the broker to check
        self.host = host
        self.port = port
        self.cfg = cfg
        self.state = "setup"
        self.versions: Dict[int, int] = {}
        self.broker_ranges: Dict[int, Tuple[int, int]] = {}
        # the cluster's finalized features as this broker's ApiVersions said them (KIP-584), and their epoch
        self.finalized_features: Dict[str, int] = {}
        self.finalized_features_epoch = -1
        self._on_ready = on_ready
        self._on_output = on_output
        self._fail = on_fail
        self._offload = offload
        self._client_id = cfg.get("client_id", "kwire")
        self.metrics: Optional[NetworkMetrics] = None   # the client's (kwire.metrics), set by its owner
        self._timeout = cfg.get("request_timeout_ms", 30000) / 1000.0
        self._corr = 0
        self._in_flight: Dict[int, _InFlight] = {}
        self.out: Deque[memoryview] = collections.deque()   # bytes to write, in order
        self.out_bytes = 0
        self._waiting: List[Tuple[Any, ...]] = []   # send()'s arguments, queued until ready
        self._rbuf = bytearray(READ_CHUNK)
        self._rview = memoryview(self._rbuf)
        self._rlen = 0
        self._frame: Optional[bytearray] = None          # a large frame read in place, grown as it arrives
        self._frame_size = 0                             # its declared size
        self._frame_got = 0
        self.throttled_until = 0.0                       # KIP-219: nothing is sent before this (monotonic)
        self._auth = auth                                # SASL's credentials (None: no SASL)
        self._mech: Optional[Mechanism] = None
        self._sasl_pending = False                       # waiting for the authenticator's credentials
        self.reauth_at: Optional[float] = None           # KIP-368: when to authenticate again (monotonic)
        self.session_end: Optional[float] = None         # when the broker's session ends
        self.reauthentications = 0

    # ------------------------------------------------------------- state
    def in_flight_count(self) -> int:
        return len(self._in_flight)

    def waited(self, now: float) -> float:
        """Seconds the oldest request in flight has waited for its response (0: none in flight)."""
        return max((now - (inf.deadline - inf.timeout) for inf in self._in_flight.values()), default=0.0)

    def idle(self) -> bool:
        """Ready with nothing in flight, waiting, unwritten or half read."""
        return self.state == "ready" and not self._in_flight and not self._waiting and not self.out and \
            self._frame is None and not self._rlen

    @property
    def mid_frame(self) -> bool:
        """Whether part of a large response has been read in place."""
        return self._frame is not None

    # ------------------------------------------------------------- sending
    def send(self, request: Any, version: Optional[int] = None, *, expect_response: bool = True,
             flush: bool = True, prepare: Optional[Callable[[Any], Any]] = None, offload: bool = False,
             timeout: Optional[float] = None) -> Future:
        """Queue ``request`` (a generated message object) and return the
        future of its response (of None when ``expect_response`` is false,
        as for a Produce with acks=0). The version is the negotiated one
        unless given. With ``flush`` false the owner is not told
        (``on_output``) and the bytes wait for its next write, so that
        several go out in one. ``timeout``: seconds the response may take (default
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
        if self.state == "ready" and self.reauth_at is not None:
            self._maybe_reauthenticate(time.monotonic())
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
        if self.metrics is not None:
            self.metrics.throttled(self.node_id, ms)
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

    def wrote(self, n: int) -> None:
        """``n`` bytes of :attr:`out` went out."""
        self.out_bytes -= n
        while n:
            head = self.out[0]
            if n >= len(head):
                n -= len(head)
                self.out.popleft()
            else:
                self.out[0] = head[n:]
                n = 0

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
        size = 0
        for c in chunks:
            mv = memoryview(c).cast("B")
            self.out.append(mv)
            size += len(mv)
        self.out_bytes += size
        if self.metrics is not None:
            self.metrics.sent(self.node_id, size, time.monotonic())
        if expect_response:
            wait = self._timeout if timeout is None else timeout
            self._in_flight[corr] = _InFlight(corr, api_key, version, fut, wait,
                                              protocol.response_class(api_key), response_limit(request, self.cfg),
                                              prepare, offload)
        else:
            fut.set_result(None)
        if flush:
            self._on_output()

    # ---------------------------------------------------------- handshake
    def start(self) -> None:
        """The transport is up (TCP, and TLS where asked): begin the
        handshake, ApiVersions then SASL; requests sent meanwhile wait."""
        self.state = "handshake"
        top = protocol.max_version(ApiKey.API_VERSIONS)
        self._api_versions(top if self.cluster_id is not None else min(top, CLUSTER_CHECK_VERSION - 1))

    def _api_versions(self, version: int) -> None:
        checked = self.cluster_id is not None
        req = protocol.message("ApiVersionsRequest")(
            client_software_name="kwire", client_software_version=kwire_version(), cluster_id=self.cluster_id,
            node_id=self.node_id if checked else -1)
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
        if resp.error_code == ErrorCode.REBOOTSTRAP_REQUIRED and self.cluster_id is not None \
                and version >= CLUSTER_CHECK_VERSION:
            self._fail(MisroutedConnectionError(
                f"node {self.node_id} ({self.host}:{self.port}) is not node {self.node_id} of cluster "
                f"{self.cluster_id}: the broker there answered the cluster check with REBOOTSTRAP_REQUIRED (KIP-1242)"))
            return
        if resp.error_code:
            self._fail(protocol.error_for(resp.error_code, api="ApiVersions"))
            return
        self.broker_ranges = ranges
        self.versions = protocol.negotiate(ranges)
        self.finalized_features = {f.name: f.max_version_level for f in (resp.finalized_features or ())}
        self.finalized_features_epoch = resp.finalized_features_epoch
        if self._auth is not None:
            self._sasl_begin()
        else:
            self._become_ready()

    # ---------------------------------------------------------- SASL
    def _sasl_begin(self) -> None:
        """Authenticate (again, when ``state`` is ``reauth``): a fresh
        mechanism from the authenticator, or, while its credentials are not
        there yet, wait (each turn tries again; the authenticator wakes the
        client when they come)."""
        assert self._auth is not None
        try:
            mech = self._auth.mechanism(self.host)
        except SaslAuthenticationError as e:
            self._fail(e)
            return
        self._sasl_pending = mech is None
        if mech is None:
            return
        self._mech = mech
        fut: Future = Future()
        self._send_now(protocol.message("SaslHandshakeRequest")(mechanism=mech.name),
                       min(1, self.versions.get(ApiKey.SASL_HANDSHAKE, 1)), fut, True)
        fut.add_done_callback(self._on_sasl_handshake)

    def _on_sasl_handshake(self, fut: Future) -> None:
        if fut.failed():
            return
        resp = fut.value
        assert self._mech is not None
        if resp.error_code:
            offered = ", ".join(resp.mechanisms or []) or "none"
            self._fail(SaslAuthenticationError(
                f"node {self.node_id} does not offer SASL mechanism {self._mech.name} (it offers: {offered})"))
            return
        try:
            first = self._mech.first()
        except SaslAuthenticationError as e:
            self._fail(e)
            return
        self._sasl_send(first)

    def _sasl_send(self, token: bytes) -> None:
        fut: Future = Future()
        self._send_now(protocol.message("SaslAuthenticateRequest")(auth_bytes=token),
                       self.versions.get(ApiKey.SASL_AUTHENTICATE, 0), fut, True)
        fut.add_done_callback(self._on_sasl_auth)

    def _on_sasl_auth(self, fut: Future) -> None:
        if fut.failed():
            return
        resp = fut.value
        mech = self._mech
        assert mech is not None
        if resp.error_code:
            msg = resp.error_message or "authentication failed"
            detail = mech.refusal()
            again = " on re-authentication (KIP-368)" if self.state == "reauth" else ""
            self._fail(SaslAuthenticationError(
                f"node {self.node_id} refused SASL {mech.name}{again}: {msg}{f' ({detail})' if detail else ''}"))
            return
        try:
            nxt = mech.step(bytes(resp.auth_bytes or b""))
        except SaslAuthenticationError as e:
            self._fail(e)
            return
        if nxt is not None:
            self._sasl_send(nxt)
            return
        lifetime = getattr(resp, "session_lifetime_ms", 0) or 0
        if mech.expiring and lifetime == 0 and self.versions.get(ApiKey.SASL_AUTHENTICATE, 0) >= 1:
            # a credential with an expiry (a token) gives a session that ends with it; none left: expired
            self._fail(SaslAuthenticationError(
                f"node {self.node_id} accepted SASL {mech.name} but ended the session at once: the broker holds "
                f"the {mech.credential} expired"))
            return
        self._authenticated(lifetime)

    def _authenticated(self, lifetime_ms: int) -> None:
        """SASL is done: note when the broker's session ends (KIP-368) and
        when to authenticate again, then go on."""
        now = time.monotonic()
        self._mech = None
        again = self.state == "reauth"
        if lifetime_ms > 0:
            self.session_end = now + lifetime_ms / 1000.0
            self.reauth_at = now + lifetime_ms / 1000.0 * random.uniform(*REAUTH_WINDOW)
        else:
            self.session_end = self.reauth_at = None
        if not again:
            self._become_ready()
            return
        self.reauthentications += 1
        log.debug("node %s: re-authenticated (session of %d ms)", self.node_id, lifetime_ms)
        self.state = "ready"
        self._release(now)

    def _maybe_reauthenticate(self, now: float) -> None:
        """Authenticate again once the session is far enough along (see the
        module doc); a session that already ended closes the connection."""
        if self.reauth_at is None or now < self.reauth_at:
            return
        if self.session_end is not None and now >= self.session_end:
            self.reauth_at = None
            self._fail(ConnectionLostError(
                f"node {self.node_id}: the SASL session ended before it was renewed (idle through its "
                "re-authentication); reconnecting"))
            return
        self.reauth_at = None
        self.state = "reauth"
        self._sasl_begin()

    def _become_ready(self) -> None:
        self.state = "ready"
        self._on_ready()
        self._release(time.monotonic())

    # ---------------------------------------------------------- reading
    def read_buffer(self) -> memoryview:
        """Where the next bytes read go (release it before :meth:`received`):
        the rest of the frame being read in place, or the read buffer's free room."""
        if self._frame is not None:
            if self._frame_got == len(self._frame):
                self._grow_frame()
            return memoryview(self._frame)[self._frame_got:]
        return self._rview[self._rlen:]

    def received(self, n: int) -> None:
        """``n`` bytes landed in the last :meth:`read_buffer`: hand on every
        response they complete. Raises :class:`ProtocolError` for a frame no
        request can take (the owner closes the connection)."""
        if self._frame is not None:
            self._frame_got += n
            if self._frame_got == self._frame_size:
                frame, self._frame = self._frame, None
                self._on_frame(memoryview(frame))
            return
        self._rlen += n
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
        if self.metrics is not None:
            now = time.monotonic()
            self.metrics.answered(self.node_id, inf.api_key, len(frame) + 4, now - (inf.deadline - inf.timeout), now)
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


    # ---------------------------------------------------------- ending
    error: Optional[BaseException] = None

    def check_timeouts(self, now: float) -> Optional[BaseException]:
        """The error to close the connection with when a request in flight
        is overdue; otherwise release what a throttle held and fail what
        waited past its own timeout."""
        for inf in self._in_flight.values():     # a few; their timeouts may differ (JoinGroup)
            if now > inf.deadline:
                return RequestTimedOutError(
                    f"request {protocol.api_name(inf.api_key)} v{inf.version} to node {self.node_id} got no "
                    f"response within {inf.timeout:.1f} s")
        if self._sasl_pending:
            self._sasl_begin()        # the credentials may be there now
        elif self.state == "ready" and self.reauth_at is not None:
            self._maybe_reauthenticate(now)
        if self._waiting:
            self._release(now)        # a throttle (KIP-219) that is over
        if self._waiting and self.state == "ready":
            self._expire_waiting(now)
        return None

    def reset(self, error: BaseException) -> None:
        """The transport under the handshake was given up (the owner tries
        another address): the setup requests (ApiVersions, SASL: nothing
        else is sent before ``ready``) fail with ``error`` and are dropped
        with what was read or unwritten. The requests waiting for ``ready``
        stay."""
        self.state = "setup"
        setup = [inf.future for inf in self._in_flight.values()]
        self._in_flight.clear()
        self.out.clear()
        self.out_bytes = 0
        self._rlen = 0
        self._frame = None
        self._frame_size = self._frame_got = 0
        self.versions, self.broker_ranges = {}, {}
        for fut in setup:            # their callbacks see a failure and do nothing
            if not fut.done():
                fut.set_exception(error)

    def fail_all(self, error: BaseException) -> None:
        """The connection closed: fail what is in flight or waiting with
        ``error``; the read buffers are freed at once."""
        if self.state == "closed":
            return
        self.state = "closed"
        self.error = error
        self._frame = None
        self._frame_size = self._frame_got = 0
        self._rbuf = bytearray()
        self._rview = memoryview(self._rbuf)
        self._rlen = 0
        pending = [inf.future for inf in self._in_flight.values()]
        pending += [w[2] for w in self._waiting]
        self._in_flight.clear()
        self._waiting.clear()
        self.out.clear()
        self.out_bytes = 0
        for fut in pending:
            if not fut.done():
                fut.set_exception(error)
        # the owner's hooks are bound to it: let go of them, so that a closed connection is freed at once
        self._on_ready = self._on_output = _nothing
        self._fail = _ignore
        self._offload = None


def _nothing() -> None:
    pass


def _ignore(error: BaseException) -> None:
    pass


def kwire_version() -> str:
    """kwire's version, as ApiVersions' client_software_version."""
    from kwire import __version__

    return __version__
