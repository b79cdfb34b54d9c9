"""The consumer's fetching: where each assigned partition's records come
from and how they become what ``poll`` returns.

- fetch scheduling (:meth:`Fetcher._send_fetches`): Fetch requests to every
  partition leader, up to ``max_in_flight_fetches`` per leader, each for a
  share of its partitions;
- read-ahead: while a partition's fetched bytes are being handed out, the
  next fetch of it is already asked for from where they end
  (``_buffer``, then ``_ahead``);
- completed fetches (:class:`_Completed`): a partition's fetched bytes,
  decoded a chunk at a time, within what one poll may decode; for
  read_committed, with the partition's :class:`~kwire._codec.Aborter`, which
  has the decoder drop the aborted transactions and the control batches;
- the nearest replica (KIP-392): a leader that prefers another replica for
  the consumer's ``client_rack`` names it in its (empty) answer; the
  partition is fetched from that node until it fails (the fetch, or an
  error there: an out-of-range offset there is the replica's, not the
  position's), the metadata no longer lists it, or ``metadata_max_age_ms``
  passes; then from the leader again (:meth:`Fetcher._read_replica`). A
  replica the client cannot connect to while the leader still names it is
  waited for (its reconnect backoff; a metadata refresh is asked), as in
  Java's consumer: a leader names no replica its cluster has fenced;
- positions: looked up with ListOffsets (``auto_offset_reset``,
  ``seek_to_*``, offsets by time) and checked with OffsetForLeaderEpoch
  when the partition's leader changes (KIP-320: a log truncated below the
  position resets it, or raises :class:`LogTruncationError`), both asked
  of the leader, whatever replica the records come from;
- a partition the leader refuses (NOT_LEADER_OR_FOLLOWER,
  FENCED_LEADER_EPOCH) naming its new leader (KIP-951): fetched from that
  leader at once, its position checked there first, with no metadata
  refresh (:meth:`Fetcher._on_refused`); without a usable hint, after a
  refresh and ``retry_backoff_ms``;
- the partitions' errors, held until ``poll`` raises them;
- paused partitions (``Consumer.pause``): not fetched, and what was fetched
  for them before stays buffered, not returned, until they are resumed (as
  Java's consumer keeps a paused partition's completed fetches); their
  positions are still looked up.
- incremental fetch sessions (KIP-227, :mod:`kwire.fetch_session`): one
  session per broker, and one request of it in flight at a time (its
  epochs are a sequence). Why one and not one per share: a broker answers a
  connection's requests in turn, so partitions with nothing to read must
  sit in a single long poll, not in one fetch per share each waiting out
  ``fetch_max_wait_ms`` in turn; and the partitions of a session are the
  ones the broker fetches in each of its requests, so they must be exactly
  the partitions of that request. So the first share sent to a broker
  whose session is idle is the session's Fetch, and it takes every
  caught-up partition (they stay in the session, in the long poll or
  riding along with partitions that have records, which are answered at
  once); the other shares, and every share sent while the session's Fetch
  is in flight, are sessionless (session id 0, epoch -1) and carry only
  partitions with records to read. Every partition of a session's Fetch
  that kwire does not fetch this time (paused, unassigned, read ahead
  twice (both held), backing off, moved to another node or another share)
  is forgotten in it, as Java forgets its partitions with buffered data;
  only the added and the changed ones (fetch offset, leader epoch) are
  named. In the steady state of many caught-up partitions (the case
  sessions are for) each broker gets one long poll naming nothing, and its
  answer names only partitions with news. A partition the answer leaves out
  has nothing new; an error of the whole Fetch, a failed request or a new
  connection resets the session to a full fetch, from the same positions.
  ``close()`` closes idle sessions; ``enable_fetch_sessions`` false sends
  every Fetch sessionless.

:class:`kwire.consumer.Consumer` is a :class:`Fetcher`: the public API and
``poll`` are the consumer's, and the partitions' states (``_states``) are
shared between the two. Nothing here waits for a broker except the
blocking ListOffsets (:meth:`Fetcher._list_offsets`) behind the consumer's
``beginning_offsets``, ``end_offsets``, ``offsets_for_times`` and
``position``; every other request's answer is taken in by an I/O callback
and acted on by a later poll.
"""

from __future__ import annotations

import collections
import logging
import time
from dataclasses import dataclass, field
from typing import AbstractSet, Any, Dict, FrozenSet, Iterable, Iterator, List, Mapping, Optional, Sequence, Set, Tuple

from kwire import protocol
from kwire._codec import Aborter, ColumnarDecoder, Decoder, PartialBatch, Record, split_batches
from kwire.client import STALLED, Client, Sleep, Steps
from kwire.config import parse_duration_ms
from kwire.errors import CorruptRecordError, KwireError, OffsetOutOfRangeError
from kwire.fetch_session import FINAL_EPOCH, SESSION_ERRORS, FetchSession, Part
from kwire.future import Future, KafkaTimeoutError
from kwire.metrics.clients import FetchMetrics, counters
from kwire.protocol.api_keys import ApiKey, ErrorCode
from kwire.types import EARLIEST, LATEST, TopicPartition

__all__ = ["Fetcher", "NoOffsetForPartitionError", "PositionOutOfRangeError", "LogTruncationError"]

log = logging.getLogger("kwire.consumer")     # the consumer's logger, as before the fetcher had a module


class NoOffsetForPartitionError(KwireError):
    """A partition has no valid position and ``auto_offset_reset`` is none."""


