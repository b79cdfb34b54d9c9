"""The consumer (manual assignment): fetches from every partition leader at
once and decodes with the compiled codec, into Python records or Arrow.

Flow: :meth:`Consumer.poll` hands out what earlier fetches brought and,
before returning, sends the next Fetch to every leader whose partitions have
nothing buffered, so the broker works while the caller processes the
records (prefetch). Nothing in ``poll`` waits for a broker: positions to look
up (``auto_offset_reset``, ``seek_to_beginning``) and checked (a new leader)
go out as requests whose answers later polls take in, and a partition is
fetched once it has a position. A failed request is retried after
``retry_backoff_ms`` and its failure logged once.

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
"""

from __future__ import annotations

import collections
import logging
import numbers
import time
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Set, Tuple

from kwire import protocol
from kwire._codec import ColumnarDecoder, Decoder, PartialBatch, Record, split_batches
from kwire.client import Client
from kwire.config import CONSUMER, resolve
from kwire.errors import CorruptRecordError, KwireError, without_traceback
from kwire.future import Future, KafkaTimeoutError
from kwire.group import GroupCoordinator
from kwire.protocol.api_keys import ApiKey, ErrorCode
from kwire.types import EARLIEST, LATEST, OffsetAndTimestamp, TopicPartition

__all__ = ["Consumer", "TopicPartition", "OffsetAndTimestamp", "NoOffsetForPartitionError", "LogTruncationError"]


log = logging.getLogger(__name__)

ABORT_MARKER = 0
MAX_OFFSET = 2**63 - 1


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
    error: Optional[BaseException] = None   # raised once, by the next poll (held bare: see without_traceback)
    corrupt: Optional[CorruptRecordError] = None   # the corrupt batch at the position: raised until a seek
    epoch: int = -1                         # leader epoch the position was read or checked under (-1: unknown)
    retry_at: float = 0.0                   # after a failure: no request for it before this (monotonic)
    failure: Optional[str] = None           # the failure last logged for it (a failure is said once)
    skipped: int = 0                        # records dropped: their offset was not above the last one returned


