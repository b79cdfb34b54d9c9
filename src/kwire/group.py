"""Consumer groups (the classic protocol): the group membership of a
consumer (:class:`GroupCoordinator`), the rebalance listener and the
``consumer`` embedded protocol. Finding the coordinator and the request
pump are :mod:`kwire.coordinator`'s; the OffsetCommit and OffsetFetch
requests :mod:`kwire.commit`'s.

A :class:`GroupCoordinator` belongs to one :class:`kwire.consumer.Consumer`
with a ``group_id``. It has a :class:`kwire.client.Client` of its own (the
connection to the group's coordinator broker) driven by a background thread,
``kwire-group``, which is the only thread doing that client's I/O: it sends
the requests other threads hand it (:class:`kwire.coordinator.RequestPump`),
runs the JoinGroup / SyncGroup exchange, and sends a Heartbeat every
``heartbeat_interval_ms`` while the member is in a stable group. Because the
heartbeat thread does not wait for the application, slow processing does not
evict a live member; ``max_poll_interval_ms`` is checked separately: a member
that does not call ``poll()`` for that long leaves the group (a dynamic
member sends LeaveGroup) and loses its partitions, as in Kafka's clients.

What the application sees happens in its own thread, inside ``poll()``:
rebalance listener callbacks, commits before partitions are revoked, and
the new assignment with its committed positions. Nothing in ``poll()``
waits for the coordinator, so ``poll(timeout)`` keeps its bound: a step
that needs an answer (the commit before a revocation, the OffsetFetch of
the committed positions) sends its request and a later ``poll()`` goes on
once it is answered, as Kafka's Java client does. Meanwhile partitions
being revoked are neither fetched nor returned (their committed positions
stay what was returned), and newly assigned partitions wait for their
committed offsets without being fetched or reset by ``auto_offset_reset``.
The rebalance protocol is incremental (KIP-429) when every configured
assignor supports it (only ``cooperative-sticky`` does), eager otherwise:

* eager: before rejoining, auto-commit (when enabled), then
  ``on_partitions_revoked(everything owned)``; after the SyncGroup,
  ``on_partitions_assigned(the new assignment)``;
* cooperative: the member keeps consuming while it rejoins; after the
  SyncGroup it commits and revokes only the partitions taken away, calls
  ``on_partitions_assigned`` with the added ones, and rejoins once more when
  it revoked any, so that their new owners get them.

When the member learns that its generation is no longer valid (fenced by
the coordinator: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, session expiry,
``max_poll_interval_ms`` passed) its partitions may already belong to
someone else: ``on_partitions_lost`` is called instead, and nothing is
committed.

Members speak the standard ``consumer`` embedded protocol
(ConsumerProtocolSubscription / ConsumerProtocolAssignment), so they share a
group with librdkafka, Java, kafka-python and aiokafka members.
"""

from __future__ import annotations

import collections
import logging
import math
import re
import struct
import threading
import time
from typing import Any, Callable, Deque, Dict, Iterable, List, Mapping, Optional, Pattern, Sequence, Set, Tuple, Union

from kwire import protocol
from kwire.assignors import COOPERATIVE, EAGER, Assignor, MemberSubscription, assignors_from_config
from kwire.client import Client, NoBrokersAvailableError
from kwire.commit import (CommitFailedError, OffsetsArg, as_offsets, commit_errors, grouped_partitions,
                          offset_commit_request, offset_fetch_request, offsets_from_response)
from kwire.coordinator import COORDINATOR_ERRORS, GROUP_KEY, CoordinatorLink, RequestPump
from kwire.errors import KwireError, ProtocolError
from kwire.future import Future, KafkaTimeoutError
from kwire.net import ConnectionLostError
from kwire.protocol.api_keys import ApiKey, ErrorCode
from kwire.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition

__all__ = [
    "GroupCoordinator",
    "RebalanceListener",
    "OffsetAndMetadata",
    "ConsumerGroupMetadata",
    "CommitFailedError",
    "leave_group_request",
    "encode_subscription",
    "decode_subscription",
    "encode_assignment",
    "decode_assignment",
]

log = logging.getLogger(__name__)

PROTOCOL_TYPE = "consumer"
_I16 = struct.Struct(">h")


class RebalanceListener:
    """Subclass and pass to ``Consumer.subscribe(..., listener=...)``. Every
    callback runs in the thread that calls ``poll()``, with a list of
    :class:`TopicPartition`; an exception raised by one is raised by that
    ``poll()`` once the rebalance step is complete."""

    def on_partitions_revoked(self, revoked: List[TopicPartition]) -> None:
        """These partitions are being taken away (the member still owns them:
        commit what was processed)."""

    def on_partitions_assigned(self, assigned: List[TopicPartition]) -> None:
        """These partitions are now this member's (eager: the whole new
        assignment; cooperative: the added partitions; possibly empty)."""

    def on_partitions_lost(self, lost: List[TopicPartition]) -> None:
        """These partitions were lost without a clean hand-over (they may be
        owned by another member already; do not commit). By default the same
        as :meth:`on_partitions_revoked`."""
        self.on_partitions_revoked(lost)


CommitCallback = Callable[[Dict[TopicPartition, OffsetAndMetadata], Optional[BaseException]], None]


# ------------------------------------------- the consumer embedded protocol
def _embedded_decode(cls: Any, data: Any) -> Any:
    """A consumer-protocol struct: an int16 version, then the body. A version
    newer than kwire knows is read as the newest it knows, ignoring the
    fields added after it (Kafka's forward-compatibility rule)."""
    buf = memoryview(bytes(data) if not isinstance(data, (bytes, bytearray, memoryview)) else data).cast("B")
    if len(buf) < 2:
        raise ProtocolError("embedded consumer protocol data shorter than its version", cls.__name__, -1)
    (version,) = _I16.unpack_from(buf, 0)
    if version < 0:
        raise ProtocolError(f"negative version {version}", cls.__name__, version)
    if version <= cls.MAX_VERSION:
        return cls.decode(buf, version, 2)
    try:
        obj, _ = cls._DECODERS[cls.MAX_VERSION](buf, 2, len(buf))
    except Exception as e:   # the generated decoder's own errors, located here
        raise ProtocolError(f"cannot read as v{cls.MAX_VERSION}: {e}", cls.__name__, version) from None
    return obj


def _embedded_encode(cls: Any, obj: Any) -> bytes:
    version = cls.MAX_VERSION
    return _I16.pack(version) + cls.encode_bytes(obj, version)


def encode_subscription(topics: Sequence[str], owned: Iterable[Tuple[str, int]] = (), generation: int = -1,
                        rack_id: Optional[str] = None, user_data: Optional[bytes] = None) -> bytes:
    cls = protocol.message("ConsumerProtocolSubscription")
    return _embedded_encode(cls, cls(
        topics=sorted(set(topics)), user_data=user_data,
        owned_partitions=[cls.TopicPartition(topic=t, partitions=ps) for t, ps in grouped_partitions(owned).items()],
        generation_id=generation, rack_id=rack_id))