class PositionOutOfRangeError(NoOffsetForPartitionError, OffsetOutOfRangeError):
    """A Fetch said OFFSET_OUT_OF_RANGE for the consumer's position (records
    deleted, or a position past the end) and ``auto_offset_reset`` is none:
    Java's OffsetOutOfRangeException. Both a :class:`NoOffsetForPartitionError`
    and the broker's :class:`~kwire.errors.OffsetOutOfRangeError`, with
    ``topic``, ``partition`` and ``offset`` (the position)."""


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
    paused: bool = False                    # Consumer.pause: neither fetched nor returned until resumed
    end_asked: bool = False                 # a ListOffsets for its end is in flight (Consumer.current_lag)
    stored: Optional[int] = None            # Consumer.store_offsets (committed when enable_auto_offset_store is off)

    def to_commit(self, auto_store: bool) -> Optional[int]:
        """The offset a commit without offsets takes for the partition: its
        position, or with ``enable_auto_offset_store`` off, the stored one."""
        return self.position if auto_store else self.stored


@dataclass
class _Completed:
    """Fetched bytes of one partition, not yet (fully) handed out. They are
    decoded a chunk at a time (what one poll may decode), so what a fetch
    brought stays compressed until a poll needs it."""

    tp: TopicPartition
    rest: memoryview                         # not decoded yet
    aborter: Optional[Aborter] = None        # read_committed: the aborted transactions (None: read_uncommitted)
    records: List[Record] = field(default_factory=list)   # the decoded chunk
    taken: int = 0                           # records of the chunk handed out
    next_offset: Optional[int] = None        # after the last record (or batch) decoded so far
    end_offset: Optional[int] = None         # after the last complete batch of the fetch (None: none complete)
    resume: Optional[PartialBatch] = None    # the rest of a batch a decode call stopped inside
    resume_by: Optional[type] = None         # the decoder class that made it (only that kind takes it)
    resume_from: Optional[memoryview] = None  # the bytes from that batch's start on (to decode it again)
    narrow: bool = False                     # a corrupt batch is ahead: decode one batch per call up to it
    error: Optional[CorruptRecordError] = None   # the corrupt batch, held until the records before it are out

    @property
    def untaken(self) -> bool:
        return self.taken < len(self.records)

    @property
    def exhausted(self) -> bool:
        """Nothing left to decode (a batch begun counts as something)."""
        return not self.rest and self.resume is None