@dataclass
class _Completed:
    """Fetched bytes of one partition, not yet (fully) handed out. They are
    decoded a chunk at a time (what one poll may decode), so what a fetch
    brought stays compressed until a poll needs it."""

    tp: TopicPartition
    rest: memoryview                         # not decoded yet
    aborted: Deque[Tuple[int, int]] = field(default_factory=collections.deque)   # (producer id, first offset)
    aborting: Set[int] = field(default_factory=set)   # producer ids inside an aborted transaction
    records: List[Record] = field(default_factory=list)   # the decoded chunk
    taken: int = 0                           # records of the chunk handed out
    next_offset: Optional[int] = None        # after the last record (or batch) decoded so far
    end_offset: Optional[int] = None         # after the last complete batch of the fetch (None: none complete)
    resume: Optional[PartialBatch] = None    # the rest of a batch a decode call stopped inside
    resume_by: Optional[type] = None         # the decoder class that made it (only that kind takes it)
    resume_from: Optional[memoryview] = None  # the bytes that decode call started from (to decode them again)
    narrow: bool = False                     # a corrupt batch is ahead: decode one batch per call up to it
    error: Optional[CorruptRecordError] = None   # the corrupt batch, held until the records before it are out

    @property
    def untaken(self) -> bool:
        return self.taken < len(self.records)

    @property
    def exhausted(self) -> bool:
        """Nothing left to decode (a batch begun counts as something)."""
        return not self.rest and self.resume is None


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
        self._looking_up: Dict[TopicPartition, Future] = {}   # a ListOffsets looks the position up
        self._node_failure: Dict[int, str] = {}          # node -> its last fetch failure logged
        self._backoff = self.cfg["retry_backoff_ms"] / 1000.0
        self._raised_last = False     # the last poll raised a held error: this one returns records first
        self._error_turn = 0          # partitions with held errors take turns
        self._read_committed = self.cfg["isolation_level"] == "read_committed"
        self._decoder = Decoder(check_crcs=self.cfg["check_crcs"], include_control=self._read_committed,
                                max_decompressed_bytes=self.cfg["max_decompressed_bytes"])
        self._columnar: Dict[str, ColumnarDecoder] = {}     # per timestamp unit
        self._poll_bytes = self.cfg["max_poll_bytes"]
        self._closed = False
        self._group: Optional[GroupCoordinator] = None     # when there is a group_id
        if self.cfg["group_id"]:
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
        self._looking_up = {tp: f for tp, f in self._looking_up.items() if tp in self._states}
        self._validating &= set(self._states)
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
        topics = [topics] if isinstance(topics, str) else list(topics)
        self._require_group().subscribe(topics, pattern, listener)
        self._client.add_topics(topics)     # leaders known by the time the assignment comes

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
        """Make ``offset`` the next offset returned for ``tp``: an integer
        from 0 to 2**63 - 1 (``ValueError`` outside, ``TypeError`` for
        anything else). Clears an error held for the partition, such as a
        corrupt batch at the old position."""
        self._move(tp, _check_offset(offset), None)

    def seek_to_beginning(self, *tps: Tuple[str, int]) -> None:
        for tp in tps or list(self._states):
            self._move(tp, None, EARLIEST)

    def seek_to_end(self, *tps: Tuple[str, int]) -> None:
        for tp in tps or list(self._states):
            self._move(tp, None, LATEST)

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
        if st.position is None:
            deadline = None if timeout is None else time.monotonic() + timeout
            if self._group is not None:     # a committed offset on its way wins over auto_offset_reset
                self._group.wait_for_positions([tp], timeout)
            if st.position is None:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                self._resolve_positions([TopicPartition(*tp)], left)
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
                        time.sleep(max(0.0, min(self._backoff, deadline - time.monotonic())))   # still unknown: back off
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
                time.sleep(max(0.0, min(self._backoff, deadline - time.monotonic())))
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
        """Look up the positions of ``tps`` now, waiting up to ``timeout``
        (for :meth:`position`; :meth:`poll` looks them up without waiting)."""
        query = {}
        for tp in tps:
            st = self._states[tp]
            if st.position is not None:
                continue
            reset = self._reset_policy(tp, st)
            if reset is None:
                raise self._no_position(tp)
            query[tp] = reset
        if query:
            for tp, (offset, _) in self._list_offsets(query, timeout).items():
                st = self._states[tp]
                st.position, st.reset = offset, None

    def _reset_policy(self, tp: TopicPartition, st: _PartitionState) -> Optional[int]:
        """EARLIEST or LATEST: where a partition without a position starts
        (a seek_to_* or ``auto_offset_reset``); None when the policy is none."""
        if st.reset is None:
            policy = self.cfg["auto_offset_reset"]
            if policy == "none":
                return None
            st.reset = EARLIEST if policy == "earliest" else LATEST
        return st.reset

    @staticmethod
    def _no_position(tp: TopicPartition) -> NoOffsetForPartitionError:
        return NoOffsetForPartitionError(f"{tp.topic}[{tp.partition}] has no position and auto_offset_reset is none")

    def _lookup_positions(self) -> None:
        """Send a ListOffsets to the leader of every partition without a
        position (none in flight, not backing off), without waiting: the
        answer sets the position at a later poll, and the partition is
        fetched from then on. With ``auto_offset_reset`` none the next poll
        raises :class:`NoOffsetForPartitionError` instead."""
        client = self._client
        now = time.monotonic()
        by_node: Dict[int, Dict[TopicPartition, int]] = collections.defaultdict(dict)
        for tp, st in self._states.items():
            if st.position is not None or st.error is not None or tp in self._looking_up or now < st.retry_at:
                continue
            reset = self._reset_policy(tp, st)
            if reset is None:
                st.error = self._no_position(tp)
                continue
            leader = client.cluster.leader_for(*tp)
            if leader is None:
                client.request_metadata_update()
                continue
            by_node[leader][tp] = reset
        for node, parts in by_node.items():
            conn = client.connection(node)
            if conn is None or not conn.ready:
                continue          # connecting (or backing off): a later poll asks
            fut = client.send(node, self._list_offsets_request(conn.versions, parts))
            for tp in parts:
                self._looking_up[tp] = fut
            fut.add_done_callback(lambda f, parts=parts: self._on_list_offsets(parts, f))

    def _on_list_offsets(self, asked: Dict[TopicPartition, int], fut: Future) -> None:
        """A ListOffsets of :meth:`_lookup_positions` answered (I/O callback)."""
        for tp in asked:
            if self._looking_up.get(tp) is fut:
                del self._looking_up[tp]
        if fut.failed():
            self._request_failed("ListOffsets", asked, fut.exception())
            return
        failed: Dict[Any, Tuple[BaseException, List[TopicPartition]]] = {}   # error code -> (error, partitions)
        unanswered = dict(asked)
        for t in fut.value.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                st = self._states.get(tp)
                if unanswered.pop(tp, None) is None or st is None or st.position is not None or st.reset != asked[tp]:
                    continue      # not asked, unassigned, or sought meanwhile
                if p.error_code:
                    err = protocol.error_for(p.error_code, api="ListOffsets")
                    if getattr(err, "invalid_metadata", False):
                        self._client.request_metadata_update()
                    if getattr(err, "retriable", False):
                        failed.setdefault(p.error_code, (err, []))[1].append(tp)
                    else:     # raised by the next poll, asked again after the backoff
                        st.error = protocol.error_for(p.error_code, api="ListOffsets", topic=tp.topic,
                                                      partition=tp.partition)
                        st.retry_at = time.monotonic() + self._backoff
                    continue
                offset = p.old_style_offsets[0] if getattr(p, "old_style_offsets", None) else p.offset
                if offset < 0:
                    failed.setdefault("offset", (KwireError(f"the answer has no offset ({offset})"), []))[1].append(tp)
                    continue
                st.position, st.reset, st.failure, st.retry_at = offset, None, None, 0.0
        if unanswered:
            failed["missing"] = (KwireError("the answer leaves the partition out"), list(unanswered))
        for err, tps in failed.values():
            self._request_failed("ListOffsets", tps, err)

    def _request_failed(self, api: str, tps: Iterable[TopicPartition], error: BaseException) -> None:
        """A request for ``tps`` failed: ask again after ``retry_backoff_ms``;
        log the failure once (again only when it changes)."""
        text = f"{api}: {type(error).__name__}: {error}"
        retry_at = time.monotonic() + self._backoff
        new = []
        for tp in tps:
            st = self._states.get(tp)
            if st is None:
                continue
            st.retry_at = retry_at
            if st.failure != text:
                st.failure = text
                new.append(tp)
        if new:
            shown = ", ".join(f"{tp.topic}[{tp.partition}]" for tp in new[:5]) + (" ..." if len(new) > 5 else "")
            log.warning("%s for %d partition(s) (%s) failed: %s; retrying every %d ms until it works",
                        api, len(new), shown, error, self.cfg["retry_backoff_ms"])

    # ------------------------------------------------------------ fetch
    def _drop_buffered(self, tp: TopicPartition) -> None:
        """Forget what was fetched for ``tp`` (its position changed)."""
        self._buffer.pop(tp, None)
        self._ahead.pop(tp, None)

    def _fetch_offset(self, tp: TopicPartition) -> Optional[int]:
        """Where the next Fetch of ``tp`` starts: its position, or, while a
        fetch is buffered, where that one ends (read-ahead); None when it
        should not be fetched now (no position yet, or read ahead already)."""
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
        buffered, no fetch in flight, no error held and no failure to back
        off from: up to ``max_in_flight_fetches`` per leader, each for a
        disjoint share of its partitions and an equal share of
        ``fetch_max_bytes``, so the broker serves one while the client reads
        another.

        Only partitions with records left to read (before the end the last
        answer gave) get shares of their own. A broker answers one request
        of a connection at a time, so a fetch of caught-up partitions would
        wait ``fetch_max_wait_ms`` for new records and hold up every fetch
        behind it. Caught-up partitions, and those no answer has given an
        end yet, ride along in the shares of partitions with records, which
        are answered at once; when a leader has none of those, they go in
        one fetch, once nothing else is in flight to it (a long poll)."""
        client = self._client
        now = time.monotonic()
        by_node: Dict[int, List[TopicPartition]] = collections.defaultdict(list)
        to_validate: Dict[int, List[TopicPartition]] = collections.defaultdict(list)
        for tp, st in self._states.items():
            if (tp in self._in_flight or tp in self._validating or st.error is not None or st.corrupt is not None
                    or now < st.retry_at or self._fetch_offset(tp) is None):
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
            if ApiKey.FETCH not in conn.versions:
                raise protocol.no_common_version(ApiKey.FETCH, conn.broker_ranges.get(ApiKey.FETCH))
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
        position is taken as valid, as Kafka's own clients do. The answer is
        taken in by a later poll; the partitions are not fetched meanwhile."""
        conn = self._client.connection(node)
        if conn is None or not conn.ready:
            return
        version = conn.versions.get(ApiKey.OFFSET_FOR_LEADER_EPOCH)
        if version is None:
            for tp in tps:
                log.debug("%s[%s]: leader changed; node %s lacks OffsetForLeaderEpoch, position %s kept",
                          tp.topic, tp.partition, node, self._states[tp].position)
                self._states[tp].epoch = self._leader_epoch(tp)
            return
        asked = {tp: (self._states[tp].position, self._states[tp].epoch, self._leader_epoch(tp)) for tp in tps}
        fut = self._client.send(node, self._epoch_request(asked), version)
        self._validating.update(tps)
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
            self._request_failed("OffsetForLeaderEpoch", asked, fut.exception())
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
                    self._on_partition_error(tp, ErrorCode.OFFSET_OUT_OF_RANGE)
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
        """A Fetch answered (I/O callback). The bookkeeping of what is in
        flight comes first, so that nothing after it can leave it wrong."""
        self._node_fetches[node] -= 1
        for tp in asked:
            if self._in_flight.get(tp) == node:
                del self._in_flight[tp]
        asked = {tp: pos for tp, pos in asked.items() if tp in self._states}
        if fut.failed():
            self._fetch_failed(node, asked, fut.exception(), logging.DEBUG)
            return
        resp = fut.value
        if getattr(resp, "error_code", 0):
            self._fetch_failed(node, asked, protocol.error_for(resp.error_code, api="Fetch"), logging.INFO)
            return
        self._node_failure.pop(node, None)
        try:
            self._take_fetch(asked, resp, epochs)
        except Exception:
            # a bug, or an answer nothing here foresaw: the future logs it (once); asking again at once
            # would only fail again
            retry_at = time.monotonic() + self._backoff
            for tp in asked:
                self._states[tp].retry_at = retry_at
            raise

    def _take_fetch(self, asked: Dict[TopicPartition, Optional[int]], resp: Any, epochs: Dict[TopicPartition, int]) -> None:
        """Buffer the data of each partition of a Fetch answer (or act on its error)."""
        names = {v: k for k, v in self._client.cluster.topic_ids.items()}
        for t in resp.responses:
            name = t.topic or names.get(getattr(t, "topic_id", None))
            for p in t.partitions:
                tp = TopicPartition(name, p.partition_index)
                if tp not in asked or self._fetch_offset(tp) != asked[tp]:
                    continue      # unassigned or sought meanwhile: the data is stale
                st = self._states[tp]
                if st.error is not None or st.corrupt is not None:
                    continue
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
                try:
                    c.end_offset = split_batches(c.rest).next_offset
                except CorruptRecordError:
                    pass          # no read-ahead past a corrupt header; decoding finds it and holds the error
                (self._ahead if ahead else self._buffer)[tp] = c

    def _fetch_failed(self, node: int, asked: Iterable[TopicPartition], error: BaseException, level: int) -> None:
        """A whole Fetch failed: its partitions are fetched again after
        ``retry_backoff_ms`` (not at once: a broker that fails every Fetch
        at once must not be asked in a loop); said once per failure."""
        retry_at = time.monotonic() + self._backoff
        for tp in asked:
            self._states[tp].retry_at = retry_at
        text = f"{type(error).__name__}: {error}"
        if self._node_failure.get(node) != text:
            self._node_failure[node] = text
            log.log(level, "fetch from node %s failed: %s; fetching again every %d ms until it works",
                    node, error, self.cfg["retry_backoff_ms"])

    def _on_partition_error(self, tp: TopicPartition, code: int, api: str = "Fetch") -> None:
        """A partition's error in a Fetch (or an OffsetForLeaderEpoch): reset
        by ``auto_offset_reset``, refresh the metadata and try again after
        ``retry_backoff_ms``, or hold the error for the next poll."""
        st = self._states[tp]
        err = protocol.error_for(code, api=api, topic=tp.topic, partition=tp.partition)
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            policy = self.cfg["auto_offset_reset"]
            if policy == "none":
                st.error = NoOffsetForPartitionError(
                    f"offset {st.position} is out of range for {tp.topic}[{tp.partition}] and auto_offset_reset is none")
                return
            log.info("%s[%s]: offset %s out of range; resetting to %s", tp.topic, tp.partition, st.position, policy)
            st.position, st.reset = None, EARLIEST if policy == "earliest" else LATEST
            return
        st.retry_at = time.monotonic() + self._backoff
        if getattr(err, "invalid_metadata", False) or getattr(err, "retriable", False):
            self._client.request_metadata_update()
            return
        st.error = err

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
        limit = self.cfg["max_poll_records"] if max_records is None else _positive("max_records", max_records)
        return self._poll(timeout_ms, lambda: self._take_records(limit))

    def poll_columnar(self, timeout_ms: int = 0, *, timestamp_unit: str = "ms",
                      max_records: Optional[int] = None) -> Dict[TopicPartition, Any]:
        """One ``pyarrow.RecordBatch`` per partition with data (columns as
        :class:`kwire.ColumnarDecoder` makes them, timestamps in
        ``timestamp_unit``: "ms" or "us"), no Python object per record: about
        ``max_poll_bytes`` in all (each row counted with its overhead) and,
        when given, at most ``max_records`` rows in all (``max_poll_records``
        does not apply: columnar readers want large batches). Errors as in
        :meth:`poll`."""
        if timestamp_unit not in ("ms", "us"):
            raise ValueError("timestamp_unit must be 'ms' or 'us'")
        if max_records is not None:
            _positive("max_records", max_records)
        return self._poll(timeout_ms, lambda: self._take_columnar(timestamp_unit, max_records))

    def _poll(self, timeout_ms: int, take: Any) -> Dict[TopicPartition, Any]:
        """Take what is buffered, or wait for it up to ``timeout_ms``. Waits
        only in the client's poll: every request it needs goes out and is
        answered in the background."""
        if self._closed:
            raise KwireError("consumer is closed")
        deadline = time.monotonic() + max(0, timeout_ms) / 1000.0
        may_raise = not self._raised_last     # after a poll that raised, other partitions' records first
        self._raised_last = False
        while True:
            if self._group is not None:
                self._group.on_poll()     # rebalances, listener callbacks, auto commit
            self._lookup_positions()
            if may_raise:
                self._raise_pending_errors()
            out = take()
            self._send_fetches()          # prefetch while the caller works
            if out:
                self._client.poll(0)
                return out
            self._raise_pending_errors()  # no records to return: a held error (maybe just found) now
            may_raise = True
            left = deadline - time.monotonic()
            if left <= 0:
                return {}
            self._client.poll(0 if self._decodable() else min(left, 0.1))

    def _decodable(self) -> bool:
        """Whether some buffered fetch has data not decoded yet (read_committed
        may decode chunks that keep nothing: go on with the next at once)."""
        return any(not c.exhausted or c.untaken for c in self._buffer.values())

    def _raise_pending_errors(self) -> None:
        """Raise an error held for a partition whose buffered records are
        all out: a one-shot error (forgotten as it is raised), or the corrupt
        batch at the partition's position, raised as a new copy each time so
        the held one never carries a caller's traceback. Partitions with
        errors take turns."""
        held = [tp for tp, st in self._states.items()
                if (st.error is not None or st.corrupt is not None) and tp not in self._buffer]
        if not held:
            return
        # one network turn first: a caller that polls again at once after each raise must not keep
        # the answers to the other partitions' fetches unread
        self._client.poll(0)
        st = self._states[held[self._error_turn % len(held)]]
        self._error_turn += 1
        self._raised_last = True
        if st.error is not None:
            err, st.error = st.error, None
            raise without_traceback(err, chained=False)   # keeps no frames (nor the bytes they held) alive
        assert st.corrupt is not None
        raise st.corrupt.at(st.corrupt.topic, st.corrupt.partition, st.corrupt.offset)

    def __iter__(self) -> Iterator[Record]:
        while True:
            for records in self.poll(1000).values():
                yield from records

    # ------------------------------------------------------------ decode
    def _step(self, c: _Completed, decoder: Any, max_records: Optional[int], max_bytes: int) -> Any:
        """One decode call on ``c``'s rest: at most ``max_records`` records
        (None: no limit) and about ``max_bytes`` (stopping inside a batch if
        need be; the next call resumes there). Returns the decoder's result,
        or None when it raised a CorruptRecordError: the first time ``c``
        turns narrow (later calls decode one batch each, to return the
        batches before the corrupt one), then the error is held in ``c``."""
        st = self._states[c.tp]
        if c.resume is not None and c.resume_by is not type(decoder):
            # a batch begun by the other decoder (poll() and poll_columnar() mixed): decode it again from
            # its start; the records already returned are below the position
            c.rest, c.resume, c.resume_by = c.resume_from, None, None
        data = c.rest
        if c.narrow:
            if c.resume is not None:
                data = c.rest[:0]         # only the rest of the batch begun
            else:
                max_bytes = 1             # one batch (or its first records)
        try:
            res = decoder.decode(data, topic=c.tp.topic, partition=c.tp.partition, min_offset=st.position,
                                 max_bytes=max_bytes, max_records=-1 if max_records is None else max_records,
                                 resume=c.resume)
        except CorruptRecordError as e:
            if c.narrow:
                # located at the position (where the bad batch begins, or its first record not returned):
                # where the partition stays, and not read from bytes known to be corrupt
                c.error = e.at(c.tp.topic, c.tp.partition, st.position)
                c.rest, c.resume = c.rest[:0], None
            else:
                c.narrow = True
            return None
        if res.resume is not None and c.resume is None:
            c.resume_from = data
        c.resume = res.resume
        c.resume_by = type(decoder) if res.resume is not None else None
        if res.next_offset is None and res.incomplete_size and c.next_offset is None and c.resume is None:
            # the first batch is bigger than the fetch brought: fetch it again (later, and say it once)
            st.retry_at = time.monotonic() + self._backoff
            self._say_once(st, f"a batch of {res.incomplete_size} bytes at offset {st.position} exceeds "
                               "max_partition_fetch_bytes", c.tp)
        c.rest = c.rest[:0] if res.incomplete_size else c.rest[res.consumed:]   # a cut batch: fetched again
        if res.next_offset is not None:
            c.next_offset = res.next_offset
        if res.skipped:
            self._skipped(c.tp, st, res.skipped)
        return res

    def _say_once(self, st: _PartitionState, text: str, tp: TopicPartition) -> None:
        if st.failure != text:
            st.failure = text
            log.warning("%s[%s]: %s", tp.topic, tp.partition, text)

    def _skipped(self, tp: TopicPartition, st: _PartitionState, n: int) -> None:
        """Records the decoder dropped because their offsets did not go up:
        counted, and said once per partition."""
        if not st.skipped:
            log.warning("%s[%s]: dropped %d record(s) whose offset was not above the last one returned (the "
                        "broker sent offsets going backwards); later ones are counted, not logged",
                        tp.topic, tp.partition, n)
        st.skipped += n

    def _decode(self, c: _Completed, max_records: Optional[int], max_bytes: int) -> None:
        """Decode the next chunk of ``c`` into records (from the partition's
        position on)."""
        c.records, c.taken = [], 0
        res = self._step(c, self._decoder, max_records, max_bytes)
        if res is None and c.error is None:
            res = self._step(c, self._decoder, max_records, max_bytes)   # narrowed down: the batches before it
        if res is not None:
            c.records = self._committed_only(res.records, c) if self._read_committed else res.records

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
        past trailing control records or compacted gaps; once nothing of
        ``c`` is left, drop it (holding its corrupt batch's error, said
        once) and take the read-ahead in."""
        if c.next_offset is not None and c.next_offset > (st.position or 0):
            st.position = c.next_offset
        if c.error is not None:
            st.corrupt = c.error
            log.error("%s; poll() raises it until seek() moves %s[%s] elsewhere (position %s)",
                      c.error, tp.topic, tp.partition, st.position)
            self._drop_buffered(tp)
            return
        if c.exhausted:
            del self._buffer[tp]
            nxt = self._ahead.pop(tp, None)
            if nxt is not None and st.error is None and st.position == c.end_offset:
                nxt.aborting = c.aborting           # an aborted transaction may go on into it
                self._buffer[tp] = nxt

    def _serving_order(self) -> List[TopicPartition]:
        """The buffered partitions, those served least recently first."""
        return list(self._buffer)

    def _served(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:              # to the back of the line: the others come first next time
            c = self._buffer.pop(tp, None)
            if c is not None:
                self._buffer[tp] = c

    def _take_records(self, limit: int) -> Dict[TopicPartition, List[Record]]:
        out: Dict[TopicPartition, List[Record]] = {}
        n = 0
        order = self._serving_order()
        share = max(1, self._poll_bytes // max(1, len(order)))   # max_poll_bytes split between the partitions
        for tp in order:
            if n >= limit:
                break
            c = self._buffer[tp]
            st = self._states.get(tp)
            if st is None:
                self._drop_buffered(tp)
                continue
            if not c.untaken:
                self._decode(c, limit - n, share)
            chunk = c.records[c.taken:c.taken + (limit - n)]
            c.taken += len(chunk)
            if chunk:
                out[tp] = chunk
                n += len(chunk)
                st.position = chunk[-1].offset + 1
            if not c.untaken:
                self._finish_chunk(tp, c, st)
        self._served(out)
        return out

    def _take_columnar(self, unit: str, max_records: Optional[int]) -> Dict[TopicPartition, Any]:
        decoder = self._columnar.get(unit)
        if decoder is None:
            decoder = self._columnar[unit] = ColumnarDecoder(
                check_crcs=self.cfg["check_crcs"], max_decompressed_bytes=self.cfg["max_decompressed_bytes"],
                timestamp_unit=unit)
        out = {}
        left = max_records
        order = self._serving_order()
        share = max(1, self._poll_bytes // max(1, len(order)))
        for tp in order:
            if left is not None and left <= 0:
                break
            c = self._buffer[tp]
            st = self._states.get(tp)
            if st is None:
                self._drop_buffered(tp)
                continue
            rb = None
            # records left by poll(), aborted data (it needs per-batch producer ids), a corrupt batch ahead
            # or a batch begun by poll(): the object path, then columns
            objects = (c.untaken or c.narrow or (self._read_committed and (c.aborted or c.aborting))
                       or (c.resume is not None and c.resume_by is Decoder))
            if not objects:
                res = self._step(c, decoder, left, share)
                if res is not None:
                    rb = res.record_batch
                objects = res is None and c.error is None
            if objects:
                if not c.untaken:
                    self._decode(c, left, share)
                rest = c.records[c.taken:] if left is None else c.records[c.taken:c.taken + left]
                c.taken += len(rest)
                if rest:
                    rb = _records_to_arrow(rest, unit)
                    st.position = rest[-1].offset + 1
            if rb is not None and rb.num_rows:
                out[tp] = rb
                if left is not None:
                    left -= rb.num_rows
            if not c.untaken:
                self._finish_chunk(tp, c, st)
        self._served(out)
        return out

    # ------------------------------------------------------------ close
    def close(self, timeout: Optional[float] = None) -> None:
        """Close the connections; with a group, first commit (auto commit),
        revoke and leave, within ``timeout`` seconds in all (default
        ``request_timeout_ms``)."""
        if not self._closed:
            try:
                if self._group is not None:
                    self._group.close(timeout)   # commit, revoke, leave the group
            finally:
                self._client.close()
                self._closed = True

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, not {value!r}")
    return int(value)


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