def decode_subscription(member_id: str, group_instance_id: Optional[str], data: Any) -> MemberSubscription:
    sub = _embedded_decode(protocol.message("ConsumerProtocolSubscription"), data)
    owned = tuple(TopicPartition(t.topic, p) for t in sub.owned_partitions or () for p in t.partitions)
    ud = sub.user_data
    return MemberSubscription(member_id, tuple(sub.topics or ()), owned, sub.generation_id, group_instance_id,
                              sub.rack_id, None if ud is None else bytes(ud))


def encode_assignment(partitions: Iterable[Tuple[str, int]], user_data: Optional[bytes] = None) -> bytes:
    cls = protocol.message("ConsumerProtocolAssignment")
    return _embedded_encode(cls, cls(
        assigned_partitions=[cls.TopicPartition(topic=t, partitions=ps) for t, ps in grouped_partitions(partitions).items()],
        user_data=user_data))


def decode_assignment(data: Any) -> List[TopicPartition]:
    """The partitions of a ConsumerProtocolAssignment (empty bytes: none,
    as the coordinator sends a member that got no assignment)."""
    if data is None or len(data) == 0:
        return []
    a = _embedded_decode(protocol.message("ConsumerProtocolAssignment"), data)
    return sorted(TopicPartition(t.topic, p) for t in a.assigned_partitions or () for p in t.partitions)


def leave_group_request(versions: Mapping[int, int], group_id: str, member_id: str, reason: str,
                        group_instance_id: Optional[str] = None) -> Any:
    cls = protocol.message("LeaveGroupRequest")
    v = versions.get(ApiKey.LEAVE_GROUP, 0)
    if v < 3:
        return cls(group_id=group_id, member_id=member_id)
    return cls(group_id=group_id, members=[cls.MemberIdentity(
        member_id=member_id, group_instance_id=group_instance_id, reason=reason if v >= 5 else None)])


# ------------------------------------------------------- the coordinator
UNJOINED, JOINING, STABLE = "unjoined", "joining", "stable"


class _Handover:
    """Partitions being revoked whose positions are being committed (auto
    commit): the consumer neither fetches nor returns their records until
    the coordinator answers, the commit fails for good, or
    ``max_poll_interval_ms`` passes (Java's rebalance timeout); then
    ``on_partitions_revoked`` runs, they are handed back, and ``then`` is
    carried out: the partitions a SyncGroup added are taken in, or (None)
    the member joins the group."""

    def __init__(self, partitions: Set[TopicPartition], offsets: Dict[TopicPartition, int],
                 then: Optional[Set[TopicPartition]], deadline: float) -> None:
        self.partitions = partitions
        self.offsets = offsets          # what to commit first (empty: nothing, go on at once)
        self.then = then
        self.deadline = deadline
        self.commit: Optional[Future] = None
        self.commit_failure: Optional[BaseException] = None   # the last retriable failure (said once)
        self.retry_at = 0.0