class Fetcher:
    """Fetching, read-ahead, position look-ups and checks, and decoding for
    a consumer (see the module docstring). :meth:`_init_fetcher` sets up
    its state; the consumer calls it once it has its ``cfg``, ``_client``
    and ``_states``."""

    cfg: Dict[str, Any]
    _client: Client
    _states: Dict[TopicPartition, _PartitionState]

    def _init_fetcher(self) -> None:
        self._buffer: Dict[TopicPartition, _Completed] = {}
        self._ahead: Dict[TopicPartition, _Completed] = {}   # the fetch after the buffered one (read-ahead)
        self._in_flight: Dict[TopicPartition, int] = {}  # partition -> node of the Fetch asking for it
        self._node_fetches: Dict[int, int] = collections.Counter()   # node -> Fetches in flight
        # Fetches in flight to a leader: serial -> (node, sent at, leader epoch of each partition when sent)
        self._fetch_flights: Dict[int, Tuple[int, float, Dict[TopicPartition, int]]] = {}
        self._fetch_serial = 0
        self._validating: Set[TopicPartition] = set()    # an OffsetForLeaderEpoch checks the position
        self._looking_up: Dict[TopicPartition, Future] = {}   # a ListOffsets looks the position up
        self._node_failure: Dict[int, str] = {}          # node -> its last fetch failure logged
        self._got_data: Dict[TopicPartition, int] = {}   # partition -> turn of the last fetch that brought data
        self._data_turn = 0
        self._backoff = self.cfg["retry_backoff_ms"] / 1000.0
        self._read_committed = self.cfg["isolation_level"] == "read_committed"
        self._decoder = Decoder(check_crcs=self.cfg["check_crcs"],
                                max_decompressed_bytes=self.cfg["max_decompressed_bytes"])
        self._columnar: Dict[str, ColumnarDecoder] = {}     # per timestamp unit
        self._fetch_metrics = FetchMetrics(self.cfg.get("metrics_sample_window_ms", 30000) / 1000.0)
        self._poll_bytes = self.cfg["max_poll_bytes"]
        # KIP-392 (kept apart from the partitions' states: with none, the fetch path pays for an empty dict)
        self._replicas: Dict[TopicPartition, Tuple[int, float]] = {}   # partition -> (read replica, expiry)
        self._expired: Dict[TopicPartition, int] = {}   # partition -> its expired read replica, till the leader answers
        self._replica_age = self.cfg["metadata_max_age_ms"] / 1000.0   # how long a preferred read replica holds
        # what was said (INFO) of each partition's read replica: a replica the leader keeps naming and the
        # client keeps failing on moves a partition to and fro every backoff; each is said once (then DEBUG)
        self._replica_said: Dict[Tuple[TopicPartition, str], int] = {}   # (partition, what) -> replica
        self._said_back: Dict[TopicPartition, str] = {}   # partition -> why it last went back to its leader
        # KIP-227: one fetch session per node (see the module docstring)
        self._use_sessions = self.cfg["enable_fetch_sessions"]
        self._sessions: Dict[int, FetchSession] = {}
        self._session_said: Dict[int, int] = {}         # node -> the session whose error was said last

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

    # ------------------------------------------------ positions (ListOffsets)
    def _list_offsets(self, query: Dict[TopicPartition, int], timeout: Optional[float]) -> Dict[TopicPartition, Tuple[int, int]]:
        return self._client.run(self._list_offsets_steps(query, timeout))

    def _list_offsets_steps(self, query: Dict[TopicPartition, int], timeout: Optional[float]) -> Steps:
        """:func:`list_offsets_steps` with this consumer's client and isolation level."""
        return list_offsets_steps(self._client, query, timeout, read_committed=self._read_committed)

    def _resolve_positions_steps(self, tps: Sequence[TopicPartition], timeout: Optional[float] = None) -> Steps:
        """Look up the positions of ``tps`` now, waiting up to ``timeout``
        (for ``Consumer.position``; a poll looks them up without waiting)."""
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
            found = yield from self._list_offsets_steps(query, timeout)
            late = {tp: LATEST for tp, (offset, _) in found.items() if offset < 0 and query[tp] >= 0}
            if late:        # by_duration: no record that recent, so from the end (as Java's consumer)
                found.update((yield from self._list_offsets_steps(late, timeout)))
            for tp, (offset, _) in found.items():
                st = self._states[tp]
                st.position, st.reset = offset, None

    def _reset_policy(self, tp: TopicPartition, st: _PartitionState) -> Optional[int]:
        """EARLIEST, LATEST or (``by_duration``) a timestamp: where a
        partition without a position starts (a seek_to_* or
        ``auto_offset_reset``); None when the policy is none."""
        if st.reset is None:
            policy = self.cfg["auto_offset_reset"]
            if policy == "none":
                return None
            st.reset = reset_target(policy)
        return st.reset

    @staticmethod
    def _no_position(tp: TopicPartition) -> NoOffsetForPartitionError:
        return NoOffsetForPartitionError(f"{tp.topic}[{tp.partition}] has no position and auto_offset_reset is none")

    def _leader_or_refusal(self, tp: TopicPartition, st: Any, now: float) -> Optional[int]:
        """The partition's leader; else None, and a metadata refresh asked
        for, or (the topic refused for good: TOPIC_AUTHORIZATION_FAILED) the
        error held for the next poll, asked again after the backoff."""
        client = self._client
        leader = client.cluster.leader_for(*tp)
        if leader is None:
            refused = client.cluster.refused(tp.topic, tp.partition)
            if refused is not None:
                st.error, st.retry_at = refused, now + self._backoff
            else:
                client.request_metadata_update()
        return leader

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
            leader = self._leader_or_refusal(tp, st, now)
            if leader is None:
                continue
            by_node[leader][tp] = reset
        for node, parts in by_node.items():
            conn = client.connection(node)
            if conn is None or not conn.ready:
                continue          # connecting (or backing off): a later poll asks
            fut = client.send(node, list_offsets_request(conn.versions, parts, self._read_committed, self.cfg["request_timeout_ms"]))
            for tp in parts:
                self._looking_up[tp] = fut
            fut.add_done_callback(lambda f, parts=parts: self._on_list_offsets(parts, f))

    def _ask_end_offset(self, tp: TopicPartition) -> None:
        """Send a ListOffsets for the end of ``tp`` (the last stable offset
        for read_committed) when no fetch has given it yet, without waiting:
        a later poll takes the answer in (Java's ``currentLag`` does so)."""
        st = self._states[tp]
        if st.end_asked or self._readable_end(st) >= 0:
            return
        leader = self._client.cluster.leader_for(*tp)
        conn = None if leader is None else self._client.connection(leader)
        if conn is None or not conn.ready:
            return          # no leader or no connection yet: the next call asks
        assert leader is not None
        request = list_offsets_request(conn.versions, {tp: LATEST}, self._read_committed, self.cfg["request_timeout_ms"])
        st.end_asked = True
        self._client.send(leader, request).add_done_callback(lambda f: self._on_end_offset(tp, st, f))

    def _on_end_offset(self, tp: TopicPartition, st: _PartitionState, fut: Future) -> None:
        """The ListOffsets of :meth:`_ask_end_offset` answered (I/O callback):
        the end it gives, unless a fetch gave one meanwhile."""
        st.end_asked = False
        if fut.failed() or self._states.get(tp) is not st or self._readable_end(st) >= 0:
            return
        for t in fut.value.topics:
            for p in t.partitions:
                end = _answered_offset(p)
                if (t.name, p.partition_index) == tp and not p.error_code and end >= 0:
                    if self._read_committed:
                        st.last_stable_offset = end
                    else:
                        st.high_watermark = end

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
                offset = _answered_offset(p)
                if offset < 0 and asked[tp] >= 0:     # by_duration: no record that recent, so from the end
                    st.reset, st.retry_at = LATEST, 0.0
                    continue
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
            log.warning("%s for %d partition(s) (%s) failed: %s; retrying every %d ms until it works",
                        api, len(new), _show(new), error, self.cfg["retry_backoff_ms"])

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

    def _fetch_request(self, versions: Dict[int, int], offsets: Mapping[TopicPartition, Optional[int]],
                       session_id: int = 0, epoch: int = FINAL_EPOCH, forget: Sequence[Tuple[TopicPartition, Any]] = (),
                       max_wait_ms: Optional[int] = None) -> Any:
        """A FetchRequest for ``offsets`` (sessionless, by default; or of
        fetch session ``session_id`` at ``epoch``, forgetting the
        (partition, topic id) pairs of ``forget``)."""
        cls = protocol.message("FetchRequest")
        topics: Dict[str, List[Any]] = collections.defaultdict(list)
        for tp, offset in offsets.items():
            topics[tp.topic].append(cls.FetchPartition(
                partition=tp.partition, fetch_offset=offset,
                current_leader_epoch=self._leader_epoch(tp),
                partition_max_bytes=self.cfg["max_partition_fetch_bytes"]))
        ids = self._client.cluster.topic_ids
        forgotten: Dict[Tuple[str, Any], List[int]] = collections.defaultdict(list)
        for tp, topic_id in forget:
            forgotten[(tp.topic, topic_id)].append(tp.partition)
        return cls(
            replica_id=-1, max_wait_ms=self.cfg["fetch_max_wait_ms"] if max_wait_ms is None else max_wait_ms,
            min_bytes=self.cfg["fetch_min_bytes"],
            max_bytes=max(1, self.cfg["fetch_max_bytes"] // self.cfg["max_in_flight_fetches"]), isolation_level=1 if self._read_committed else 0,
            session_id=session_id, session_epoch=epoch,
            topics=[cls.FetchTopic(topic=t, topic_id=ids.get(t), partitions=ps) for t, ps in topics.items()],
            forgotten_topics_data=[cls.ForgottenTopic(topic=t, topic_id=i, partitions=ps)
                                   for (t, i), ps in forgotten.items()],
            rack_id=self.cfg["client_rack"] or "")

    def _send_fetches(self) -> None:
        """Fetches for the assigned partitions that are not paused and have a
        position, nothing buffered, no fetch in flight, no error held and no
        failure to back off from: up to ``max_in_flight_fetches`` per
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
        now = time.monotonic()
        if self._fetch_flights:
            self._check_stalled_fetches(now)
        by_node: Dict[int, List[TopicPartition]] = collections.defaultdict(list)
        to_validate: Dict[int, List[TopicPartition]] = collections.defaultdict(list)
        replicas = self._replicas
        from_replica: Set[TopicPartition] = set()     # fetched from a read replica, not the leader (KIP-392)
        unlisted: List[TopicPartition] = []           # their read replica is not in the metadata any more
        for tp, st in self._states.items():
            if (st.paused or tp in self._in_flight or tp in self._validating or st.error is not None
                    or st.corrupt is not None or now < st.retry_at or self._fetch_offset(tp) is None):
                continue
            leader = self._leader_or_refusal(tp, st, now)
            if leader is None:
                continue
            if 0 <= st.epoch < self._leader_epoch(tp):
                if tp in self._buffer:
                    continue                        # checked once the buffered records are out
                to_validate[leader].append(tp)      # a new leader: is the position still in its log?
                continue
            node = leader
            if replicas and tp in replicas:
                node = self._read_replica(tp, leader, now, unlisted)
                if node != leader:
                    from_replica.add(tp)
            by_node[node].append(tp)
        if unlisted:
            self._back_to_leader(unlisted, "the metadata no longer lists it")
            client.request_metadata_update()
        for node, tps in to_validate.items():
            self._validate_positions(node, tps)
        depth = self.cfg["max_in_flight_fetches"]
        for node, tps in by_node.items():
            busy = self._node_fetches[node]
            # those that brought data least recently first: a broker fills a response in the request's
            # order, and Apache Kafka sends nothing of a partition whose first batch exceeds its limit
            # (per partition, or what is left of the response's) once a partition before it brought data
            # (KIP-74 exempts only the first), so a fixed order starves the later partitions of a share
            # as long as the first has records
            unread = sorted((tp for tp in tps if self._has_unread(tp)), key=lambda tp: self._got_data.get(tp, -1))
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
            session = self._session_for(node, conn)
            if session is not None and session.busy:
                session = None            # this round's fetches go sessionless
            shares: List[List[TopicPartition]] = [[] for _ in range(slots)]
            with_records = set(unread)
            rest = [tp for tp in tps if tp not in with_records]
            if session is not None:
                # the session's share (the first) takes every caught-up partition: they stay in the session,
                # and ride along with partitions that have records (answered at once)
                for i, tp in enumerate(unread):
                    shares[i % slots].append(tp)
                shares[0].extend(rest)
            else:
                for i, tp in enumerate(unread + rest):
                    shares[i % slots].append(tp)
            for share in shares:
                self._send_fetch(node, conn, share, from_replica, now, session if share is shares[0] else None)

    def _send_fetch(self, node: int, conn: Any, share: List[TopicPartition], from_replica: Set[TopicPartition],
                    now: float, session: Optional[FetchSession]) -> None:
        """Send one Fetch of ``share`` to ``node``: sessionless, or as the
        next request of ``session`` (only what changed since its last one)."""
        asked = {tp: self._fetch_offset(tp) for tp in share}
        epochs = {tp: self._leader_epoch(tp) for tp in share}
        via = from_replica.intersection(share) if from_replica else _NO_REPLICA
        if session is None:
            request = self._fetch_request(conn.versions, asked)
        else:
            ids = self._client.cluster.topic_ids
            max_bytes = self.cfg["max_partition_fetch_bytes"]
            want: Dict[TopicPartition, Part] = {tp: (ids.get(tp.topic), asked[tp], epochs[tp], max_bytes)
                                                for tp in share}
            session_id, epoch, send, forget = session.next_request(want)
            request = self._fetch_request(conn.versions, {tp: asked[tp] for tp in send}, session_id, epoch, forget)
            if session_id and log.isEnabledFor(logging.DEBUG):     # (a fetch opening a session: nothing to say yet)
                log.debug("fetch session %s (epoch %s) to node %s: %d of %d partition(s) sent, %d forgotten",
                          session_id, epoch, node, len(send), len(want), len(forget))
        fut = self._client.send(node, request)
        self._node_fetches[node] += 1
        for tp in share:
            self._in_flight[tp] = node
        self._fetch_serial += 1
        serial = self._fetch_serial
        self._fetch_flights[serial] = (node, now, {tp: e for tp, e in epochs.items() if tp not in via})
        fut.add_done_callback(lambda f: self._fetch_flights.pop(serial, None))
        fut.add_done_callback(lambda f: self._on_fetch(node, asked, f, epochs, via, session))

    def _session_for(self, node: int, conn: Any) -> Optional[FetchSession]:
        """The fetch session of ``node`` (made on first use), or None: sessions
        off (``enable_fetch_sessions``), or a broker without them (Fetch v7+)."""
        if not self._use_sessions or conn.versions[ApiKey.FETCH] < 7:
            return None
        session = self._sessions.get(node)
        if session is None:
            session = self._sessions[node] = FetchSession(node)
        session.use_on(conn)
        return session

    def _check_stalled_fetches(self, now: float) -> None:
        """Fetches to a leader unanswered for ``fetch_max_wait_ms`` plus
        :data:`kwire.client.STALLED` seconds (a hung or cut off broker): the
        metadata is refreshed every ``retry_backoff_ms`` meanwhile, and once
        it names another leader with a higher epoch for one of their
        partitions, the connection to the old one is closed, so that its
        partitions are fetched from the new leader (after the position is
        checked there) now, not after ``request_timeout_ms``."""
        limit = self.cfg["fetch_max_wait_ms"] / 1000.0 + STALLED
        self._client.drop_replaced_leaders(list(self._fetch_flights.values()), now, limit, "Fetch")

    # ------------------------------------------- the nearest replica (KIP-392)
    def _read_replica(self, tp: TopicPartition, leader: int, now: float, unlisted: List[TopicPartition]) -> int:
        """The node to fetch ``tp`` from when its leader named a preferred
        read replica: that replica, unless its time is up (the leader is
        asked again, and names it again or not: said only if that changes),
        it became the leader, or the metadata no longer lists it (``tp`` is
        added to ``unlisted``: back to the leader, as Java's consumer)."""
        replica, until = self._replicas[tp]
        if now >= until or replica == leader:
            log.debug("%s[%s]: read replica %s %s; fetching from the leader %s", tp.topic, tp.partition, replica,
                      "is the leader now" if replica == leader else "expired (metadata_max_age_ms)", leader)
            del self._replicas[tp]
            if replica != leader:
                self._expired[tp] = replica
            return leader
        if replica not in self._client.cluster.brokers:
            unlisted.append(tp)
            return leader
        return replica

    def _note_replica(self, tp: TopicPartition, st: _PartitionState, preferred: int,
                      moved: Dict[int, List[TopicPartition]]) -> None:
        """A leader's answer for ``tp`` named a preferred read replica
        (``preferred`` >= 0: kept for ``metadata_max_age_ms``, as Java does,
        and ``tp`` added to ``moved`` to be said, unless it is the one that
        just expired), or, after an expiry, named none (the partition is the
        leader's again: said here)."""
        expired = self._expired.pop(tp, None)
        if preferred < 0:
            if expired is not None:
                log.info("%s[%s]: fetched from the leader again instead of read replica %s: the leader names no "
                         "read replica any more", tp.topic, tp.partition, expired)
            return
        if preferred == self._client.cluster.leader_for(*tp):
            return                       # the leader itself: nothing to move to
        if preferred not in self._client.cluster.brokers:
            # a node this client does not know yet (a new broker): the metadata first, the leader again after
            # the backoff (not in a loop of empty answers)
            st.retry_at = time.monotonic() + self._backoff
            self._client.request_metadata_update()
            return
        if self._replicas.get(tp, _LEADER)[0] != preferred:
            self._replicas[tp] = (preferred, time.monotonic() + self._replica_age)
            if preferred != expired:
                moved.setdefault(preferred, []).append(tp)

    def _back_to_leader(self, tps: List[TopicPartition], why: str) -> None:
        """Fetch ``tps`` from their leaders again instead of their read
        replicas; said (INFO) once for all of them, and not again for the
        same partition, replica and reason (DEBUG then)."""
        nodes = {tp: self._replicas.pop(tp, _LEADER)[0] for tp in tps}
        new = self._first_said([(tp, why, node) for tp, node in nodes.items()])
        for tp in tps:
            self._said_back[tp] = why
        log.log(logging.INFO if new else logging.DEBUG,
                "%d partition(s) (%s) are fetched from their leader again instead of read replica %s: %s",
                len(tps), _show(tps), ", ".join(str(n) for n in sorted(set(nodes.values()))), why)

    def _first_said(self, notes: Iterable[Tuple[TopicPartition, str, int]]) -> bool:
        """Note each (partition, what was said, read replica); whether any
        is new (the notes are kept for assigned partitions only)."""
        said = self._replica_said
        new = False
        for tp, what, node in notes:
            if said.get((tp, what)) != node:
                said[(tp, what)] = node
                new = True
        if len(said) > 8 * max(1, len(self._states)):      # forget unassigned partitions
            self._replica_said = {k: v for k, v in said.items() if k[0] in self._states}
            self._said_back = {k: v for k, v in self._said_back.items() if k in self._states}
        return new

    def _replica_errors(self, node: int, asked: Dict[TopicPartition, Optional[int]], resp: Any,
                        via: AbstractSet[TopicPartition]) -> Dict[TopicPartition, Optional[int]]:
        """The partitions with an error in read replica ``node``'s answer go
        back to their leader. OFFSET_OUT_OF_RANGE there is the replica's (it
        lags behind the position, or has lost the start): the leader is asked
        at once, the position kept, as Java does. Other errors are then acted
        on as a leader's (a metadata refresh and the backoff, or the error
        held). Returns ``asked`` without those partitions."""
        failed: Dict[TopicPartition, int] = {}
        names = {v: k for k, v in self._client.cluster.topic_ids.items()}
        for t in resp.responses:
            name = t.topic or names.get(getattr(t, "topic_id", None))
            for p in t.partitions:
                tp = TopicPartition(name, p.partition_index)
                if (p.error_code and tp in via and tp in asked and self._fetch_offset(tp) == asked[tp]
                        and self._replicas.get(tp, _LEADER)[0] == node):
                    failed[tp] = p.error_code
        if not failed:
            return asked
        by_code: Dict[int, List[TopicPartition]] = collections.defaultdict(list)
        for tp, code in failed.items():
            by_code[code].append(tp)
        for code, tps in by_code.items():
            self._back_to_leader(tps, f"it answered {type(protocol.error_for(code, api='Fetch')).__name__}")
            if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                continue
            for tp in tps:
                st = self._states[tp]
                if tp not in self._buffer and st.error is None and st.corrupt is None:
                    self._on_partition_error(tp, code)   # a read-ahead's error comes again at the position
        return {tp: offset for tp, offset in asked.items() if tp not in failed}

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
                  epochs: Dict[TopicPartition, int], via: AbstractSet[TopicPartition] = frozenset(),
                  session: Optional[FetchSession] = None) -> None:
        """A Fetch answered (I/O callback); ``via``: its partitions asked of
        ``node`` as their read replica; ``session``: the fetch session it
        was a request of (its partitions left out of the answer have
        nothing new). The bookkeeping of what is in flight comes first, so
        that nothing after it can leave it wrong."""
        self._node_fetches[node] -= 1
        for tp in asked:
            if self._in_flight.get(tp) == node:
                del self._in_flight[tp]
        asked = {tp: pos for tp, pos in asked.items() if tp in self._states}
        if fut.failed():
            if session is not None:
                session.failed()
            self._fetch_failed(node, asked, fut.exception(), logging.DEBUG, via)
            return
        resp = fut.value
        code = getattr(resp, "error_code", 0)
        incremental = session is not None and not session.full
        if session is not None:
            self._session_answered(session, code, resp)
        if code:
            if incremental and code in SESSION_ERRORS:
                return        # nothing fetched: its partitions are fetched again at once, in full
            # a full fetch refused too (no session to drop): after retry_backoff_ms, never in a loop
            self._fetch_failed(node, asked, protocol.error_for(code, api="Fetch"), logging.INFO, via)
            return
        self._node_failure.pop(node, None)
        try:
            if via:
                asked = self._replica_errors(node, asked, resp, via)
            self._take_fetch(asked, resp, epochs)
        except Exception:
            # a bug, or an answer nothing here foresaw: the future logs it (once); asking again at once
            # would only fail again
            retry_at = time.monotonic() + self._backoff
            for tp in asked:
                self._states[tp].retry_at = retry_at
            raise

    def _session_answered(self, session: FetchSession, code: int, resp: Any) -> None:
        """Move ``session`` on by its request's answer; a session error is
        said (INFO, as Java's client says it; once per session id)."""
        old_id, old_epoch = session.id, session.epoch
        session.answered(code, resp.session_id)
        if code in SESSION_ERRORS and self._session_said.get(session.node) != old_id:
            self._session_said[session.node] = old_id
            log.info("fetch session %s of node %s (epoch %s) failed: %s; fetching in full (a new session)",
                     old_id, session.node, old_epoch, type(protocol.error_for(code, api="Fetch")).__name__)

    def _close_sessions_steps(self, deadline: float) -> Steps:
        """Close the fetch sessions with no request in flight (a Fetch at the
        final epoch naming no partition, as Java's consumer sends on close),
        waiting for the answers until ``deadline``. A session whose Fetch is
        still in flight (a long poll, mostly) is left to the broker's cache,
        which drops it once it needs the room and the session has been idle
        for two minutes: the close would be answered only after that Fetch,
        up to ``fetch_max_wait_ms`` later."""
        futures = []
        for node, session in self._sessions.items():
            conn = self._client.connection(node)
            if session.id == 0 or session.busy or conn is None or not conn.ready or conn is not session.conn:
                continue
            futures.append(self._client.send(node, self._fetch_request(conn.versions, {}, session.id, FINAL_EPOCH,
                                                                       max_wait_ms=0)))
            session.reset(known=False)
        for fut in futures:
            try:
                yield from self._client.wait_steps(fut, max(0.0, deadline - time.monotonic()))
            except Exception as e:     # closing anyway: the broker's cache drops an idle session in time
                log.debug("closing a fetch session failed: %s", e)

    def _take_fetch(self, asked: Dict[TopicPartition, Optional[int]], resp: Any, epochs: Dict[TopicPartition, int]) -> None:
        """Buffer the data of each partition of a Fetch answer (or act on its
        error); note a read replica the leader prefers (KIP-392)."""
        moved: Dict[int, List[TopicPartition]] = {}
        refused: List[Tuple[TopicPartition, Any, bool]] = []
        expired = self._expired
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
                    refused.append((tp, p, ahead))
                    continue
                st.high_watermark = p.high_watermark
                st.last_stable_offset = getattr(p, "last_stable_offset", -1)
                st.log_start_offset = getattr(p, "log_start_offset", -1)
                if p.preferred_read_replica >= 0 or (expired and tp in expired):
                    self._note_replica(tp, st, p.preferred_read_replica, moved)
                data = p.records
                if data is None or len(data) == 0:
                    continue
                self._data_turn += 1
                self._got_data[tp] = self._data_turn
                if len(self._got_data) > 2 * len(self._states):     # forget unassigned partitions
                    self._got_data = {k: v for k, v in self._got_data.items() if k in self._states}
                st.epoch = epochs[tp]
                aborter = None
                if self._read_committed:
                    aborter = Aborter((a.producer_id, a.first_offset)
                                      for a in (getattr(p, "aborted_transactions", None) or []))
                c = _Completed(tp, memoryview(data), aborter)
                try:
                    c.end_offset = split_batches(c.rest).next_offset
                except CorruptRecordError:
                    pass          # no read-ahead past a corrupt header; decoding finds it and holds the error
                (self._ahead if ahead else self._buffer)[tp] = c
        if refused:
            self._on_refused(refused, getattr(resp, "node_endpoints", None) or (), epochs)
        for node, tps in moved.items():
            # a move back after a fallback is said once per reason of the fallback
            said = self._first_said([(tp, "to, after " + self._said_back.get(tp, "none"), node) for tp in tps])
            log.log(logging.INFO if said else logging.DEBUG,"%d partition(s) (%s) are fetched from node %s from now on: the read replica their leader "
                     "prefers for client_rack %r (KIP-392)", len(tps), _show(tps), node, self.cfg["client_rack"])

    def _on_refused(self, refused: List[Tuple[TopicPartition, Any, bool]], endpoints: Sequence[Any],
                    epochs: Mapping[TopicPartition, int]) -> None:
        """The partitions a Fetch answer refused (with their answers; true
        for a read-ahead, whose error comes again when its offset is the
        position): leader hints (KIP-951) first. A partition whose hint
        named a new leader is fetched from it at once (its position checked
        there first, as after any leader change), with no metadata refresh
        and no backoff; the others' errors are acted on as before."""
        moved = self._client.follow_leader_hints(((tp, p, epochs.get(tp, -1)) for tp, p, _ in refused), endpoints,
                                                 "Fetch")
        for tp, p, ahead in refused:
            if not ahead and tp not in moved:
                self._on_partition_error(tp, p.error_code)

    def _fetch_failed(self, node: int, asked: Iterable[TopicPartition], error: BaseException, level: int,
                      via: AbstractSet[TopicPartition] = frozenset()) -> None:
        """A whole Fetch failed: its partitions are fetched again after
        ``retry_backoff_ms`` (not at once: a broker that fails every Fetch
        at once must not be asked in a loop); said once per failure. Those
        asked of ``node`` as their read replica (``via``) go back to their
        leader at once."""
        retry_at = time.monotonic() + self._backoff
        back = []
        for tp in asked:
            if tp in via and self._replicas.get(tp, _LEADER)[0] == node:
                back.append(tp)
            else:
                self._states[tp].retry_at = retry_at
        text = f"{type(error).__name__}: {error}"
        if self._node_failure.get(node) != text:
            self._node_failure[node] = text
            log.log(level, "fetch from node %s failed: %s; fetching again every %d ms until it works",
                    node, error, self.cfg["retry_backoff_ms"])
        if back and not self._client._closed:      # (closing fails every fetch: nothing to say then)
            self._back_to_leader(back, f"the fetch from it failed ({text})")

    def _on_partition_error(self, tp: TopicPartition, code: int, api: str = "Fetch") -> None:
        """A partition's error in a Fetch (or an OffsetForLeaderEpoch): reset
        by ``auto_offset_reset``, refresh the metadata and try again after
        ``retry_backoff_ms``, or hold the error for the next poll."""
        st = self._states[tp]
        err = protocol.error_for(code, api=api, topic=tp.topic, partition=tp.partition)
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            policy = self.cfg["auto_offset_reset"]
            if policy == "none":
                st.error = PositionOutOfRangeError(
                    f"offset {st.position} is out of range for {tp.topic}[{tp.partition}] and auto_offset_reset is none",
                    api=api, topic=tp.topic, partition=tp.partition, offset=st.position)
                return
            log.info("%s[%s]: offset %s out of range; resetting to %s", tp.topic, tp.partition, st.position, policy)
            st.position, st.reset = None, reset_target(policy)
            return
        st.retry_at = time.monotonic() + self._backoff
        if getattr(err, "invalid_metadata", False) or getattr(err, "retriable", False):
            self._client.request_metadata_update()
            return
        st.error = err

    def _decodable(self) -> bool:
        """Whether some buffered fetch of a partition not paused has data not
        decoded yet (read_committed may decode chunks that keep nothing: go
        on with the next at once)."""
        return any((not c.exhausted or c.untaken) and not self._states[tp].paused
                   for tp, c in self._buffer.items() if tp in self._states)

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
            # its start (that batch only: read_committed's aborter has decided the batches before it);
            # the records already returned are below the position
            c.rest, c.resume, c.resume_by = c.resume_from, None, None
        data = c.rest
        if c.narrow:
            if c.resume is not None:
                data = c.rest[:0]         # only the rest of the batch begun
            else:
                max_bytes = 1             # one batch (or its first records)
        before = counters(decoder)
        try:
            res = decoder.decode(data, topic=c.tp.topic, partition=c.tp.partition, min_offset=st.position,
                                 max_bytes=max_bytes, max_records=-1 if max_records is None else max_records,
                                 resume=c.resume, aborter=c.aborter)
            self._fetch_metrics.decoded(c.tp, decoder, before)
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
            c.resume_from = data[res.consumed - res.resume.batch_bytes:]
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

    def _lags(self) -> Iterator[Tuple[TopicPartition, Optional[int], Optional[int]]]:
        """(any thread) Each assigned partition's lag (the end a read may
        reach minus the position) and lead (the position minus the log
        start offset); None where either is unknown."""
        for tp, st in dict(self._states).items():
            pos, end = st.position, self._readable_end(st)
            lag = end - pos if pos is not None and end >= 0 else None
            lead = pos - st.log_start_offset if pos is not None and st.log_start_offset >= 0 else None
            yield tp, (None if lag is None else max(0, lag)), lead

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
            c.records = res.records

    def _finish_chunk(self, tp: TopicPartition, c: _Completed, st: _PartitionState) -> None:
        """After the last record of a chunk was handed out: move the position
        past trailing control batches, aborted batches or compacted gaps (the
        decoder's next_offset); once nothing of
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
                if c.aborter is not None:
                    c.aborter.extend(nxt.aborter.pending)   # an aborted transaction may go on into it
                    nxt.aborter = c.aborter
                self._buffer[tp] = nxt

    def _serving_order(self) -> List[TopicPartition]:
        """The buffered partitions, those served least recently first
        (paused ones left out: their fetches stay buffered)."""
        states = self._states
        return [tp for tp in self._buffer if tp not in states or not states[tp].paused]

    def _served(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:              # to the back of the line: the others come first next time
            c = self._buffer.pop(tp, None)
            if c is not None:
                self._buffer[tp] = c

    def _each_buffered(self) -> Iterator[Tuple[TopicPartition, Any, Any, int]]:
        """The buffered partitions in serving order, each with its chunk, its state and its share of
        max_poll_bytes; a partition no longer assigned is dropped on the way."""
        order = self._serving_order()
        share = max(1, self._poll_bytes // max(1, len(order)))   # max_poll_bytes split between the partitions
        for tp in order:
            st = self._states.get(tp)
            if st is None:
                self._drop_buffered(tp)
                continue
            yield tp, self._buffer[tp], st, share

    def _take_records(self, limit: int) -> Dict[TopicPartition, List[Record]]:
        out: Dict[TopicPartition, List[Record]] = {}
        n = 0
        for tp, c, st, share in self._each_buffered():
            if n >= limit:
                break
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
        for tp, c, st, share in self._each_buffered():
            if left is not None and left <= 0:
                break
            rb = None
            # records left by poll(), a corrupt batch ahead or a batch begun by poll(): the object path,
            # then columns
            objects = c.untaken or c.narrow or (c.resume is not None and c.resume_by is Decoder)
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


_NO_REPLICA: FrozenSet[TopicPartition] = frozenset()   # a Fetch whose partitions all go to their leader
_LEADER = (-1, 0.0)                                      # no read replica (fetched from the leader)


def reset_target(policy: str) -> int:
    """What a reset by ``policy`` (``auto_offset_reset``, not none) asks
    ListOffsets for: EARLIEST, LATEST, or for ``by_duration:<duration>`` the
    timestamp that long ago, taken once per reset (so a retried lookup asks
    for the same moment, not a later one)."""
    if policy.startswith("by_duration:"):
        return max(0, int(time.time() * 1000) - parse_duration_ms(policy.split(":", 1)[1]))
    return EARLIEST if policy == "earliest" else LATEST


def _show(tps: Sequence[TopicPartition]) -> str:
    """Some partitions, for a log line (the first five)."""
    return ", ".join(f"{tp.topic}[{tp.partition}]" for tp in tps[:5]) + (" ..." if len(tps) > 5 else "")


def _records_to_arrow(records: List[Record], unit: str) -> Any:
    """Records as the columnar decoder's Arrow layout (the rare path: records
    left by poll(), a batch poll() began, or the good prefix of a corrupt
    fetch)."""
    from kwire._arrow import pa, record_schema     # first: without pyarrow, its error names kwire[arrow]

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


def list_offsets_steps(client: Client, query: Dict[TopicPartition, int], timeout: Optional[float], *,
                   read_committed: bool) -> Steps:
    """ListOffsets for ``query`` ({partition: timestamp, EARLIEST or
    LATEST}) at the partitions' leaders, through ``client``, retried
    (after ``retry_backoff_ms``) until ``timeout`` (default
    ``request_timeout_ms``): {partition: (offset, timestamp)}. Steps
    (:meth:`kwire.client.Client.run`). The consumer's, and the admin's."""
    cfg = client.cfg
    backoff = cfg["retry_backoff_ms"] / 1000.0
    deadline = time.monotonic() + (timeout if timeout is not None else cfg["request_timeout_ms"] / 1000.0)
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
            yield from client.refresh_metadata_steps(timeout=max(0.1, deadline - time.monotonic()))
            if not by_node:
                if any(client.cluster.leader_for(*tp) is None for tp in todo):
                    yield Sleep(max(0.0, min(backoff, deadline - time.monotonic())))   # still unknown: back off
                continue
        futures = {}
        for node, parts in by_node.items():
            conn = yield from client.wait_ready_steps(node, deadline)
            futures[node] = (parts, client.send(node, list_offsets_request(conn.versions, parts, read_committed, cfg["request_timeout_ms"])))
        retry = False
        for node, (parts, fut) in futures.items():
            resp = yield from client.wait_steps(fut, max(0.0, deadline - time.monotonic()))
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
            yield Sleep(max(0.0, min(backoff, deadline - time.monotonic())))
            yield from client.refresh_metadata_steps(timeout=max(0.1, deadline - time.monotonic()))
    return out


def _answered_offset(p: Any) -> int:
    """The offset of a ListOffsets answer's partition (v0: its first old-style offset; -1: none)."""
    return p.old_style_offsets[0] if getattr(p, "old_style_offsets", None) else p.offset


def list_offsets_request(versions: Dict[int, int], parts: Dict[TopicPartition, int], read_committed: bool,
                         timeout_ms: int) -> Any:
    """A ListOffsetsRequest for ``parts`` ({partition: timestamp, EARLIEST or LATEST})."""
    cls = protocol.message("ListOffsetsRequest")
    topics: Dict[str, List[Any]] = collections.defaultdict(list)
    for tp, ts in parts.items():
        topics[tp.topic].append(cls.ListOffsetsPartition(partition_index=tp.partition, timestamp=ts))
    return cls(replica_id=-1, isolation_level=1 if read_committed else 0,
               topics=[cls.ListOffsetsTopic(name=t, partitions=ps) for t, ps in topics.items()],
               timeout_ms=timeout_ms)
