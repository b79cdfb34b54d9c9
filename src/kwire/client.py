"""The network client every kwire client sits on: connections to the
brokers of one cluster, driven by one selector, and the cluster's metadata.

:class:`Client` is single-threaded: one thread calls :meth:`Client.poll`
(the producer's sender thread, or the consumer's caller). Requests to
different brokers are in flight at the same time; on each connection several
are in flight, matched by correlation id. A broker that cannot be reached is
retried with exponential backoff (``reconnect_backoff_ms`` doubling up to
``reconnect_backoff_max_ms``); failures surface as retriable errors on the
futures of the requests concerned, never as a hang.
"""

from __future__ import annotations

import itertools
import logging
import selectors
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from kwire import protocol
from kwire._codec import Generation
from kwire.errors import KwireError
from kwire.future import Future, KafkaTimeoutError
from kwire.net import Connection, ConnectionLostError, ssl_context_from_config

__all__ = ["Client", "ClusterMetadata", "Broker", "PartitionInfo", "NoBrokersAvailableError"]

log = logging.getLogger(__name__)

METADATA = 3


class NoBrokersAvailableError(KwireError):
    """No broker of the cluster could be reached (yet)."""

    retriable = True


@dataclass(frozen=True)
class Broker:
    node_id: int
    host: str
    port: int
    rack: Optional[str] = None