class GroupCoordinator:
    """The group membership and offsets of one consumer (see the module
    docstring). Created by the consumer when it has a ``group_id``; the
    background thread starts at the first request."""

    def __init__(self, consumer: Any) -> None:
        cfg = consumer.cfg
        self.cfg = cfg
        self.group_id: str = cfg["group_id"]
        self.group_instance_id: Optional[str] = cfg["group_instance_id"]
        self._consumer = consumer
        self._assignors: List[Assignor] = assignors_from_config(cfg["partition_assignment_strategy"])
        self.rebalance_protocol = (COOPERATIVE if all(COOPERATIVE in a.protocols for a in self._assignors)
                                   else EAGER)
        if cfg["heartbeat_interval_ms"] >= cfg["session_timeout_ms"]:
            raise KwireError("heartbeat_interval_ms must be lower than session_timeout_ms")
        self._client_cfg = dict(cfg)
        self._client: Optional[Client] = None
        self._pump: Optional[RequestPump] = None
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self._lock = threading.RLock()
        # membership (guarded by _lock)
        self.generation = -1
        self.member_id = ""
        self.leader_id = ""
        self.protocol_name: Optional[str] = None
        self.state = UNJOINED
        self._topics: Set[str] = set()
        self._pattern: Optional[Pattern[str]] = None
        self._listener: Optional[Any] = None
        self._owned: Set[TopicPartition] = set()
        self._need_rejoin = False
        self._rejoin_reason = ""
        self._lost_pending = False
        self._pending_assignment: Optional[Tuple[int, List[TopicPartition]]] = None
        self._fatal: Optional[BaseException] = None
        self._link: Optional[CoordinatorLink] = None     # the coordinator, once started
        # join progress (I/O thread)
        self._joining_step: Optional[str] = None     # "find", "join", "metadata", "sync" while in flight
        self._join_retry_at = 0.0
        self._assigned_snapshot: Dict[str, int] = {}  # leader: partition counts it assigned from
        self._group_topics: Set[str] = set()
        # liveness (I/O thread, except _last_poll)
        now = time.monotonic()
        self._last_poll = now
        self._last_heartbeat_ok = now
        self._next_heartbeat = now
        self._heartbeat_in_flight = False
        self._metadata_check_at = now
        self._metadata_in_flight = False
        # commits
        self._next_auto_commit = now + cfg["auto_commit_interval_ms"] / 1000.0
        self._commit_results: Deque[Tuple[Optional[CommitCallback], Dict[TopicPartition, OffsetAndMetadata],
                                          Optional[BaseException]]] = collections.deque()
        # rebalance steps waiting for the coordinator (application thread)
        self._handover: Optional[_Handover] = None     # partitions being revoked, their commit in flight
        self._awaiting: Future = Future()   # the consumer's marker (in its _looking_up) of a committed offset awaited
        self._awaiting_committed: Set[TopicPartition] = set()
        self._offset_fetch: Optional[Future] = None    # the OffsetFetch of committed positions in flight
        self._offset_fetch_asked: Set[TopicPartition] = set()
        self._offset_fetch_retry_at = 0.0
        self._offset_fetch_failure: Optional[str] = None   # the failure last logged (said once)
        self._closed = False

    # ============================================================ public
    @property
    def subscribed(self) -> bool:
        return bool(self._topics) or self._pattern is not None

    def subscription(self) -> Set[str]:
        with self._lock:
            return set(self._topics)

    def subscribe(self, topics: Iterable[str] = (), pattern: Optional[Union[str, Pattern[str]]] = None,
                  listener: Optional[Any] = None) -> None:
        """Subscribe to ``topics`` or to the topics matching ``pattern``
        (replacing an earlier subscription); join at the next poll."""
        topics = [topics] if isinstance(topics, str) else list(topics)
        if bool(topics) == (pattern is not None):
            raise KwireError("subscribe() takes topics or a pattern (one of the two)")
        if self._consumer._states and not self.subscribed:
            raise KwireError("subscribe() after assign(): call unsubscribe() or assign([]) first")
        with self._lock:
            self._pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
            self._topics = set(topics)
            self._listener = listener
            self._request_rejoin("subscription changed")
            if self._pattern is not None:
                self._metadata_check_at = 0.0
        self._start()

    def unsubscribe(self) -> None:
        """Leave the group (committing first when auto commit is on) and
        drop the subscription and the assignment."""
        if not self.subscribed:
            return
        self._leave("the consumer unsubscribed")
        with self._lock:
            self._topics, self._pattern = set(), None

    def group_metadata(self) -> ConsumerGroupMetadata:
        with self._lock:
            return ConsumerGroupMetadata(self.group_id, self.generation, self.member_id, self.group_instance_id)

    def on_poll(self) -> None:
        """The consumer's ``poll()`` turn (application thread): callbacks of
        finished async commits, a fatal error, lost or new partitions, the
        revocations before a rejoin, the committed positions of new
        partitions, auto commit. Never waits for the coordinator: a step
        that needs its answer goes on at a later call."""
        self._last_poll = time.monotonic()
        self._run_commit_callbacks()
        if self._fatal is not None:
            raise self._fatal
        if not self.subscribed:
            self._maybe_auto_commit()
            return
        self._start()
        raised: Optional[BaseException] = None
        with self._lock:
            lost, self._lost_pending = self._lost_pending, False
        if lost:
            self._handover = None           # lost, not revoked: nothing to commit
            raised = self._partitions_lost() or raised
        if self._handover is not None:
            raised = self._continue_handover() or raised
        if self._handover is None:
            with self._lock:
                pending, self._pending_assignment = self._pending_assignment, None
            if pending is not None:
                raised = self._apply(pending[1]) or raised
        if self._handover is None:
            with self._lock:
                start_join = self._need_rejoin and self.state != JOINING and self._pending_assignment is None
            if start_join:
                raised = self._prepare_join() or raised
        raised = self._fetch_positions() or raised
        if self.state == STABLE:
            self._maybe_auto_commit()
        if raised is not None:
            raise raised

    def commit(self, offsets: Optional[OffsetsArg] = None, timeout: Optional[float] = None) -> Dict[TopicPartition, OffsetAndMetadata]:
        """Commit ``offsets`` ({(topic, partition): offset or
        OffsetAndMetadata}; default: the position of every assigned
        partition) and wait for the coordinator's answer. Retriable failures
        are retried until ``timeout`` (default ``request_timeout_ms``).
        Raises :class:`CommitFailedError` when the member lost its
        partitions, even before their positions are known."""
        self._run_commit_callbacks()
        todo = self._offsets_or_positions(offsets)
        if not todo:
            if offsets is None and self._consumer._states:
                self._commit_generation()     # nothing to commit yet, but are they still this member's?
            return {}
        deadline = time.monotonic() + (timeout if timeout is not None else self.cfg["request_timeout_ms"] / 1000.0)
        while True:
            generation, member = self._commit_generation()
            resp = self._coordinator_request(
                lambda v: offset_commit_request(self.group_id, todo, generation, member, self.group_instance_id),
                deadline)
            errors = commit_errors(resp)
            if not errors:
                log.debug("group %s committed %s", self.group_id, todo)
                return todo
            err = self._commit_error(errors)
            if not getattr(err, "retriable", False) or time.monotonic() >= deadline:
                raise err
            self._sleep_backoff(deadline)

    def commit_async(self, offsets: Optional[OffsetsArg] = None, callback: Optional[CommitCallback] = None) -> Future:
        """Send a commit and return at once; ``callback(offsets, error)``
        runs in a later ``poll()`` or ``commit()`` (the application's
        thread). The returned future completes with the offsets (or fails)."""
        self._run_commit_callbacks()
        result: Future = Future()
        try:
            todo = self._offsets_or_positions(offsets)
            generation, member = self._commit_generation()
        except KwireError as e:
            self._commit_results.append((callback, {}, e))
            result.set_exception(e)
            return result
        if not todo:
            self._commit_results.append((callback, {}, None))
            result.set_result({})
            return result

        def answered(f: Future) -> None:
            error = f.exception()
            if error is None:
                errors = commit_errors(f.value)
                if errors:
                    error = self._commit_error(errors)
            self._commit_results.append((callback, todo, error))
            if error is None:
                result.set_result(todo)
            else:
                result.set_exception(error)

        self._coordinator_async(lambda v: offset_commit_request(
            self.group_id, todo, generation, member, self.group_instance_id)).add_done_callback(answered)
        return result

    def committed(self, partitions: Iterable[Tuple[str, int]],
                  timeout: Optional[float] = None) -> Dict[TopicPartition, Optional[OffsetAndMetadata]]:
        """The group's committed offsets of ``partitions`` (None where
        nothing is committed). Transactional offsets not yet decided are
        waited for (``require_stable``)."""
        tps = [TopicPartition(*tp) for tp in partitions]
        if not tps:
            return {}
        deadline = time.monotonic() + (timeout if timeout is not None else self.cfg["request_timeout_ms"] / 1000.0)
        while True:
            resp = self._coordinator_request(lambda v: offset_fetch_request(v, self.group_id, tps), deadline)
            try:
                got = offsets_from_response(resp, self.group_id)
            except KwireError as e:
                code = getattr(e, "code", None)
                if code in COORDINATOR_ERRORS:
                    self._coordinator_dead(self._coordinator)
                if not getattr(e, "retriable", False) or time.monotonic() >= deadline:
                    raise
                self._sleep_backoff(deadline)
                continue
            return {tp: got.get(tp) for tp in tps}

    def close(self, timeout: Optional[float] = None) -> None:
        """Commit (auto commit), revoke, leave the group (dynamic members),
        stop the thread and close the connection: all within ``timeout``
        seconds (default ``request_timeout_ms``), as one budget."""
        if self._closed:
            return
        deadline = time.monotonic() + (timeout if timeout is not None else self.cfg["request_timeout_ms"] / 1000.0)
        try:
            if self.subscribed:
                self._leave("the consumer is closing", deadline)
            elif self.cfg["enable_auto_commit"] and self._client is not None:
                self._commit_quietly(max(0.0, deadline - time.monotonic()))
            self._run_commit_callbacks()
        finally:
            self._closed = True
            self._stop.set()
            if self._client is not None:
                self._client.wakeup()
            if self._thread is not None:
                # woken, the thread ends within one turn of its loop; a short grace even when time is up
                self._thread.join(max(0.1, deadline - time.monotonic()))
            if self._pump is not None:
                self._pump.fail_all(KwireError("consumer closed"))
            if self._client is not None:
                self._client.close()

    # ======================================================= app thread
    def _offsets_or_positions(self, offsets: Optional[OffsetsArg]) -> Dict[TopicPartition, OffsetAndMetadata]:
        if offsets is not None:
            return as_offsets(offsets)
        return {tp: OffsetAndMetadata(st.position) for tp, st in self._consumer._states.items()
                if st.position is not None}

    def _commit_generation(self) -> Tuple[int, str]:
        """The generation and member id a commit carries: -1 and "" for a
        consumer that assigns partitions itself."""
        with self._lock:
            if not self.subscribed:
                return -1, ""
            if self.generation < 0 or not self.member_id:
                if self.state == JOINING:
                    raise protocol.error_for(ErrorCode.REBALANCE_IN_PROGRESS, api="OffsetCommit",
                                             message="the group is rebalancing; commit after it completes")
                raise CommitFailedError("the consumer is not part of an active group generation "
                                        "(its partitions were lost or it has not joined yet)")
            return self.generation, self.member_id

    def _commit_error(self, errors: Mapping[TopicPartition, BaseException]) -> BaseException:
        """The error to report for a failed commit, reacting to it first."""
        err = next(iter(errors.values()))
        code = getattr(err, "code", None)
        if code in COORDINATOR_ERRORS:
            self._coordinator_dead(self._coordinator)
        elif code in (ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
            with self._lock:
                self._reset_generation(f"commit refused: {err}", member_unknown=code == ErrorCode.UNKNOWN_MEMBER_ID)
            if code == ErrorCode.FENCED_INSTANCE_ID:
                return err
            return CommitFailedError(f"commit failed: {err}; the group rebalanced and these partitions may "
                                     "belong to another member now")
        elif code == ErrorCode.REBALANCE_IN_PROGRESS:
            with self._lock:
                self._request_rejoin("commit answered REBALANCE_IN_PROGRESS")
        return err

    def _commit_quietly(self, timeout: float) -> None:
        try:
            self.commit(None, timeout)
        except KwireError as e:
            log.warning("group %s: auto commit failed: %s", self.group_id, e)

    def _maybe_auto_commit(self) -> None:
        if not self.cfg["enable_auto_commit"]:
            return
        now = time.monotonic()
        if now < self._next_auto_commit:
            return
        self._next_auto_commit = now + self.cfg["auto_commit_interval_ms"] / 1000.0
        if not self._consumer._states:
            return
        self._start()

        def report(offsets: Dict[TopicPartition, OffsetAndMetadata], error: Optional[BaseException]) -> None:
            if error is not None:
                log.warning("group %s: auto commit failed: %s", self.group_id, error)

        self.commit_async(None, report)

    def _run_commit_callbacks(self) -> None:
        while self._commit_results:
            cb, offsets, error = self._commit_results.popleft()
            if cb is not None:
                try:
                    cb(offsets, error)
                except Exception:
                    log.exception("commit callback %r raised", cb)

    def _call_listener(self, name: str, tps: Iterable[TopicPartition]) -> Optional[BaseException]:
        listener = self._listener
        if listener is None:
            return None
        fn = getattr(listener, name, None)
        if fn is None and name == "on_partitions_lost":
            fn = getattr(listener, "on_partitions_revoked", None)
        if fn is None:
            return None
        try:
            fn(sorted(tps))
        except Exception as e:
            log.error("group %s: rebalance listener %s raised %r", self.group_id, name, e)
            return e
        return None

    def _set_assignment(self, tps: Iterable[TopicPartition]) -> None:
        tps = sorted(set(tps))
        self._consumer._apply_assignment(tps)
        with self._lock:
            self._owned = set(tps)

    def _hold(self, tps: Iterable[TopicPartition]) -> None:
        """Keep the consumer from returning or fetching records of ``tps``
        while they are being revoked: their committed positions must stay
        the ones returned. What is buffered is dropped (nothing was returned
        from it: its next owner fetches it from the committed position)."""
        consumer = self._consumer
        for tp in tps:
            st = consumer._states.get(tp)
            if st is not None:
                st.retry_at = math.inf          # no fetch (they are unassigned before anything resets it)
                consumer._drop_buffered(tp)

    def _wake_consumer(self, _done: Future) -> None:
        """(any thread) An answer a poll waits for came: wake a ``poll()``
        waiting in the consumer's client, so that it takes it in now."""
        self._consumer._client.wakeup()

    def _hand_back(self, revoked: Set[TopicPartition]) -> Optional[BaseException]:
        """``on_partitions_revoked(revoked)``, then give them up."""
        if not revoked:
            return None
        err = self._call_listener("on_partitions_revoked", revoked)
        self._set_assignment(self._owned - revoked)
        return err

    def _revoke(self, revoked: Set[TopicPartition], then: Optional[Set[TopicPartition]]) -> Optional[BaseException]:
        """Begin handing ``revoked`` back, then carry out ``then`` (see
        :class:`_Handover`): with auto commit, their positions are committed
        first, and the rest waits for the coordinator's answer (at a later
        poll when it is not there yet)."""
        offsets: Dict[TopicPartition, int] = {}
        if self.cfg["enable_auto_commit"]:
            offsets = {tp: st.position for tp, st in self._consumer._states.items()
                       if tp in revoked and st.position is not None}
        self._handover = _Handover(set(revoked), offsets, then,
                                   time.monotonic() + self.cfg["max_poll_interval_ms"] / 1000.0)
        return self._continue_handover()

    def _continue_handover(self) -> Optional[BaseException]:
        """Send the handover's commit, or look whether it was answered (a
        retriable failure is sent again after ``retry_backoff_ms``); once it
        is done with, revoke and go on. Returns a listener's error."""
        h = self._handover
        assert h is not None
        if h.offsets:
            now = time.monotonic()
            if h.commit is None and now >= h.retry_at:
                h.commit = self.commit_async(h.offsets)
                h.commit.add_done_callback(self._wake_consumer)
            fut = h.commit
            if fut is None or not fut.done():
                if now < h.deadline:
                    self._hold(h.partitions)
                    return None
                log.error("group %s: the commit before revoking %s got no answer within max_poll_interval_ms "
                          "(%s ms); revoking without it", self.group_id, sorted(h.partitions),
                          self.cfg["max_poll_interval_ms"])
            elif fut.failed():
                err = fut.exception()
                if getattr(err, "retriable", False) and now < h.deadline:
                    if h.commit_failure is None:
                        log.info("group %s: the commit before revoking failed (%s); retrying every %s ms",
                                 self.group_id, err, self.cfg["retry_backoff_ms"])
                    h.commit, h.commit_failure = None, err
                    h.retry_at = now + self.cfg["retry_backoff_ms"] / 1000.0
                    self._hold(h.partitions)
                    return None
                log.warning("group %s: auto commit failed: %s", self.group_id, err)
        self._handover = None
        error = self._hand_back(h.partitions)
        if h.then is None:
            with self._lock:
                self._need_rejoin = False
                self.state = JOINING
                self._join_retry_at = 0.0
            self._wake()
            return error
        return self._take_assignment(h.then, h.partitions) or error

    def _partitions_lost(self) -> Optional[BaseException]:
        lost = set(self._owned)
        if not lost:
            return None
        log.info("group %s: partitions lost: %s", self.group_id, sorted(lost))
        err = self._call_listener("on_partitions_lost", lost)
        self._set_assignment(set())
        return err

    def _prepare_join(self) -> Optional[BaseException]:
        """Before a JoinGroup: eager members commit and revoke everything;
        cooperative ones revoke only what they no longer subscribe to. The
        JoinGroup goes once that is done."""
        if self.rebalance_protocol == EAGER:
            return self._revoke(set(self._owned), then=None)
        wanted = self._wanted_topics()
        return self._revoke({tp for tp in self._owned if tp.topic not in wanted}, then=None)

    def _apply(self, assigned: List[TopicPartition]) -> Optional[BaseException]:
        """Take in the assignment of a completed SyncGroup: cooperative
        members first revoke what it takes away."""
        new = set(assigned)
        if self.rebalance_protocol == COOPERATIVE:
            return self._revoke(self._owned - new, then=new - self._owned)
        return self._revoke(self._owned - new, then=new)    # none: eager members revoke before joining

    def _take_assignment(self, added: Set[TopicPartition], revoked: Set[TopicPartition]) -> Optional[BaseException]:
        """The end of :meth:`_apply`, once ``revoked`` are handed back."""
        if revoked and self.rebalance_protocol == COOPERATIVE:
            with self._lock:
                self._request_rejoin(f"revoked {len(revoked)} partition(s) for their new owners")
        self._set_assignment(self._owned | added)
        log.info("group %s generation %s: assigned %s", self.group_id, self.generation, sorted(self._owned))
        error = self._call_listener("on_partitions_assigned", added)
        self._init_positions(added)
        return error

    def _init_positions(self, tps: Iterable[TopicPartition]) -> None:
        """Newly assigned partitions without a position (a listener may have
        sought already) start at their committed offsets: until
        :meth:`_fetch_positions` has them, the consumer counts them as
        looked up, so that it neither fetches them nor resets them by
        ``auto_offset_reset``. An OffsetFetch still in flight is not waited
        for: it was sent before this assignment, maybe before the commits of
        the partitions' previous owners."""
        consumer = self._consumer
        for tp in tps:
            st = consumer._states.get(tp)
            if st is not None and st.position is None:
                consumer._looking_up[tp] = self._awaiting
                self._awaiting_committed.add(tp)
                self._offset_fetch, self._offset_fetch_retry_at = None, 0.0

    def _fetch_positions(self) -> Optional[BaseException]:
        """For the partitions waiting for their committed offsets: take in
        the OffsetFetch's answer (seek to the committed offset; where none
        is, the consumer's ``auto_offset_reset`` applies) and ask for those
        still waiting. A failure is logged once and asked again after
        ``retry_backoff_ms``; one that retrying cannot cure is also returned,
        to be raised by this poll."""
        if not self._awaiting_committed:
            return None
        consumer = self._consumer
        looking = consumer._looking_up
        # a partition sought or unassigned meanwhile waits no more
        waiting = {tp for tp in self._awaiting_committed if looking.get(tp) is self._awaiting}
        if not waiting:
            self._awaiting_committed, self._offset_fetch = set(), None
            return None
        error = None
        fut = self._offset_fetch
        if fut is not None and fut.done():
            self._offset_fetch = None
            failure = fut.exception()
            got: Dict[TopicPartition, Optional[OffsetAndMetadata]] = {}
            if failure is None:
                try:
                    got = offsets_from_response(fut.value, self.group_id)
                except KwireError as e:
                    failure = e
            if failure is not None:
                error = self._offset_fetch_failed(failure, len(waiting))
            else:
                self._offset_fetch_failure = None
                for tp in self._offset_fetch_asked & waiting:
                    del looking[tp]
                    waiting.discard(tp)
                    om = got.get(tp)
                    if om is not None:
                        consumer.seek(tp, om.offset)
        self._awaiting_committed = waiting
        if waiting and self._offset_fetch is None and time.monotonic() >= self._offset_fetch_retry_at:
            asked = sorted(waiting)
            self._offset_fetch_asked = set(asked)
            self._offset_fetch = self._coordinator_async(lambda v: offset_fetch_request(v, self.group_id, asked))
            self._offset_fetch.add_done_callback(self._wake_consumer)
        return error

    def _offset_fetch_failed(self, error: BaseException, partitions: int) -> Optional[BaseException]:
        """Ask again after ``retry_backoff_ms``; say the failure once; the
        error to raise when retrying cannot cure it."""
        if getattr(error, "code", None) in COORDINATOR_ERRORS:
            self._coordinator_dead(self._coordinator)
        self._offset_fetch_retry_at = time.monotonic() + self.cfg["retry_backoff_ms"] / 1000.0
        text = f"{type(error).__name__}: {error}"
        if text != self._offset_fetch_failure:
            self._offset_fetch_failure = text
            log.warning("group %s: OffsetFetch of the committed offsets of %d partition(s) failed: %s; asking "
                        "again every %s ms until it works", self.group_id, partitions, error,
                        self.cfg["retry_backoff_ms"])
        return None if getattr(error, "retriable", False) else error

    def wait_for_positions(self, partitions: Iterable[Tuple[str, int]], timeout: Optional[float] = None) -> None:
        """Wait up to ``timeout`` seconds (default ``request_timeout_ms``)
        for the committed offsets of those of ``partitions`` that are waiting
        for them (for ``Consumer.position``, which must not look a position
        up by ``auto_offset_reset`` meanwhile). Raises
        :class:`KafkaTimeoutError`, or what the OffsetFetch failed with when
        retrying cannot cure it."""
        tps = {TopicPartition(*tp) for tp in partitions}
        deadline = time.monotonic() + (timeout if timeout is not None else self.cfg["request_timeout_ms"] / 1000.0)
        while True:
            error = self._fetch_positions()
            if error is not None:
                raise error
            if not tps & self._awaiting_committed:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise KafkaTimeoutError(f"the committed offsets of {sorted(tps & self._awaiting_committed)} "
                                        "did not come in time")
            fut = self._offset_fetch
            if fut is None:                 # backing off after a failure
                time.sleep(max(0.0, min(left, self._offset_fetch_retry_at - time.monotonic())))
                continue
            try:
                fut.result(left)
            except KwireError:
                pass                        # taken in (and raised if need be) by _fetch_positions

    def _wanted_topics(self) -> Set[str]:
        with self._lock:
            return set(self._topics)

    def _leave(self, reason: str, deadline: Optional[float] = None) -> None:
        """Commit, revoke (or lose), leave: for close() and unsubscribe(),
        all within ``deadline`` (default: ``request_timeout_ms`` from now)."""
        if deadline is None:
            deadline = time.monotonic() + self.cfg["request_timeout_ms"] / 1000.0
        self._handover = None           # revoked now, after the commit of every position
        with self._lock:
            valid = self.generation >= 0 and bool(self.member_id)
        if valid:
            if self.cfg["enable_auto_commit"] and self._owned:
                self._commit_quietly(max(0.0, deadline - time.monotonic()))
            err = self._hand_back(set(self._owned))
        else:
            err = self._partitions_lost()
        if err is not None:
            log.warning("group %s: listener failed while leaving: %r", self.group_id, err)
        with self._lock:
            member, node = self.member_id, self._coordinator
            dynamic = self.group_instance_id is None
            self._reset_generation(reason, member_unknown=True, lost=False, rejoin=False)
            self.state = UNJOINED
            self._need_rejoin = False
            self._pending_assignment = None
        if dynamic and member and node is not None:
            self._send_leave(node, member, reason, max(0.0, deadline - time.monotonic()))

    def _send_leave(self, node: int, member: str, reason: str, timeout: float) -> None:
        try:
            resp = self._submit(node, lambda v: leave_group_request(v, self.group_id, member, reason),
                                timeout).result(timeout)
            if resp.error_code:
                log.info("group %s: LeaveGroup: %s", self.group_id, protocol.error_for(resp.error_code, api="LeaveGroup"))
            else:
                log.info("group %s: member %s left (%s)", self.group_id, member, reason)
        except KwireError as e:
            log.info("group %s: LeaveGroup failed: %s", self.group_id, e)

    def _coordinator_request(self, make: Callable[[Mapping[int, int]], Any], deadline: float) -> Any:
        self._start()
        assert self._link is not None
        return self._link.request(make, deadline)

    def _sleep_backoff(self, deadline: float) -> None:
        time.sleep(max(0.0, min(self.cfg["retry_backoff_ms"] / 1000.0, deadline - time.monotonic())))

    # ==================================================== shared, locked
    def _start(self) -> None:
        with self._lock:
            if self._thread is not None or self._closed:
                return
            self._client = Client(self._client_cfg)
            self._pump = RequestPump(self._client)
            self._link = CoordinatorLink(self._pump, self._client, self.group_id, GROUP_KEY,
                                         self.cfg["retry_backoff_ms"], self._coordinator_found)
            self._thread = threading.Thread(target=self._run, name=f"kwire-group-{self.group_id}", daemon=True)
            self._thread.start()

    def _submit(self, node: Optional[int], make: Callable[[Mapping[int, int]], Any],
                timeout: Optional[float] = None, response_timeout: Optional[float] = None) -> Future:
        self._start()
        assert self._pump is not None
        return self._pump.submit(node, make, timeout, response_timeout)

    def _wake(self) -> None:
        if self._client is not None:
            self._client.wakeup()

    def _coordinator_async(self, make: Callable[[Mapping[int, int]], Any]) -> Future:
        """Send to the coordinator (looked up first when unknown) without
        waiting: the future of its answer. After a connection failure the
        coordinator is looked up again."""
        result: Future = Future()

        def answered(f: Future, node: int) -> None:
            error = f.exception()
            if error is None:
                result.set_result(f.value)
                return
            if isinstance(error, (ConnectionLostError, NoBrokersAvailableError)):
                self._coordinator_dead(node)
            result.set_exception(error)

        def send(f: Future) -> None:
            if f.failed():
                result.set_exception(f.exception())   # type: ignore[arg-type]
                return
            node = f.value
            self._submit(node, make).add_done_callback(lambda r: answered(r, node))

        node = self._coordinator
        if node is None:
            self._lookup_coordinator().add_done_callback(send)
        else:
            self._submit(node, make).add_done_callback(lambda r: answered(r, node))
        return result

    def _lookup_coordinator(self) -> Future:
        """The future of the coordinator's node id (one lookup at a time)."""
        self._start()
        assert self._link is not None
        return self._link.lookup()

    @property
    def _coordinator(self) -> Optional[int]:
        return None if self._link is None else self._link.node

    def _coordinator_found(self, node: int) -> None:
        with self._lock:
            self._last_heartbeat_ok = time.monotonic()

    def _coordinator_dead(self, node: Optional[int]) -> None:
        if self._link is not None and self._link.forget(node):
            with self._lock:
                self._heartbeat_in_flight = False

    def _request_rejoin(self, reason: str) -> None:
        """(lock held)"""
        if not self._need_rejoin:
            log.info("group %s: rejoining: %s", self.group_id, reason)
        self._need_rejoin = True
        self._rejoin_reason = reason

    def _reset_generation(self, reason: str, member_unknown: bool = False, lost: bool = True,
                          rejoin: bool = True) -> None:
        """The member's generation is void (lock held): its partitions are
        lost (reported at the next poll), and it rejoins."""
        log.info("group %s: generation %s of member %s ended: %s", self.group_id, self.generation,
                 self.member_id, reason)
        self.generation = -1
        if member_unknown:
            self.member_id = ""
        if lost and self._owned:
            self._lost_pending = True
        if self.state == STABLE:
            self.state = UNJOINED
        if rejoin:
            self._request_rejoin(reason)

    def _fail(self, error: BaseException) -> None:
        log.error("group %s: %s", self.group_id, error)
        with self._lock:
            self._fatal = error
            self.state = UNJOINED

    # ======================================================== I/O thread
    def _run(self) -> None:
        client, pump = self._client, self._pump
        assert client is not None and pump is not None
        while not self._stop.is_set():
            try:
                now = time.monotonic()
                pump.pump()
                self._drive_join(now)
                self._heartbeat(now)
                self._check_metadata(now)
                pump.pump()
                client.poll(self._poll_timeout(now))
            except Exception as e:   # a bug here must surface, not kill the group silently
                if self._stop.is_set():
                    return               # closing: the client may be closed under it
                log.exception("group %s: background thread failed", self.group_id)
                self._fail(KwireError(f"group background thread failed: {e!r}"))
                pump.fail_all(KwireError(f"group background thread failed: {e!r}"))
                return

    def _poll_timeout(self, now: float) -> float:
        wait = 0.1
        if self.state == STABLE and not self._heartbeat_in_flight:
            wait = min(wait, max(0.0, self._next_heartbeat - now))
        return wait

    # ----------------------------------------------------- join / sync
    def _drive_join(self, now: float) -> None:
        with self._lock:
            if self.state != JOINING or self._joining_step is not None or now < self._join_retry_at:
                return
            node = self._coordinator
            if node is None:
                self._joining_step = "find"
        if node is None:
            fut = self._lookup_coordinator()

            def found(f: Future) -> None:
                with self._lock:
                    self._joining_step = None
                    if f.failed():
                        self._join_retry_at = time.monotonic() + self.cfg["retry_backoff_ms"] / 1000.0
                if f.failed() and not getattr(f.exception(), "retriable", True):
                    self._fail(f.exception())   # GROUP_AUTHORIZATION_FAILED: raised by poll, not looked up again

            fut.add_done_callback(found)
            return
        if self._pattern is None:
            self._send_join(node)
            return
        # a pattern: match it against the cluster's topics now, then join with the matches
        with self._lock:
            self._joining_step = "join"
        assert self._client is not None
        client = self._client

        def matched(f: Future) -> None:
            if f.failed():
                self._join_failed(node, f.exception())   # type: ignore[arg-type]
                return
            with self._lock:
                self._topics = self._matching({t.name: len(t.partitions) for t in f.value.topics
                                               if t.name and not t.error_code})
            self._send_join(node)

        self._submit(None, lambda v: client.metadata_request(v, None)).add_done_callback(matched)

    def _subscription_bytes(self, assignor: Assignor) -> bytes:
        with self._lock:
            topics = sorted(self._topics)
            owned = sorted(self._owned) if self.generation >= 0 else []
            generation = self.generation
        return encode_subscription(topics, owned, generation, self.cfg["client_rack"],
                                   assignor.subscription_user_data(topics, owned, generation))

    def _send_join(self, node: int) -> None:
        cls = protocol.message("JoinGroupRequest")
        protocols = [cls.JoinGroupRequestProtocol(name=a.name, metadata=self._subscription_bytes(a))
                     for a in self._assignors]
        with self._lock:
            member = self.member_id
            reason = self._rejoin_reason
            self._joining_step = "join"

        def make(v: Mapping[int, int]) -> Any:
            return cls(group_id=self.group_id, session_timeout_ms=self.cfg["session_timeout_ms"],
                       rebalance_timeout_ms=self.cfg["max_poll_interval_ms"], member_id=member,
                       group_instance_id=self.group_instance_id, protocol_type=PROTOCOL_TYPE, protocols=protocols,
                       reason=(reason or None) if v.get(ApiKey.JOIN_GROUP, 0) >= 8 else None)

        log.debug("group %s: JoinGroup as %r", self.group_id, member or "(new member)")
        # JoinGroup may wait a whole rebalance (up to max_poll_interval_ms) for its answer; as Kafka's client
        wait = max(self.cfg["request_timeout_ms"], self.cfg["max_poll_interval_ms"] + 5000) / 1000.0
        self._submit(node, make, response_timeout=wait).add_done_callback(lambda f: self._on_join(node, f))

    def _join_failed(self, node: int, error: BaseException, *, retry_in: Optional[float] = None) -> None:
        """A step of the join failed (lock not held): retry, or fail for good."""
        code = getattr(error, "code", None)
        with self._lock:
            self._joining_step = None
            if isinstance(error, (ConnectionLostError, NoBrokersAvailableError)) or code in COORDINATOR_ERRORS:
                self._coordinator_dead(node)
            elif code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
                self._reset_generation(str(error), member_unknown=code == ErrorCode.UNKNOWN_MEMBER_ID)
                self.state = JOINING
            elif code == ErrorCode.REBALANCE_IN_PROGRESS:
                pass
            elif not getattr(error, "retriable", False) and not isinstance(error, KafkaTimeoutError):
                self._fatal = error
                self.state = UNJOINED
                log.error("group %s: cannot join: %s", self.group_id, error)
                return
            delay = self.cfg["retry_backoff_ms"] / 1000.0 if retry_in is None else retry_in
            self._join_retry_at = time.monotonic() + delay
        log.info("group %s: join step failed (%s); retrying", self.group_id, error)

    def _on_join(self, node: int, fut: Future) -> None:
        if fut.failed():
            self._join_failed(node, fut.exception())   # type: ignore[arg-type]
            return
        resp = fut.value
        code = resp.error_code
        if code == ErrorCode.MEMBER_ID_REQUIRED:
            with self._lock:
                self.member_id = resp.member_id
                self._joining_step = None
                self._join_retry_at = 0.0
            log.debug("group %s: member id %s assigned; joining with it", self.group_id, resp.member_id)
            return
        if code:
            self._join_failed(node, protocol.error_for(code, api="JoinGroup"))
            return
        with self._lock:
            self.generation = resp.generation_id
            self.member_id = resp.member_id
            self.leader_id = resp.leader
            self.protocol_name = resp.protocol_name
            self._joining_step = "sync"
        log.info("group %s: joined generation %s as %s (leader %s, protocol %s)", self.group_id,
                 resp.generation_id, resp.member_id, resp.leader, resp.protocol_name)
        if resp.leader == resp.member_id and not getattr(resp, "skip_assignment", False):
            self._lead(node, resp)
        else:
            self._send_sync(node, resp.generation_id, resp.member_id, resp.protocol_name, [])

    def _lead(self, node: int, resp: Any) -> None:
        """As leader: read every member's subscription, get the partition
        counts of all their topics, assign, then SyncGroup."""
        assignor = next((a for a in self._assignors if a.name == resp.protocol_name), None)
        if assignor is None:
            self._join_failed(node, KwireError(f"the group chose assignor {resp.protocol_name!r}, which this "
                                               "member did not offer"))
            return
        try:
            members = {m.member_id: decode_subscription(m.member_id, m.group_instance_id, m.metadata)
                       for m in resp.members}
        except ProtocolError as e:
            self._join_failed(node, e)
            return
        topics = sorted({t for m in members.values() for t in m.topics})
        assert self._client is not None

        def got_metadata(f: Future) -> None:
            if f.failed():
                self._join_failed(node, f.exception())   # type: ignore[arg-type]
                return
            counts = {t.name: len(t.partitions) for t in f.value.topics
                      if t.name in set(topics) and not t.error_code and t.partitions}
            try:
                plan = assignor.assign(counts, members)
            except Exception as e:
                log.exception("group %s: assignor %s failed", self.group_id, assignor.name)
                self._join_failed(node, KwireError(f"assignor {assignor.name} failed: {e!r}"))
                return
            with self._lock:
                self._assigned_snapshot = counts
                self._group_topics = set(topics)
            log.info("group %s: leader assigned with %s: %s", self.group_id, assignor.name,
                     {m: len(tps) for m, tps in plan.items()})
            cls = protocol.message("SyncGroupRequest")
            assignments = [cls.SyncGroupRequestAssignment(member_id=m, assignment=encode_assignment(tps))
                           for m, tps in plan.items()]
            self._send_sync(node, resp.generation_id, resp.member_id, resp.protocol_name, assignments)

        client = self._client
        self._submit(None, lambda v: client.metadata_request(v, topics)).add_done_callback(got_metadata)

    def _send_sync(self, node: int, generation: int, member: str, protocol_name: str, assignments: List[Any]) -> None:
        cls = protocol.message("SyncGroupRequest")

        def make(v: Mapping[int, int]) -> Any:
            named = v.get(ApiKey.SYNC_GROUP, 0) >= 5
            return cls(group_id=self.group_id, generation_id=generation, member_id=member,
                       group_instance_id=self.group_instance_id, protocol_type=PROTOCOL_TYPE if named else None,
                       protocol_name=protocol_name if named else None, assignments=assignments)

        self._submit(node, make).add_done_callback(lambda f: self._on_sync(node, generation, f))

    def _on_sync(self, node: int, generation: int, fut: Future) -> None:
        if fut.failed():
            self._join_failed(node, fut.exception())   # type: ignore[arg-type]
            return
        resp = fut.value
        if resp.error_code:
            self._join_failed(node, protocol.error_for(resp.error_code, api="SyncGroup"))
            return
        try:
            assigned = decode_assignment(resp.assignment)
        except ProtocolError as e:
            self._join_failed(node, e)
            return
        now = time.monotonic()
        with self._lock:
            self._joining_step = None
            if self.state != JOINING or self.generation != generation:
                return      # the member left or rejoined meanwhile
            self.state = STABLE
            self._pending_assignment = (generation, assigned)
            self._last_heartbeat_ok = now
            self._next_heartbeat = now + self.cfg["heartbeat_interval_ms"] / 1000.0
            self._metadata_check_at = now + self.cfg["metadata_max_age_ms"] / 1000.0
        log.debug("group %s: generation %s assignment %s", self.group_id, generation, assigned)
        self._wake_consumer(fut)          # a poll takes it in now

    # --------------------------------------------------------- liveness
    def _heartbeat(self, now: float) -> None:
        with self._lock:
            if self.state != STABLE:
                return
            if now - self._last_poll > self.cfg["max_poll_interval_ms"] / 1000.0:
                self._poll_timeout_expired()
                return
            node = self._coordinator
            if node is None:
                self._lookup_coordinator()
                return
            if now - self._last_heartbeat_ok > self.cfg["session_timeout_ms"] / 1000.0:
                self._coordinator_dead(node)
                return
            if self._heartbeat_in_flight or now < self._next_heartbeat:
                return
            self._heartbeat_in_flight = True
            self._next_heartbeat = now + self.cfg["heartbeat_interval_ms"] / 1000.0
            generation, member = self.generation, self.member_id
        req = protocol.message("HeartbeatRequest")(group_id=self.group_id, generation_id=generation,
                                                   member_id=member, group_instance_id=self.group_instance_id)
        self._submit(node, lambda v: req).add_done_callback(lambda f: self._on_heartbeat(node, generation, f))

    def _on_heartbeat(self, node: int, generation: int, fut: Future) -> None:
        with self._lock:
            self._heartbeat_in_flight = False
            if fut.failed():
                log.debug("group %s: heartbeat failed: %s", self.group_id, fut.exception())
                if isinstance(fut.exception(), (ConnectionLostError, NoBrokersAvailableError)):
                    self._coordinator_dead(node)
                return
            if self.generation != generation:
                return
            code = fut.value.error_code
            if code == ErrorCode.NONE:
                self._last_heartbeat_ok = time.monotonic()
            elif code == ErrorCode.REBALANCE_IN_PROGRESS:
                self._last_heartbeat_ok = time.monotonic()
                self._request_rejoin("the group is rebalancing")
            elif code in (ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID):
                self._reset_generation(f"heartbeat: {protocol.error_for(code, api='Heartbeat')}",
                                       member_unknown=code == ErrorCode.UNKNOWN_MEMBER_ID)
            elif code == ErrorCode.FENCED_INSTANCE_ID:
                self._reset_generation("another member uses this group_instance_id")
                self._fatal = protocol.error_for(code, api="Heartbeat",
                                                 message=f"group_instance_id {self.group_instance_id!r} is in use "
                                                 "by another member")
            elif code in COORDINATOR_ERRORS:
                self._coordinator_dead(node)
            else:
                err = protocol.error_for(code, api="Heartbeat")
                if not getattr(err, "retriable", False):
                    self._fatal = err
                log.info("group %s: heartbeat: %s", self.group_id, err)

    def _poll_timeout_expired(self) -> None:
        """(lock held) The application did not poll within
        max_poll_interval_ms: leave so the group can move on without it."""
        log.warning("group %s: no poll() for more than max_poll_interval_ms (%s ms); leaving the group. Process "
                    "less per poll (max_poll_records) or raise max_poll_interval_ms.",
                    self.group_id, self.cfg["max_poll_interval_ms"])
        member, node = self.member_id, self._coordinator
        if self.group_instance_id is None and member and node is not None:
            self._submit(node, lambda v: leave_group_request(v, self.group_id, member,
                                                            "consumer poll timeout has expired"))
        self._reset_generation("max_poll_interval_ms passed without a poll", member_unknown=True)

    # --------------------------------------------------------- metadata
    def _check_metadata(self, now: float) -> None:
        """Every metadata_max_age_ms while stable: a pattern's matches and
        (leader) the partition counts the assignment was made from; a change
        means a rejoin."""
        with self._lock:
            if self.state != STABLE or self._metadata_in_flight or now < self._metadata_check_at:
                return
            pattern = self._pattern
            leader = self.member_id == self.leader_id and bool(self.member_id)
            if pattern is None and not leader:
                return
            self._metadata_in_flight = True
            self._metadata_check_at = now + self.cfg["metadata_max_age_ms"] / 1000.0
            topics = None if pattern is not None else sorted(self._group_topics)
        assert self._client is not None
        client = self._client

        def done(f: Future) -> None:
            with self._lock:
                self._metadata_in_flight = False
                if f.failed() or self.state != STABLE:
                    return
                counts = {t.name: len(t.partitions) for t in f.value.topics if t.name and not t.error_code}
                self._take_metadata(counts, pattern, leader)

        self._submit(None, lambda v: client.metadata_request(v, topics)).add_done_callback(done)

    def _take_metadata(self, counts: Mapping[str, int], pattern: Optional[Pattern[str]], leader: bool) -> None:
        """(lock held)"""
        if pattern is not None:
            matched = self._matching(counts)
            if matched != self._topics:
                self._topics = matched
                self._request_rejoin(f"the pattern now matches {len(matched)} topic(s)")
                return
        if leader:
            now_counts = {t: counts[t] for t in self._group_topics if t in counts}
            if now_counts != self._assigned_snapshot:
                self._request_rejoin("the subscribed topics' partitions changed")

    def _matching(self, topics: Iterable[str]) -> Set[str]:
        """The topics the subscription's pattern matches (internal topics
        left out when ``exclude_internal_topics``)."""
        pattern = self._pattern
        if pattern is None:
            return set(self._topics)
        internal = self.cfg["exclude_internal_topics"]
        return {t for t in topics if pattern.fullmatch(t) and not (internal and t.startswith("__"))}
