"""Consumer groups: the group membership of a consumer
(:class:`GroupCoordinator`) and the rebalance listener. Finding the
coordinator and the request pump are :mod:`kwire.coordinator`'s; the
OffsetCommit and OffsetFetch requests :mod:`kwire.commit`'s; the membership
protocol :mod:`kwire.classic`'s (the classic JoinGroup / SyncGroup /
Heartbeat, its assignors and the ``consumer`` embedded protocol; the
default) or, with ``group_protocol="consumer"``,
:mod:`kwire.consumer_membership`'s (KIP-848's ConsumerGroupHeartbeat, the
coordinator assigning), which the coordinator drives through the interface
of :mod:`kwire.membership`.

A :class:`GroupCoordinator` belongs to one :class:`kwire.consumer.Consumer`
with a ``group_id``. It has a :class:`kwire.client.Client` of its own (the
connection to the group's coordinator broker) driven by a background thread,
``kwire-group``, which is the only thread doing that client's I/O: it sends
the requests other threads hand it (:class:`kwire.coordinator.RequestPump`)
and gives the membership its turns (joining, heartbeats: see
:mod:`kwire.classic`). Because the heartbeat thread does not wait for the
application, slow processing does not evict a live member;
``max_poll_interval_ms`` is checked separately: a member that does not call
``poll()`` for that long leaves the group and loses its partitions, as in
Kafka's clients.

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
The membership says which partitions to revoke and which to add, and when
(eager or cooperative: :mod:`kwire.classic`); the coordinator carries each
step out: auto commit, then ``on_partitions_revoked``, then
``on_partitions_assigned`` with the partitions added.

When the member learns that its generation is no longer valid (fenced by
the coordinator: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, session expiry,
``max_poll_interval_ms`` passed) its partitions may already belong to
someone else: ``on_partitions_lost`` is called instead, and nothing is
committed.
"""

from __future__ import annotations

import collections
import inspect
import logging
import math
import re
import threading
import time
from typing import Any, Callable, Deque, Dict, Iterable, List, Mapping, Optional, Pattern, Set, Tuple, Union

from kwire import protocol
from kwire.classic import (ClassicMembership, decode_assignment, decode_subscription, encode_assignment,
                           encode_subscription, leave_group_request)
from kwire.client import Await, Client, NoBrokersAvailableError, Sleep, Steps, StepsOf, Wait, run_blocking
from kwire.commit import (CommitFailedError, OffsetsArg, as_offsets, commit_errors, offset_commit_request,
                          offset_fetch_request, offsets_from_response)
from kwire.consumer_membership import ConsumerMembership
from kwire.coordinator import COORDINATOR_ERRORS, GROUP_KEY, CoordinatorLink, RequestPump
from kwire.errors import KwireError
from kwire.future import Future, KafkaTimeoutError
from kwire.membership import JOINING, STABLE, AssignmentChange, Membership
from kwire.metrics.clients import GroupMetrics
from kwire.net import ConnectionLostError
from kwire.protocol.api_keys import ErrorCode
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


# ------------------------------------------------------- the coordinator
_PHASES = {"on_partitions_assigned": "assign", "on_partitions_revoked": "revoke", "on_partitions_lost": "lose"}


