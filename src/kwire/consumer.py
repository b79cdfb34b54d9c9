"""The consumer (manual assignment): fetches from every partition leader at
once (or from the replica a leader prefers for ``client_rack``, KIP-392)
and decodes with the compiled codec, into Python records or Arrow.
This module holds its public API and ``poll``; the fetching itself (fetch
scheduling, read-ahead, position look-ups and checks, decoding) is
:mod:`kwire.fetcher`'s, whose :class:`kwire.fetcher.Fetcher` the consumer is.

Flow: :meth:`Consumer.poll` hands out what earlier fetches brought and,
before returning, sends the next Fetch to every leader whose partitions have
nothing buffered, so the broker works while the caller processes the
records (prefetch). Nothing in ``poll`` waits for a broker: positions to look
up (``auto_offset_reset``, ``seek_to_beginning``) and checked (a new leader)
go out as requests whose answers later polls take in, and a partition is
fetched once it has a position. A failed request is retried after
``retry_backoff_ms`` and its failure logged once. A topic the broker
refuses (TOPIC_AUTHORIZATION_FAILED) makes ``poll`` raise
:class:`kwire.errors.TopicAuthorizationFailedError` for its partitions (again
after ``retry_backoff_ms``) while the others are fetched. The metadata
requests of the consumer (and of its group) ask the broker to create a
missing topic as ``allow_auto_create_topics`` says (Kafka's
``allow.auto.create.topics``, default true).

One poll decodes a bounded amount: at most ``max_records`` records and about
``max_poll_bytes`` of record bytes (with a per-record overhead) in all, even
inside one batch; the rest stays in the buffer, undecoded, for the next
polls. A partition's position only moves past records that were returned,
and never backwards: a record whose offset is not above the last one
returned is dropped and counted (a broker that sends offsets going
backwards), as Kafka's client does.

A fetch cut inside a batch returns the complete batches and fetches again
from the first missing offset. A corrupt batch returns the records before
it; then :meth:`Consumer.poll` raises a located
:class:`kwire.CorruptRecordError` for that partition, and keeps raising it
(every other poll while other partitions have records to return, every poll
otherwise) without fetching that partition again, until the caller seeks it
elsewhere: the position stays at the corrupt batch, as in Kafka's Java
client, because fetching again would bring the same bytes.

``isolation_level="read_committed"`` asks the broker for the stable data only
and drops control records and the records of aborted transactions, using the
aborted-transaction list of the Fetch response.

:meth:`Consumer.pause` stops a partition as Java's consumer does: no Fetch
asks for it and no poll returns its records (not even those fetched before
the pause: they stay buffered for after :meth:`Consumer.resume`); its
position stays. The pause belongs to the partition's assignment: it lasts
while the partition stays assigned (``assign()`` again, a cooperative or
KIP-848 rebalance that keeps it) and ends when the partition is revoked or
lost (an eager rebalance revokes every partition).
"""

from __future__ import annotations

import numbers
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Set, Tuple

from kwire import protocol
from kwire._codec import Record
from kwire.client import Client, Steps
from kwire.config import CONSUMER, check_group_protocol, resolve
from kwire.errors import IllegalStateError, KwireError, without_traceback
from kwire.fetcher import Fetcher, LogTruncationError, NoOffsetForPartitionError, PositionOutOfRangeError, _PartitionState
from kwire.future import Future
from kwire.group import GroupCoordinator
from kwire.interceptors import ConsumerInterceptors
from kwire.metrics.names import Metric, client_network_metrics, fetch_metrics, fold, group_metrics
from kwire.metrics.events import ClientEvents
from kwire.metrics.report import brokers_doc, header_doc, stats_reporter
from kwire.metrics.telemetry import TelemetryReporter
from kwire.protocol.api_keys import ErrorCode
from kwire.types import EARLIEST, LATEST, ConsumerRecord, OffsetAndTimestamp, TopicPartition

__all__ = ["Consumer", "ConsumerRecord", "TopicPartition", "OffsetAndTimestamp", "NoOffsetForPartitionError", "PositionOutOfRangeError",
           "LogTruncationError"]

MAX_OFFSET = 2**63 - 1


