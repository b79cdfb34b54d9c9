"""A share group member (KIP-932): :class:`ShareConsumer`.

Records of the subscribed topics come to whichever member asks; each is
acknowledged on its own (:class:`~kwire.share.acks.AcknowledgeType`), as with
Java's ``KafkaShareConsumer``:

- **implicit** acknowledgement (``share_acknowledgement_mode="implicit"``,
  the default): the next :meth:`~ShareConsumer.poll`,
  :meth:`~ShareConsumer.commit_sync` or :meth:`~ShareConsumer.commit_async`
  accepts what the last poll returned;
- **explicit**: :meth:`~ShareConsumer.acknowledge` each record (ACCEPT,
  RELEASE, REJECT, RENEW); a poll with records of the last one not
  acknowledged raises :class:`kwire.errors.IllegalStateError`.

Acknowledgements ride on the next ShareFetch to the broker that delivered
the records (piggy-backed, as Java's client does) and go alone
(ShareAcknowledge) only when no ShareFetch is due: a commit, close, explicit
mode's acknowledgements. ``commit_sync`` waits for their answers and returns
each partition's outcome; the ``acknowledgement_commit_callback`` gets
every outcome, in the polling thread. ``close()`` sends the
acknowledgements made and closes each broker's share session, which
releases every record still acquired (an implicit consumer's last records
included: they are delivered again, as with Java's), then leaves the group.

Each broker has one request in flight at a time (its share session's epochs
are a sequence, :mod:`kwire.share.session`). A ShareFetch asks every broker
leading an assigned partition for records: ``max_poll_records``, and up to
``share_fetch_max_records`` while the application takes them fast enough
that what is buffered is handed out within a quarter of the record lock. A
poll returns ``max_poll_records`` at most and leaves the rest buffered,
decoded, for the next. In implicit mode the next ShareFetch goes out as a
poll returns once less than half of what it asks for is buffered, carrying
the acceptances, so the broker answers while the application works; in
explicit mode only at a poll that finds nothing buffered, so a record the
application releases is not taken straight back. Buffered records whose
lock lapsed before a poll took them are dropped, not returned: the broker
has released them. A ShareFetch answer's records are sorted by the ranges
the broker acquired for the member
(:func:`kwire._core.acquired.take_acquired`): only those are returned, with
their delivery count; acquired offsets without a record are acknowledged as
gaps with the rest.
"""

from __future__ import annotations

import collections
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, Iterable, List, Mapping, Optional, Set, Tuple

from kwire import protocol
from kwire._codec import Decoder
from kwire._core.acquired import ShareRecord, take_acquired
from kwire.client import Client, Steps
from kwire.config import SHARE_CONSUMER, ConfigError, resolve
from kwire.coordinator import GROUP_KEY, CoordinatorLink, RequestPump
from kwire.errors import IllegalStateError, KwireError, UnsupportedVersionError, without_traceback
from kwire.future import Future, KafkaTimeoutError
from kwire.metrics.clients import ShareMetrics
from kwire.metrics.names import client_network_metrics, fold, share_metrics
from kwire.protocol.api_keys import ApiKey, ErrorCode
from kwire.share.acks import GAP, AcknowledgeType, ack_batches, merge_ranges
from kwire.share.membership import ShareMembership
from kwire.share.session import SESSION_ERRORS, Part, Plan, ShareSession
from kwire.types import TopicPartition

__all__ = ["ShareConsumer", "AcknowledgementCallback"]

log = logging.getLogger("kwire.share")

#: ``callback(offsets, error)``: the offsets of one partition whose acknowledgements were answered, and
#: the error they failed with (None: they succeeded), as Java's AcknowledgementCommitCallback.
AcknowledgementCallback = Callable[[Dict[TopicPartition, Set[int]], Optional[BaseException]], None]

_LEADER_ERRORS = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH,
                            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID,
                            ErrorCode.REPLICA_NOT_AVAILABLE, ErrorCode.KAFKA_STORAGE_ERROR,
                            ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.INCONSISTENT_TOPIC_ID})


_ACCEPT = int(AcknowledgeType.ACCEPT)

#: Kafka's share.record.lock.duration.ms default: a buffered record's lock until an answer says the group's.
DEFAULT_LOCK_MS = 30_000

#: The most offsets one partition's ShareFetch answer may acquire (Kafka's share.partition.max.record.locks is
#: at most 4,000 records in flight per share-partition; whole batches may go a little past it).
MAX_ACQUIRED = 100_000


@dataclass
class _Fetched:
    """One partition's records from one ShareFetch answer (or those of them
    renewed), not yet returned: the answer's record batches and the ranges
    acquired, decoded when a poll takes them, as records or as columns."""

    tp: TopicPartition
    part: Part
    node: int
    data: Any
    ranges: List[Tuple[int, int, int]]
    generation: int = 0          # of the node's share session that acquired them
    at: float = 0.0              # when they were acquired (or renewed): their locks lapse a lock duration later
    # what a take decoded and left (a partial take): (columns or None, records or rows, their offsets, gaps)
    cache: Any = None

    @property
    def size(self) -> int:
        """The offsets acquired (records and gaps)."""
        return sum(last - first + 1 for first, last, _ in self.ranges)