class _Handover:
    """Partitions being revoked whose positions are being committed (auto
    commit): the consumer neither fetches nor returns their records until
    the coordinator answers, the commit fails for good, or
    ``max_poll_interval_ms`` passes (Java's rebalance timeout); then
    ``on_partitions_revoked`` runs, they are handed back, and ``then`` is
    carried out: the partitions the membership added (``change.added``)
    are taken in, or (None) the membership goes on (joins the group)."""

    def __init__(self, change: AssignmentChange, offsets: Dict[TopicPartition, int], deadline: float) -> None:
        self.change = change
        self.partitions = set(change.revoked)
        self.offsets = offsets          # what to commit first (empty: nothing, go on at once)
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
        self.metrics = GroupMetrics(cfg.get("metrics_sample_window_ms", 30000) / 1000.0)
        self.group_id: str = cfg["group_id"]
        self.group_instance_id: Optional[str] = cfg["group_instance_id"]
        self._consumer = consumer
        self._lock = threading.RLock()
        # the membership protocol (guarded by _lock)
        self._membership: Membership = (ConsumerMembership(self, self._lock) if cfg["group_protocol"] == "consumer"
                                        else ClassicMembership(self, self._lock))
        self._client_cfg = dict(cfg)
        self._client: Optional[Client] = None
        self._pump: Optional[RequestPump] = None
        self._ended: Optional[Future] = None    # done once the background (thread, or loop task) has ended
        self._stop = threading.Event()
        # subscription and assignment (guarded by _lock)
        self._topics: Set[str] = set()
        self._pattern: Optional[Pattern[str]] = None
        self._listener: Optional[Any] = None
        self._owned: Set[TopicPartition] = set()
        self._lost_pending = False
        self._fatal: Optional[BaseException] = None
        self._link: Optional[CoordinatorLink] = None     # the coordinator, once started
        now = time.monotonic()
        # commits
        self._next_auto_commit = now + cfg["auto_commit_interval_ms"] / 1000.0
        self._auto_commit_failure: Optional[str] = None   # the periodic auto commit's failure last logged
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
    def generation(self) -> int:
        """The generation of the member's assignment (-1: none)."""
        return self._membership.generation

    @property
    def member_id(self) -> str:
        """The member id the group's coordinator gave ("" : none yet)."""
        return self._membership.member_id

    @property
    def state(self) -> str:
        """``unjoined``, ``joining`` or ``stable``."""
        return self._membership.state

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
            self._membership.subscription_changed()
        self._start()

    def unsubscribe(self) -> None:
        """Leave the group (committing first when auto commit is on) and
        drop the subscription and the assignment."""
        run_blocking(self.unsubscribe_steps())

    def unsubscribe_steps(self) -> Steps:
        """:meth:`unsubscribe` as steps."""
        if not self.subscribed:
            return
        yield from self._leave("the consumer unsubscribed")
        with self._lock:
            self._topics, self._pattern = set(), None

    def group_metadata(self) -> ConsumerGroupMetadata:
        with self._lock:
            return ConsumerGroupMetadata(self.group_id, self.generation, self.member_id, self.group_instance_id)

    def enforce_rebalance(self, reason: str) -> None:
        """Rebalance at the next poll, for ``reason`` (the membership
        protocol says how, or that it cannot); nothing while not
        subscribed."""
        if not self.subscribed:
            return
        with self._lock:
            self._membership.enforce_rebalance(reason)

    def on_poll(self) -> Steps:
        """The consumer's ``poll()`` turn (application thread): callbacks of
        finished async commits, a fatal error, lost or new partitions, the
        revocations before a rejoin, the committed positions of new
        partitions, auto commit. Never waits for the coordinator: a step
        that needs its answer goes on at a later call. Steps: the only ones
        are a rebalance listener's awaitables (``kwire.aio``)."""
        self._membership.on_poll()
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
            raised = (yield from self._partitions_lost()) or raised
        if self._handover is not None:
            raised = (yield from self._continue_handover()) or raised
        while self._handover is None:       # the membership's next steps, each handed over in turn
            change = self._membership.next_change()
            if change is None:
                break
            raised = (yield from self._revoke(change)) or raised
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
        return run_blocking(self.commit_steps(offsets, timeout))

    def commit_steps(self, offsets: Optional[OffsetsArg] = None, timeout: Optional[float] = None) -> Steps:
        """:meth:`commit` as steps."""
        self._run_commit_callbacks()
        todo = self._offsets_or_positions(offsets)
        if not todo:
            if offsets is None and self._consumer._states:
                self._commit_generation()     # nothing to commit yet, but are they still this member's?
            return {}
        deadline = time.monotonic() + (timeout if timeout is not None else self.cfg["request_timeout_ms"] / 1000.0)
        while True:
            generation, member = self._commit_generation()
            resp = yield from self._coordinator_request(
                lambda v: offset_commit_request(self.group_id, todo, generation, member, self.group_instance_id),
                deadline)
            errors = commit_errors(resp)
            if not errors:
                log.debug("group %s committed %s", self.group_id, todo)
                self._committed(todo)
                return todo
            err = self._commit_error(errors)
            if not getattr(err, "retriable", False) or time.monotonic() >= deadline:
                raise err
            yield self._backoff(deadline)

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
        return run_blocking(self.committed_steps(partitions, timeout))

    def committed_steps(self, partitions: Iterable[Tuple[str, int]], timeout: Optional[float] = None) -> Steps:
        """:meth:`committed` as steps."""
        tps = [TopicPartition(*tp) for tp in partitions]
        if not tps:
            return {}
        deadline = time.monotonic() + (timeout if timeout is not None else self.cfg["request_timeout_ms"] / 1000.0)
        while True:
            resp = yield from self._coordinator_request(
                lambda v: offset_fetch_request(v, self.group_id, tps, member=self._fetch_member()), deadline)
            try:
                got = offsets_from_response(resp, self.group_id)
            except KwireError as e:
                code = getattr(e, "code", None)
                if code in COORDINATOR_ERRORS:
                    self.coordinator_dead(self.coordinator)
                self._offset_fetch_error(e)
                if not getattr(e, "retriable", False) or time.monotonic() >= deadline:
                    raise
                yield self._backoff(deadline)
                continue
            return {tp: got.get(tp) for tp in tps}

    def close(self, timeout: Optional[float] = None) -> None:
        """Commit (auto commit), revoke, leave the group (dynamic members),
        stop the thread and close the connection: all within ``timeout``
        seconds (default ``request_timeout_ms``), as one budget."""
        run_blocking(self.close_steps(timeout))

    def close_steps(self, timeout: Optional[float] = None) -> Steps:
        """:meth:`close` as steps."""
        if self._closed:
            return
        deadline = time.monotonic() + (timeout if timeout is not None else self.cfg["request_timeout_ms"] / 1000.0)
        try:
            if self.subscribed:
                yield from self._leave("the consumer is closing", deadline)
            elif self.cfg["enable_auto_commit"] and self._client is not None:
                yield from self._commit_quietly(max(0.0, deadline - time.monotonic()))
            self._run_commit_callbacks()
        finally:
            self._closed = True
            self._stop.set()
            if self._client is not None:
                self._client.wakeup()
            if self._ended is not None:
                # woken, the background ends within one turn of its loop; a short grace even when time is up
                yield Wait(self._ended, max(0.1, deadline - time.monotonic()))
            if self._pump is not None:
                self._pump.fail_all(KwireError("consumer closed"))
            if self._client is not None:
                self._client.close()

    # ======================================================= app thread
    def _offsets_or_positions(self, offsets: Optional[OffsetsArg]) -> Dict[TopicPartition, OffsetAndMetadata]:
        if offsets is not None:
            return as_offsets(offsets)
        return {tp: OffsetAndMetadata(offset) for tp, offset in self._to_commit().items()}

    def _to_commit(self, among: Optional[Set[TopicPartition]] = None) -> Dict[TopicPartition, int]:
        """What a commit without offsets commits (of ``among``, default every
        assigned partition): the positions, or with ``enable_auto_offset_store``
        off the offsets stored by ``Consumer.store_offsets``."""
        auto = self.cfg["enable_auto_offset_store"]
        found = ((tp, st.to_commit(auto)) for tp, st in self._consumer._states.items() if among is None or tp in among)
        return {tp: offset for tp, offset in found if offset is not None}

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
            self.coordinator_dead(self.coordinator)
        elif code in (ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
            with self._lock:
                self._membership.reset(f"commit refused: {err}", member_unknown=code == ErrorCode.UNKNOWN_MEMBER_ID)
            if code == ErrorCode.FENCED_INSTANCE_ID:
                return err
            return CommitFailedError(f"commit failed: {err}; the group rebalanced and these partitions may "
                                     "belong to another member now")
        elif code == ErrorCode.REBALANCE_IN_PROGRESS:
            with self._lock:
                self._membership.rejoin("commit answered REBALANCE_IN_PROGRESS")
        elif code == ErrorCode.STALE_MEMBER_EPOCH:
            # the consumer protocol: the commit's member epoch is behind the member's (a heartbeat bumped it);
            # retried with the epoch the member has now while it is in the group, as Java's client does
            with self._lock:
                in_group = self.generation >= 0 and bool(self.member_id)
            if not in_group:
                return CommitFailedError(f"commit failed: {err}; the member is no longer in the group and these "
                                         "partitions may belong to another member now")
            err.retriable = True    # type: ignore[attr-defined]
        return err

    def _fetch_member(self) -> Tuple[Optional[str], int]:
        """The member id and epoch an OffsetFetch carries (v9+, read when it
        is sent): a KIP-848 member's while it has an epoch, as Java's
        consumer sends them; (None, -1) otherwise, as for a classic group's
        member, whose offsets the coordinator gives without a check."""
        with self._lock:
            if self.cfg["group_protocol"] != "consumer" or not self.subscribed:
                return None, -1
            if self.generation <= 0 or not self.member_id:
                return None, -1
            return self.member_id, self.generation

    def _offset_fetch_error(self, error: BaseException) -> None:
        """Mark an OffsetFetch refusal of the member's epoch retriable: the
        consumer protocol's STALE_MEMBER_EPOCH (a heartbeat bumped the epoch
        after the request was made) or UNKNOWN_MEMBER_ID (the member was
        fenced: it rejoins, or fetches as a non-member meanwhile); the retry
        carries what the member has then."""
        if self.cfg["group_protocol"] == "consumer" and getattr(error, "code", None) in (
                ErrorCode.STALE_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
            error.retriable = True      # type: ignore[attr-defined]

    def _commit_quietly(self, timeout: float) -> Steps:
        try:
            yield from self.commit_steps(None, timeout)
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
            # said at WARNING once (and when it changes), at DEBUG while every interval fails alike
            text = None if error is None else f"{type(error).__name__}: {error}"
            if text is not None:
                level = logging.DEBUG if text == self._auto_commit_failure else logging.WARNING
                log.log(level, "group %s: auto commit failed: %s", self.group_id, error)
            self._auto_commit_failure = text

        self.commit_async(None, report)

    def _committed(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        """A commit of ``offsets`` succeeded: the consumer's interceptors' ``on_commit``."""
        interceptors = self._consumer._interceptors
        if interceptors is not None:
            interceptors.on_commit(offsets)

    def _run_commit_callbacks(self) -> None:
        while self._commit_results:
            cb, offsets, error = self._commit_results.popleft()
            if error is None:
                self._committed(offsets)
            if cb is not None:
                try:
                    cb(offsets, error)
                except Exception:
                    log.exception("commit callback %r raised", cb)

    def _call_listener(self, name: str, tps: Iterable[TopicPartition]) -> StepsOf[Optional[BaseException]]:
        """Call the listener's ``name``; what it raises is returned. A
        callback that returns an awaitable (an ``async def`` one, for
        ``kwire.aio``'s consumer) is awaited before the rebalance goes on.
        With tracing (kwire.tracing), inside the phase's rebalance span."""
        tracing = getattr(self._consumer, "_tracing", None)
        if tracing is None:
            return (yield from self._listener_call(name, tps))
        tps = list(tps)
        with tracing.rebalance(_PHASES[name], len(tps)):
            return (yield from self._listener_call(name, tps))

    def _listener_call(self, name: str, tps: Iterable[TopicPartition]) -> StepsOf[Optional[BaseException]]:
        listener = self._listener
        if listener is None:
            return None
        fn = getattr(listener, name, None)
        if fn is None and name == "on_partitions_lost":
            fn = getattr(listener, "on_partitions_revoked", None)
        if fn is None:
            return None
        try:
            out = fn(sorted(tps))
            if inspect.isawaitable(out):
                yield Await(out)
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

    def wake_consumer(self, _done: Any = None) -> None:
        """(any thread) An answer a poll waits for came: wake a ``poll()``
        waiting in the consumer's client, so that it takes it in now."""
        self._consumer._client.wakeup()

    def _hand_back(self, revoked: Set[TopicPartition]) -> StepsOf[Optional[BaseException]]:
        """``on_partitions_revoked(revoked)``, then give them up."""
        if not revoked:
            return None
        err = yield from self._call_listener("on_partitions_revoked", revoked)
        self._set_assignment(self._owned - revoked)
        return err

    def _revoke(self, change: AssignmentChange) -> StepsOf[Optional[BaseException]]:
        """Begin handing ``change.revoked`` back, then carry out the rest of
        ``change`` (see :class:`_Handover`): with auto commit, their
        positions are committed first, and the rest waits for the
        coordinator's answer (at a later poll when it is not there yet)."""
        revoked = change.revoked
        offsets: Dict[TopicPartition, int] = {}
        if self.cfg["enable_auto_commit"]:
            offsets = self._to_commit(set(revoked))
        self._handover = _Handover(change, offsets, time.monotonic() + self.cfg["max_poll_interval_ms"] / 1000.0)
        return (yield from self._continue_handover())

    def _continue_handover(self) -> StepsOf[Optional[BaseException]]:
        """Send the handover's commit, or look whether it was answered (a
        retriable failure is sent again after ``retry_backoff_ms``); once it
        is done with, revoke and go on. Returns a listener's error."""
        h = self._handover
        assert h is not None
        if h.offsets:
            now = time.monotonic()
            if h.commit is None and now >= h.retry_at:
                h.commit = self.commit_async(h.offsets)
                h.commit.add_done_callback(self.wake_consumer)
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
        error = yield from self._hand_back(h.partitions)
        self._membership.handed_back(h.change)
        if h.change.added is None:
            self._wake()
            return error
        return (yield from self._take_assignment(h.change.added)) or error

    def _partitions_lost(self) -> StepsOf[Optional[BaseException]]:
        lost = set(self._owned)
        if not lost:
            return None
        log.info("group %s: partitions lost: %s", self.group_id, sorted(lost))
        self.metrics.lost()
        err = yield from self._call_listener("on_partitions_lost", lost)
        self._set_assignment(set())
        return err

    def _take_assignment(self, added: Set[TopicPartition]) -> StepsOf[Optional[BaseException]]:
        """The end of a handover that adds partitions, once the revoked
        ones are handed back."""
        self._set_assignment(self._owned | added)
        self.metrics.assigned()
        log.info("group %s generation %s: assigned %s", self.group_id, self.generation, sorted(self._owned))
        error = yield from self._call_listener("on_partitions_assigned", added)
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
            self._offset_fetch = self._coordinator_async(
                lambda v: offset_fetch_request(v, self.group_id, asked, member=self._fetch_member()))
            self._offset_fetch.add_done_callback(self.wake_consumer)
        return error

    def _offset_fetch_failed(self, error: BaseException, partitions: int) -> Optional[BaseException]:
        """Ask again after ``retry_backoff_ms``; say the failure once; the
        error to raise when retrying cannot cure it."""
        if getattr(error, "code", None) in COORDINATOR_ERRORS:
            self.coordinator_dead(self.coordinator)
        self._offset_fetch_error(error)
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
        run_blocking(self.wait_for_positions_steps(partitions, timeout))

    def wait_for_positions_steps(self, partitions: Iterable[Tuple[str, int]], timeout: Optional[float] = None) -> Steps:
        """:meth:`wait_for_positions` as steps."""
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
                yield Sleep(max(0.0, min(left, self._offset_fetch_retry_at - time.monotonic())))
                continue
            yield Wait(fut, left)           # its answer is taken in (and raised if need be) by _fetch_positions

    def _leave(self, reason: str, deadline: Optional[float] = None) -> Steps:
        """Commit, revoke (or lose), leave: for close() and unsubscribe(),
        all within ``deadline`` (default: ``request_timeout_ms`` from now)."""
        if deadline is None:
            deadline = time.monotonic() + self.cfg["request_timeout_ms"] / 1000.0
        self._handover = None           # revoked now, after the commit of every position
        with self._lock:
            valid = self.generation >= 0 and bool(self.member_id)
        if valid:
            if self.cfg["enable_auto_commit"] and self._owned:
                yield from self._commit_quietly(max(0.0, deadline - time.monotonic()))
            err = yield from self._hand_back(set(self._owned))
        else:
            err = yield from self._partitions_lost()
        if err is not None:
            log.warning("group %s: listener failed while leaving: %r", self.group_id, err)
        sent = self._membership.leave(reason, deadline)
        if sent is not None:
            yield Wait(sent, max(0.0, deadline - time.monotonic()))   # its answer is logged when it comes

    def _coordinator_request(self, make: Callable[[Mapping[int, int]], Any], deadline: float) -> Steps:
        self._start()
        assert self._link is not None
        return (yield from self._link.request_steps(make, deadline))

    def _backoff(self, deadline: float) -> Sleep:
        return Sleep(max(0.0, min(self.cfg["retry_backoff_ms"] / 1000.0, deadline - time.monotonic())))

    # ================================== shared; for the membership (see
    # kwire.membership.MembershipHost, which says what each of these does)
    def _start(self) -> None:
        with self._lock:
            if self._ended is not None or self._closed:
                return
            self._client = self._consumer._client_class(self._client_cfg)
            self._pump = RequestPump(self._client)
            self._link = CoordinatorLink(self._pump, self._client, self.group_id, GROUP_KEY,
                                         self.cfg["retry_backoff_ms"], self._membership.coordinator_changed)
            self._ended = self._client.start_background(self._run(), f"kwire-group-{self.group_id}")

    def submit(self, node: Optional[int], make: Callable[[Mapping[int, int]], Any],
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
                self.coordinator_dead(node)
            result.set_exception(error)

        def send(f: Future) -> None:
            if f.failed():
                result.set_exception(f.exception())   # type: ignore[arg-type]
                return
            node = f.value
            self.submit(node, make).add_done_callback(lambda r: answered(r, node))

        node = self.coordinator
        if node is None:
            self.lookup_coordinator().add_done_callback(send)
        else:
            self.submit(node, make).add_done_callback(lambda r: answered(r, node))
        return result

    def lookup_coordinator(self) -> Future:
        """The future of the coordinator's node id (one lookup at a time)."""
        self._start()
        assert self._link is not None
        return self._link.lookup()

    @property
    def coordinator(self) -> Optional[int]:
        return None if self._link is None else self._link.node

    def coordinator_dead(self, node: Optional[int]) -> None:
        if self._link is not None and self._link.forget(node):
            self._membership.coordinator_changed(None)

    def metadata(self, topics: Optional[List[str]]) -> Future:
        assert self._client is not None
        client = self._client
        return self.submit(None, lambda v: client.metadata_request(v, topics))

    @property
    def owned(self) -> Set[TopicPartition]:
        return self._owned

    @property
    def pattern(self) -> Optional[Pattern[str]]:
        return self._pattern

    def match_topics(self, topics: Iterable[str]) -> bool:
        matched = self._matching(topics)
        if matched == self._topics:
            return False
        self._topics = matched
        return True

    def lose_partitions(self) -> None:
        if self._owned:
            self._lost_pending = True

    def set_fatal(self, error: BaseException) -> None:
        self._fatal = error

    def _fail(self, error: BaseException) -> None:
        log.error("group %s: %s", self.group_id, error)
        with self._lock:
            self.set_fatal(error)
            self._membership.halt()

    # ======================================================== I/O thread
    def _run(self) -> Steps:
        """The background's turns: the pump's requests, the membership's
        steps (joining, heartbeats), the client's I/O."""
        client, pump = self._client, self._pump
        assert client is not None and pump is not None
        while not self._stop.is_set():
            try:
                now = time.monotonic()
                pump.pump()
                self._membership.drive(now)
                if self._membership.state != STABLE:
                    self.metrics.unstable(now)           # a rebalance under way (kwire.metrics)
                pump.pump()
                yield min(0.1, self._membership.wait_time(now))
            except Exception as e:   # a bug here must surface, not kill the group silently
                if self._stop.is_set():
                    return               # closing: the client may be closed under it
                log.exception("group %s: background thread failed", self.group_id)
                self._fail(KwireError(f"group background thread failed: {e!r}"))
                pump.fail_all(KwireError(f"group background thread failed: {e!r}"))
                return

    def _matching(self, topics: Iterable[str]) -> Set[str]:
        """The topics the subscription's pattern matches (internal topics
        left out when ``exclude_internal_topics``)."""
        pattern = self._pattern
        if pattern is None:
            return set(self._topics)
        internal = self.cfg["exclude_internal_topics"]
        return {t for t in topics if pattern.fullmatch(t) and not (internal and t.startswith("__"))}
