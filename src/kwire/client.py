"""The network client every kwire client sits on: connections to the
brokers of one cluster, driven by one selector, and the cluster's metadata.

:class:`Client` is single-threaded: one thread calls :meth:`Client.poll`
(the producer's sender thread, or the consumer's caller). Requests to
different brokers are in flight at the same time; on each connection several
are in flight, matched by correlation id. A broker that cannot be reached is
retried with exponential backoff (``reconnect_backoff_ms`` doubling up to
``reconnect_backoff_max_ms``); failures surface as retriable errors on the
futures of the requests concerned, never as a hang. A connection idle for
``connections_max_idle_ms`` (nothing in flight) is closed; the next request
to that broker opens a new one. Each connection attempt goes through every
address the broker's name resolves to (``client_dns_lookup``; see
:mod:`kwire.net`); the address that answered is tried first the next time.
With ``client_dns_lookup="resolve_canonical_bootstrap_servers_only"`` the
bootstrap names are replaced, once, by their addresses' canonical names.

Metadata: the client refreshes it when asked (a partition without a known
leader, a new topic, a stale-metadata error) and at least every
``metadata_max_age_ms``. While the answers leave a followed partition
without a leader the broker list names (or a topic with an error, or the
request fails), each refresh waits ``retry_backoff_ms`` after the one
before, doubling, up to ``retry_backoff_max_ms``: never a tight loop. New
topics are asked for at once. Topics a response lists that nobody asked for
are not taken in. A large Metadata response (from ``OFFLOAD_MIN_BYTES``,
about 4,000 partitions) is decoded and made ready on a helper thread, one at
a time, and installed by :meth:`Client.poll`, so that a cluster of 200,000
topics does not stop :meth:`Client.poll` from keeping its timeout (the
helper thread ends when it has nothing to do).

Leader hints (KIP-951): a Produce (v10+) or Fetch (v16+) partition refused
with NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH names the partition's
current leader and epoch, and the response the new leader's endpoint.
:meth:`Client.follow_leader_hints` takes in a hint newer than the cached
leader epoch (Java's ``Metadata.updatePartitionLeadership``): the producer
retries and the consumer fetches from the new leader at once, with no
metadata refresh in between, and so do the other requests the old leader
refuses once the hint is taken. A missing or stale hint leaves the error to
the refresh as before. A refresh never takes a partition back to an older leader
epoch than the one cached (for the same topic id), so a broker that has not
heard of the election yet does not undo a hint.

Rebootstrap (KIP-899, KIP-1102, KIP-1242; ``metadata_recovery_strategy``,
Java's default ``"rebootstrap"``): the client forgets the brokers it learned
and starts again from ``bootstrap_servers``, their names resolved afresh,
when a refresh is due and no broker it knows can be reached (each in its
reconnect backoff), when no refresh succeeded for
``metadata_recovery_rebootstrap_trigger_ms`` while one was wanted, or when a
broker answers REBOOTSTRAP_REQUIRED: as a Metadata response's error, or to
the cluster check a connection to a known node sends (ApiVersions v5 with
the cluster id and node id, ``metadata_cluster_check_enable``: a broker of a
replaced cluster at an old address). Every connection is closed (what was in
flight fails, retriable), partitions have no known leader until the
bootstrap servers' metadata comes. Each reason is said once at WARNING,
then at INFO at most once a minute. With ``"none"`` the client keeps to the brokers it
learned, as Java's does.
"""

from __future__ import annotations

import collections
import functools
import itertools
import logging
import selectors
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, FrozenSet, Generator, Iterable, List, Mapping, Optional, Sequence, Set, Tuple, TypeVar

from kwire import protocol
from kwire._codec import Generation
from kwire.errors import KwireError, error_for_code, without_traceback
from kwire.future import Future, KafkaTimeoutError
from kwire.metrics.events import ClientEvents
from kwire.metrics.network import NetworkMetrics
from kwire.metrics.report import StatsReporter
from kwire.metrics.telemetry import TelemetryReporter
from kwire.net import (CLUSTER_CHECK_VERSION, Connection, ConnectionLostError, MisroutedConnectionError,
                       canonical_bootstrap, ssl_context_from_config)
from kwire.protocol.api_keys import ApiKey, ErrorCode
from kwire.sasl import authenticator

__all__ = ["Client", "ClusterMetadata", "Broker", "PartitionInfo", "NoBrokersAvailableError", "Sleep", "Wait", "Await", "Offload", "Steps", "StepsOf", "run_blocking",
           "leader_hint", "LEADER_HINT_ERRORS"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Seconds a request may wait for its response before its connection counts
#: as stalled (see :meth:`Client.least_loaded_node`); a healthy broker
#: answers in milliseconds, a Produce with acks=all in tens of them.
STALLED = 1.0

#: The partition errors whose answer may name the new leader (KIP-951), the
#: two Java's clients read its hint on.
LEADER_HINT_ERRORS = frozenset((ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH))

REBOOTSTRAP_SAID_AGAIN = 60.0   # seconds before a rebootstrap said already is said again (at INFO)
_WORKER_JOIN = 1.0          # how long close() waits for the helper thread's decode in progress
_warned_hostname: Set[Tuple[Tuple[str, int], ...]] = set()   # clusters already warned about (once each)


class Sleep:
    """A step that waits ``seconds`` without I/O (a backoff). The other
    steps a waiting generator yields are numbers: let the I/O run for up to
    that many seconds. See :meth:`Client.run`."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


class Wait:
    """A step that waits until ``future`` (a :class:`kwire.future.Future`)
    is done, at most ``timeout`` seconds (None: no limit), without driving
    any I/O: for a future that another thread's client completes (the
    group's, the producer's sender), or, in ``kwire.aio``, the loop. What
    the future holds is the generator's to read after the step."""

    __slots__ = ("future", "timeout")

    def __init__(self, future: Future, timeout: Optional[float]) -> None:
        self.future = future
        self.timeout = timeout


class Await:
    """A step that awaits ``awaitable`` (what an ``async def`` rebalance
    listener returns): only ``kwire.aio`` takes it; a blocking client
    refuses it with a ``TypeError``."""

    __slots__ = ("awaitable",)

    def __init__(self, awaitable: Any) -> None:
        self.awaitable = awaitable


class Offload:
    """A step that runs ``fn`` (work that lets the GIL go, such as
    encoding and compressing batches) and sends its result back into the
    generator: here on the driver's own thread, in ``kwire.aio`` on a
    worker thread, while the loop goes on."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn


#: A generator of waiting steps (:class:`Sleep`, :class:`Wait`, or seconds
#: of I/O) whose value is its result; :meth:`Client.run` drives one
#: blocking, ``kwire.aio`` awaits one.
Steps = Generator[Any, None, Any]
#: Steps whose value is a ``T``.
StepsOf = Generator[Any, None, T]


_NOT_IO = (Sleep, Wait, Await, Offload)     # the steps that do no I/O


def run_blocking(steps: Steps) -> Any:
    """Drive ``steps`` that never ask for I/O (only :class:`Sleep` and
    :class:`Wait`: another thread does the I/O), blocking; returns the
    generator's value."""
    return _drive(steps, _block_on)


def _drive(steps: Steps, take: Callable[[Any], Any]) -> Any:
    """Run ``steps``, each step taken by ``take`` (blocking), whose result
    goes back into the generator; what ``take`` raises is raised into it,
    at its ``yield``."""
    try:
        want = next(steps)
        while True:
            try:
                got = take(want)
            except BaseException as e:   # noqa: BLE001 - the generator's own except/finally decide
                want = steps.throw(e)
                continue
            want = steps.send(got)
    except StopIteration as done:
        return done.value