@dataclass
class _Flight:
    """One request of a session in flight: what it carried, for the callback."""

    plan: Plan
    acks: Dict[Part, Dict[int, int]] = field(default_factory=dict)
    fetch: bool = False
    at: float = 0.0       # when it was sent: the records it acquires are locked from about then


class ShareConsumer:
    """A member of a share group (``group_id``): :meth:`subscribe`, then
    :meth:`poll`. Options: :data:`kwire.config.SHARE_CONSUMER` (Kafka's
    names; the consumer options a share group decides itself, such as
    ``auto_offset_reset`` or ``enable_auto_commit``, are the group's configs
    and refused here)."""

    _client_class = Client      # kwire.aio's: the event loop's

    def __init__(self, config: Optional[Mapping[str, Any]] = None, **kwargs: Any) -> None:
        self.cfg = resolve(SHARE_CONSUMER, config, kwargs, what="share consumer")
        if not self.cfg["group_id"]:
            raise ConfigError("a share consumer needs group_id")
        self._client = self._client_class(self.cfg, auto_create_topics=False)
        self._pump = RequestPump(self._client)
        self._link = CoordinatorLink(self._pump, self._client, self.cfg["group_id"], GROUP_KEY,
                                     self.cfg["retry_backoff_ms"])
        self._member = ShareMembership(self._client, self._link, self._pump, self.cfg["group_id"], self.cfg)
        self._explicit = self.cfg["share_acknowledgement_mode"] == "explicit"
        self._decoder = Decoder(check_crcs=self.cfg["check_crcs"],
                                max_decompressed_bytes=self.cfg["max_decompressed_bytes"])
        self._columnar: Dict[str, Any] = {}       # a ColumnarDecoder per timestamp unit
        self._sessions: Dict[int, ShareSession] = {}
        self._flights: Dict[int, _Flight] = {}
        self._retry_at: Dict[int, float] = {}      # a node whose last request failed: not asked again before
        self._acks_until: Dict[Tuple[int, Part], float] = {}   # acknowledgements retried until then
        self._buffer: Deque[_Fetched] = collections.deque()
        # the last poll's records: (node, part) -> {offset: type; explicit mode: None until acknowledged}
        self._delivered: Dict[Tuple[int, Part], Dict[int, Optional[int]]] = {}
        self._handed: Dict[Tuple[int, Part], List[_Fetched]] = {}     # what the last poll's records came from
        self._renewing: Dict[Tuple[int, Part], Dict[int, _Fetched]] = {}   # RENEW sent, not answered: its record
        self._names: Dict[Part, TopicPartition] = {}
        self._to_send: Dict[int, Dict[Part, Dict[int, int]]] = {}   # acknowledgements taken, by node
        self._outcomes: Deque[Tuple[Dict[TopicPartition, Set[int]], Optional[BaseException]]] = collections.deque()
        self._errors: Deque[BaseException] = collections.deque()
        self._callback: Optional[AcknowledgementCallback] = None
        self._metrics = ShareMetrics(self.cfg["metrics_sample_window_ms"] / 1000.0)
        self._in_callback = False
        self._callback_failed = False
        self.acquisition_lock_timeout_ms: Optional[int] = None
        self._pace, self._last_poll = 0.0, 0.0     # records/s the application takes (see _fetch_records)
        self._closed = False

    # ------------------------------------------------------------ the API
    def subscribe(self, topics: Iterable[str]) -> None:
        """Join the group for ``topics`` (at the next poll); an empty list unsubscribes."""
        self._check_open()
        topics = sorted(set(topics))
        if not topics:
            self.unsubscribe()
            return
        self._client.add_topics(topics)
        self._member.subscribe(topics)

    def subscription(self) -> Set[str]:
        """The topics subscribed to."""
        return set(self._member.topics)

    def unsubscribe(self) -> None:
        """Leave the group; the records acquired are released when the sessions close."""
        self._check_open()
        self._client.run(self._unsubscribe_steps())

    def _unsubscribe_steps(self) -> Steps:
        yield from self._member.leave_steps(time.monotonic() + self.cfg["request_timeout_ms"] / 1000.0)
        self._member.topics = []

    def set_acknowledgement_commit_callback(self, callback: Optional[AcknowledgementCallback]) -> None:
        """``callback(offsets, error)`` for every partition's acknowledgements once answered (in the thread that
        polls, commits or closes)."""
        self._callback = callback

    def acknowledge(self, record: ShareRecord, type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """Acknowledge a record the last poll returned (explicit mode): ACCEPT, RELEASE, REJECT or RENEW. Again
        before the next poll or commit: the last type counts."""
        self._check_open()
        if not self._explicit:
            raise IllegalStateError("acknowledge() needs share_acknowledgement_mode='explicit' (this consumer "
                                    "accepts what a poll returned at the next poll or commit)")
        kind = AcknowledgeType(type)
        for (node, part), offsets in self._delivered.items():
            if self._names.get(part) == (record.topic, record.partition) and record.offset in offsets:
                offsets[record.offset] = int(kind)
                return
        raise IllegalStateError(f"{record.topic}[{record.partition}]@{record.offset} cannot be acknowledged: it "
                                "is not a record of the last poll still waiting for its acknowledgement")

    def acknowledge_offsets(self, tp: Tuple[str, int], offsets: Iterable[int],
                            type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """Acknowledge rows :meth:`poll_columnar` (or :meth:`poll`) returned, by offset (explicit mode): the
        ``offset`` column of a partition's batch, or of the rows of it a filter kept (a ``pyarrow`` array, or
        any iterable of ints). Each offset must be a record of the last poll; none is taken otherwise."""
        self._check_open()
        if not self._explicit:
            raise IllegalStateError("acknowledge_offsets() needs share_acknowledgement_mode='explicit' (this "
                                    "consumer accepts what a poll returned at the next poll or commit)")
        kind = int(AcknowledgeType(type))
        tp = TopicPartition(*tp)
        if hasattr(offsets, "to_pylist"):
            offsets = offsets.to_pylist()
        found = [acks for (node, part), acks in self._delivered.items() if self._names.get(part) == tp]
        todo = list(offsets)
        for offset in todo:
            if not any(offset in acks and acks[offset] != GAP for acks in found):
                raise IllegalStateError(f"{tp.topic}[{tp.partition}]@{offset} cannot be acknowledged: it is not a "
                                        "record of the last poll")
        for offset in todo:
            next(acks for acks in found if offset in acks)[offset] = kind

    def poll(self, timeout_ms: int = 0) -> Dict[TopicPartition, List[ShareRecord]]:
        """Records per partition, each with its ``delivery_count``: about ``max_poll_records`` (whole answers of
        a partition), waiting up to ``timeout_ms`` for some. First the last poll's records are acknowledged
        (implicit mode), or must have been (explicit mode)."""
        self._check_open()
        return self._client.run(self._poll_steps(timeout_ms))

    def poll_columnar(self, timeout_ms: int = 0, *, timestamp_unit: str = "ms") -> Dict[TopicPartition, Any]:
        """:meth:`poll` as one ``pyarrow.RecordBatch`` per partition, no Python object per record: the
        columns of :class:`kwire.ColumnarDecoder` (``offset``, ``timestamp`` in ``timestamp_unit``,
        ``timestamp_type``, ``key``, ``value``, ``headers``) and ``delivery_count`` (int16). Acknowledged as
        :meth:`poll`'s records are: by the next poll in implicit mode; by :meth:`acknowledge_offsets` in
        explicit mode."""
        self._check_open()
        return self._client.run(self._poll_steps(timeout_ms, self._columns(timestamp_unit)))

    def _columns(self, timestamp_unit: str) -> Any:
        if timestamp_unit not in ("ms", "us"):
            raise ValueError("timestamp_unit must be 'ms' or 'us'")
        if timestamp_unit not in self._columnar:
            from kwire.share.columns import Columns      # pyarrow only when columns are asked for

            self._columnar[timestamp_unit] = Columns(self.cfg, timestamp_unit)
        return self._columnar[timestamp_unit]

    def commit_sync(self, timeout: Optional[float] = None) -> Dict[TopicPartition, Optional[BaseException]]:
        """Send the acknowledgements made (implicit mode: accept the last poll's records first) and wait for
        the answers, at most ``timeout`` seconds (default ``default_api_timeout_ms``): each partition's
        outcome (None: done)."""
        self._check_open()
        return self._client.run(self._commit_steps(timeout))

    def commit_async(self) -> None:
        """Send the acknowledgements made (implicit mode: accept the last poll's records first) without
        waiting; their outcomes go to the callback."""
        self._check_open()
        self._take_acks()
        self._turn(fetch=False)
        self._client.poll(0)

    def close(self, timeout: Optional[float] = None) -> None:
        """Send the acknowledgements made, close each broker's share session (the broker releases the records
        still acquired: they are delivered again, to any member), leave the group, close the connections;
        within ``timeout`` seconds (default ``request_timeout_ms``)."""
        self._client.run(self._close_steps(timeout))

    def metrics(self) -> Dict[str, Dict[str, float]]:
        """The member's metrics, named as Java's KafkaShareConsumer names them (:mod:`kwire.metrics`):
        ``{"consumer-share-fetch-manager-metrics": {"records-consumed-rate": ..., "acknowledgements-send-total":
        ...}, "consumer-share-metrics": {...}, "consumer-share-node-metrics,node-id=node-1": {...}}``."""
        now = time.monotonic()
        return fold(client_network_metrics("consumer-share", [self._client], now)
                    + list(share_metrics(self._metrics, self._client.metrics, now)))

    def __enter__(self) -> "ShareConsumer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------ poll
    def _check_open(self) -> None:
        if self._closed:
            raise KwireError("share consumer is closed")
        if self._in_callback:
            raise IllegalStateError("the acknowledgement commit callback may not call the share consumer")

    def _poll_steps(self, timeout_ms: int, columns: Any = None) -> Steps:
        if not self._member.topics:
            raise IllegalStateError("the share consumer is not subscribed to any topics")
        deadline = time.monotonic() + max(0, timeout_ms) / 1000.0
        self._run_callbacks()
        self._take_acks()
        self._member.polled(time.monotonic())
        turned = False
        while True:
            self._raise_errors()
            out = self._take_records(columns)
            if out:
                self._paced(sum(len(taken) for taken in out.values()))
                # nothing awaited once records are taken (kwire.aio: a cancelled poll loses none). Implicit
                # mode: the next ShareFetch goes out now if the buffer runs low (carrying the acceptances, so the
                # broker answers while the application works), else the acceptances wait for it. Explicit
                # mode: the acknowledgements go alone, and nothing is acquired before the next poll (a record
                # the application releases is not taken straight back)
                self._turn(fetch=not self._explicit)
                return out
            self._turn(fetch=True)
            self._run_callbacks()
            left = deadline - time.monotonic()
            if left <= 0 and turned:
                return {}
            yield 0.0 if left <= 0 else min(left, 0.1)
            turned = True

    def _hold(self, error: BaseException) -> None:
        """Keep ``error`` for the next poll to raise; one already held alike (a partition refused at each
        fetch) is not held twice, so what is held stays bounded by the partitions' distinct errors."""
        if not any(type(e) is type(error) and str(e) == str(error) for e in self._errors):
            self._errors.append(error)

    def _raise_errors(self) -> None:
        if self._member.fatal is not None:
            raise without_traceback(self._member.fatal, chained=False)
        if self._errors:
            raise without_traceback(self._errors.popleft(), chained=False)

    def _take_acks(self) -> None:
        """The last poll's records become acknowledgements to send (implicit: accepted; explicit: each must
        have been acknowledged)."""
        if self._explicit:
            left = sum(1 for offsets in self._delivered.values() for t in offsets.values() if t is None)
            if left:
                raise IllegalStateError(f"{left} records of the last poll are not acknowledged: acknowledge each "
                                        "(share_acknowledgement_mode='explicit') before polling or committing")
        for (node, part), taken in self._delivered.items():
            # implicit mode: the records are ACCEPT already (and the gaps GAP); explicit: each was acknowledged
            if self._stale(node, part):
                self._outcome({part: taken}, _session_ended(node))
                continue
            self._to_send.setdefault(node, {}).setdefault(part, {}).update(taken)
            if self._explicit:
                for offset, kind in taken.items():
                    if kind == AcknowledgeType.RENEW:
                        self._renewing.setdefault((node, part), {})[offset] = self._source(node, part, offset)
        self._delivered, self._handed = {}, {}

    def _stale(self, node: int, part: Part) -> bool:
        """Whether the last poll's records of ``part`` from ``node`` came in a share session since gone."""
        session = self._sessions.get(node)
        return session is None or any(f.generation != session.generation for f in self._handed.get((node, part), ()))

    def _source(self, node: int, part: Part, offset: int) -> _Fetched:
        """The last poll's record at ``offset`` as a fetch of its own (its answer's batches, its delivery count)."""
        for f in self._handed.get((node, part), ()):
            for first, last, count in f.ranges:
                if first <= offset <= last:
                    return _Fetched(f.tp, part, node, f.data, [(offset, offset, count)], f.generation, f.at)
        raise IllegalStateError(f"offset {offset} is not a record of the last poll")

    def _take_records(self, columns: Any = None) -> Dict[TopicPartition, Any]:
        """The buffered answers, whole, up to ``max_poll_records`` records: as lists of records, or (``columns``,
        a :class:`kwire.share.columns.Columns`) one Arrow batch per partition. A batch that cannot be decoded
        is rejected (as Java's client does: it would fail every member alike) and its error raised next."""
        out: Dict[TopicPartition, Any] = {}
        count, limit = 0, self.cfg["max_poll_records"]
        now, lock = time.monotonic(), self._lock_seconds()
        while self._buffer and count < limit:
            f = self._buffer.popleft()
            if now - f.at >= lock:
                self._lapsed(f)
                continue
            fresh = f.cache is None
            try:
                taken, offsets, gaps = self._decoded(f, columns)
            except KwireError as e:
                self._to_send.setdefault(f.node, {}).setdefault(f.part, {}).update(
                    {o: int(AcknowledgeType.REJECT) for first, last, _ in f.ranges for o in range(first, last + 1)})
                self._hold(e)
                continue
            if count + len(offsets) > limit:        # the rest stays buffered, decoded, for the next poll
                (taken, offsets, gaps), rest = _split(f, columns, taken, offsets, gaps, limit - count)
                self._buffer.appendleft(rest)
            delivered: Dict[int, Optional[int]] = self._delivered.setdefault((f.node, f.part), {})
            for first, last in gaps:
                for o in range(first, last + 1):
                    delivered[o] = GAP
            delivered.update(dict.fromkeys(offsets, None if self._explicit else _ACCEPT))
            self._handed.setdefault((f.node, f.part), []).append(f)
            if offsets:
                out.setdefault(f.tp, []).append(taken)
                count += len(offsets)
                self._metrics.taken(len(offsets), len(f.data) if fresh else 0)
        if columns is not None:
            return {tp: columns.concat(batches) for tp, batches in out.items()}
        return {tp: [r for rs in lists for r in rs] for tp, lists in out.items()}

    def _decoded(self, f: _Fetched, columns: Any) -> Tuple[Any, List[int], List[Tuple[int, int]]]:
        """``f``'s records (or rows), their offsets and its gaps: what a partial take left decoded, in the form
        asked for, else decoded now."""
        if f.cache is not None and f.cache[0] is columns:
            return f.cache[1:]
        return columns.take(f) if columns is not None else self._records(f)

    def _lock_seconds(self) -> float:
        """The broker's record lock duration (its ShareFetch answers say it; Kafka's default until then)."""
        return (self.acquisition_lock_timeout_ms or DEFAULT_LOCK_MS) / 1000.0

    def _lapsed(self, f: _Fetched) -> None:
        """Buffered records held past their lock: the broker has released them (another member may have them
        now), so they are not handed out, nor acknowledged."""
        log.debug("share group %s: %d offsets of %s from %s lapsed in the buffer (held over the %.0f s lock): not "
                  "returned", self.cfg["group_id"], f.size, f.tp, f.ranges[0][0], self._lock_seconds())

    def _fetch_records(self) -> int:
        """How many records the next ShareFetch asks for: ``max_poll_records``, and more
        (``share_fetch_max_records`` at most) while the application takes them fast enough that what is
        buffered is handed out within a quarter of the lock duration."""
        polled = self.cfg["max_poll_records"]
        want = int(self._pace * self._lock_seconds() / 4)
        return max(polled, min(self.cfg["share_fetch_max_records"], want))

    def _paced(self, count: int) -> None:
        """A poll returned ``count`` records: the application's pace (records/s between polls, smoothed)."""
        now = time.monotonic()
        if self._last_poll:
            rate = count / max(now - self._last_poll, 1e-6)
            self._pace = rate if not self._pace else (self._pace + rate) / 2
        self._last_poll = now

    def _buffered(self) -> int:
        return sum(f.size for f in self._buffer)

    def _records(self, f: _Fetched) -> Tuple[List[ShareRecord], List[int], List[Tuple[int, int]]]:
        decoded = self._decoder.decode(f.data, topic=f.tp.topic, partition=f.tp.partition,
                                       min_offset=f.ranges[0][0]).records
        records, gaps = take_acquired(decoded, f.ranges, f.tp.topic, f.tp.partition)
        return records, [r.offset for r in records], gaps

    # ------------------------------------------------------------ requests
    def _wanted(self) -> Dict[int, Set[Part]]:
        """The assigned partitions by the node leading each (metadata asked for where unknown)."""
        cluster = self._client.cluster
        names = {tid: name for name, tid in cluster.topic_ids.items()}
        out: Dict[int, Set[Part]] = {}
        missing = False
        for tid, partitions in self._member.assignment.items():
            name = names.get(tid)
            if name is None:
                missing = True
                continue
            for p in partitions:
                self._names[(tid, p)] = TopicPartition(name, p)
                leader = cluster.leader_for(name, p)
                if leader is None:
                    missing = True
                    continue
                out.setdefault(leader, set()).add((tid, p))
        if missing:
            self._client.request_metadata_update()
        return out

    def _turn(self, fetch: bool) -> None:
        """Heartbeats, coordinator lookups, and each idle broker's next request: a ShareFetch when ``fetch``
        and the buffer is running low (under half of what the next ShareFetch asks for, and at least a poll's
        worth: the answer comes while the application takes the rest), else the acknowledgements waiting
        (ShareAcknowledge). In implicit mode with records buffered, a poll's acceptances wait for the next
        ShareFetch instead (they ride on it: the buffer is handed out within a quarter of the lock). Sends
        only: the caller's wait lets the I/O run."""
        now = time.monotonic()
        self._member.drive(now)
        self._pump.pump()
        wanted = self._wanted()
        due = self._buffered() < max(self.cfg["max_poll_records"], self._fetch_records() // 2)
        wait_for_fetch = fetch and not due and not self._explicit      # the acceptances ride on the next one
        fetch = fetch and due
        for node in set(wanted) | set(self._to_send) | {n for n, s in self._sessions.items() if s.partitions}:
            if node not in self._flights and self._retry_at.get(node, 0.0) <= now:
                self._send(node, wanted.get(node, set()), fetch, acks_alone=not wait_for_fetch)

    def _acks_for(self, node: int) -> Dict[Part, Dict[int, int]]:
        return {part: acks for part, acks in self._to_send.get(node, {}).items() if acks}

    def _send(self, node: int, wanted: Set[Part], fetch: bool, close: bool = False, acks_alone: bool = True) -> None:
        session = self._sessions.setdefault(node, ShareSession(node))
        acks = {} if session.is_new else self._acks_for(node)
        versions = self._client.versions(node)
        renewals = {part: {o: t for o, t in a.items() if t == AcknowledgeType.RENEW} for part, a in acks.items()}
        renewals = {part: r for part, r in renewals.items() if r}
        refused = version_refusal(versions, node, "batch_optimized", True) if renewals else None
        if refused is not None:          # renewals a v1 broker cannot take: failed (their records' locks lapse)
            self._hold(refused)
            for part, r in renewals.items():
                for o in r:
                    del acks[part][o]
            self._failed(node, renewals, refused)
        refused = version_refusal(versions, node, self.cfg["share_acquire_mode"], False) if fetch else None
        if refused is not None:          # no fetch from this broker: poll raises why
            self._hold(refused)
            fetch = False
        batches = {part: ack_batches(a) for part, a in acks.items()}
        if close:
            if session.is_new:
                return
            plan = session.plan(wanted, batches, close=True)
            request = self._acknowledge_request(plan)
        elif fetch or session.is_new or wanted != session.partitions:
            plan = session.plan(wanted, batches)
            fetch = fetch and not plan.renew
            request = self._fetch_request(plan, fetch)
        elif batches and acks_alone:
            plan = session.plan(wanted, batches)
            request = self._acknowledge_request(plan)
        else:
            return
        sent = {part: a for part, a in acks.items() if part in plan.named}
        if sent:
            self._metrics.acknowledged(sum(len(a) for a in sent.values()), False)
        for part in sent:
            del self._to_send[node][part]
        if not self._to_send.get(node, True):
            del self._to_send[node]
        flight = self._flights[node] = _Flight(plan, sent, fetch, time.monotonic())
        session.sent(plan)
        fut = self._client.send(node, request)
        fut.add_done_callback(lambda f: self._answered(node, flight, f))

    def _topics(self, plan: Plan, topic_cls: Any, part_cls: Any, batch_cls: Any) -> List[Any]:
        by_topic: Dict[uuid.UUID, List[Any]] = {}
        for (tid, p), batches in plan.named.items():
            by_topic.setdefault(tid, []).append(part_cls(partition_index=p, acknowledgement_batches=[
                batch_cls(first_offset=first, last_offset=last, acknowledge_types=types)
                for first, last, types in batches]))
        return [topic_cls(topic_id=tid, partitions=parts) for tid, parts in by_topic.items()]

    def _fetch_request(self, plan: Plan, fetch: bool) -> Any:
        cls = protocol.message("ShareFetchRequest")
        forgotten: Dict[uuid.UUID, List[int]] = {}
        for tid, p in plan.forgotten:
            forgotten.setdefault(tid, []).append(p)
        n = self._fetch_records() if fetch else 0
        return cls(group_id=self.cfg["group_id"], member_id=self._member.member_id, share_session_epoch=plan.epoch,
                   max_wait_ms=self.cfg["fetch_max_wait_ms"] if fetch else 0,
                   min_bytes=self.cfg["fetch_min_bytes"] if fetch else 0,
                   max_bytes=self.cfg["fetch_max_bytes"] if fetch else 0, max_records=n,
                   batch_size=min(n, self.cfg["max_poll_records"]),
                   share_acquire_mode=1 if self.cfg["share_acquire_mode"] == "record_limit" else 0,
                   is_renew_ack=plan.renew,
                   topics=self._topics(plan, cls.FetchTopic, cls.FetchPartition, cls.AcknowledgementBatch),
                   forgotten_topics_data=[cls.ForgottenTopic(topic_id=tid, partitions=ps)
                                          for tid, ps in forgotten.items()])

    def _acknowledge_request(self, plan: Plan) -> Any:
        cls = protocol.message("ShareAcknowledgeRequest")
        return cls(group_id=self.cfg["group_id"], member_id=self._member.member_id, share_session_epoch=plan.epoch,
                   is_renew_ack=plan.renew,
                   topics=self._topics(plan, cls.AcknowledgeTopic, cls.AcknowledgePartition,
                                       cls.AcknowledgementBatch))

    # ------------------------------------------------------------ answers
    def _answered(self, node: int, flight: _Flight, fut: Future) -> None:
        self._flights.pop(node, None)
        session = self._sessions[node]
        error = fut.exception()
        if error is not None:
            session.failed()
            # the node may be gone: who leads its partitions now; it is asked again after retry_backoff_ms
            self._client.request_metadata_update()
            self._retry_at[node] = time.monotonic() + self.cfg["retry_backoff_ms"] / 1000.0
            log.debug("share group %s: request to node %s failed: %s", self.cfg["group_id"], node, error)
            self._failed(node, _merged(self._to_send.pop(node, {}), flight.acks), error)
            return
        resp = fut.value
        gone = session.generation
        session.answered(resp.error_code)
        if resp.error_code:
            err = protocol.error_for(resp.error_code, api=type(resp).__name__[:-len("Response")],
                                     message=resp.error_message or None)
            # acknowledgements waiting for a session that ended cannot go in the next one
            waiting = self._to_send.pop(node, {}) if session.generation != gone else {}
            self._failed(node, _merged(waiting, flight.acks), err)
            if resp.error_code not in SESSION_ERRORS and not getattr(err, "retriable", False):
                self._hold(err)
            return
        if getattr(resp, "acquisition_lock_timeout_ms", 0):
            self.acquisition_lock_timeout_ms = resp.acquisition_lock_timeout_ms
        answered: Set[Part] = set()
        for topic in resp.responses:
            for pr in topic.partitions:
                part = (topic.topic_id, pr.partition_index)
                answered.add(part)
                ack_code = getattr(pr, "acknowledge_error_code", pr.error_code)
                if part in flight.acks:
                    error = self._part_error(ack_code, part, pr)
                    log.debug("share group %s: member %s: node %s answered %d acknowledgements of %s (%s..%s) in "
                              "epoch %d: %s", self.cfg["group_id"], self._member.member_id, node,
                              len(flight.acks[part]), self._names.get(part), min(flight.acks[part]),
                              max(flight.acks[part]), flight.plan.epoch, error or "done")
                    if not self._retried(node, part, flight.acks[part], error):
                        self._outcome({part: flight.acks[part]}, error)
                        self._renewals_answered(node, part, flight.acks[part], error)
                if flight.fetch and hasattr(pr, "acquired_records"):
                    self._take_fetched(node, part, pr, getattr(resp, "node_endpoints", None) or (), flight.at)
        missing = {part: a for part, a in flight.acks.items() if part not in answered}
        if missing:
            self._failed(node, missing, KwireError("the broker's answer did not mention the partition acknowledged"))

    def _retried(self, node: int, part: Part, acks: Mapping[int, int], error: Optional[BaseException]) -> bool:
        """Acknowledgements a live broker refused with a retriable error that is not a leader change (its
        share-partition state not written: REQUEST_TIMED_OUT while its share coordinator moves) go again to
        the same broker after ``retry_backoff_ms``, as Java's client retries them, until
        ``default_api_timeout_ms`` after the first refusal; the records stay acquired meanwhile."""
        key = (node, part)
        if error is None or not getattr(error, "retriable", False) or getattr(error, "invalid_metadata", False):
            self._acks_until.pop(key, None)
            return False
        now = time.monotonic()
        until = self._acks_until.setdefault(key, now + self.cfg["default_api_timeout_ms"] / 1000.0)
        if now >= until or self._closed:
            self._acks_until.pop(key, None)
            return False
        pending = self._to_send.setdefault(node, {}).setdefault(part, {})
        for offset, kind in acks.items():
            pending.setdefault(offset, kind)          # an acknowledgement made since counts
        self._retry_at[node] = now + self.cfg["retry_backoff_ms"] / 1000.0
        log.debug("share group %s: %d acknowledgements of %s refused (%s): sent again", self.cfg["group_id"],
                  len(acks), self._names.get(part), error)
        return True

    def _failed(self, node: int, acks: Mapping[Part, Mapping[int, int]], error: BaseException) -> None:
        self._outcome(acks, error)
        for part, offsets in acks.items():
            self._renewals_answered(node, part, offsets, error)

    def _renewals_answered(self, node: int, part: Part, acks: Mapping[int, int],
                           error: Optional[BaseException]) -> None:
        """Renewed records return with the next poll, first, to be acknowledged once more (as Java's); those
        whose renewal failed are dropped (their lock is gone: the broker delivers them again, to any member)."""
        renewing = self._renewing.get((node, part))
        if not renewing:
            return
        for offset, kind in sorted(acks.items(), reverse=True):
            f = renewing.pop(offset, None) if kind == AcknowledgeType.RENEW else None
            if f is not None and error is None:
                f.at = time.monotonic()          # the lock starts again
                self._buffer.appendleft(f)

    def _part_error(self, code: int, part: Part, pr: Any) -> Optional[BaseException]:
        if not code:
            return None
        tp = self._names.get(part)
        msg = getattr(pr, "acknowledge_error_message", None) or getattr(pr, "error_message", None)
        return protocol.error_for(code, api="ShareAcknowledge", topic=tp.topic if tp else None,
                                  message=msg or None)

    def _take_fetched(self, node: int, part: Part, pr: Any, endpoints: Any, at: float) -> None:
        tp = self._names.get(part)
        if pr.error_code:
            if pr.error_code in _LEADER_ERRORS:
                # the answer's leader hint (KIP-951, as Fetch's) moves the partition at once; else metadata
                if tp is None or not self._client.follow_leader_hints([(tuple(tp), pr, -1)], endpoints, "ShareFetch"):
                    self._client.request_metadata_update()
            else:
                self._hold(protocol.error_for(pr.error_code, api="ShareFetch",
                                                       topic=tp.topic if tp else None,
                                                       message=pr.error_message or None))
            return
        if tp is None or not pr.acquired_records:
            return
        ranges = merge_ranges((a.first_offset, a.last_offset, a.delivery_count) for a in pr.acquired_records)
        acquired = sum(last - first + 1 for first, last, _ in ranges)
        self._metrics.fetched(acquired)
        if not ranges or acquired > MAX_ACQUIRED:
            # each acquired offset is acknowledged one by one: a broker's answer claiming more than a share
            # partition can hold in flight (Kafka's most is 4,000) is refused, not expanded; the locks lapse
            self._hold(KwireError(
                f"{tp.topic}[{tp.partition}]: the broker acquired {acquired} offsets from offset "
                f"{ranges[0][0] if ranges else '-'} in one ShareFetch answer, more than kwire takes ({MAX_ACQUIRED})"))
            return
        self._buffer.append(_Fetched(tp, part, node, pr.records or b"", ranges, self._sessions[node].generation, at))

    def _outcome(self, acks: Mapping[Part, Mapping[int, int]], error: Optional[BaseException]) -> None:
        if error is not None:
            self._metrics.acknowledged(sum(len(offsets) for offsets in acks.values()), True)
        for part, offsets in acks.items():
            tp = self._names.get(part) or TopicPartition(str(part[0]), part[1])
            self._outcomes.append(({tp: set(offsets)}, error))

    def _run_callbacks(self) -> Dict[TopicPartition, Optional[BaseException]]:
        """Hand every outcome to the callback; returns them by partition (the last error wins)."""
        out: Dict[TopicPartition, Optional[BaseException]] = {}
        while self._outcomes:
            offsets, error = self._outcomes.popleft()
            for tp in offsets:
                out[tp] = error if error is not None else out.get(tp)
            if self._callback is not None:
                self._in_callback = True
                try:
                    self._callback(offsets, error)
                except Exception:
                    # said once with its traceback, then at DEBUG: a callback that always raises floods nothing
                    log.log(logging.DEBUG if self._callback_failed else logging.ERROR,
                            "share group %s: the acknowledgement commit callback raised", self.cfg["group_id"],
                            exc_info=True)
                    self._callback_failed = True
                finally:
                    self._in_callback = False
        return out

    # ------------------------------------------------------------ commit and close
    def _commit_steps(self, timeout: Optional[float]) -> Steps:
        deadline = time.monotonic() + (self.cfg["default_api_timeout_ms"] / 1000.0 if timeout is None else timeout)
        self._take_acks()
        results = self._run_callbacks()
        nodes = set(self._to_send)
        while time.monotonic() < deadline:
            self._turn(fetch=False)
            yield 0.0
            waiting = [n for n in nodes if n in self._flights or self._acks_for(n)]
            if not waiting:
                break
            yield min(0.05, max(0.0, deadline - time.monotonic()))
        for node in nodes:
            left = self._to_send.pop(node, {})
            if left:
                self._outcome(left, KafkaTimeoutError("the acknowledgements were not answered in time"))
        results.update(self._run_callbacks())
        return results

    def _close_steps(self, timeout: Optional[float]) -> Steps:
        if self._closed:
            return
        try:
            yield from self._goodbye_steps(timeout)
        finally:
            self._closed = True
            self._client.close()

    def _goodbye_steps(self, timeout: Optional[float]) -> Steps:
        deadline = time.monotonic() + (self.cfg["request_timeout_ms"] / 1000.0 if timeout is None else timeout)
        self._take_explicit_only()
        while self._flights and time.monotonic() < deadline:      # a long poll in flight: its answer first
            yield min(0.05, max(0.0, deadline - time.monotonic()))
        for node, session in self._sessions.items():
            if not session.is_new and node not in self._flights:
                self._send(node, set(), fetch=False, close=True)
        while self._flights and time.monotonic() < deadline:
            yield min(0.05, max(0.0, deadline - time.monotonic()))
        self._run_callbacks()
        yield from self._member.leave_steps(deadline)

    def _take_explicit_only(self) -> None:
        """At close: the acknowledgements made (explicit mode) become ones to send; records not acknowledged
        (implicit mode: the last poll's) stay unsent (the closed session releases them)."""
        for (node, part), offsets in self._delivered.items() if self._explicit else ():
            acks = self._to_send.setdefault(node, {}).setdefault(part, {})
            acks.update({o: t for o, t in offsets.items() if t is not None})
        self._delivered, self._handed = {}, {}


def _cut(ranges: List[Tuple[int, ...]], at: int) -> Tuple[List[Tuple[int, ...]], List[Tuple[int, ...]]]:
    """Ranges ``(first, last, ...)`` split into the parts below offset ``at`` and from it."""
    below = [(first, min(last, at - 1), *more) for first, last, *more in ranges if first < at]
    above = [(max(first, at), last, *more) for first, last, *more in ranges if last >= at]
    return below, above


def _split(f: _Fetched, columns: Any, taken: Any, offsets: List[int], gaps: List[Tuple[int, int]], k: int
           ) -> Tuple[Tuple[Any, List[int], List[Tuple[int, int]]], _Fetched]:
    """A partial take of ``f``'s first ``k`` records (or rows): ``f`` keeps the offsets below the next record's
    (the poll hands them out), and the rest, decoded already, is a buffered answer of its own."""
    at = offsets[k]
    f.ranges, ranges = _cut(f.ranges, at)
    gaps, rest_gaps = _cut(gaps, at)
    rest = _Fetched(f.tp, f.part, f.node, f.data, ranges, f.generation, f.at,
                    (columns, taken[k:], offsets[k:], rest_gaps))
    f.cache = None
    return (taken[:k], offsets[:k], gaps), rest


def _session_ended(node: int) -> KwireError:
    """The outcome of acknowledgements whose records came in a share session since gone."""
    return KwireError(f"the share session with node {node} ended before the acknowledgements were sent: the "
                      "broker released their records (they are delivered again)")


def _merged(*acks: Mapping[Part, Mapping[int, int]]) -> Dict[Part, Dict[int, int]]:
    out: Dict[Part, Dict[int, int]] = {}
    for each in acks:
        for part, offsets in each.items():
            out.setdefault(part, {}).update(offsets)
    return out


def version_refusal(versions: Mapping[int, int], node: int, acquire_mode: str, renew: bool) -> Optional[KwireError]:
    """What a broker offering only ShareFetch v1 (Kafka 4.0 and 4.1's share groups) cannot do, as the
    error :meth:`ShareConsumer.poll` raises: RENEW and ``share_acquire_mode="record_limit"`` came with v2
    (Kafka 4.2). None when it can (or its versions are not known yet: no connection)."""
    top = versions.get(ApiKey.SHARE_FETCH)
    if top is None or top >= 2:
        return None
    if renew:
        return UnsupportedVersionError(f"AcknowledgeType.RENEW needs ShareFetch v2 (Kafka 4.2+); node {node} offers "
                                       f"v{top}: its renewals are reported failed")
    if acquire_mode == "record_limit":
        return UnsupportedVersionError(f"share_acquire_mode='record_limit' needs ShareFetch v2 (Kafka 4.2+); node "
                                       f"{node} offers v{top}: use 'batch_optimized'")
    return None