def _check_offset(offset: Any) -> int:
    """``offset`` as a valid Kafka offset (0 to 2**63 - 1), or an error
    saying what is wrong with it (Kafka's client refuses negative ones)."""
    if isinstance(offset, bool) or not isinstance(offset, numbers.Integral):
        raise TypeError(f"seek offset must be an integer, not {type(offset).__name__}")
    offset = int(offset)
    if offset < 0:
        raise ValueError(f"seek offset must not be a negative number: {offset}")
    if offset > MAX_OFFSET:
        raise ValueError(f"seek offset must be at most 2**63 - 1: {offset}")
    return offset


class Consumer(Fetcher):
    """A Kafka consumer with manual assignment.

    ``Consumer({"bootstrap.servers": ...}, auto_offset_reset="earliest")``;
    :meth:`assign` the partitions, then :meth:`poll` (records per partition)
    or :meth:`poll_columnar` (one ``pyarrow.RecordBatch`` per partition).
    """

    _client_class = Client     # kwire.aio's consumer drives the same logic on an event loop's client

    def __init__(self, config: Optional[Mapping[str, Any]] = None, **kwargs: Any) -> None:
        self.cfg = resolve(CONSUMER, config, kwargs, what="consumer", check=check_group_protocol)
        self._client = self._client_class(self.cfg)
        self._states: Dict[TopicPartition, _PartitionState] = {}
        self._init_fetcher()
        self._raised_last = False     # the last poll raised a held error: this one returns records first
        self._error_turn = 0          # partitions with held errors take turns
        self._closed = False
        self._formats: Any = None     # the kwire.formats.FormatCache of poll_columnar's key and value formats
        self._interceptors: Optional[ConsumerInterceptors] = None
        if self.cfg["interceptor_classes"]:
            self._interceptors = ConsumerInterceptors(self.cfg["interceptor_classes"], self.cfg)
        self._group: Optional[GroupCoordinator] = None     # when there is a group_id
        if self.cfg["group_id"]:
            self._group = GroupCoordinator(self)
        self._started = time.monotonic()
        self._client.reporter = stats_reporter(self.cfg, self._stats_doc)
        self._client.events = ClientEvents.from_config(self.cfg)
        self._tracing: Any = None
        if self.cfg["tracer_provider"]:
            from kwire.tracing import tracing_for       # only when asked for: it needs kwire[otel]

            self._tracing = tracing_for(self.cfg, "consumer")
        self._client.telemetry = TelemetryReporter(self._client, self._metric_list, self._telemetry_resource)

    def _telemetry_resource(self) -> Dict[str, str]:
        """KIP-714's resource attributes of a consumer, as Java's: its group and member id."""
        if self._group is None:
            return {}
        return {"group_id": self._group.group_id, "group_member_id": self._group.member_id}

    def client_instance_id(self) -> Optional[Any]:
        """The client instance id (a ``uuid.UUID``) the brokers assigned for
        client telemetry (KIP-714; Java's ``clientInstanceId``), once a
        broker answered; None before, or with ``enable_metrics_push`` off."""
        return self._client.telemetry.instance_id if self._client.telemetry is not None else None

    # ------------------------------------------------------- metrics
    def metrics(self) -> Dict[str, Dict[str, float]]:
        """The consumer's metrics, named as Java's consumer names them
        (:mod:`kwire.metrics`): ``{"consumer-metrics": {...},
        "consumer-node-metrics,node-id=node-1": {...},
        "consumer-fetch-manager-metrics,topic=t,partition=0": {"records-lag": ...}, ...}``.
        Any thread; a snapshot, computed when called."""
        return fold(self._metric_list(time.monotonic()))

    _metrics_kind = "consumer"

    def _clients(self) -> List[Client]:
        group = self._group._client if self._group is not None else None
        return [self._client] + ([group] if group is not None else [])

    def _metric_list(self, now: float) -> List[Metric]:
        out = client_network_metrics("consumer", self._clients(), now)
        out += fetch_metrics(self._fetch_metrics, self._client.metrics, self._lags(), now)
        if self._group is not None:
            net = self._group._client.metrics if self._group._client is not None else self._client.metrics
            out += group_metrics("consumer", self._group.metrics, net, len(self._states), now)
        return out

    def _stats_doc(self) -> Dict[str, Any]:
        """``stats_cb``'s document (:mod:`kwire.metrics.report`)."""
        now = time.monotonic()
        doc = header_doc("consumer", self.cfg, self._started, now)
        doc["brokers"] = brokers_doc(self._clients(), now)
        topics: Dict[str, Any] = {}
        parts = self._fetch_metrics.parts
        for tp, lag, _ in self._lags():
            st = self._states.get(tp)
            got = parts.get(tp)
            topics.setdefault(tp.topic, {"topic": tp.topic, "partitions": {}})["partitions"][str(tp.partition)] = {
                "partition": tp.partition, "consumer_lag": -1 if lag is None else lag,
                "hi_offset": st.high_watermark if st is not None else -1,
                "ls_offset": st.last_stable_offset if st is not None else -1,
                "lo_offset": st.log_start_offset if st is not None else -1,
                "app_offset": st.position if st is not None and st.position is not None else -1001,
                "rxmsgs": got.records if got is not None else 0, "rxbytes": got.bytes if got is not None else 0}
        doc["topics"] = topics
        doc["rxmsgs"] = int(self._fetch_metrics.records.total)
        doc["rxmsg_bytes"] = int(self._fetch_metrics.bytes.total)
        doc["metrics"] = fold(self._metric_list(now))
        return doc

    # ------------------------------------------------------- assignment
    def assign(self, partitions: Iterable[Tuple[str, int]]) -> None:
        """Consume exactly these partitions (replacing any earlier set)."""
        if self._group is not None and self._group.subscribed:
            raise KwireError("assign() while subscribed: the group assigns the partitions (unsubscribe() first)")
        self._apply_assignment(partitions)

    def _apply_assignment(self, partitions: Iterable[Tuple[str, int]]) -> None:
        tps = [TopicPartition(*tp) for tp in partitions]
        self._states = {tp: self._states.get(tp, _PartitionState()) for tp in tps}
        self._buffer = {tp: c for tp, c in self._buffer.items() if tp in self._states}
        self._ahead = {tp: c for tp, c in self._ahead.items() if tp in self._states}
        self._replicas = {tp: r for tp, r in self._replicas.items() if tp in self._states}
        self._expired = {tp: r for tp, r in self._expired.items() if tp in self._states}
        self._looking_up = {tp: f for tp, f in self._looking_up.items() if tp in self._states}
        self._validating &= set(self._states)
        self._client.add_topics({tp.topic for tp in tps})

    def incremental_assign(self, partitions: Iterable[Tuple[str, int]]) -> None:
        """Add ``partitions`` to the assignment (confluent-kafka's); those
        already assigned keep their positions and buffered records. Start
        the new ones elsewhere than ``auto_offset_reset`` with :meth:`seek`."""
        current = self.assignment()
        have = set(current)
        self.assign(current + [tp for tp in map(TopicPartition._make, partitions) if tp not in have])

    def incremental_unassign(self, partitions: Iterable[Tuple[str, int]]) -> None:
        """Remove ``partitions`` from the assignment (confluent-kafka's); the
        others go on where they are."""
        gone = set(map(TopicPartition._make, partitions))
        self.assign([tp for tp in self.assignment() if tp not in gone])

    def assignment(self) -> List[TopicPartition]:
        """The partitions assigned to this consumer (by ``assign`` or by its group)."""
        return list(self._states)

    # ----------------------------------------------- group (kwire.group)
    def _require_group(self) -> Any:
        if self._group is None:
            raise KwireError("this needs a consumer group: set group_id")
        return self._group

    def subscribe(self, topics: Iterable[str] = (), pattern: Any = None, listener: Any = None) -> None:
        """Join the consumer group ``group_id`` for ``topics`` (or the topics
        matching the regular expression ``pattern``); the group assigns the
        partitions. ``listener``: a :class:`kwire.group.RebalanceListener`."""
        topics = [topics] if isinstance(topics, str) else list(topics)
        self._require_group().subscribe(topics, pattern, listener)
        self._client.add_topics(topics)     # leaders known by the time the assignment comes

    def unsubscribe(self) -> None:
        """Leave the group and drop the subscription and assignment."""
        if self._group is not None:
            self._group.unsubscribe()

    def subscription(self) -> set:
        """The topics subscribed to (empty without a group subscription)."""
        return set() if self._group is None else self._group.subscription()

    def commit(self, offsets: Any = None, asynchronous: bool = False, callback: Any = None,
               timeout: Optional[float] = None) -> Any:
        """Commit ``offsets`` ({(topic, partition): offset or
        :class:`kwire.group.OffsetAndMetadata`}; default: the position of
        every assigned partition). Synchronous unless ``asynchronous``; see
        :meth:`kwire.group.GroupCoordinator.commit` and ``commit_async``."""
        if asynchronous:
            return self._require_group().commit_async(offsets, callback)
        return self._require_group().commit(offsets, timeout)

    def commit_async(self, offsets: Any = None, callback: Any = None) -> Future:
        """Send a commit and return at once; ``callback(offsets, error)`` runs in a
        later ``poll()`` or ``commit()``. The future completes with the offsets (or
        fails). ``offsets``: as :meth:`commit`; default: the positions."""
        return self._require_group().commit_async(offsets, callback)

    def committed(self, partitions: Iterable[Tuple[str, int]], timeout: Optional[float] = None) -> Dict[TopicPartition, Any]:
        """The group's committed :class:`kwire.group.OffsetAndMetadata` per
        partition (None where nothing is committed)."""
        return self._require_group().committed(partitions, timeout)

    def store_offsets(self, message: Any = None, offsets: Optional[Mapping[Tuple[str, int], int]] = None) -> None:
        """librdkafka's ``store_offsets``, with ``enable_auto_offset_store``
        off: what the next commit without offsets (the auto commit's too)
        takes. ``message``: a :class:`kwire.ConsumerRecord` processed (its
        offset + 1 is stored); ``offsets``: ``{(topic, partition): the next
        offset to read}``. A partition not assigned raises
        :class:`kwire.errors.IllegalStateError`."""
        if self.cfg["enable_auto_offset_store"]:
            raise IllegalStateError("store_offsets() needs enable_auto_offset_store=False (otherwise every commit "
                                    "takes the positions)")
        todo: Dict[TopicPartition, int] = {}
        if message is not None:
            todo[TopicPartition(message.topic, message.partition)] = message.offset + 1
        for tp, offset in (offsets or {}).items():
            todo[TopicPartition(*tp)] = _check_offset(offset)
        missing = [tp for tp in todo if tp not in self._states]
        if missing:
            raise IllegalStateError(f"store_offsets: {', '.join(f'{t}[{p}]' for t, p in missing)} not assigned")
        for tp, offset in todo.items():
            self._states[tp].stored = offset

    def group_metadata(self) -> Any:
        """For ``Producer.send_offsets_to_transaction``."""
        return self._require_group().group_metadata()

    def enforce_rebalance(self, reason: Optional[str] = None) -> None:
        """Have the group rebalance at the next poll (Java's
        ``enforceRebalance``): with the classic protocol the member rejoins,
        its JoinGroup carrying ``reason`` (default "rebalance enforced by
        user"); the consumer protocol (KIP-848) has no rebalance a member
        can ask for, so there it is logged and ignored, as in Java's
        consumer. Nothing happens while not subscribed. Without a
        ``group_id``: :class:`kwire.errors.IllegalStateError`."""
        if self._group is None:
            raise IllegalStateError("enforce_rebalance() needs a consumer group: set group_id")
        self._group.enforce_rebalance(reason or "rebalance enforced by user")

    def current_lag(self, tp: Tuple[str, int]) -> Optional[int]:
        """Records between the position of ``tp`` and its end as the last
        fetch answered it (the high watermark; the last stable offset for
        read_committed), without waiting for a broker (Java's
        ``currentLag``): None while the position or the end is not known;
        an unknown end is then asked for (ListOffsets, answered in a later
        poll)."""
        st = self._state(tp)
        if self._readable_end(st) < 0:
            self._ask_end_offset(TopicPartition(*tp))
        return self._lag(st)

    def lag(self, tp: Tuple[str, int]) -> Optional[int]:
        """Records between the position and the end of ``tp`` (the last
        stable offset for read_committed) as of the last fetch, never below
        0; None before the first fetch answered. Unlike
        :meth:`current_lag`, sends nothing."""
        lag = self._lag(self._state(tp))
        return None if lag is None else max(0, lag)

    def _lag(self, st: _PartitionState) -> Optional[int]:
        end = self._readable_end(st)
        if end < 0 or st.position is None:
            return None
        return end - st.position

    # ------------------------------------------------------ flow control
    def pause(self, *tps: Tuple[str, int]) -> None:
        """Stop fetching and returning records of these assigned partitions
        until :meth:`resume` (see the module docstring); their positions
        stay. A partition not assigned raises
        :class:`kwire.errors.IllegalStateError` (and none is paused)."""
        for st in [self._state(tp) for tp in tps]:
            st.paused = True

    def resume(self, *tps: Tuple[str, int]) -> None:
        """Fetch and return these paused partitions again, from their
        positions (records buffered before the pause first). A partition not
        assigned raises :class:`kwire.errors.IllegalStateError`."""
        for st in [self._state(tp) for tp in tps]:
            st.paused = False

    def paused(self) -> set:
        """The assigned partitions that are paused."""
        return {tp for tp, st in self._states.items() if st.paused}

    def _state(self, tp: Tuple[str, int]) -> _PartitionState:
        try:
            return self._states[TopicPartition(*tp)]
        except KeyError:
            raise IllegalStateError(f"no current assignment for partition {tp[0]}[{tp[1]}]") from None

    def seek(self, tp: Tuple[str, int], offset: int) -> None:
        """Make ``offset`` the next offset returned for ``tp``: an integer
        from 0 to 2**63 - 1 (``ValueError`` outside, ``TypeError`` for
        anything else). Clears an error held for the partition, such as a
        corrupt batch at the old position."""
        self._move(tp, _check_offset(offset), None)

    def seek_to_beginning(self, *tps: Tuple[str, int]) -> None:
        """Start these partitions (default: every assigned one) at their log start; looked up at the next poll."""
        for tp in tps or list(self._states):
            self._move(tp, None, EARLIEST)

    def seek_to_end(self, *tps: Tuple[str, int]) -> None:
        """Start these partitions (default: every assigned one) at their log end; looked up at the next poll."""
        for tp in tps or list(self._states):
            self._move(tp, None, LATEST)

    def seek_to_committed(self, *tps: Tuple[str, int], timeout: Optional[float] = None
                          ) -> Dict[TopicPartition, Optional[int]]:
        """Move these partitions (default: every assigned one) to the
        group's committed offsets (aiokafka's ``seek_to_committed``); one
        with nothing committed starts where ``auto_offset_reset`` says, at
        the next poll. Returns the offsets moved to (None: reset)."""
        return self._client.run(self._seek_to_committed_steps(tps, timeout))

    def _seek_to_committed_steps(self, tps: Tuple[Tuple[str, int], ...], timeout: Optional[float]) -> Steps:
        parts = [TopicPartition(*tp) for tp in tps or list(self._states)]
        found = yield from self._require_group().committed_steps(parts, timeout)
        moved: Dict[TopicPartition, Optional[int]] = {}
        for tp in parts:
            meta = found.get(tp)
            moved[tp] = None if meta is None else meta.offset
            self._move(tp, moved[tp], None)
        return moved

    def last_stable_offset(self, tp: Tuple[str, int]) -> Optional[int]:
        """The partition's last stable offset from the last fetch (aiokafka's
        ``last_stable_offset``): the first offset of a transaction still open,
        else the high watermark; None before a fetch answered it."""
        lso = self._state(tp).last_stable_offset
        return None if lso < 0 else lso

    def _move(self, tp: Tuple[str, int], position: Optional[int], reset: Optional[int]) -> None:
        st = self._state(tp)
        st.position, st.reset, st.error, st.corrupt, st.epoch = position, reset, None, None, -1
        st.retry_at = 0.0
        self._looking_up.pop(TopicPartition(*tp), None)   # look up at once; an older answer must match st.reset
        self._drop_buffered(TopicPartition(*tp))

    def position(self, tp: Tuple[str, int], timeout: Optional[float] = None) -> int:
        """The next offset :meth:`poll` will return for ``tp`` (looked up
        when the partition has no position yet)."""
        st = self._state(tp)
        if st.position is not None:
            return st.position
        return self._client.run(self._position_steps(tp, timeout))

    def _position_steps(self, tp: Tuple[str, int], timeout: Optional[float]) -> Steps:
        st = self._state(tp)
        if st.position is None:
            deadline = None if timeout is None else time.monotonic() + timeout
            if self._group is not None:     # a committed offset on its way wins over auto_offset_reset
                yield from self._group.wait_for_positions_steps([tp], timeout)
            if st.position is None:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                yield from self._resolve_positions_steps([TopicPartition(*tp)], left)
        assert st.position is not None
        return st.position

    def highwater(self, tp: Tuple[str, int]) -> int:
        """The partition's high watermark from the last fetch (-1: none yet)."""
        return self._state(tp).high_watermark

    # ---------------------------------------------------------- offsets
    def beginning_offsets(self, tps: Iterable[Tuple[str, int]], timeout: Optional[float] = None) -> Dict[TopicPartition, int]:
        """The log start offsets (ListOffsets at each leader)."""
        return self._client.run(self._offsets_steps(tps, EARLIEST, timeout))

    def end_offsets(self, tps: Iterable[Tuple[str, int]], timeout: Optional[float] = None) -> Dict[TopicPartition, int]:
        """The log end offsets (for read_committed: the last stable offsets)."""
        return self._client.run(self._offsets_steps(tps, LATEST, timeout))

    def _offsets_steps(self, tps: Iterable[Tuple[str, int]], which: int, timeout: Optional[float]) -> Steps:
        found = yield from self._list_offsets_steps({TopicPartition(*t): which for t in tps}, timeout)
        return {tp: o for tp, (o, _) in found.items()}

    def offsets_for_times(self, timestamps: Mapping[Tuple[str, int], int],
                          timeout: Optional[float] = None) -> Dict[TopicPartition, Optional[OffsetAndTimestamp]]:
        """Per partition, the earliest offset whose timestamp is at least the
        given one (ms), or None when there is none."""
        return self._client.run(self._offsets_for_times_steps(timestamps, timeout))

    def _offsets_for_times_steps(self, timestamps: Mapping[Tuple[str, int], int], timeout: Optional[float]) -> Steps:
        got = yield from self._list_offsets_steps({TopicPartition(*tp): ts for tp, ts in timestamps.items()}, timeout)
        return {tp: (None if o < 0 else OffsetAndTimestamp(o, ts)) for tp, (o, ts) in got.items()}

    # --------------------------------------------------------- metadata
    def topics(self, timeout: Optional[float] = None) -> Set[str]:
        """The names of the cluster's topics this client may describe
        (Java's ``listTopics``, kafka-python's ``topics``), without the
        internal ones when ``exclude_internal_topics``: a Metadata request
        now, which changes nothing the consumer follows."""
        return self._client.run(self._topics_steps(timeout))

    def _topics_steps(self, timeout: Optional[float]) -> Steps:
        resp = yield from self._metadata_steps(None, timeout)
        internal = self.cfg["exclude_internal_topics"]
        return {t.name for t in resp.topics if not t.error_code and t.name and not (internal and t.is_internal)}

    def partitions_for_topic(self, topic: str, timeout: Optional[float] = None) -> Optional[Set[int]]:
        """The partition ids of ``topic`` (Java's ``partitionsFor``, as a set
        like kafka-python's and aiokafka's), None when the cluster has no such
        topic; a topic the client may not describe raises its error
        (:class:`kwire.errors.TopicAuthorizationFailedError`). A Metadata
        request now, asking the broker to create the topic only when
        ``allow_auto_create_topics`` is on (as Java's consumer does)."""
        return self._client.run(self._partitions_steps(topic, timeout))

    def _partitions_steps(self, topic: str, timeout: Optional[float]) -> Steps:
        resp = yield from self._metadata_steps([topic], timeout)
        for t in resp.topics:
            if t.name != topic:
                continue
            if t.error_code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_TOPIC_EXCEPTION):
                return None
            if t.error_code and t.error_code != ErrorCode.LEADER_NOT_AVAILABLE:   # (being created: its partitions)
                raise protocol.error_for(t.error_code, api="Metadata", topic=topic)
            return {p.partition_index for p in t.partitions}
        return None

    def _metadata_steps(self, topics: Optional[List[str]], timeout: Optional[float]) -> Steps:
        client = self._client
        return (yield from client.request_any_steps(lambda v: client.metadata_request(v, topics), timeout))

    # ------------------------------------------------------------- poll
    def poll(self, timeout_ms: int = 0, max_records: Optional[int] = None) -> Dict[TopicPartition, List[Record]]:
        """Records per partition: at most ``max_records`` (default
        ``max_poll_records``) in all, and about ``max_poll_bytes`` of them,
        waiting up to ``timeout_ms`` for some.

        Raises an error held for a partition once the records before it are
        out: an error answered for it (raised once), or a
        :class:`kwire.CorruptRecordError` for a corrupt batch at its
        position, raised again by later polls (every other poll while other
        partitions have records, so they keep flowing) until :meth:`seek`
        moves the position; the partition is not fetched meanwhile."""
        return self._poll(self._poll_steps(timeout_ms, self._records_taker(max_records)))

    def _records_taker(self, max_records: Optional[int]) -> Callable[[], Dict[TopicPartition, List[Record]]]:
        limit = self.cfg["max_poll_records"] if max_records is None else _positive("max_records", max_records)
        take = self._intercepted(lambda: self._take_records(limit), "on_consume")
        if self._tracing is None:
            return take
        return self._traced(take, time.time_ns())

    def _traced(self, take: Callable[[], Dict[TopicPartition, List[Record]]],
                began_ns: int) -> Callable[[], Dict[TopicPartition, List[Record]]]:
        """``take`` followed by the poll's span (kwire.tracing), when it returned records."""
        def traced() -> Dict[TopicPartition, List[Record]]:
            out = take()
            if out:
                self._tracing.polled(out, began_ns)
            return out
        return traced

    def _intercepted(self, take: Callable[[], Dict[TopicPartition, Any]],
                     method: str) -> Callable[[], Dict[TopicPartition, Any]]:
        """``take`` followed by the interceptors' ``method`` (when there are
        interceptors: a check per poll, none per record)."""
        if self._interceptors is None:
            return take
        on = getattr(self._interceptors, method)
        return lambda: on(take())

    def poll_columnar(self, timeout_ms: int = 0, *, timestamp_unit: str = "ms", max_records: Optional[int] = None,
                      key_format: Any = None, value_format: Any = None) -> Dict[TopicPartition, Any]:
        """One ``pyarrow.RecordBatch`` per partition with data (columns as
        :class:`kwire.ColumnarDecoder` makes them, timestamps in
        ``timestamp_unit``: "ms" or "us"), no Python object per record: about
        ``max_poll_bytes`` in all (each row counted with its overhead) and,
        when given, at most ``max_records`` rows in all (``max_poll_records``
        does not apply: columnar readers want large batches). Errors as in
        :meth:`poll`.

        ``key_format`` / ``value_format`` type the ``key`` / ``value``
        column: a :class:`kwire.formats.base.Format`, a kind ("avro",
        "protobuf", "json") or ``(kind, options)`` (:mod:`kwire.formats`;
        each spec's format made once per topic and kept by the consumer).
        A value its format cannot decode raises
        :class:`kwire.formats.base.UndecodableValueError` (a
        :class:`kwire.CorruptRecordError` naming its topic, partition and
        offset) once the records before it are returned; the partition's
        position stays at it, so later polls raise it again until
        :meth:`seek` moves past it (as Java's consumer does with a record
        its deserializer refuses)."""
        return self._poll(self._poll_steps(timeout_ms, self._columnar_taker(timestamp_unit, max_records,
                                                                            key_format, value_format)))

    def _columnar_taker(self, timestamp_unit: str, max_records: Optional[int], key_format: Any = None,
                        value_format: Any = None) -> Callable[[], Dict[TopicPartition, Any]]:
        # without pyarrow: the ImportError naming kwire[arrow] now, not when the first records come
        import kwire._arrow  # noqa: F401

        if timestamp_unit not in ("ms", "us"):
            raise ValueError("timestamp_unit must be 'ms' or 'us'")
        if max_records is not None:
            _positive("max_records", max_records)
        if key_format is None and value_format is None:
            return self._intercepted(lambda: self._take_columnar(timestamp_unit, max_records), "on_consume_columnar")
        from kwire.formats import check_spec

        check_spec(key_format)
        check_spec(value_format)
        return self._intercepted(lambda: self._typed(self._take_columnar(timestamp_unit, max_records), key_format,
                                                     value_format), "on_consume_columnar")

    def _typed(self, batches: Dict[TopicPartition, Any], key_spec: Any, value_spec: Any) -> Dict[TopicPartition, Any]:
        """Each partition's batch with its key and value typed by their
        formats. A batch with a value its format cannot decode keeps the
        rows before it; the partition goes back to that record's offset and
        holds the error (raised once these rows are out)."""
        from kwire.formats import FormatCache
        from kwire.formats.base import UndecodableValueError, decode_batch

        if self._formats is None:
            self._formats = FormatCache()
        out = {}
        for tp, batch in batches.items():
            key_format = self._formats.get(key_spec, topic=tp.topic, is_key=True)
            value_format = self._formats.get(value_spec, topic=tp.topic, is_key=False)
            while batch.num_rows:
                try:
                    out[tp] = decode_batch(batch, topic=tp.topic, partition=tp.partition, key_format=key_format,
                                           value_format=value_format)
                    break
                except UndecodableValueError as e:
                    if e.offset is None:
                        raise
                    self._move(tp, e.offset, None)
                    self._states[tp].error = e
                    batch = batch.slice(0, e.row)
        return out

    def _poll(self, steps: Steps) -> Dict[TopicPartition, Any]:
        out = self._client.run(steps)
        if out:
            self._client.poll(0)      # the fetches just sent go out while the caller works
        return out

    def _poll_steps(self, timeout_ms: int, take: Callable[[], Dict[TopicPartition, Any]]) -> Steps:
        """Take what is buffered, or wait for it up to ``timeout_ms``. Waits
        only for the client's I/O: every request it needs goes out and is
        answered in the background. Nothing is awaited once records are
        taken: a wait cancelled (``kwire.aio``) loses none."""
        if self._closed:
            raise KwireError("consumer is closed")
        deadline = time.monotonic() + max(0, timeout_ms) / 1000.0
        self._fetch_metrics.polled()
        may_raise = not self._raised_last     # after a poll that raised, other partitions' records first
        self._raised_last = False
        turned = False                        # the client's I/O had a turn in this call
        while True:
            if self._group is not None:
                yield from self._group.on_poll()     # rebalances, listener callbacks, auto commit
            self._lookup_positions()
            if may_raise:
                yield from self._raise_pending_errors()
            out = take()
            self._send_fetches()          # prefetch while the caller works
            if out:
                return out
            yield from self._raise_pending_errors()  # no records to return: a held error (maybe just found) now
            may_raise = True
            left = deadline - time.monotonic()
            if left <= 0 and turned:
                return {}
            # at least one turn, even with no time left: poll(0) alone must send and read, or a caller
            # that never waits would never get a record
            yield 0.0 if left <= 0 or self._decodable() else min(left, 0.1)
            turned = True

    def _raise_pending_errors(self) -> Steps:
        """Raise an error held for a partition whose buffered records are
        all out: a one-shot error (forgotten as it is raised), or the corrupt
        batch at the partition's position (not while the partition is
        paused), raised as a new copy each time so the held one never carries
        a caller's traceback. Partitions with errors take turns."""
        held = [tp for tp, st in self._states.items()
                if (st.error is not None or (st.corrupt is not None and not st.paused)) and tp not in self._buffer]
        if not held:
            return
        # one network turn first: a caller that polls again at once after each raise must not keep
        # the answers to the other partitions' fetches unread
        yield 0.0
        st = self._states[held[self._error_turn % len(held)]]
        self._error_turn += 1
        self._raised_last = True
        if st.error is not None:
            err, st.error = st.error, None
            raise without_traceback(err, chained=False)   # keeps no frames (nor the bytes they held) alive
        assert st.corrupt is not None
        raise st.corrupt.at(st.corrupt.topic, st.corrupt.partition, st.corrupt.offset)

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Every record, with its topic and partition
        (:class:`kwire.types.ConsumerRecord`); the iteration ends after
        ``consumer_timeout_ms`` without a record (never, by default)."""
        quiet = self.cfg["consumer_timeout_ms"]
        last = time.monotonic()
        while True:
            left = 1000.0 if quiet is None else quiet - (time.monotonic() - last) * 1000
            if left <= 0:
                return
            got = self.poll(int(min(1000.0, left)))
            for tp, records in got.items():
                for r in records:
                    yield ConsumerRecord.of(tp, r)
            if got:
                last = time.monotonic()

    # ------------------------------------------------------------ close
    def close(self, timeout: Optional[float] = None) -> None:
        """Close the connections; with a group, first commit (auto commit),
        revoke and leave, then close the fetch sessions (as Java's consumer
        does), within ``timeout`` seconds in all (default
        ``request_timeout_ms``)."""
        self._client.run(self._close_steps(timeout))

    def _close_steps(self, timeout: Optional[float]) -> Steps:
        if not self._closed:
            deadline = time.monotonic() + (self.cfg["request_timeout_ms"] / 1000.0 if timeout is None else timeout)
            try:
                if self._group is not None:
                    yield from self._group.close_steps(timeout)   # commit, revoke, leave the group
                yield from self._close_sessions_steps(deadline)    # the brokers' fetch sessions (KIP-227)
                if self._client.telemetry is not None:
                    yield from self._client.telemetry.terminate_steps(deadline)   # KIP-714's last push
            finally:
                self._client.close()
                self._closed = True
                if self._interceptors is not None:
                    self._interceptors.close()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, not {value!r}")
    return int(value)