@dataclass(frozen=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: Tuple[int, ...]
    isr: Tuple[int, ...]
    offline_replicas: Tuple[int, ...]
    error_code: int


@dataclass
class ClusterMetadata:
    """What the last Metadata responses said about the cluster.
    ``generation`` counts the responses taken in (the producer's compiled
    send checks it), ``updated_at`` is when the last one was."""

    brokers: Dict[int, Broker] = field(default_factory=dict)
    partitions: Dict[str, Dict[int, PartitionInfo]] = field(default_factory=dict)
    topic_errors: Dict[str, int] = field(default_factory=dict)
    topic_ids: Dict[str, Any] = field(default_factory=dict)
    internal_topics: set = field(default_factory=set)
    cluster_id: Optional[str] = None
    controller_id: int = -1
    updated_at: float = 0.0
    generation: Generation = field(default_factory=Generation)

    def leader_for(self, topic: str, partition: int) -> Optional[int]:
        info = self.partitions.get(topic, {}).get(partition)
        return None if info is None or info.leader < 0 else info.leader

    def partitions_for(self, topic: str) -> Optional[List[int]]:
        parts = self.partitions.get(topic)
        return None if parts is None else sorted(parts)

    def topics(self) -> List[str]:
        return sorted(self.partitions)

    def update(self, resp: Any, requested: Optional[Sequence[str]]) -> None:
        """Take in a MetadataResponse (for ``requested`` topics, or all)."""
        self.brokers = {b.node_id: Broker(b.node_id, b.host, b.port, getattr(b, "rack", None)) for b in resp.brokers}
        self.cluster_id = getattr(resp, "cluster_id", None)
        self.controller_id = getattr(resp, "controller_id", -1)
        if requested is None:
            self.partitions, self.topic_errors, self.topic_ids = {}, {}, {}
            self.internal_topics = set()
        for t in resp.topics:
            name = t.name
            if name is None:
                continue
            self.topic_errors[name] = t.error_code
            if getattr(t, "topic_id", None) is not None:
                self.topic_ids[name] = t.topic_id
            if getattr(t, "is_internal", False):
                self.internal_topics.add(name)
            if t.error_code and not t.partitions:
                self.partitions.pop(name, None)
                continue
            self.partitions[name] = {
                p.partition_index: PartitionInfo(
                    name, p.partition_index, p.leader_id, getattr(p, "leader_epoch", -1),
                    tuple(p.replica_nodes or ()), tuple(p.isr_nodes or ()),
                    tuple(getattr(p, "offline_replicas", None) or ()), p.error_code)
                for p in t.partitions
            }
        self.updated_at = time.monotonic()
        self.generation.bump()


class Client:
    """Connections to one cluster and its metadata. ``cfg`` is a resolved
    option dict (:func:`kwire.config.resolve`)."""

    def __init__(self, cfg: Dict[str, Any]) -> None:
        self.cfg = cfg
        self.cluster = ClusterMetadata()
        self._selector = selectors.DefaultSelector()
        self._conns: Dict[int, Connection] = {}
        self._masks: Dict[int, int] = {}
        self._backoff: Dict[int, Tuple[float, float]] = {}     # node -> (not before, last backoff)
        self._bootstrap = [Broker(-1 - i, h, p) for i, (h, p) in enumerate(cfg["bootstrap_servers"])]
        proto = cfg.get("security_protocol", "PLAINTEXT")
        self._ssl = ssl_context_from_config(cfg) if proto in ("SSL", "SASL_SSL") else None
        self._metadata_future: Optional[Future] = None
        self._metadata_wanted = True
        self._metadata_topics: Optional[set] = set()   # None: all topics
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_pending = False
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._closed = False
        self._rr = itertools.count()
        self._errors: Dict[int, BaseException] = {}   # why each node's last connection closed

    # ---------------------------------------------------------- brokers
    def broker(self, node_id: int) -> Optional[Broker]:
        b = self.cluster.brokers.get(node_id)
        if b is None:
            for boot in self._bootstrap:
                if boot.node_id == node_id:
                    return boot
        return b

    def connection(self, node_id: int) -> Optional[Connection]:
        """The connection to ``node_id``, started if there is none and the
        node is not in its reconnect backoff; None when it must wait."""
        conn = self._conns.get(node_id)
        if conn is not None and not conn.closed:
            return conn
        now = time.monotonic()
        not_before, _ = self._backoff.get(node_id, (0.0, 0.0))
        if now < not_before:
            return None
        broker = self.broker(node_id)
        if broker is None:
            return None
        conn = Connection(node_id, broker.host, broker.port, self.cfg, ssl_context=self._ssl, on_state=self._on_state)
        self._conns[node_id] = conn
        conn.connect()
        return conn

    def is_ready(self, node_id: int) -> bool:
        conn = self._conns.get(node_id)
        return conn is not None and conn.ready

    def in_flight(self, node_id: int) -> int:
        conn = self._conns.get(node_id)
        return 0 if conn is None or conn.closed else conn.in_flight_count()

    def versions(self, node_id: int) -> Dict[int, int]:
        conn = self._conns.get(node_id)
        return conn.versions if conn is not None else {}

    def _on_state(self, conn: Connection) -> None:
        if conn.state == "ready":
            self._backoff.pop(conn.node_id, None)
            self._errors.pop(conn.node_id, None)
        elif conn.state == "closed":
            self._forget(conn)
            first = self.cfg.get("reconnect_backoff_ms", 50) / 1000.0
            top = self.cfg.get("reconnect_backoff_max_ms", 1000) / 1000.0
            _, last = self._backoff.get(conn.node_id, (0.0, 0.0))
            wait = min(top, last * 2) if last else first
            self._backoff[conn.node_id] = (time.monotonic() + wait, wait)
            if conn.error is not None:
                before = self._errors.get(conn.node_id)
                if before is None or str(before) != str(conn.error):   # say a new failure once, not every retry
                    log.info("node %s (%s:%s): %s", conn.node_id, conn.host, conn.port, conn.error)
                self._errors[conn.node_id] = conn.error
            if conn.node_id >= 0:
                self._metadata_wanted = True

    def _forget(self, conn: Connection) -> None:
        fd = self._masks.pop(conn.node_id, None)
        if fd is not None and conn.sock is not None:
            try:
                self._selector.unregister(conn.sock)
            except (KeyError, ValueError, OSError):
                pass
        if self._conns.get(conn.node_id) is conn:
            del self._conns[conn.node_id]

    def least_loaded_node(self) -> Optional[int]:
        """A known broker with the fewest requests in flight, preferring
        connected ones; bootstrap servers before any metadata."""
        nodes = list(self.cluster.brokers) or [b.node_id for b in self._bootstrap]
        start = next(self._rr) % max(1, len(nodes))
        nodes = nodes[start:] + nodes[:start]
        best, best_load = None, None
        now = time.monotonic()
        for n in nodes:
            conn = self._conns.get(n)
            if conn is not None and conn.ready:
                load = conn.in_flight_count()
            elif self._backoff.get(n, (0.0, 0.0))[0] > now:
                continue
            else:
                load = 1_000_000 + (0 if conn is not None else 1)
            if best_load is None or load < best_load:
                best, best_load = n, load
        if best is None and self.cluster.brokers:
            best = min(self._bootstrap, key=lambda b: self._backoff.get(b.node_id, (0.0, 0.0))[0]).node_id
        return best

    # --------------------------------------------------------- requests
    def send(self, node_id: int, request: Any, version: Optional[int] = None, *,
             expect_response: bool = True, flush: bool = True) -> Future:
        """Send ``request`` to ``node_id`` (connecting if needed); the future
        fails with a retriable error if the node cannot be reached. With
        ``flush`` false it is written with the next request that flushes,
        by :meth:`flush`, or when :meth:`poll` finds the socket writable."""
        conn = self.connection(node_id)
        if conn is None:
            fut: Future = Future()
            fut.set_exception(NoBrokersAvailableError(f"node {node_id} is not reachable now (reconnect backoff)")
                              if self.broker(node_id) is not None else
                              KwireError(f"unknown broker node {node_id}"))
            return fut
        fut = conn.send(request, version, expect_response=expect_response, flush=flush)
        self._update_mask(conn)
        return fut

    def flush(self, node_id: int) -> None:
        """Write the requests queued for ``node_id``, as far as its socket takes them now."""
        conn = self._conns.get(node_id)
        if conn is not None:
            conn.flush()
            self._update_mask(conn)

    def request(self, node_id: int, request: Any, version: Optional[int] = None,
                timeout: Optional[float] = None) -> Any:
        """Send and wait for the response (blocking, driving the I/O)."""
        return self.wait(self.send(node_id, request, version), timeout)

    def wait(self, fut: Future, timeout: Optional[float] = None) -> Any:
        """Drive the I/O until ``fut`` is done; return its result or raise."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not fut.done():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise KafkaTimeoutError(f"no response within {timeout} s")
            self.poll(0.1 if left is None else min(left, 0.1))
        return fut.result()

    def request_any(self, make: Callable[[Dict[int, int]], Any], timeout: Optional[float] = None,
                    retries: int = 3) -> Any:
        """Send ``make(versions)`` to the least loaded broker, retrying on
        another broker when the connection fails. Returns the response."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.cfg.get("request_timeout_ms", 30000) / 1000.0)
        last: Optional[BaseException] = None
        for _ in range(retries + 1):
            node = self.wait_for_node(deadline)
            try:
                conn = self.connection(node)
                if conn is None:
                    raise NoBrokersAvailableError("no broker reachable")
                self.wait_ready(node, deadline)
                return self.wait(self.send(node, make(conn.versions)), max(0.0, deadline - time.monotonic()))
            except (ConnectionLostError, NoBrokersAvailableError) as e:
                if not e.retriable:
                    raise
                last = e
                if time.monotonic() >= deadline:
                    break
                time.sleep(min(self.cfg.get("retry_backoff_ms", 100) / 1000.0, max(0.0, deadline - time.monotonic())))
        raise last if last is not None else NoBrokersAvailableError("no broker reachable")

    def wait_for_node(self, deadline: float) -> int:
        while True:
            node = self.least_loaded_node()
            if node is not None:
                return node
            if time.monotonic() >= deadline:
                raise NoBrokersAvailableError(
                    "no broker of " + ", ".join(f"{b.host}:{b.port}" for b in self._bootstrap) + " could be reached")
            self.poll(0.05)

    def wait_ready(self, node_id: int, deadline: float) -> Connection:
        """Connect to ``node_id`` and wait until its setup is done. A
        non-retriable failure (TLS refused, SASL refused) is raised at once;
        otherwise :class:`NoBrokersAvailableError` at ``deadline``, naming the
        last failure."""
        while True:
            conn = self.connection(node_id)
            if conn is not None and conn.ready:
                return conn
            err = conn.error if conn is not None and conn.closed else self._last_error(node_id)
            if err is not None and getattr(err, "retriable", True) is False:
                raise err
            now = time.monotonic()
            if now >= deadline:
                raise NoBrokersAvailableError(f"node {node_id} did not become ready in time"
                                              + (f" (last error: {err})" if err is not None else ""))
            if conn is None or conn.closed:
                not_before = self._backoff.get(node_id, (0.0, 0.0))[0]
                time.sleep(max(0.001, min(not_before - now, deadline - now, 0.1)))
                continue
            self.poll(min(0.1, max(0.0, deadline - now)))

    def _last_error(self, node_id: int) -> Optional[BaseException]:
        return self._errors.get(node_id)

    # --------------------------------------------------------- metadata
    def add_topics(self, topics: Iterable[str]) -> None:
        """Ask for these topics' metadata from now on (refresh if new)."""
        if self._metadata_topics is None:
            return
        new = set(topics) - self._metadata_topics
        if new:
            self._metadata_topics |= new
            self._metadata_wanted = True

    def want_all_topics(self) -> None:
        self._metadata_topics = None
        self._metadata_wanted = True

    def request_metadata_update(self) -> None:
        """Refresh at the next poll (after a stale-metadata error)."""
        self._metadata_wanted = True

    def metadata_request(self, versions: Dict[int, int], topics: Optional[Iterable[str]]) -> Any:
        version = versions.get(METADATA, 0)
        cls = protocol.message("MetadataRequest")
        if topics is None:
            topic_list = None if version >= 1 else []
        else:
            topic_list = [cls.MetadataRequestTopic(name=t) for t in sorted(topics)]
        return cls(topics=topic_list, allow_auto_topic_creation=False)

    def refresh_metadata(self, topics: Optional[Iterable[str]] = None, timeout: Optional[float] = None) -> ClusterMetadata:
        """Fetch metadata now (blocking) for ``topics`` (None: the topics this
        client follows; all topics if it follows all)."""
        wanted = self._metadata_topics if topics is None else set(topics)
        resp = self.request_any(lambda v: self.metadata_request(v, wanted), timeout)
        self.cluster.update(resp, None if wanted is None else sorted(wanted))
        if topics is None:
            self._metadata_wanted = False
        return self.cluster

    def _maybe_update_metadata(self) -> None:
        if self._metadata_future is not None:
            return
        max_age = self.cfg.get("metadata_max_age_ms", 300000) / 1000.0
        if not self._metadata_wanted and time.monotonic() - self.cluster.updated_at < max_age:
            return
        if self._metadata_topics is not None and not self._metadata_topics and self.cluster.updated_at:
            self._metadata_wanted = False
            return
        node = self.least_loaded_node()
        if node is None:
            return
        conn = self.connection(node)
        if conn is None or not conn.ready:
            return
        wanted = None if self._metadata_topics is None else set(self._metadata_topics)
        fut = self.send(node, self.metadata_request(conn.versions, wanted))
        self._metadata_wanted = False
        self._metadata_future = fut

        def done(f: Future) -> None:
            self._metadata_future = None
            if f.failed():
                self._metadata_wanted = True
                return
            self.cluster.update(f.value, None if wanted is None else sorted(wanted))

        fut.add_done_callback(done)

    # -------------------------------------------------------------- I/O
    def wakeup(self) -> None:
        """Make a blocked :meth:`poll` return (callable from any thread).
        A wakeup not yet seen by :meth:`poll` is not repeated."""
        if self._wake_pending:
            return
        self._wake_pending = True
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass

    def _update_mask(self, conn: Connection) -> None:
        if conn.sock is None or conn.closed:
            return
        mask = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.wants_write() else 0)
        old = self._masks.get(conn.node_id)
        if old == mask:
            return
        try:
            if old is None:
                self._selector.register(conn.sock, mask, conn)
            else:
                self._selector.modify(conn.sock, mask, conn)
        except (KeyError, ValueError):
            try:
                self._selector.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
            self._selector.register(conn.sock, mask, conn)
        self._masks[conn.node_id] = mask

    def poll(self, timeout: float = 0.0) -> None:
        """Do the network I/O that is ready, waiting at most ``timeout``
        seconds for some; check request deadlines; refresh metadata when due."""
        if self._closed:
            raise KwireError("client is closed")
        self._maybe_update_metadata()
        for conn in list(self._conns.values()):
            self._update_mask(conn)
        events = self._selector.select(timeout)
        for key, ev in events:
            conn = key.data
            if conn is None:
                # one read, not until empty: a thread calling wakeup() in a loop would keep it from ending
                try:
                    self._wake_r.recv(4096)
                except (BlockingIOError, OSError):
                    pass
                self._wake_pending = False      # after the read, so no wakeup is lost in between
                continue
            conn.on_io(bool(ev & selectors.EVENT_READ), bool(ev & selectors.EVENT_WRITE))
            self._update_mask(conn)
        now = time.monotonic()
        for conn in list(self._conns.values()):
            conn.check_timeouts(now)

    def close(self) -> None:
        if self._closed:
            return
        for conn in list(self._conns.values()):
            conn.close(ConnectionLostError("client closed"), quiet=True)
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()
        self._closed = True