def _block_on(want: Any) -> Any:
    if type(want) is Offload:
        return want.fn()
    if type(want) is Sleep:
        time.sleep(want.seconds)
    elif type(want) is Wait:
        try:        # result(), not done(): it returns once the future's callbacks have run (on another thread)
            want.future.result(want.timeout)
        except Exception:       # noqa: BLE001 - done or not, the generator looks at the future itself
            pass
    elif type(want) is Await:
        close = getattr(want.awaitable, "close", None)
        if close is not None:
            close()                 # a coroutine never awaited: no warning about it
        raise TypeError("a rebalance listener returned an awaitable: only kwire.aio's AsyncConsumer awaits "
                        "them; a blocking Consumer's listener must be plain functions")
    else:
        raise KwireError(f"a step of I/O ({want!r} s) where another thread does the I/O")


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
class MetadataUpdate:
    """A Metadata response made ready to install (:meth:`ClusterMetadata.prepare`).

    ``requested`` is None for a response about every topic (it replaces what
    is known), else the topics asked for (only those are taken in).
    ``complete`` is false when a partition has no leader the broker list
    names, or a topic has an error: the client then refreshes again, with a
    growing backoff."""

    requested: Optional[FrozenSet[str]]
    brokers: Dict[int, Broker]
    cluster_id: Optional[str]
    controller_id: int
    partitions: Dict[str, Dict[int, PartitionInfo]]
    partition_counts: Dict[str, int]
    topic_errors: Dict[str, int]
    topic_ids: Dict[str, Any]
    internal_topics: Set[str]
    removed: Set[str]
    complete: bool
    missing: Dict[str, Set[int]]       # leaders not among the brokers, by topic (logged by install)
    bad: Dict[str, List[int]]          # malformed partition indexes, by topic (logged by install)
    error_code: int = 0                # the response's top-level error (v13+): REBOOTSTRAP_REQUIRED; not installed


def _is_refusal(code: int) -> bool:
    """Whether a topic's metadata error ``code`` is one retrying cannot help."""
    return bool(code) and not getattr(error_for_code(code), "retriable", True)


@dataclass
class ClusterMetadata:
    """What the last Metadata responses said about the cluster.
    ``generation`` counts the responses taken in (the producer's compiled
    send checks it), ``updated_at`` is when the last one was.

    A partition whose leader is not among the brokers of the response is
    kept with leader -1 (unknown); a partition entry whose index is negative,
    not below the number of partitions the topic lists, or repeated, is
    dropped. Each is logged once."""

    brokers: Dict[int, Broker] = field(default_factory=dict)
    partitions: Dict[str, Dict[int, PartitionInfo]] = field(default_factory=dict)
    partition_counts: Dict[str, int] = field(default_factory=dict)
    topic_errors: Dict[str, int] = field(default_factory=dict)
    topic_ids: Dict[str, Any] = field(default_factory=dict)
    internal_topics: set = field(default_factory=set)
    cluster_id: Optional[str] = None
    controller_id: int = -1
    updated_at: float = 0.0
    generation: Generation = field(default_factory=Generation)
    _missing_logged: Set[Tuple[str, int]] = field(default_factory=set, repr=False)
    _bad_index_logged: Set[str] = field(default_factory=set, repr=False)
    _refused_logged: Dict[str, int] = field(default_factory=dict, repr=False)

    def refused(self, topic: str, partition: Optional[int] = None) -> Optional[BaseException]:
        """The error of ``topic`` in the last metadata about it when
        retrying cannot help (TOPIC_AUTHORIZATION_FAILED, an invalid topic
        name), naming the topic; None otherwise. The producer raises it from
        ``send``, the consumer from ``poll``, at once rather than waiting
        for metadata that will not come."""
        code = self.topic_errors.get(topic, 0)
        if not _is_refusal(code):
            return None
        return protocol.error_for(code, api="Metadata", topic=topic, partition=partition)

    def leader_for(self, topic: str, partition: int) -> Optional[int]:
        info = self.partitions.get(topic, {}).get(partition)
        return None if info is None or info.leader < 0 else info.leader

    def partitions_for(self, topic: str) -> Optional[List[int]]:
        parts = self.partitions.get(topic)
        return None if parts is None else sorted(parts)

    def partition_count(self, topic: str) -> Optional[int]:
        """How many partitions the topic has, as the metadata lists them
        (partition entries dropped as malformed still count)."""
        n = self.partition_counts.get(topic)
        if n is None:
            parts = self.partitions.get(topic)
            return None if parts is None else len(parts)
        return n

    def topics(self) -> List[str]:
        return sorted(self.partitions)

    def update(self, resp: Any, requested: Optional[Sequence[str]]) -> None:
        """Take in a MetadataResponse (for ``requested`` topics, or all)."""
        self.install(self.prepare(resp, None if requested is None else frozenset(requested)))

    def prepare(self, resp: Any, requested: Optional[FrozenSet[str]]) -> MetadataUpdate:
        """A :class:`MetadataUpdate` of ``resp``: the topics of ``requested``
        (all topics when None), their partitions checked. Changes nothing
        (what it found wrong is logged by :meth:`install`), so it may run on
        the client's helper thread."""
        brokers = {b.node_id: Broker(b.node_id, b.host, b.port, getattr(b, "rack", None)) for b in resp.brokers}
        known = self.partitions          # unchanged topics keep their objects: replacing them is then cheap
        partitions: Dict[str, Dict[int, PartitionInfo]] = {}
        counts: Dict[str, int] = {}
        errors: Dict[str, int] = {}
        ids: Dict[str, Any] = {}
        internal: Set[str] = set()
        removed: Set[str] = set()
        missing: Dict[str, Set[int]] = {}
        bad: Dict[str, List[int]] = {}
        complete = True
        for t in resp.topics:
            name = t.name
            if name is None or (requested is not None and name not in requested):
                continue
            errors[name] = t.error_code
            if t.error_code:
                complete = False
            if getattr(t, "topic_id", None) is not None:
                ids[name] = t.topic_id
            if getattr(t, "is_internal", False):
                internal.add(name)
            listed = t.partitions or []
            if t.error_code and not listed:
                removed.add(name)
                continue
            count = len(listed)
            parts: Dict[int, PartitionInfo] = {}
            before = known.get(name)
            # a leader hint (KIP-951) newer than this answer is kept: same topic (id), higher epoch
            newer = before if before and ids.get(name) is not None and ids[name] == self.topic_ids.get(name) else None
            for p in listed:
                index = p.partition_index
                if not 0 <= index < count or index in parts:
                    bad.setdefault(name, []).append(index)
                    continue
                epoch = getattr(p, "leader_epoch", -1)
                cached = newer.get(index) if newer else None
                if cached is not None and cached.leader_epoch > epoch >= 0 and cached.leader in brokers:
                    parts[index] = cached
                    continue
                leader = p.leader_id
                if leader >= 0 and leader not in brokers:
                    missing.setdefault(name, set()).add(leader)
                    leader = -1
                if leader < 0:
                    complete = False
                parts[index] = PartitionInfo(
                    name, index, leader, epoch,
                    tuple(p.replica_nodes or ()), tuple(p.isr_nodes or ()),
                    tuple(getattr(p, "offline_replicas", None) or ()), p.error_code)
            partitions[name] = before if before == parts else parts
            counts[name] = count
        return MetadataUpdate(requested, brokers, getattr(resp, "cluster_id", None),
                              getattr(resp, "controller_id", -1), partitions, counts, errors, ids, internal, removed,
                              complete, missing, bad, getattr(resp, "error_code", 0) or 0)

    def _log_anomalies(self, topics: Dict[str, int], counts: Dict[str, int], missing: Dict[str, Set[int]],
                       bad: Dict[str, List[int]]) -> None:
        """Say once each: a leader not among the brokers (again if it comes
        back after being fixed), a topic's malformed partition entries."""
        now_missing = {(name, leader) for name, leaders in missing.items() for leader in leaders}
        self._missing_logged -= {pair for pair in self._missing_logged if pair[0] in topics} - now_missing
        new = sorted(now_missing - self._missing_logged)
        if new:
            self._missing_logged |= set(new)
            shown = ", ".join(f"topic {name!r}: node {leader}" for name, leader in new[:5])
            log.warning("metadata: a partition leader named is not among the brokers the response lists (%s%s); "
                        "those partitions have no known leader until a refresh (with backoff) names one", shown,
                        f", and {len(new) - 5} more" if len(new) > 5 else "")
        for name, code in topics.items():      # a refusal (authorization): said once, again if it comes back
            if not _is_refusal(code):
                self._refused_logged.pop(name, None)
            elif self._refused_logged.get(name) != code:
                self._refused_logged[name] = code
                log.warning("metadata: %s", protocol.error_for(code, api="Metadata", topic=name))
        for name, indexes in bad.items():
            if name in self._bad_index_logged:
                continue
            self._bad_index_logged.add(name)
            log.warning("metadata: topic %r lists %d partitions, %d of them with an index that is negative, not "
                        "below that count, or repeated (%s); those entries are ignored", name, counts.get(name, 0),
                        len(indexes), ", ".join(str(i) for i in indexes[:5]) + (", ..." if len(indexes) > 5 else ""))

    def install(self, update: MetadataUpdate) -> None:
        """Make ``update`` the current metadata (for its topics, or all).
        Cheap: the work was done by :meth:`prepare`."""
        self._log_anomalies(update.topic_errors, update.partition_counts, update.missing, update.bad)
        broker_change = update.brokers.keys() != self.brokers.keys()
        self.brokers = update.brokers
        self.cluster_id = update.cluster_id
        self.controller_id = update.controller_id
        if update.requested is None:
            self.partitions, self.partition_counts = update.partitions, update.partition_counts
            self.topic_errors, self.topic_ids = update.topic_errors, update.topic_ids
            self.internal_topics = update.internal_topics
        else:
            for name in update.removed:
                self.partitions.pop(name, None)
                self.partition_counts.pop(name, None)
            self.topic_errors.update(update.topic_errors)
            self.topic_ids.update(update.topic_ids)
            self.internal_topics |= update.internal_topics
            self.partitions.update(update.partitions)
            self.partition_counts.update(update.partition_counts)
            if broker_change:
                self._forget_lost_leaders(set(update.partitions))
        self.updated_at = time.monotonic()
        self.generation.bump()

    def take_leader_hints(self, hints: Mapping[Tuple[str, int], Tuple[int, int]],
                          endpoints: Iterable[Any]) -> Set[Tuple[str, int]]:
        """Take in leader hints (KIP-951), as Java's
        ``Metadata.updatePartitionLeadership``: ``hints`` maps a partition
        to the (leader id, leader epoch) a broker named, ``endpoints`` are
        the response's ``node_endpoints`` (their brokers added, or updated,
        in the broker list). A hint is taken for a partition the metadata
        holds, whose cached leader epoch is older, and whose leader is a
        known broker (or one of ``endpoints``); the partition keeps its
        replicas and ISR. Returns the partitions whose leader was updated.
        No generation bump: the partitions of each topic are unchanged."""
        named = {e.node_id: Broker(e.node_id, e.host, e.port, e.rack) for e in endpoints if e.node_id >= 0}
        brokers = {**self.brokers, **named}
        moved: Set[Tuple[str, int]] = set()
        for (topic, index), (leader, epoch) in hints.items():
            parts = self.partitions.get(topic)
            info = None if parts is None else parts.get(index)
            if info is None or epoch <= info.leader_epoch or leader not in brokers:
                continue
            parts = self.partitions[topic] = dict(parts)      # (a topic's dict may be shared with an update)
            parts[index] = PartitionInfo(topic, index, leader, epoch, info.replicas, info.isr,
                                         info.offline_replicas, info.error_code)
            moved.add((topic, index))
        if moved and named:
            self.brokers = brokers
        return moved

    def forget_brokers(self) -> None:
        """Back to what is known before any metadata (a rebootstrap): no
        broker, cluster or controller, no partition leader; the topics are
        kept, so what the clients follow is asked for at once."""
        self.brokers = {}
        self.cluster_id = None
        self.controller_id = -1
        self.updated_at = 0.0
        self._forget_lost_leaders(set())
        self.generation.bump()

    def _forget_lost_leaders(self, fresh: Set[str]) -> None:
        """After the broker list changed: a partition of a topic the update
        did not cover whose leader is no longer listed has no known leader."""
        brokers = self.brokers
        for name, parts in self.partitions.items():
            if name in fresh:
                continue
            lost = [i for i, info in parts.items() if info.leader >= 0 and info.leader not in brokers]
            if lost:
                parts = dict(parts)
                for i in lost:
                    info = parts[i]
                    parts[i] = PartitionInfo(info.topic, i, -1, info.leader_epoch, info.replicas, info.isr,
                                             info.offline_replicas, info.error_code)
                self.partitions[name] = parts


