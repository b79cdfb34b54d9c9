"""The consumer (manual assignment): fetches from every partition leader at
once and decodes with the compiled codec, into Python records or Arrow.

Flow: :meth:`Consumer.poll` hands out what earlier fetches brought and,
before returning, sends the next Fetch to every leader whose partitions have
nothing buffered, so the broker works while the caller processes the
records (prefetch). A partition's position only moves past records that
were returned: a fetch cut inside a batch returns the complete batches and
fetches again from the first missing offset; a corrupt batch returns the
records before it, and the next poll raises a located
:class:`kwire.CorruptRecordError` without moving past it.

``isolation_level="read_committed"`` asks the broker for the stable data only
and drops control records and the records of aborted transactions, using the
aborted-transaction list of the Fetch response.
"""

from __future__ import annotations

import collections
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Set, Tuple

from kwire import protocol
from kwire._codec import ColumnarDecoder, Decoder, Record, split_batches
from kwire.client import Client
from kwire.config import CONSUMER, resolve
from kwire.errors import CorruptRecordError, KwireError
from kwire.future import Future, KafkaTimeoutError

__all__ = ["Consumer", "TopicPartition", "OffsetAndTimestamp", "NoOffsetForPartitionError", "LogTruncationError"]

log = logging.getLogger(__name__)

FETCH = 1
LIST_OFFSETS = 2
OFFSET_FOR_LEADER_EPOCH = 23
EARLIEST = -2
LATEST = -1
OFFSET_OUT_OF_RANGE = 1
ABORT_MARKER = 0


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int


class NoOffsetForPartitionError(KwireError):
    """A partition has no valid position and ``auto_offset_reset`` is none."""


class LogTruncationError(NoOffsetForPartitionError):
    """A new partition leader's log ends before the consumer's position (the
    records past it were lost, e.g. an unclean leader election) and
    ``auto_offset_reset`` is none. ``end_offset`` is where the logs agree."""

    def __init__(self, message: str, topic: str, partition: int, offset: int, end_offset: int) -> None:
        super().__init__(message)
        self.topic, self.partition, self.offset, self.end_offset = topic, partition, offset, end_offset


@dataclass
class _PartitionState:
    position: Optional[int] = None          # next offset to return
    reset: Optional[int] = None             # EARLIEST / LATEST: look it up
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    error: Optional[BaseException] = None   # raised by the next poll (a corrupt batch)
    epoch: int = -1                         # leader epoch the position was read or checked under (-1: unknown)


@dataclass
class _Completed:
    """Fetched bytes of one partition, not yet (fully) handed out. They are
    decoded a chunk at a time (``max_poll_bytes`` of decompressed records),
    so what a fetch brought stays compressed until a poll needs it."""

    tp: TopicPartition
    rest: memoryview                         # not decoded yet
    aborted: Deque[Tuple[int, int]] = field(default_factory=collections.deque)   # (producer id, first offset)
    aborting: Set[int] = field(default_factory=set)   # producer ids inside an aborted transaction
    records: List[Record] = field(default_factory=list)   # the decoded chunk
    taken: int = 0                           # records of the chunk handed out
    next_offset: Optional[int] = None        # after the last batch decoded so far
    end_offset: Optional[int] = None         # after the last complete batch of the fetch (None: none complete)

    @property
    def untaken(self) -> bool:
        return self.taken < len(self.records)

    def advance(self, consumed: int, incomplete_size: int) -> None:
        """Past what a decode call consumed; a cut batch at the end is not
        kept (the next fetch asks for it again)."""
        self.rest = self.rest[:0] if incomplete_size else self.rest[consumed:]