def leader_hint(code: int, p: Any) -> Optional[Tuple[int, int]]:
    """The (leader id, leader epoch) a partition's answer ``p`` of a Produce
    or Fetch names with its error ``code`` (KIP-951's ``current_leader``),
    or None: another error, or no complete hint (an older version, or a
    broker that does not know the leader either)."""
    if code not in LEADER_HINT_ERRORS:
        return None
    current = getattr(p, "current_leader", None)
    if current is None or current.leader_id < 0 or current.leader_epoch < 0:
        return None
    return current.leader_id, current.leader_epoch


def _prepare_metadata(cluster: ClusterMetadata, requested: Optional[FrozenSet[str]], resp: Any) -> MetadataUpdate:
    """``cluster.prepare(resp, requested)`` for a response the client asked
    for itself, then the response's topics let go a slice at a time: freeing
    200,000 topics at once is a tenth of a second in C, without a chance for
    the I/O thread to take the GIL."""
    update = cluster.prepare(resp, requested)
    topics, resp.topics = resp.topics, []
    while topics:
        del topics[-1024:]
    return update


class Client:
    """Connections to one cluster and its metadata. ``cfg`` is a resolved
    option dict (:func:`kwire.config.resolve`).

    ``auto_create_topics``: whether Metadata requests for named topics ask
    the broker to create those that do not exist (it does when its
    ``auto.create.topics.enable`` is on). The producer asks (as Kafka's
    Java producer does), a consumer as its ``allow_auto_create_topics``
    says (the default when not given), an Admin never."""

    #: Whether leader hints (KIP-951) are followed (see the module docstring).
    #: Always, as in Java's client, which has no option for it; an instance
    #: set to False measures what they save (tests/cluster/test_leader_hints.py).
    leader_hints = True

    def __init__(self, cfg: Dict[str, Any], auto_create_topics: Optional[bool] = None) -> None:
        self.cfg = cfg
        proto = cfg.get("security_protocol", "PLAINTEXT")
        # before anything that holds a resource: a store or certificate refused leaves nothing open
        self._ssl = ssl_context_from_config(cfg) if proto in ("SSL", "SASL_SSL") else None
        self._auth = authenticator(cfg)           # SASL's credentials: refused at once when incomplete
        self.auto_create_topics = bool(cfg.get("allow_auto_create_topics", False) if auto_create_topics is None
                                       else auto_create_topics)
        self.cluster = ClusterMetadata()
        self.metrics = NetworkMetrics(cfg.get("metrics_sample_window_ms", 30000) / 1000.0)
        self.reporter: Optional[StatsReporter] = None      # stats_cb's, set by the client that owns this one
        self.telemetry: Optional[TelemetryReporter] = None  # KIP-714's pushes, set by the client that owns this one
        self._events: Optional[ClientEvents] = None      # error_cb's and throttle_cb's, set the same way
        self._all_down_said = False                      # error_cb was told that no broker can be reached
        self._conns: Dict[int, Connection] = {}
        self._masks: Dict[int, int] = {}
        self._backoff: Dict[int, Tuple[float, float]] = {}     # node -> (not before, last backoff)
        self._bootstrap = self._bootstrap_brokers()
        self._recovers = cfg.get("metadata_recovery_strategy", "rebootstrap") == "rebootstrap"
        self._rebootstrap_due: Optional[str] = None     # why the next tick rebootstraps (REBOOTSTRAP_REQUIRED)
        self._rebootstrap_said: Dict[str, float] = {}   # each reason to rebootstrap: when it was last logged
        self._metadata_since: Optional[float] = None    # since when a refresh was wanted and none succeeded
        self._checks_cluster = False                    # the cluster's brokers offer KIP-1242's check
        self._answered: Dict[Tuple[str, int], Tuple[Any, ...]] = {}   # (host, port) -> the address that answered
        self._leaders_refresh_at = 0.0                 # the next refresh_leaders() refresh
        if self._ssl is not None:
            self._warn_unverified(self._ssl, proto)
        self._metadata_future: Optional[Future] = None
        self._metadata_wanted = True
        self._metadata_new = True                      # topics never asked for yet: no backoff
        self._metadata_topics: Optional[set] = set()   # None: all topics
        self._metadata_not_before = 0.0                # the refresh backoff
        self._metadata_attempts = 0                    # refreshes in a row that left something unknown
        self._jobs: Deque[Tuple[Callable[[], Any], Future]] = collections.deque()   # for the helper thread
        self._finished: Deque[Tuple[Future, Any, Optional[BaseException]]] = collections.deque()
        self._jobs_lock = threading.Lock()
        self._worker: Optional[threading.Thread] = None
        self._working: Optional[Future] = None         # the future of the job the helper thread is on
        self._closed = False
        self._rr = itertools.count()
        self._errors: Dict[int, BaseException] = {}   # why each node's last connection closed
        self._logged: Dict[int, Set[str]] = {}        # the failures said per node since it last connected
        # the cluster's finalized features (KIP-584) from the ApiVersions answer with the highest
        # features epoch seen (Java's ApiVersions.getFinalizedFeaturesInfo): transaction.version...
        self.finalized_features: Dict[str, int] = {}
        self.finalized_features_epoch = -1
        self._init_io()
        if self._auth is not None:
            self._auth.start(self.wakeup, getattr(self, "_loop", None))

    def _bootstrap_brokers(self) -> List[Broker]:
        """The bootstrap servers as brokers -1, -2, ...; with
        ``client_dns_lookup="resolve_canonical_bootstrap_servers_only"``,
        their names replaced by their addresses' canonical names (looked up
        now). Other names are resolved at each connection attempt."""
        servers = self.cfg["bootstrap_servers"]
        if self.cfg.get("client_dns_lookup") == "resolve_canonical_bootstrap_servers_only":
            servers = canonical_bootstrap(servers)
        return [Broker(-1 - i, h, p) for i, (h, p) in enumerate(servers)]

    def _init_io(self) -> None:
        """The driver's own state: a selector and the socket pair that wakes it."""
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_pending = False
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)

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
        conn = self._new_connection(node_id, broker)
        conn.channel.metrics = self.metrics
        self._conns[node_id] = conn
        conn.connect()
        return conn

    def _new_connection(self, node_id: int, broker: Broker) -> Connection:
        """A connection to ``broker``, not started (the driver's kind)."""
        return Connection(node_id, broker.host, broker.port, self.cfg, **self._connection_options(node_id, broker))

    def _connection_options(self, node_id: int, broker: Broker) -> Dict[str, Any]:
        """What every driver's connection to ``broker`` is made with: TLS,
        SASL, the client's hooks, the address that answered last, and the
        cluster a learned node is checked against (KIP-1242: only when the
        client rebootstraps, as Java's, and once a broker of the cluster
        offered ApiVersions v5)."""
        check = self._recovers and self._checks_cluster and node_id >= 0 and \
            self.cfg.get("metadata_cluster_check_enable", True)
        return dict(ssl_context=self._ssl, on_state=self._on_state, offload=self._offload,
                    prefer=self._answered.get((broker.host, broker.port)), auth=self._auth,
                    cluster_id=self.cluster.cluster_id if check else None)

    def is_ready(self, node_id: int) -> bool:
        conn = self._conns.get(node_id)
        return conn is not None and conn.ready

    def disconnect(self, node_id: int, error: BaseException) -> None:
        """Close the connection to ``node_id``, failing what is in flight on
        it with ``error`` (the node is then in its reconnect backoff, as
        after any failure): for a node that stopped answering."""
        conn = self._conns.get(node_id)
        if conn is not None and not conn.closed:
            conn.close(error)

    def drop_replaced_leaders(self, flights: Iterable[Tuple[int, float, Mapping[Tuple[str, int], int]]], now: float,
                              limit: float, what: str) -> None:
        """Of the requests ``flights`` (node, sent at, the leader epoch of
        each partition when sent) that have waited ``limit`` s or more: the
        connection to a node the metadata says was replaced as the leader of
        one of their partitions (another leader, a higher epoch: a hung or
        cut off broker the controller fenced) is closed, so the requests on
        it fail now, retriable, not after ``request_timeout_ms``; ``what``
        names the request in the log line (one per node). Requests waiting
        that long on a leader the metadata still names ask for fresher
        metadata (:meth:`refresh_leaders`)."""
        moved: Dict[int, Set[str]] = {}
        waited = 0.0
        for node, sent, epochs in flights:
            if now - sent < limit:
                continue
            waited = max(waited, now - sent)
            for (topic, partition), epoch in epochs.items():
                info = self.cluster.partitions.get(topic, {}).get(partition)
                if info is not None and info.leader not in (-1, node) and (epoch < 0 or info.leader_epoch > epoch):
                    moved.setdefault(node, set()).add(f"{topic}[{partition}]")
        if waited and not moved:
            self.refresh_leaders(now)           # to find out whether a leader was replaced
        for node, names in moved.items():
            shown = ", ".join(sorted(names)[:5]) + (" ..." if len(names) > 5 else "")
            err = ConnectionLostError(f"node {node} no longer leads {shown} (another replica was elected) and has "
                                      f"not answered a {what} for {waited:.1f} s: closed, sending to the new leader")
            log.info("%s", err)
            self.disconnect(node, err)

    def refresh_leaders(self, now: float) -> None:
        """A leader may be gone (it cannot be reached, or a request to it
        stalls) and the cluster may name another any moment: metadata is
        asked for every ``retry_backoff_ms`` while this is called, not only
        at each failed reconnect (those drift to ``reconnect_backoff_max_ms``
        apart) or request timeout, so that requests go to the new leader
        once the controller has elected it (librdkafka refreshes at its fast
        interval too). A refresh whose answer leaves nothing unknown has no
        backoff of its own, hence this one."""
        if now >= self._leaders_refresh_at:
            self._leaders_refresh_at = now + self.cfg.get("retry_backoff_ms", 100) / 1000.0
            self.request_metadata_update()

    def connection_states(self) -> Dict[int, Tuple[str, str, int]]:
        """(any thread) Each connection now: node -> ("host:port", state, requests in flight)."""
        return {node: (f"{c.host}:{c.port}", c.state, c.in_flight_count()) for node, c in dict(self._conns).items()}

    def in_flight(self, node_id: int) -> int:
        conn = self._conns.get(node_id)
        return 0 if conn is None or conn.closed else conn.in_flight_count()

    def versions(self, node_id: int) -> Dict[int, int]:
        conn = self._conns.get(node_id)
        return conn.versions if conn is not None else {}

    def _on_state(self, conn: Connection) -> None:
        node = conn.node_id
        if conn.state == "connecting":
            self._unregister(conn)     # a new address, a new socket: the old one leaves the selector
            return
        if conn.state == "ready":
            self.metrics.connected(node)
            if conn.resolved is not None:
                self._answered[(conn.host, conn.port)] = conn.resolved
            channel = conn.channel
            if channel.finalized_features_epoch > self.finalized_features_epoch:
                self.finalized_features = channel.finalized_features
                self.finalized_features_epoch = channel.finalized_features_epoch
            if conn.broker_ranges.get(ApiKey.API_VERSIONS, (0, 0))[1] >= CLUSTER_CHECK_VERSION:
                self._checks_cluster = True
            self._all_down_said = False
            err = self._errors.pop(node, None)
            if err is None or getattr(err, "retriable", True):
                self._backoff.pop(node, None)
                self._logged.pop(node, None)
            # else: a broker that sets up fine and then breaks the protocol
            # (an oversized or malformed response) is retried with a growing
            # backoff, and its failure is said once, not at every reconnect
        elif conn.state == "closed":
            self.metrics.disconnected(node)
            self._forget(conn)
            if conn.orderly:       # closed idle, or with the client: nothing failed
                return
            first = self.cfg.get("reconnect_backoff_ms", 50) / 1000.0
            top = self.cfg.get("reconnect_backoff_max_ms", 1000) / 1000.0
            _, last = self._backoff.get(node, (0.0, 0.0))
            wait = min(top, last * 2) if last else first
            self._backoff[node] = (time.monotonic() + wait, wait)
            if conn.error is not None:
                self._errors[node] = conn.error
                said = str(conn.error)
                said_before = self._logged.setdefault(node, set())
                if said not in said_before and len(said_before) < 8:
                    # each failure once until the node connects again, not at every retry (nor at every
                    # other one, when a dead broker's failures alternate: refused, reset), and a few at most
                    level = logging.INFO if getattr(conn.error, "retriable", True) else logging.WARNING
                    where = "" if f"node {node} " in said else f"node {node} ({conn.host}:{conn.port}): "
                    log.log(level, "%s%s", where, said)
                    said_before.add(said)
                    if self._events is not None and not getattr(conn.error, "retriable", True):
                        self._events.error(conn.error)     # refused for good (each failure once): error_cb
            if node >= 0:
                self._metadata_wanted = True
            if isinstance(conn.error, MisroutedConnectionError) and self._recovers:
                self._rebootstrap_due = str(conn.error)

    def _warn_unverified(self, ctx: ssl.SSLContext, proto: str) -> None:
        """Warn, once per process and cluster (a consumer's group has a
        client of its own), when TLS does not check the broker's host name
        or its certificate."""
        if ctx.check_hostname and ctx.verify_mode != ssl.CERT_NONE:
            return
        key = tuple((b.host, b.port) for b in self._bootstrap)
        if key in _warned_hostname:
            return
        _warned_hostname.add(key)
        what = "certificate" if ctx.verify_mode == ssl.CERT_NONE else "host name"
        log.warning("%s to %s without verifying the broker's %s (ssl.endpoint.identification.algorithm is empty or "
                    "ssl_check_hostname false, or the ssl_context given does not check): anyone who can intercept "
                    "the connection can pose as the broker", proto,
                    ", ".join(f"{h}:{p}" for h, p in key), what)

    def _unregister(self, conn: Connection) -> None:
        if self._masks.get(conn.node_id) is None or self._conns.get(conn.node_id) is not conn:
            return
        del self._masks[conn.node_id]
        if conn.sock is not None:
            try:
                self._selector.unregister(conn.sock)
            except (KeyError, ValueError, OSError):
                pass

    def _forget(self, conn: Connection) -> None:
        self._unregister(conn)
        if self._conns.get(conn.node_id) is conn:
            del self._conns[conn.node_id]

    def least_loaded_node(self) -> Optional[int]:
        """A known broker with the fewest requests in flight, preferring
        connected ones, but a connection whose oldest request has waited
        :data:`STALLED` seconds last of all (a hung broker: a metadata
        request sent there would wait out the request timeout, and the
        refresh that would name its replacement with it); bootstrap servers
        before any metadata (and after a rebootstrap). None when each is in
        its reconnect backoff."""
        nodes = list(self.cluster.brokers) or [b.node_id for b in self._bootstrap]
        start = next(self._rr) % max(1, len(nodes))
        nodes = nodes[start:] + nodes[:start]
        best, best_load = None, None
        now = time.monotonic()
        for n in nodes:
            conn = self._conns.get(n)
            if conn is not None and conn.ready:
                load = conn.in_flight_count()
                if load and conn.waited(now) >= STALLED:
                    load += 2_000_000
            elif self._backoff.get(n, (0.0, 0.0))[0] > now:
                continue
            else:
                load = 1_000_000 + (0 if conn is not None else 1)
            if best_load is None or load < best_load:
                best, best_load = n, load
        return best

    # --------------------------------------------------------- requests
    def send(self, node_id: int, request: Any, version: Optional[int] = None, *,
             expect_response: bool = True, flush: bool = True, prepare: Optional[Callable[[Any], Any]] = None,
             offload: bool = False, timeout: Optional[float] = None) -> Future:
        """Send ``request`` to ``node_id`` (connecting if needed); the future
        fails with a retriable error if the node cannot be reached. With
        ``flush`` false it is written with the next request that flushes,
        by :meth:`flush`, or when :meth:`poll` finds the socket writable.
        ``prepare``, ``offload`` and ``timeout``: see
        :meth:`kwire.channel.Channel.send` (a large response is decoded on the
        helper thread; ``timeout`` overrides ``request_timeout_ms``)."""
        conn = self.connection(node_id)
        if conn is None:
            fut: Future = Future()
            fut.set_exception(NoBrokersAvailableError(f"node {node_id} is not reachable now (reconnect backoff)")
                              if self.broker(node_id) is not None else
                              KwireError(f"unknown broker node {node_id}"))
            return fut
        fut = conn.send(request, version, expect_response=expect_response, flush=flush, prepare=prepare,
                        offload=offload, timeout=timeout)
        self._update_mask(conn)
        return fut

    def flush(self, node_id: int) -> None:
        """Write the requests queued for ``node_id``, as far as its socket takes them now."""
        conn = self._conns.get(node_id)
        if conn is not None:
            conn.flush()
            self._update_mask(conn)

    # ------------------------------------------------ waiting (steps)
    # What waits for the network is written once, as a generator of steps
    # (see :class:`Sleep`): :meth:`run` drives it here, blocking, with
    # :meth:`poll`; ``kwire.aio``'s client awaits the same steps on an
    # event loop.
    def run(self, steps: Steps) -> Any:
        """Drive ``steps`` to its end (blocking): a number lets the I/O run
        for up to that many seconds (:meth:`poll`), a :class:`Sleep` or a
        :class:`Wait` waits without I/O. What a step raises is raised into the generator, at
        its ``yield``. Returns the generator's value."""
        return _drive(steps, self._take_step)

    def _take_step(self, want: Any) -> Any:
        if type(want) in _NOT_IO:
            return _block_on(want)
        self.poll(want)
        return None

    def request(self, node_id: int, request: Any, version: Optional[int] = None,
                timeout: Optional[float] = None) -> Any:
        """Send and wait for the response (blocking, driving the I/O)."""
        return self.run(self.wait_steps(self.send(node_id, request, version), timeout))

    def wait(self, fut: Future, timeout: Optional[float] = None) -> Any:
        """Drive the I/O until ``fut`` is done; return its result or raise."""
        return self.run(self.wait_steps(fut, timeout))

    def wait_steps(self, fut: Future, timeout: Optional[float] = None) -> Steps:
        """:meth:`wait` as steps."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not fut.done():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise KafkaTimeoutError(f"no response within {timeout} s")
            yield 0.1 if left is None else min(left, 0.1)
        return fut.result()

    def request_any(self, make: Callable[[Dict[int, int]], Any], timeout: Optional[float] = None,
                    retries: int = 3, *, send: Optional[Callable[[int, Any], Future]] = None) -> Any:
        """Send ``make(versions)`` to the least loaded broker, retrying on
        another broker when the connection fails. Returns the response (the
        result of the future ``send(node, request)`` returns, when given)."""
        return self.run(self.request_any_steps(make, timeout, retries, send=send))

    def request_any_steps(self, make: Callable[[Dict[int, int]], Any], timeout: Optional[float] = None,
                          retries: int = 3, *, send: Optional[Callable[[int, Any], Future]] = None) -> Steps:
        """:meth:`request_any` as steps."""
        send = send or self.send
        deadline = time.monotonic() + (timeout if timeout is not None else self.cfg.get("request_timeout_ms", 30000) / 1000.0)
        last: Optional[BaseException] = None
        failures = 0
        while failures <= retries:
            node = yield from self.wait_for_node_steps(deadline)
            try:
                conn = self.connection(node)
                if conn is None:
                    raise NoBrokersAvailableError("no broker reachable")
                # fail_over: a broker that cannot be reached (refused, or no answer to the
                # connection's setup within its timeout) sends the request to another one
                # (in its reconnect backoff now, least_loaded_node passes it over) instead
                # of the whole deadline going on this one: a dead first bootstrap address
                yield from self.wait_ready_steps(node, deadline, fail_over=True)
            except NoBrokersAvailableError as e:
                if not e.retriable:
                    raise
                last = e                            # not a retry: the request never left
                if time.monotonic() >= deadline:
                    break
                yield min(0.02, max(0.0, deadline - time.monotonic()))   # every broker in backoff: no spin
                continue
            try:
                return (yield from self.wait_steps(send(node, make(conn.versions)), max(0.0, deadline - time.monotonic())))
            except (ConnectionLostError, NoBrokersAvailableError) as e:
                if not e.retriable:
                    raise
                last = e
                failures += 1
                if time.monotonic() >= deadline:
                    break
                yield Sleep(min(self.cfg.get("retry_backoff_ms", 100) / 1000.0, max(0.0, deadline - time.monotonic())))
        raise last if last is not None else NoBrokersAvailableError("no broker reachable")

    def wait_for_node(self, deadline: float) -> int:
        return self.run(self.wait_for_node_steps(deadline))

    def wait_for_node_steps(self, deadline: float) -> Steps:
        """A broker to send to (:meth:`least_loaded_node`), waiting until
        ``deadline`` for one."""
        while True:
            node = self.least_loaded_node()
            if node is not None:
                return node
            if time.monotonic() >= deadline:
                why = self.last_errors()
                raise NoBrokersAvailableError(
                    "no broker of " + ", ".join(f"{b.host}:{b.port}" for b in self._bootstrap) + " could be reached"
                    + (f" (last errors: {why})" if why else ""))
            yield 0.05

    def last_errors(self, most: int = 3) -> str:
        """Why the brokers known now (the bootstrap servers before any
        metadata) last failed to connect, each different reason once, for an
        error that would otherwise not say why (a name that does not
        resolve, a refused port); empty when none failed."""
        nodes = list(self.cluster.brokers) or [b.node_id for b in self._bootstrap]
        why = sorted({str(self._errors[n]) for n in nodes if n in self._errors})
        return "; ".join(why[:most]) + (", ..." if len(why) > most else "")

    def wait_ready(self, node_id: int, deadline: float, *, fail_over: bool = False) -> Connection:
        return self.run(self.wait_ready_steps(node_id, deadline, fail_over=fail_over))

    def wait_ready_steps(self, node_id: int, deadline: float, *, fail_over: bool = False) -> Steps:
        """Connect to ``node_id`` and wait until its setup is done. A
        non-retriable failure (TLS refused, SASL refused) is raised at once;
        otherwise :class:`NoBrokersAvailableError` at ``deadline``, naming the
        last failure, or with ``fail_over`` as soon as a connection attempt
        has failed (the caller may try another broker)."""
        attempted = False
        while True:
            conn = self.connection(node_id)
            if conn is not None and conn.ready:
                return conn
            if conn is not None and not conn.closed:
                attempted = True
            err = conn.error if conn is not None and conn.closed else self._last_error(node_id)
            if err is not None and getattr(err, "retriable", True) is False:
                raise err
            if fail_over and err is not None and (attempted or conn is None) and (conn is None or conn.closed):
                raise NoBrokersAvailableError(f"node {node_id} could not be reached ({err})")
            now = time.monotonic()
            if now >= deadline:
                raise NoBrokersAvailableError(f"node {node_id} did not become ready in time"
                                              + (f" (last error: {err})" if err is not None else ""))
            if conn is None or conn.closed:
                not_before = self._backoff.get(node_id, (0.0, 0.0))[0]
                yield Sleep(max(0.001, min(not_before - now, deadline - now, 0.1)))
                continue
            yield min(0.1, max(0.0, deadline - now))

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
            self._metadata_new = True

    def discard_topics(self, topics: Iterable[str]) -> None:
        """Stop asking for these topics' metadata, and forget their errors
        (a later :meth:`add_topics` looks again, afresh)."""
        gone = set(topics)        # read once: ``topics`` may be an iterator
        if self._metadata_topics is not None:
            self._metadata_topics -= gone
        for t in gone:
            self.cluster.topic_errors.pop(t, None)     # its logged refusal is kept: not said again

    def want_all_topics(self) -> None:
        self._metadata_topics = None
        self._metadata_wanted = True
        self._metadata_new = True

    def request_metadata_update(self) -> int:
        """Refresh at the next poll (after a stale-metadata error), once
        the refresh backoff allows. Returns the value ``cluster.generation``
        reaches once an answer to a request sent after this call is taken
        in (a request already in flight is answered first)."""
        self._metadata_wanted = True
        return self.cluster.generation.value + (2 if self._metadata_future is not None else 1)

    def follow_leader_hints(self, refused: Iterable[Tuple[Tuple[str, int], Any, int]], endpoints: Iterable[Any],
                            what: str) -> Set[Tuple[str, int]]:
        """Take in the leader hints (:func:`leader_hint`) of the partitions a
        ``what`` (Produce, Fetch) answer refused, given as (partition, its
        answer, the leader epoch the request was sent under), with the
        answer's ``node_endpoints`` (:meth:`ClusterMetadata.take_leader_hints`).
        Returns the refused partitions whose leader is now known to have
        changed since the request was sent (a hint taken now, or one an
        earlier answer gave: several requests in flight to the old leader
        are refused one after the other), which the caller sends to the new
        leader at once, with no metadata refresh, as Java's producer skips
        its backoff for a retry to a new leader. The others are left to the
        caller's refresh."""
        if not self.leader_hints:
            return set()
        refused = list(refused)
        hints = {}
        for tp, p, _ in refused:
            hint = leader_hint(p.error_code, p)
            if hint is not None:
                hints[tp] = hint
        if not hints:
            return set()
        taken = self.cluster.take_leader_hints(hints, endpoints)
        if taken:
            log.debug("%s: leader hints moved %d partition(s): %s", what, len(taken),
                      ", ".join(f"{t}[{p}] to node {self.cluster.partitions[t][p].leader}" for t, p in sorted(taken)))
        moved = set(taken)
        partitions = self.cluster.partitions
        for tp, _, sent in refused:
            info = partitions.get(tp[0], {}).get(tp[1])
            if tp in hints and 0 <= sent < (-1 if info is None or info.leader < 0 else info.leader_epoch):
                moved.add(tp)
        return moved

    def metadata_request(self, versions: Dict[int, int], topics: Optional[Iterable[str]]) -> Any:
        version = versions.get(ApiKey.METADATA, 0)
        cls = protocol.message("MetadataRequest")
        if topics is None:
            topic_list = None if version >= 1 else []
        else:
            topic_list = [cls.MetadataRequestTopic(name=t) for t in sorted(topics)]
        return cls(topics=topic_list, allow_auto_topic_creation=self.auto_create_topics and topics is not None)

    def refresh_metadata(self, topics: Optional[Iterable[str]] = None, timeout: Optional[float] = None) -> ClusterMetadata:
        """Fetch metadata now (blocking) for ``topics`` (None: the topics this
        client follows; all topics if it follows all). On a timeout the
        refresh goes on, and is taken in when it completes."""
        return self.run(self.refresh_metadata_steps(topics, timeout))

    def refresh_metadata_steps(self, topics: Optional[Iterable[str]] = None, timeout: Optional[float] = None) -> Steps:
        """:meth:`refresh_metadata` as steps."""
        wanted = self._metadata_topics if topics is None else set(topics)
        requested = None if wanted is None else frozenset(wanted)
        yield from self.request_any_steps(lambda v: self.metadata_request(v, requested), timeout,
                                          send=lambda node, req: self._send_metadata(node, req, requested))
        if topics is None:
            self._metadata_wanted = False
        return self.cluster

    def _send_metadata(self, node: int, request: Any, requested: Optional[FrozenSet[str]]) -> Future:
        """Send a Metadata request; its future completes (on the I/O thread)
        once the answer is installed, with the :class:`MetadataUpdate`."""
        fut = self.send(node, request, prepare=functools.partial(_prepare_metadata, self.cluster, requested),
                        offload=True)
        fut.add_done_callback(self._metadata_done)
        return fut

    def _metadata_done(self, fut: Future) -> None:
        """Install a refresh's answer and set the backoff of the next one:
        none after an answer that left nothing unknown; else
        ``retry_backoff_ms``, doubled for each further refresh in a row that
        failed or left a partition without a known leader (or a topic with
        an error), up to ``retry_backoff_max_ms``."""
        if fut.failed() or fut.value.error_code:
            if not fut.failed():
                self._metadata_error(fut.value.error_code)
            self._metadata_wanted = True
            complete = False
        else:
            update: MetadataUpdate = fut.value
            self.cluster.install(update)
            self._metadata_since = None
            complete = update.complete
            if not complete:
                # refresh again once the backoff allows, as the class doc says: without this a topic
                # being created (auto-creation: UNKNOWN_TOPIC_OR_PARTITION, then LEADER_NOT_AVAILABLE)
                # was asked for once, and a producer's send waited for max_block_ms for nothing
                self._metadata_wanted = True
        self._metadata_attempts = 0 if complete else self._metadata_attempts + 1
        first = self.cfg.get("retry_backoff_ms", 100) / 1000.0
        top = max(first, self.cfg.get("retry_backoff_max_ms", 1000) / 1000.0)
        wait = min(top, first * 2 ** min(self._metadata_attempts - 1, 32)) if self._metadata_attempts else 0.0
        self._metadata_not_before = time.monotonic() + wait

    def _metadata_error(self, code: int) -> None:
        """A Metadata response with a top-level error (v13+): nothing in it
        is taken in. REBOOTSTRAP_REQUIRED (KIP-1102) rebootstraps at the
        next tick when the client does; otherwise it is a failed refresh."""
        if code == ErrorCode.REBOOTSTRAP_REQUIRED and self._recovers:
            self._rebootstrap_due = "a broker answered Metadata with REBOOTSTRAP_REQUIRED"
        else:
            log.debug("metadata: %s", protocol.error_for(code, api="Metadata"))

    def _metadata_due(self, now: float) -> Optional[float]:
        """Seconds until a refresh should go (0: now), None when none is due."""
        if self._metadata_future is not None:
            return None
        max_age = self.cfg.get("metadata_max_age_ms", 300000) / 1000.0
        if not self._metadata_wanted:
            return max(0.0, self.cluster.updated_at + max_age - now)
        if self._metadata_new:
            return 0.0
        return max(0.0, self._metadata_not_before - now)

    def _maybe_update_metadata(self) -> None:
        now = time.monotonic()
        due = self._metadata_due(now)
        if due is None or due > 0:
            return
        node = self.least_loaded_node()
        if node is None and self._recovers and self.cluster.brokers:
            self._rebootstrap("no broker the client learned can be reached", close=False)
            node = self.least_loaded_node()
        # The flags are cleared before the topics are read: a topic another
        # thread adds (add_topics) after this point sets them again and gets
        # its own refresh. Cleared after the read, such a topic was dropped
        # until metadata_max_age_ms, and a producer's first send() of it
        # timed out waiting for its metadata.
        if self._metadata_topics is not None and not self._metadata_topics and self.cluster.updated_at:
            self._metadata_wanted = self._metadata_new = False
            if not self._metadata_topics:
                return
            self._metadata_wanted = self._metadata_new = True      # one came meanwhile
        if self._metadata_since is None:
            self._metadata_since = now
        if node is None:
            return
        conn = self.connection(node)
        if conn is None or not conn.ready:
            return
        self._metadata_wanted = self._metadata_new = False
        requested = None if self._metadata_topics is None else frozenset(self._metadata_topics)
        fut = self._send_metadata(node, self.metadata_request(conn.versions, requested), requested)
        if fut.done():
            return

        def done(f: Future) -> None:
            self._metadata_future = None

        self._metadata_future = fut
        fut.add_done_callback(done)

    def start_background(self, steps: Steps, name: str) -> Future:
        """Run ``steps`` in the background, driving this client (its only
        driver from now on): a thread here, a task of the loop in
        ``kwire.aio``. The future returned is done once they end."""
        ended: Future = Future()

        def run() -> None:
            try:
                self.run(steps)
            finally:
                ended.set_result(None)

        threading.Thread(target=run, name=name, daemon=True).start()
        return ended

    # ------------------------------------------------------------ helper
    def _offload(self, job: Callable[[], Any], fut: Future) -> None:
        """Run ``job`` (a decode) on the helper thread; :meth:`poll`
        completes ``fut`` with its result. The thread starts on demand and
        ends once it has nothing to do."""
        with self._jobs_lock:
            if self._closed:
                fut.set_exception(ConnectionLostError("client closed"))
                return
            self._jobs.append((job, fut))
            if self._worker is not None:
                return
            worker = self._worker = threading.Thread(target=self._work, name="kwire-decode", daemon=True)
        worker.start()

    def _work(self) -> None:
        while True:
            with self._jobs_lock:
                if not self._jobs or self._closed:
                    self._worker = self._working = None
                    return
                job, fut = self._jobs.popleft()
                self._working = fut
            try:
                value, error = job(), None
            except Exception as e:  # noqa: BLE001 - handed to the request's future, as a decode on the I/O thread would
                value, error = None, without_traceback(e)
            del job                  # the frame goes now, not with the next job
            self._finished.append((fut, value, error))
            del fut, value, error
            self.wakeup()

    def _complete_offloaded(self) -> None:
        """Complete the futures of the helper thread's finished jobs (their
        callbacks run here, on the I/O thread)."""
        while self._finished:
            fut, value, error = self._finished.popleft()
            if fut.done():
                continue
            if error is None:
                fut.set_result(value)
            else:
                fut.set_exception(error)

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
        seconds for some; check request deadlines; refresh metadata when
        due; close connections idle for ``connections_max_idle_ms``."""
        if self._closed:
            raise KwireError("client is closed")
        self._maybe_update_metadata()
        for conn in list(self._conns.values()):
            self._update_mask(conn)
        timeout = min(timeout, self._next_due(time.monotonic()))
        began = time.monotonic()
        events = self._selector.select(timeout)
        self.metrics.selected(time.monotonic() - began)
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
        self.tick()

    def _next_due(self, now: float) -> float:
        """Seconds until :meth:`tick` has something to start: a metadata
        refresh waiting out its backoff, a rebootstrap's trigger, requests
        held by a quota's throttle (KIP-219); infinity when none."""
        due = self._metadata_due(now)
        timeout = float("inf") if due is None or due <= 0 else due
        trigger = self._rebootstrap_trigger_left(now)
        if trigger is not None:
            timeout = min(timeout, trigger)
        if self.reporter is not None:
            timeout = min(timeout, self.reporter.wait_time(now))
        if self.telemetry is not None:
            timeout = min(timeout, self.telemetry.wait_time(now))
        for conn in self._conns.values():
            left = conn.throttle_left(now)
            if left is not None and left < timeout:
                timeout = left
        return timeout

    @property
    def events(self) -> Optional[ClientEvents]:
        """The owner's ``error_cb`` and ``throttle_cb`` (:mod:`kwire.metrics.events`)."""
        return self._events

    @events.setter
    def events(self, events: Optional[ClientEvents]) -> None:
        self._events = events
        if events is not None and events.throttle_cb is not None:
            self.metrics.on_throttle = lambda node, ms: events.throttled(self._broker_name(node), node, ms)

    def _broker_name(self, node: int) -> str:
        conn = self._conns.get(node)
        return f"{conn.host}:{conn.port}/{node}" if conn is not None else f"node {node}"

    def _tell_all_down(self, events: ClientEvents) -> None:
        """error_cb, once until a broker connects again: the last attempt
        at every broker the client knows (those learned, else the bootstrap
        servers) failed, and no connection is up."""
        known = set(self.cluster.brokers) or {b.node_id for b in self._bootstrap}
        if not known <= set(self._errors) or any(c.ready for c in self._conns.values()):
            return
        self._all_down_said = True
        failures = "; ".join(f"{self._broker_name(n)}: {self._errors[n]}" for n in sorted(known))
        events.error(NoBrokersAvailableError(f"all brokers are down ({failures})"))

    def tick(self) -> None:
        """What follows I/O, whichever driver did it: complete the helper
        thread's decodes, check deadlines, close idle connections, start a
        metadata refresh that is due."""
        self._complete_offloaded()
        now = time.monotonic()
        self._maybe_rebootstrap(now)
        if self.reporter is not None:
            self.reporter.maybe_report(now)
        if self._events is not None:
            if not self._all_down_said:
                self._tell_all_down(self._events)
            self._events.deliver()
        if self.telemetry is not None and not self._closed:
            self.telemetry.tick(now)
        idle = self.cfg.get("connections_max_idle_ms", 540000)
        for conn in list(self._conns.values()):
            conn.check_timeouts(now)
            if 0 <= idle and conn.idle() and (now - conn.last_activity) * 1000 > idle:
                conn.close(ConnectionLostError(f"idle for more than {idle} ms"), quiet=True)
        self._maybe_update_metadata()

    # ------------------------------------------------------- rebootstrap
    def _maybe_rebootstrap(self, now: float) -> None:
        """Rebootstrap when a broker asked for it (REBOOTSTRAP_REQUIRED), or
        when no refresh succeeded for ``metadata_recovery_rebootstrap_trigger_ms``
        while one was wanted (KIP-1102); see the module doc."""
        if not self._recovers:
            return
        if self._rebootstrap_due is not None:
            self._rebootstrap(self._rebootstrap_due)
            return
        left = self._rebootstrap_trigger_left(now)
        if left is not None and left < 0:
            trigger = self.cfg.get("metadata_recovery_rebootstrap_trigger_ms", 300000)
            self._rebootstrap(f"no metadata for metadata.recovery.rebootstrap.trigger.ms ({trigger} ms)")

    def _rebootstrap_trigger_left(self, now: float) -> Optional[float]:
        """Seconds until the trigger rebootstraps (negative: past it); None
        when no refresh is waited for, or the client does not rebootstrap."""
        if not self._recovers or self._metadata_since is None:
            return None
        return self._metadata_since + self.cfg.get("metadata_recovery_rebootstrap_trigger_ms", 300000) / 1000.0 - now

    def _rebootstrap(self, reason: str, *, close: bool = True) -> None:
        """Forget the brokers learned and start again from the bootstrap
        servers (resolved afresh: their connections closed), a refresh
        asked for at once; with ``close``, every other connection closed too
        (what was in flight fails, retriable), as Java's does but when no
        learned broker can be reached (then none is open to them). Reconnect backoffs are kept:
        a cluster that names brokers nobody can reach is asked again at
        their pace, not in a loop. Each reason said once at WARNING, then at
        INFO at most every :data:`REBOOTSTRAP_SAID_AGAIN` seconds."""
        learned = sorted(self.cluster.brokers)
        self._rebootstrap_due = None
        now = time.monotonic()
        said = self._rebootstrap_said.get(reason)
        level = logging.WARNING if said is None else logging.INFO if now - said >= REBOOTSTRAP_SAID_AGAIN \
            else logging.DEBUG
        if level != logging.DEBUG:
            self._rebootstrap_said[reason] = now
        log.log(level, "%s: going back to the bootstrap servers %s, forgetting the brokers learned (nodes %s) "
                "(metadata.recovery.strategy=rebootstrap)", reason,
                ", ".join(f"{b.host}:{b.port}" for b in self._bootstrap), ", ".join(map(str, learned)) or "none")
        error = ConnectionLostError(f"rebootstrap: {reason}")
        for conn in list(self._conns.values()):
            if close or conn.node_id < 0:      # a bootstrap server is connected to afresh: its name resolved again
                conn.close(error, quiet=True)
        for b in self._bootstrap:
            self._answered.pop((b.host, b.port), None)
        self._bootstrap = self._bootstrap_brokers()
        self._checks_cluster = False
        self.cluster.forget_brokers()
        self._metadata_wanted = self._metadata_new = True
        self._metadata_attempts = 0
        self._metadata_not_before = 0.0
        self._metadata_since = now

    def _close_io(self) -> None:
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    def close(self) -> None:
        """Close every connection; fail what is in flight. A decode on the
        helper thread cannot be stopped midway: close waits up to a second
        for it (the thread touches no socket and ends right after)."""
        if self._closed:
            return
        with self._jobs_lock:
            self._closed = True
            jobs = [fut for _, fut in self._jobs]
            self._jobs.clear()
            if self._working is not None:
                jobs.append(self._working)
            worker = self._worker
        for conn in list(self._conns.values()):
            conn.close(ConnectionLostError("client closed"), quiet=True)
        if self._auth is not None:
            self._auth.close()
        jobs += [fut for fut, _, _ in self._finished]
        self._finished.clear()
        for fut in jobs:
            if not fut.done():
                fut.set_exception(ConnectionLostError("client closed"))
        self._close_io()
        if worker is not None and worker is not threading.current_thread():
            worker.join(_WORKER_JOIN)