class Consumer:
    """A Kafka consumer with manual assignment.

    ``Consumer({"bootstrap.servers": ...}, auto_offset_reset="earliest")``;
    :meth:`assign` the partitions, then :meth:`poll` (records per partition)
    or :meth:`poll_columnar` (one ``pyarrow.RecordBatch`` per partition).
    """

    def __init__(self, config: Optional[Mapping[str, Any]] = None, **kwargs: Any) -> None:
        self.cfg = resolve(CONSUMER, config, kwargs, what="consumer")
        self._client = Client(self.cfg)
        self._states: Dict[TopicPartition, _PartitionState] = {}
        self._buffer: Dict[TopicPartition, _Completed] = {}
        self._ahead: Dict[TopicPartition, _Completed] = {}   # the fetch after the buffered one (read-ahead)
        self._in_flight: Dict[TopicPartition, int] = {}  # partition -> node of the Fetch asking for it
        self._node_fetches: Dict[int, int] = collections.Counter()   # node -> Fetches in flight
        self._validating: Set[TopicPartition] = set()    # an OffsetForLeaderEpoch checks the position
        self._read_committed = self.cfg["isolation_level"] == "read_committed"
        self._decoder = Decoder(check_crcs=self.cfg["check_crcs"], include_control=self._read_committed,
                                max_decompressed_bytes=self.cfg["max_decompressed_bytes"])
        self._columnar: Dict[str, ColumnarDecoder] = {}     # per timestamp unit
        self._poll_bytes = self.cfg["max_poll_bytes"]
        self._closed = False
        self._group: Any = None       # kwire.group.GroupCoordinator when there is a group_id
        if self.cfg["group_id"]:
            from kwire.group import GroupCoordinator

            self._group = GroupCoordinator(self)

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
        self._client.add_topics({tp.topic for tp in tps})

    def assignment(self) -> List[TopicPartition]:
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
        self._require_group().subscribe(topics, pattern, listener)

    def unsubscribe(self) -> None:
        """Leave the group and drop the subscription and assignment."""
        if self._group is not None:
            self._group.unsubscribe()

    def subscription(self) -> set:
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
        return self._require_group().commit_async(offsets, callback)

    def committed(self, partitions: Iterable[Tuple[str, int]], timeout: Optional[float] = None) -> Dict[TopicPartition, Any]:
        """The group's committed :class:`kwire.group.OffsetAndMetadata` per
        partition (None where nothing is committed)."""
        return self._require_group().committed(partitions, timeout)

    def group_metadata(self) -> Any:
        """For ``Producer.send_offsets_to_transaction``."""
        return self._require_group().group_metadata()

    def lag(self, tp: Tuple[str, int]) -> Optional[int]:
        """Records between the position and the end of ``tp`` (the last
        stable offset for read_committed) as of the last fetch; None before
        the first fetch answered."""
        st = self._state(tp)
        end = self._readable_end(st)
        if end < 0 or st.position is None:
            return None
        return max(0, end - st.position)

    def _has_unread(self, tp: TopicPartition) -> bool:
        """Whether the next fetch of ``tp`` starts before the end the last
        answer gave (false before any answer: the partition may be empty)."""
        offset, end = self._fetch_offset(tp), self._readable_end(self._states[tp])
        return offset is not None and offset < end

    def _readable_end(self, st: _PartitionState) -> int:
        """Where a fetch stops finding records, as of the last one answered:
        the high watermark (the last stable offset for read_committed); -1
        before any."""
        return st.last_stable_offset if self._read_committed and st.last_stable_offset >= 0 else st.high_watermark

    def _state(self, tp: Tuple[str, int]) -> _PartitionState:
        try:
            return self._states[TopicPartition(*tp)]
        except KeyError:
            raise KwireError(f"partition {tp[0]}[{tp[1]}] is not assigned") from None

    def seek(self, tp: Tuple[str, int], offset: int) -> None:
        """Make ``offset`` the next offset returned for ``tp``."""
        st = self._state(tp)
        st.position, st.reset, st.error, st.epoch = offset, None, None, -1
        self._drop_buffered(TopicPartition(*tp))

    def seek_to_beginning(self, *tps: Tuple[str, int]) -> None:
        for tp in tps or self._states:
            st = self._state(tp)
            st.position, st.reset, st.error, st.epoch = None, EARLIEST, None, -1
            self._drop_buffered(TopicPartition(*tp))

    def seek_to_end(self, *tps: Tuple[str, int]) -> None:
        for tp in tps or self._states:
            st = self._state(tp)
            st.position, st.reset, st.error, st.epoch = None, LATEST, None, -1
            self._drop_buffered(TopicPartition(*tp))

    def position(self, tp: Tuple[str, int], timeout: Optional[float] = None) -> int:
        """The next offset :meth:`poll` will return for ``tp`` (looked up
        when the partition has no position yet)."""
        st = self._state(tp)
        if st.position is None:
            self._resolve_positions([TopicPartition(*tp)], timeout)
        assert st.position is not None
        return st.position

    def highwater(self, tp: Tuple[str, int]) -> int:
        """The partition's high watermark from the last fetch (-1: none yet)."""
        return self._state(tp).high_watermark

    # ---------------------------------------------------------- offsets
    def beginning_offsets(self, tps: Iterable[Tuple[str, int]], timeout: Optional[float] = None) -> Dict[TopicPartition, int]:
        return {tp: o for tp, (o, _) in self._list_offsets({TopicPartition(*t): EARLIEST for t in tps}, timeout).items()}

    def end_offsets(self, tps: Iterable[Tuple[str, int]], timeout: Optional[float] = None) -> Dict[TopicPartition, int]:
        """The log end offsets (for read_committed: the last stable offsets)."""
        return {tp: o for tp, (o, _) in self._list_offsets({TopicPartition(*t): LATEST for t in tps}, timeout).items()}

    def offsets_for_times(self, timestamps: Mapping[Tuple[str, int], int],
                          timeout: Optional[float] = None) -> Dict[TopicPartition, Optional[OffsetAndTimestamp]]:
        """Per partition, the earliest offset whose timestamp is at least the
        given one (ms), or None when there is none."""
        got = self._list_offsets({TopicPartition(*tp): ts for tp, ts in timestamps.items()}, timeout)
        return {tp: (None if o < 0 else OffsetAndTimestamp(o, ts)) for tp, (o, ts) in got.items()}

    def _list_offsets(self, query: Dict[TopicPartition, int], timeout: Optional[float]) -> Dict[TopicPartition, Tuple[int, int]]:
        client = self._client
        deadline = time.monotonic() + (timeout if timeout is not None else self.cfg["request_timeout_ms"] / 1000.0)
        client.add_topics({tp.topic for tp in query})
        out: Dict[TopicPartition, Tuple[int, int]] = {}
        todo = dict(query)
        while todo:
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"ListOffsets for {sorted(todo)} did not complete in time")
            by_node: Dict[int, Dict[TopicPartition, int]] = collections.defaultdict(dict)
            missing = False
            for tp, ts in todo.items():
                leader = client.cluster.leader_for(*tp)
                if leader is None:
                    missing = True
                else:
                    by_node[leader][tp] = ts
            if missing:
                client.refresh_metadata(timeout=max(0.1, deadline - time.monotonic()))
                if not by_node:
                    if any(client.cluster.leader_for(*tp) is None for tp in todo):
                        time.sleep(self.cfg["retry_backoff_ms"] / 1000.0)   # still unknown: back off
                    continue
            futures = {}
            for node, parts in by_node.items():
                conn = client.wait_ready(node, deadline)
                futures[node] = (parts, client.send(node, self._list_offsets_request(conn.versions, parts)))
            retry = False
            for node, (parts, fut) in futures.items():
                resp = client.wait(fut, max(0.0, deadline - time.monotonic()))
                for t in resp.topics:
                    for p in t.partitions:
                        tp = TopicPartition(t.name, p.partition_index)
                        if tp not in todo:
                            continue
                        if p.error_code:
                            err = protocol.error_for(p.error_code, api="ListOffsets", topic=tp.topic, partition=tp.partition)
                            if getattr(err, "retriable", False):
                                if getattr(err, "invalid_metadata", False):
                                    client.request_metadata_update()
                                retry = True
                                continue
                            raise err
                        if getattr(p, "old_style_offsets", None):
                            out[tp] = (p.old_style_offsets[0], -1)
                        else:
                            out[tp] = (p.offset, p.timestamp)
                        del todo[tp]
            if retry:
                time.sleep(self.cfg["retry_backoff_ms"] / 1000.0)
                client.refresh_metadata(timeout=max(0.1, deadline - time.monotonic()))
        return out

    def _list_offsets_request(self, versions: Dict[int, int], parts: Dict[TopicPartition, int]) -> Any:
        cls = protocol.message("ListOffsetsRequest")
        topics: Dict[str, List[Any]] = collections.defaultdict(list)
        for tp, ts in parts.items():
            topics[tp.topic].append(cls.ListOffsetsPartition(partition_index=tp.partition, timestamp=ts))
        return cls(replica_id=-1, isolation_level=1 if self._read_committed else 0,
                   topics=[cls.ListOffsetsTopic(name=t, partitions=ps) for t, ps in topics.items()],
                   timeout_ms=self.cfg["request_timeout_ms"])

    def _resolve_positions(self, tps: Sequence[TopicPartition], timeout: Optional[float] = None) -> None:
        query = {}
        for tp in tps:
            st = self._states[tp]
            if st.position is not None:
                continue
            if st.reset is None:
                policy = self.cfg["auto_offset_reset"]
                if policy == "none":
                    raise NoOffsetForPartitionError(
                        f"{tp.topic}[{tp.partition}] has no position and auto_offset_reset is none")
                st.reset = EARLIEST if policy == "earliest" else LATEST
            query[tp] = st.reset
        if query:
            for tp, (offset, _) in self._list_offsets(query, timeout).items():
                st = self._states[tp]
                st.position, st.reset = offset, None

    # ------------------------------------------------------------ fetch
    def _drop_buffered(self, tp: TopicPartition) -> None:
        """Forget what was fetched for ``tp`` (its position changed)."""
        self._buffer.pop(tp, None)
        self._ahead.pop(tp, None)

    def _fetch_offset(self, tp: TopicPartition) -> Optional[int]:
        """Where the next Fetch of ``tp`` starts: its position, or, while a
        fetch is buffered, where that one ends (read-ahead); None when it
        should not be fetched now."""
        c = self._buffer.get(tp)
        if c is None:
            return self._states[tp].position
        if tp in self._ahead or c.end_offset is None:
            return None
        return c.end_offset

    def _fetch_request(self, versions: Dict[int, int], offsets: Dict[TopicPartition, Optional[int]]) -> Any:
        cls = protocol.message("FetchRequest")
        topics: Dict[str, List[Any]] = collections.defaultdict(list)
        for tp, offset in offsets.items():
            topics[tp.topic].append(cls.FetchPartition(
                partition=tp.partition, fetch_offset=offset,
                current_leader_epoch=self._leader_epoch(tp),
                partition_max_bytes=self.cfg["max_partition_fetch_bytes"]))
        ids = self._client.cluster.topic_ids
        return cls(
            replica_id=-1, max_wait_ms=self.cfg["fetch_max_wait_ms"], min_bytes=self.cfg["fetch_min_bytes"],
            max_bytes=max(1, self.cfg["fetch_max_bytes"] // self.cfg["max_in_flight_fetches"]), isolation_level=1 if self._read_committed else 0,
            session_id=0, session_epoch=-1,
            topics=[cls.FetchTopic(topic=t, topic_id=ids.get(t), partitions=ps) for t, ps in topics.items()],
            forgotten_topics_data=[], rack_id=self.cfg["client_rack"] or "")

    def _send_fetches(self) -> None:
        """Fetches for the assigned partitions that have a position, nothing
        buffered and no fetch in flight: up to ``max_in_flight_fetches`` per
        leader, each for a disjoint share of its partitions and an equal
        share of ``fetch_max_bytes``, so the broker serves one while the
        client reads another.

        Only partitions with records left to read (before the end the last
        answer gave) get shares of their own. A broker answers one request
        of a connection at a time, so a fetch of caught-up partitions would
        wait ``fetch_max_wait_ms`` for new records and hold up every fetch
        behind it. Caught-up partitions, and those no answer has given an
        end yet, ride along in the shares of partitions with records, which
        are answered at once; when a leader has none of those, they go in
        one fetch, once nothing else is in flight to it (a long poll)."""
        client = self._client
        need_positions = [tp for tp, st in self._states.items() if st.position is None]
        if need_positions:
            self._resolve_positions(need_positions)
        by_node: Dict[int, List[TopicPartition]] = collections.defaultdict(list)
        to_validate: Dict[int, List[TopicPartition]] = collections.defaultdict(list)
        for tp, st in self._states.items():
            if tp in self._in_flight or tp in self._validating or st.error is not None:
                continue
            if tp in self._buffer and self._fetch_offset(tp) is None:
                continue
            leader = client.cluster.leader_for(*tp)
            if leader is None:
                client.request_metadata_update()
                continue
            if 0 <= st.epoch < self._leader_epoch(tp):
                if tp in self._buffer:
                    continue                        # checked once the buffered records are out
                to_validate[leader].append(tp)      # a new leader: is the position still in its log?
                continue
            by_node[leader].append(tp)
        for node, tps in to_validate.items():
            self._validate_positions(node, tps)
        depth = self.cfg["max_in_flight_fetches"]
        for node, tps in by_node.items():
            busy = self._node_fetches[node]
            unread = [tp for tp in tps if self._has_unread(tp)]
            if unread:
                slots = min(depth - busy, len(unread))
            else:
                slots = 1 if busy == 0 else 0
            if slots <= 0:
                continue
            conn = client.connection(node)
            if conn is None or not conn.ready:
                continue
            if FETCH not in conn.versions:
                raise protocol.no_common_version(FETCH, conn.broker_ranges.get(FETCH))
            shares: List[List[TopicPartition]] = [[] for _ in range(slots)]
            with_records = set(unread)
            for i, tp in enumerate(unread + [tp for tp in tps if tp not in with_records]):
                shares[i % slots].append(tp)
            for share in shares:
                asked = {tp: self._fetch_offset(tp) for tp in share}
                epochs = {tp: self._leader_epoch(tp) for tp in share}
                fut = client.send(node, self._fetch_request(conn.versions, asked))
                self._node_fetches[node] += 1
                for tp in share:
                    self._in_flight[tp] = node
                fut.add_done_callback(lambda f, node=node, asked=asked, epochs=epochs: self._on_fetch(node, asked, f, epochs))

    def _leader_epoch(self, tp: TopicPartition) -> int:
        """The partition leader's epoch in the current metadata (-1: unknown)."""
        info = self._client.cluster.partitions.get(tp.topic, {}).get(tp.partition)
        return -1 if info is None else info.leader_epoch

    # -------------------------------------------------- position checks
    def _validate_positions(self, node: int, tps: List[TopicPartition]) -> None:
        """Ask the new leader (OffsetForLeaderEpoch) where the epoch of each
        position ends in its log; a log that ends before the position was
        truncated (KIP-320). A broker without the API cannot tell: the
        position is taken as valid, as Kafka's own clients do."""
        conn = self._client.connection(node)
        if conn is None or not conn.ready:
            return
        version = conn.versions.get(OFFSET_FOR_LEADER_EPOCH)
        if version is None:
            for tp in tps:
                log.debug("%s[%s]: leader changed; node %s lacks OffsetForLeaderEpoch, position %s kept",
                          tp.topic, tp.partition, node, self._states[tp].position)
                self._states[tp].epoch = self._leader_epoch(tp)
            return
        asked = {tp: (self._states[tp].position, self._states[tp].epoch, self._leader_epoch(tp)) for tp in tps}
        self._validating.update(tps)
        fut = self._client.send(node, self._epoch_request(asked), version)
        fut.add_done_callback(lambda f: self._on_epoch_end(asked, f))

    def _epoch_request(self, asked: Mapping[TopicPartition, Tuple[Optional[int], int, int]]) -> Any:
        cls = protocol.message("OffsetForLeaderEpochRequest")
        topics: Dict[str, List[Any]] = collections.defaultdict(list)
        for tp, (_, epoch, current) in asked.items():
            topics[tp.topic].append(cls.OffsetForLeaderPartition(
                partition=tp.partition, current_leader_epoch=current, leader_epoch=epoch))
        return cls(replica_id=-1, topics=[cls.OffsetForLeaderTopic(topic=t, partitions=ps) for t, ps in topics.items()])

    def _on_epoch_end(self, asked: Mapping[TopicPartition, Tuple[Optional[int], int, int]], fut: Future) -> None:
        self._validating.difference_update(asked)
        if fut.failed():
            log.debug("OffsetForLeaderEpoch failed: %s; checking again", fut.exception())
            return
        for t in fut.value.topics:
            for p in t.partitions:
                tp = TopicPartition(t.topic, p.partition)
                st = self._states.get(tp)
                if st is None or tp not in asked or st.position != asked[tp][0]:
                    continue      # unassigned or sought meanwhile
                position, _, current = asked[tp]
                if p.error_code:
                    self._on_partition_error(tp, p.error_code, api="OffsetForLeaderEpoch")
                    continue
                if p.end_offset < 0:          # the leader knows no such epoch: the position is gone
                    self._on_partition_error(tp, OFFSET_OUT_OF_RANGE)
                    continue
                if position is not None and p.end_offset < position:
                    self._on_truncation(tp, position, p.end_offset)
                st.epoch = current

    def _on_truncation(self, tp: TopicPartition, position: int, end_offset: int) -> None:
        st = self._states[tp]
        self._drop_buffered(tp)         # fetched past the truncation: not in the log any more
        what = (f"{tp.topic}[{tp.partition}]: the log of the new leader ends at {end_offset}, before the "
                f"position {position}: records were lost")
        if self.cfg["auto_offset_reset"] == "none":
            st.error = LogTruncationError(what + " and auto_offset_reset is none", tp.topic, tp.partition,
                                          position, end_offset)
            return
        log.warning("%s; going on from %s", what, end_offset)
        st.position = end_offset

    def _on_fetch(self, node: int, asked: Dict[TopicPartition, Optional[int]], fut: Future,
                  epochs: Dict[TopicPartition, int]) -> None:
        self._node_fetches[node] -= 1
        for tp in asked:
            if self._in_flight.get(tp) == node:
                del self._in_flight[tp]
        asked = {tp: pos for tp, pos in asked.items() if tp in self._states}
        if fut.failed():
            log.debug("fetch from node %s failed: %s", node, fut.exception())
            return
        resp = fut.value
        if getattr(resp, "error_code", 0):
            log.info("fetch from node %s: %s", node, protocol.error_for(resp.error_code, api="Fetch"))
            return
        names = {v: k for k, v in self._client.cluster.topic_ids.items()}
        for t in resp.responses:
            name = t.topic or names.get(getattr(t, "topic_id", None))
            for p in t.partitions:
                tp = TopicPartition(name, p.partition_index)
                if tp not in asked or self._fetch_offset(tp) != asked[tp]:
                    continue      # unassigned or sought meanwhile: the data is stale
                st = self._states[tp]
                ahead = tp in self._buffer
                if p.error_code:
                    if not ahead:   # a read-ahead's error comes again when its offset is the position
                        self._on_partition_error(tp, p.error_code)
                    continue
                st.high_watermark = p.high_watermark
                st.last_stable_offset = getattr(p, "last_stable_offset", -1)
                st.log_start_offset = getattr(p, "log_start_offset", -1)
                data = p.records
                if data is None or len(data) == 0:
                    continue
                st.epoch = epochs[tp]
                aborted = [(a.producer_id, a.first_offset) for a in (getattr(p, "aborted_transactions", None) or [])]
                c = _Completed(tp, memoryview(data), collections.deque(sorted(aborted, key=lambda a: a[1])))
                c.end_offset = split_batches(c.rest).next_offset
                (self._ahead if ahead else self._buffer)[tp] = c

    def _on_partition_error(self, tp: TopicPartition, code: int, api: str = "Fetch") -> None:
        """A partition's error in a Fetch (or an OffsetForLeaderEpoch): reset
        by ``auto_offset_reset``, refresh the metadata and try again, or hold
        the error for the next poll."""
        st = self._states[tp]
        err = protocol.error_for(code, api=api, topic=tp.topic, partition=tp.partition)
        if code == OFFSET_OUT_OF_RANGE:
            policy = self.cfg["auto_offset_reset"]
            if policy == "none":
                st.error = NoOffsetForPartitionError(
                    f"offset {st.position} is out of range for {tp.topic}[{tp.partition}] and auto_offset_reset is none")
                return
            log.info("%s[%s]: offset %s out of range; resetting to %s", tp.topic, tp.partition, st.position, policy)
            st.position, st.reset = None, EARLIEST if policy == "earliest" else LATEST
            return
        if getattr(err, "invalid_metadata", False) or getattr(err, "retriable", False):
            self._client.request_metadata_update()
            return
        st.error = err

    # ------------------------------------------------------------- poll
    def poll(self, timeout_ms: int = 0, max_records: Optional[int] = None) -> Dict[TopicPartition, List[Record]]:
        """Records per partition: at most ``max_records`` (default
        ``max_poll_records``) in all, waiting up to ``timeout_ms`` for some."""
        limit = self.cfg["max_poll_records"] if max_records is None else max_records
        return self._poll(timeout_ms, lambda: self._take_records(limit))

    def poll_columnar(self, timeout_ms: int = 0, *, timestamp_unit: str = "ms") -> Dict[TopicPartition, Any]:
        """One ``pyarrow.RecordBatch`` per partition with data (columns as
        :class:`kwire.ColumnarDecoder` makes them, timestamps in
        ``timestamp_unit``: "ms" or "us"), no Python object per record.
        Everything buffered is returned."""
        if timestamp_unit not in ("ms", "us"):
            raise ValueError("timestamp_unit must be 'ms' or 'us'")
        return self._poll(timeout_ms, lambda: self._take_columnar(timestamp_unit))

    def _poll(self, timeout_ms: int, take: Any) -> Dict[TopicPartition, Any]:
        if self._closed:
            raise KwireError("consumer is closed")
        deadline = time.monotonic() + timeout_ms / 1000.0
        while True:
            if self._group is not None:
                self._group.on_poll()     # rebalances, listener callbacks, auto commit
            self._raise_pending_errors()
            out = take()
            self._send_fetches()          # prefetch while the caller works
            if out:
                self._client.poll(0)
                return out
            left = deadline - time.monotonic()
            if left <= 0:
                return {}
            self._client.poll(min(left, 0.1))

    def _raise_pending_errors(self) -> None:
        for tp, st in self._states.items():
            if st.error is not None and tp not in self._buffer:
                err, st.error = st.error, None
                raise err

    def __iter__(self) -> Iterator[Record]:
        while True:
            for records in self.poll(1000).values():
                yield from records

    def _decode(self, c: _Completed) -> None:
        """Decode the next chunk of ``c`` into records (from the partition's
        position on), until there are records or nothing is left."""
        st = self._states[c.tp]
        c.records, c.taken = [], 0
        while not c.records and c.rest:
            first = c.next_offset is None
            try:
                res = self._decoder.decode(c.rest, topic=c.tp.topic, partition=c.tp.partition,
                                           min_offset=st.position, max_bytes=self._poll_bytes)
            except CorruptRecordError as e:
                records, next_offset = self._decode_prefix(c, e)
            else:
                records, next_offset = res.records, res.next_offset
                c.advance(res.consumed, res.incomplete_size)
                if first and not res.batches and res.incomplete_size:
                    # the first batch is bigger than the fetch brought: the next fetch asks again
                    log.warning("%s[%s]: a batch of %d bytes at offset %s exceeds max_partition_fetch_bytes",
                                c.tp.topic, c.tp.partition, res.incomplete_size, st.position)
            c.records = self._committed_only(records, c) if self._read_committed else records
            if next_offset is not None:
                c.next_offset = next_offset

    def _decode_prefix(self, c: _Completed, error: CorruptRecordError) -> Tuple[List[Record], Optional[int]]:
        """The records of the good batches before a corrupt one; the error is
        raised by the next poll, at the corrupt batch's offset."""
        st = self._states[c.tp]
        records: List[Record] = []
        next_offset = None
        for view in split_batches(c.rest, topic=c.tp.topic, partition=c.tp.partition).batches:
            try:
                res = self._decoder.decode(view, topic=c.tp.topic, partition=c.tp.partition, min_offset=st.position)
            except CorruptRecordError:
                break
            records.extend(res.records)
            next_offset = res.next_offset
        st.error = error
        c.rest = c.rest[:0]
        return records, next_offset

    def _committed_only(self, records: List[Record], c: _Completed) -> List[Record]:
        """Drop control records and records of aborted transactions (the
        Fetch response's aborted list gives each aborted producer id and the
        first offset of its aborted transaction)."""
        out = []
        pending, aborting = c.aborted, c.aborting
        for r in records:
            b = r.batch
            while pending and pending[0][1] <= b.last_offset:
                aborting.add(pending.popleft()[0])
            if b.is_control:
                if b.producer_id in aborting and _control_type(r) == ABORT_MARKER:
                    aborting.discard(b.producer_id)
                continue
            if b.is_transactional and b.producer_id in aborting:
                continue
            out.append(r)
        return out

    def _finish_chunk(self, tp: TopicPartition, c: _Completed, st: _PartitionState) -> None:
        """After the last record of a chunk was handed out: move the position
        past trailing control records or compacted gaps, and drop ``c`` once
        nothing of it is left."""
        if c.next_offset is not None and st.error is None and c.next_offset > (st.position or 0):
            st.position = c.next_offset
        if not c.rest:
            del self._buffer[tp]
            nxt = self._ahead.pop(tp, None)
            if nxt is not None and st.error is None and st.position == c.end_offset:
                nxt.aborting = c.aborting           # an aborted transaction may go on into it
                self._buffer[tp] = nxt

    def _take_records(self, limit: int) -> Dict[TopicPartition, List[Record]]:
        out: Dict[TopicPartition, List[Record]] = {}
        n = 0
        for tp in list(self._buffer):
            if n >= limit:
                break
            c = self._buffer[tp]
            st = self._states.get(tp)
            if st is None:
                self._drop_buffered(tp)
                continue
            if not c.untaken:
                self._decode(c)
            chunk = c.records[c.taken:c.taken + (limit - n)]
            c.taken += len(chunk)
            if chunk:
                out[tp] = chunk
                n += len(chunk)
                st.position = chunk[-1].offset + 1
            if not c.untaken:
                self._finish_chunk(tp, c, st)
        return out

    def _take_columnar(self, unit: str) -> Dict[TopicPartition, Any]:
        decoder = self._columnar.get(unit)
        if decoder is None:
            decoder = self._columnar[unit] = ColumnarDecoder(
                check_crcs=self.cfg["check_crcs"], max_decompressed_bytes=self.cfg["max_decompressed_bytes"],
                timestamp_unit=unit)
        out = {}
        for tp in list(self._buffer):
            c = self._buffer[tp]
            st = self._states.get(tp)
            if st is None:
                self._drop_buffered(tp)
                continue
            if c.untaken or (self._read_committed and (c.aborted or c.aborting)):
                # records left by poll(), or aborted data (it needs per-batch
                # producer ids): the object path, then columns
                if not c.untaken:
                    self._decode(c)
                rest = c.records[c.taken:]
                c.taken = len(c.records)
                if rest:
                    out[tp] = _records_to_arrow(rest, unit)
                    st.position = rest[-1].offset + 1
                self._finish_chunk(tp, c, st)
                continue
            try:
                res = decoder.decode(c.rest, topic=tp.topic, partition=tp.partition,
                                            min_offset=st.position, max_bytes=self._poll_bytes)
            except CorruptRecordError as e:
                good, _ = self._decode_prefix(c, e)
                if good:
                    out[tp] = _records_to_arrow(good, unit)
                    st.position = good[-1].offset + 1
                self._drop_buffered(tp)
                continue
            rb = res.record_batch
            if rb.num_rows:
                out[tp] = rb
            c.advance(res.consumed, res.incomplete_size)
            if res.next_offset is not None:   # a cut rest is fetched again from here
                c.next_offset = res.next_offset
            self._finish_chunk(tp, c, st)
        return out

    # ------------------------------------------------------------ close
    def close(self) -> None:
        if not self._closed:
            try:
                if self._group is not None:
                    self._group.close()   # commit, revoke, leave the group
            finally:
                self._client.close()
                self._closed = True

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _control_type(r: Record) -> int:
    from kwire._codec import parse_control_key

    return parse_control_key(r.key)[1]


def _records_to_arrow(records: List[Record], unit: str) -> Any:
    """Records as the columnar decoder's Arrow layout (the rare path: a
    read_committed fetch with aborted data, or the good prefix of a corrupt
    fetch)."""
    import pyarrow as pa

    from kwire._arrow import record_schema

    schema = record_schema(unit)
    scale = 1000 if unit == "us" else 1
    return pa.RecordBatch.from_pydict({
        "offset": [r.offset for r in records],
        "timestamp": [r.timestamp * scale for r in records],
        "timestamp_type": [r.batch.timestamp_type for r in records],
        "key": [r.key for r in records],
        "value": [r.value for r in records],
        "headers": [[{"key": k, "value": v} for k, v in r.headers] or None for r in records],
    }, schema=schema)
