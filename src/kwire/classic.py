"""The classic consumer group protocol (``group.protocol=classic`` in
Kafka's clients): a member's JoinGroup / SyncGroup exchange, the leader's
assignment with the configured assignors (:mod:`kwire.assignors`),
Heartbeat, the generation and member id errors and what they trigger,
LeaveGroup, and the ``consumer`` embedded protocol. :class:`ClassicMembership`
is the :class:`kwire.membership.Membership` that
:class:`kwire.group.GroupCoordinator` drives; what every member does
whatever the protocol (commits, the rebalance listener, the handover of
partitions, the background thread) is :mod:`kwire.group`'s.

The coordinator's background thread runs the JoinGroup / SyncGroup
exchange and sends a Heartbeat every ``heartbeat_interval_ms`` while the
member is in a stable group. Because the heartbeat thread does not wait for
the application, slow processing does not evict a live member;
``max_poll_interval_ms`` is checked separately: a member that does not call
``poll()`` for that long leaves the group (a dynamic member sends
LeaveGroup) and loses its partitions, as in Kafka's clients.

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
someone else: they are reported lost (``on_partitions_lost``), and nothing
is committed.

While stable, every ``metadata_max_age_ms`` a pattern subscription is
matched again and the leader compares the partition counts it assigned
from with the cluster's: a change means a rejoin.

Members speak the standard ``consumer`` embedded protocol
(ConsumerProtocolSubscription / ConsumerProtocolAssignment), so they share a
group with librdkafka, Java, kafka-python and aiokafka members.
"""

from __future__ import annotations

import logging
import math
import struct
import threading
import time
from typing import Any, Dict, FrozenSet, Iterable, List, Mapping, Optional, Pattern, Sequence, Set, Tuple

from kwire import protocol
from kwire.assignors import COOPERATIVE, EAGER, Assignor, MemberSubscription, assignors_from_config
from kwire.client import NoBrokersAvailableError
from kwire.commit import grouped_partitions
from kwire.config import rebalance_timeout_ms
from kwire.coordinator import COORDINATOR_ERRORS
from kwire.errors import KwireError, ProtocolError
from kwire.future import Future, KafkaTimeoutError
from kwire.membership import JOINING, STABLE, UNJOINED, AssignmentChange, HostedMembership, MembershipHost
from kwire.net import ConnectionLostError
from kwire.protocol.api_keys import ApiKey, ErrorCode
from kwire.types import TopicPartition

__all__ = [
    "ClassicMembership",
    "PROTOCOL_TYPE",
    "leave_group_request",
    "encode_subscription",
    "decode_subscription",
    "encode_assignment",
    "decode_assignment",
    "partition_racks",
]

log = logging.getLogger("kwire.group")     # the logger these said their lines with before this module

PROTOCOL_TYPE = "consumer"
_I16 = struct.Struct(">h")


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


def partition_racks(response: Any, topics: Iterable[str]) -> Dict[TopicPartition, FrozenSet[str]]:
    """The racks of each partition's replicas (offline ones too, as Java's
    rack-aware assignors count them) of ``topics`` in a Metadata response."""
    racks = {b.node_id: b.rack for b in response.brokers or () if b.rack}
    wanted = set(topics)
    return {TopicPartition(t.name, p.partition_index): frozenset(racks[r] for r in p.replica_nodes or () if r in racks)
            for t in response.topics or () if t.name in wanted and not t.error_code
            for p in t.partitions or ()}


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


# ------------------------------------------------------- the membership
class ClassicMembership(HostedMembership):
    """The classic protocol's membership of one consumer (see the module
    docstring), driven by its :class:`kwire.group.GroupCoordinator`
    (``host``) as :class:`kwire.membership.Membership` says. ``lock`` is
    the coordinator's, guarding the membership and the subscription
    together."""

    def __init__(self, host: MembershipHost, lock: threading.RLock) -> None:
        super().__init__(host, lock)
        cfg = self.cfg
        self._assignors: List[Assignor] = assignors_from_config(cfg["partition_assignment_strategy"])
        self.rebalance_protocol = (COOPERATIVE if all(COOPERATIVE in a.protocols for a in self._assignors)
                                   else EAGER)
        if cfg["heartbeat_interval_ms"] >= cfg["session_timeout_ms"]:
            raise KwireError("heartbeat_interval_ms must be lower than session_timeout_ms")
        # membership (guarded by _lock)
        self.generation = -1
        self.member_id = ""
        self.leader_id = ""
        self.protocol_name: Optional[str] = None
        self.state = UNJOINED
        self._need_rejoin = False
        self._rejoin_reason = ""
        self._pending_assignment: Optional[Tuple[int, List[TopicPartition]]] = None
        # join progress (I/O thread)
        self._joining_step: Optional[str] = None     # "find", "join", "metadata", "sync" while in flight
        self._join_retry_at = 0.0
        self._assigned_snapshot: Dict[str, int] = {}  # leader: partition counts it assigned from
        # leader with a client_rack: the partitions' replica racks it assigned from (Java rejoins on a change)
        self._assigned_racks: Dict[TopicPartition, FrozenSet[str]] = {}
        self._group_topics: Set[str] = set()
        # liveness (I/O thread)
        now = time.monotonic()
        self._last_heartbeat_ok = now
        self._next_heartbeat = now
        self._heartbeat_in_flight = False
        self._metadata_check_at = now
        self._metadata_in_flight = False
        self._metadata_misses = 0                     # checks in a row with a subscribed topic unassignable

    # ================================================ Membership, app thread
    def next_change(self) -> Optional[AssignmentChange]:
        with self._lock:
            pending, self._pending_assignment = self._pending_assignment, None
        if pending is not None:
            return self._apply(pending[1])
        with self._lock:
            start_join = self._need_rejoin and self.state != JOINING and self._pending_assignment is None
        if start_join:
            return self._prepare_join()
        return None

    def handed_back(self, change: AssignmentChange) -> None:
        if change.added is None:
            with self._lock:
                self._need_rejoin = False
                self.state = JOINING
                self._join_retry_at = 0.0
        elif change.revoked and self.rebalance_protocol == COOPERATIVE:
            with self._lock:
                self.rejoin(f"revoked {len(change.revoked)} partition(s) for their new owners")

    def subscription_changed(self) -> None:
        self.rejoin("subscription changed")
        if self._host.pattern is not None:
            self._metadata_check_at = 0.0

    def leave(self, reason: str, deadline: float) -> Optional[Future]:
        with self._lock:
            member, node = self.member_id, self._host.coordinator
            dynamic = self.group_instance_id is None
            self.reset(reason, member_unknown=True, lost=False, rejoin=False)
            self.state = UNJOINED
            self._need_rejoin = False
            self._pending_assignment = None
        if dynamic and member and node is not None:
            return self._send_leave(node, member, reason, max(0.0, deadline - time.monotonic()))
        return None

    def coordinator_changed(self, node: Optional[int]) -> None:
        with self._lock:
            if node is not None:
                self._last_heartbeat_ok = time.monotonic()
                self._next_heartbeat = 0.0
            else:
                self._heartbeat_in_flight = False

    # ================================================= Membership, I/O thread
    def drive(self, now: float) -> None:
        self._drive_join(now)
        self._heartbeat(now)
        self._check_metadata(now)

    def wait_time(self, now: float) -> float:
        if self.state == STABLE and not self._heartbeat_in_flight:
            return max(0.0, self._next_heartbeat - now)
        return math.inf

    # ====================================================== rebalance steps
    def _prepare_join(self) -> AssignmentChange:
        """Before a JoinGroup: eager members commit and revoke everything;
        cooperative ones revoke only what they no longer subscribe to. The
        JoinGroup goes once that is done."""
        owned = self._host.owned
        if self.rebalance_protocol == EAGER:
            return AssignmentChange(set(owned), None)
        wanted = self._host.subscription()
        return AssignmentChange({tp for tp in owned if tp.topic not in wanted}, None)

    def _apply(self, assigned: List[TopicPartition]) -> AssignmentChange:
        """Take in the assignment of a completed SyncGroup: cooperative
        members first revoke what it takes away."""
        new = set(assigned)
        owned = self._host.owned
        if self.rebalance_protocol == COOPERATIVE:
            return AssignmentChange(owned - new, new - owned)
        return AssignmentChange(owned - new, new)    # none: eager members revoke before joining

    def rejoin(self, reason: str) -> None:
        """(lock held)"""
        if not self._need_rejoin:
            log.info("group %s: rejoining: %s", self.group_id, reason)
        self._need_rejoin = True
        self._rejoin_reason = reason

    def enforce_rebalance(self, reason: str) -> None:
        """(lock held) Rejoin, the JoinGroup carrying ``reason``."""
        self.rejoin(reason)

    def reset(self, reason: str, member_unknown: bool = False, lost: bool = True, rejoin: bool = True) -> None:
        """The member's generation is void (lock held): its partitions are
        lost (reported at the next poll), and it rejoins."""
        log.info("group %s: generation %s of member %s ended: %s", self.group_id, self.generation,
                 self.member_id, reason)
        self.generation = -1
        if member_unknown:
            self.member_id = ""
        if lost:
            self._host.lose_partitions()
        if self.state == STABLE:
            self.state = UNJOINED
        if rejoin:
            self.rejoin(reason)

    def _send_leave(self, node: int, member: str, reason: str, timeout: float) -> Future:
        return self._send_leave_request(node, lambda v: leave_group_request(v, self.group_id, member, reason), timeout,
                                 "LeaveGroup", "group %s: member %s left (%s)", self.group_id, member, reason)

    # ----------------------------------------------------- join / sync
    def _drive_join(self, now: float) -> None:
        with self._lock:
            if self.state != JOINING or self._joining_step is not None or now < self._join_retry_at:
                return
            node = self._host.coordinator
            if node is None:
                self._joining_step = "find"
        if node is None:
            fut = self._host.lookup_coordinator()

            def found(f: Future) -> None:
                with self._lock:
                    self._joining_step = None
                    if f.failed():
                        self._join_retry_at = time.monotonic() + self.cfg["retry_backoff_ms"] / 1000.0
                if f.failed() and not getattr(f.exception(), "retriable", True):
                    self._host.set_fatal(f.exception())   # GROUP_AUTHORIZATION_FAILED: raised by poll, not looked up again

            fut.add_done_callback(found)
            return
        if self._host.pattern is None:
            self._send_join(node)
            return
        # a pattern: match it against the cluster's topics now, then join with the matches
        with self._lock:
            self._joining_step = "join"

        def matched(f: Future) -> None:
            if f.failed():
                self._join_failed(node, f.exception())   # type: ignore[arg-type]
                return
            with self._lock:
                self._host.match_topics({t.name: len(t.partitions) for t in f.value.topics
                                         if t.name and not t.error_code})
            self._send_join(node)

        self._host.metadata(None).add_done_callback(matched)

    def _subscription_bytes(self, assignor: Assignor) -> bytes:
        with self._lock:
            topics = sorted(self._host.subscription())
            owned = sorted(self._host.owned) if self.generation >= 0 else []
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
                       rebalance_timeout_ms=rebalance_timeout_ms(self.cfg), member_id=member,
                       group_instance_id=self.group_instance_id, protocol_type=PROTOCOL_TYPE, protocols=protocols,
                       reason=(reason or None) if v.get(ApiKey.JOIN_GROUP, 0) >= 8 else None)

        log.debug("group %s: JoinGroup as %r", self.group_id, member or "(new member)")
        # JoinGroup may wait a whole rebalance (up to the rebalance timeout) for its answer; as Kafka's client
        wait = max(self.cfg["request_timeout_ms"], rebalance_timeout_ms(self.cfg) + 5000) / 1000.0
        self._host.submit(node, make, response_timeout=wait).add_done_callback(lambda f: self._on_join(node, f))

    def _join_failed(self, node: int, error: BaseException, *, retry_in: Optional[float] = None) -> None:
        """A step of the join failed (lock not held): retry, or fail for good."""
        code = getattr(error, "code", None)
        with self._lock:
            self._joining_step = None
            if isinstance(error, (ConnectionLostError, NoBrokersAvailableError)) or code in COORDINATOR_ERRORS:
                self._host.coordinator_dead(node)
            elif code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
                self.reset(str(error), member_unknown=code == ErrorCode.UNKNOWN_MEMBER_ID)
                self.state = JOINING
            elif code == ErrorCode.REBALANCE_IN_PROGRESS:
                pass
            elif not getattr(error, "retriable", False) and not isinstance(error, KafkaTimeoutError):
                self._host.set_fatal(error)
                self.state = UNJOINED
                log.error("group %s: cannot join: %s", self.group_id, error)
                return
            delay = self.cfg["retry_backoff_ms"] / 1000.0 if retry_in is None else retry_in
            self._join_retry_at = time.monotonic() + delay
        self._say_failure("join", error, "group %s: join step failed (%s); retrying", self.group_id, error)

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

        def got_metadata(f: Future) -> None:
            if f.failed():
                self._join_failed(node, f.exception())   # type: ignore[arg-type]
                return
            wanted = set(topics)
            counts = {t.name: len(t.partitions) for t in f.value.topics
                      if t.name in wanted and not t.error_code and t.partitions}
            racks = partition_racks(f.value, topics)
            try:
                plan = assignor.assign_partitions(counts, members, racks)
            except Exception as e:
                log.exception("group %s: assignor %s failed", self.group_id, assignor.name)
                self._join_failed(node, KwireError(f"assignor {assignor.name} failed: {e!r}"))
                return
            with self._lock:
                self._assigned_snapshot = counts
                self._assigned_racks = racks if self.cfg["client_rack"] else {}
                self._group_topics = set(topics)
            log.info("group %s: leader assigned with %s: %s", self.group_id, assignor.name,
                     {m: len(tps) for m, tps in plan.items()})
            cls = protocol.message("SyncGroupRequest")
            assignments = [cls.SyncGroupRequestAssignment(member_id=m, assignment=encode_assignment(tps))
                           for m, tps in plan.items()]
            self._send_sync(node, resp.generation_id, resp.member_id, resp.protocol_name, assignments)

        self._host.metadata(topics).add_done_callback(got_metadata)

    def _send_sync(self, node: int, generation: int, member: str, protocol_name: str, assignments: List[Any]) -> None:
        cls = protocol.message("SyncGroupRequest")

        def make(v: Mapping[int, int]) -> Any:
            named = v.get(ApiKey.SYNC_GROUP, 0) >= 5
            return cls(group_id=self.group_id, generation_id=generation, member_id=member,
                       group_instance_id=self.group_instance_id, protocol_type=PROTOCOL_TYPE if named else None,
                       protocol_name=protocol_name if named else None, assignments=assignments)

        self._host.submit(node, make).add_done_callback(lambda f: self._on_sync(node, generation, f))

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
        self._step_succeeded("join")
        with self._lock:
            self._joining_step = None
            if self.state != JOINING or self.generation != generation:
                return      # the member left or rejoined meanwhile
            self.state = STABLE
            self._pending_assignment = (generation, assigned)
            self._last_heartbeat_ok = now
            self._next_heartbeat = now + self.cfg["heartbeat_interval_ms"] / 1000.0
            self._metadata_misses = 0
            self._metadata_check_at = now + self._metadata_check_in()
        log.debug("group %s: generation %s assignment %s", self.group_id, generation, assigned)
        self._host.wake_consumer(fut)          # a poll takes it in now

    # --------------------------------------------------------- liveness
    def _heartbeat(self, now: float) -> None:
        with self._lock:
            if self.state != STABLE:
                return
            if self._poll_overdue(now):
                self._poll_timeout_expired()
                return
            node = self._host.coordinator
            if node is None:
                self._host.lookup_coordinator()
                # not due again before a backoff (wait_time would be 0: a busy loop until the lookup answers)
                self._next_heartbeat = max(self._next_heartbeat, now + self.cfg["retry_backoff_ms"] / 1000.0)
                return
            if now - self._last_heartbeat_ok > self.cfg["session_timeout_ms"] / 1000.0:
                self._host.coordinator_dead(node)
                return
            if self._heartbeat_in_flight or now < self._next_heartbeat:
                return
            self._heartbeat_in_flight = True
            self._next_heartbeat = now + self.cfg["heartbeat_interval_ms"] / 1000.0
            generation, member = self.generation, self.member_id
        req = protocol.message("HeartbeatRequest")(group_id=self.group_id, generation_id=generation,
                                                   member_id=member, group_instance_id=self.group_instance_id)
        self._host.submit(node, lambda v: req).add_done_callback(lambda f: self._on_heartbeat(node, generation, f))

    def _on_heartbeat(self, node: int, generation: int, fut: Future) -> None:
        with self._lock:
            self._heartbeat_in_flight = False
            if fut.failed():
                log.debug("group %s: heartbeat failed: %s", self.group_id, fut.exception())
                if isinstance(fut.exception(), (ConnectionLostError, NoBrokersAvailableError)):
                    self._host.coordinator_dead(node)
                return
            if self.generation != generation:
                return
            code = fut.value.error_code
            if code == ErrorCode.NONE:
                self._last_heartbeat_ok = time.monotonic()
                self._step_succeeded("heartbeat")
            elif code == ErrorCode.REBALANCE_IN_PROGRESS:
                self._last_heartbeat_ok = time.monotonic()
                self.rejoin("the group is rebalancing")
            elif code in (ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID):
                self.reset(f"heartbeat: {protocol.error_for(code, api='Heartbeat')}",
                           member_unknown=code == ErrorCode.UNKNOWN_MEMBER_ID)
            elif code == ErrorCode.FENCED_INSTANCE_ID:
                self.reset("another member uses this group_instance_id")
                self._host.set_fatal(protocol.error_for(code, api="Heartbeat",
                                                        message=f"group_instance_id {self.group_instance_id!r} is "
                                                        "in use by another member"))
            elif code in COORDINATOR_ERRORS:
                self._host.coordinator_dead(node)
            else:
                err = protocol.error_for(code, api="Heartbeat")
                if not getattr(err, "retriable", False):
                    self._host.set_fatal(err)
                self._say_failure("heartbeat", err, "group %s: heartbeat: %s", self.group_id, err)

    def _poll_timeout_expired(self) -> None:
        """(lock held) The application did not poll within
        max_poll_interval_ms: leave so the group can move on without it."""
        member, node = self.member_id, self._host.coordinator
        if self.group_instance_id is None and member and node is not None:
            self._host.submit(node, lambda v: leave_group_request(v, self.group_id, member,
                                                                  "consumer poll timeout has expired"))
        self.reset("max_poll_interval_ms passed without a poll", member_unknown=True)

    # --------------------------------------------------------- metadata
    def _check_metadata(self, now: float) -> None:
        """Every metadata_max_age_ms while stable: a pattern's matches and
        (leader) the partition counts the assignment was made from; a change
        means a rejoin."""
        with self._lock:
            if self.state != STABLE or self._metadata_in_flight or now < self._metadata_check_at:
                return
            pattern = self._host.pattern
            leader = self.member_id == self.leader_id and bool(self.member_id)
            if pattern is None and not leader:
                return
            self._metadata_in_flight = True
            self._metadata_check_at = now + self._metadata_check_in()
            topics = None if pattern is not None else sorted(self._group_topics)

        def done(f: Future) -> None:
            with self._lock:
                self._metadata_in_flight = False
                if f.failed() or self.state != STABLE:
                    return
                counts = {t.name: len(t.partitions) for t in f.value.topics if t.name and not t.error_code}
                racks = partition_racks(f.value, self._group_topics) if self._assigned_racks else {}
                self._take_metadata(counts, pattern, leader, racks)

        self._host.metadata(topics).add_done_callback(done)

    def _metadata_check_in(self) -> float:
        """(lock held) Seconds to the next metadata check: ``metadata_max_age_ms``;
        but while the leader's assignment lacks a subscribed topic (it had no
        partitions then: being auto-created, or not there yet), soon:
        ``retry_backoff_ms``, doubled at each check in a row that still
        lacks it, up to ``retry_backoff_max_ms``, as a refresh after a topic
        error is. (Java's leader compares each metadata update with the one
        it assigned from.) Without this, a group that joined while its topic
        was being created had no partitions for ``metadata_max_age_ms``."""
        if self.member_id and self.member_id == self.leader_id and self._group_topics - set(self._assigned_snapshot):
            self._metadata_misses += 1
            first = self.cfg["retry_backoff_ms"] / 1000.0
            top = max(first, self.cfg["retry_backoff_max_ms"] / 1000.0)
            return min(top, first * 2 ** min(self._metadata_misses - 1, 32))
        self._metadata_misses = 0
        return self.cfg["metadata_max_age_ms"] / 1000.0

    def _take_metadata(self, counts: Mapping[str, int], pattern: Optional[Pattern[str]], leader: bool,
                       racks: Mapping[TopicPartition, FrozenSet[str]]) -> None:
        """(lock held) ``racks``: the group topics' partition racks when the
        leader assigned rack-aware from some."""
        if pattern is not None:
            if self._host.match_topics(counts):
                self.rejoin(f"the pattern now matches {len(self._host.subscription())} topic(s)")
                return
        if leader:
            now_counts = {t: counts[t] for t in self._group_topics if t in counts}
            if now_counts != self._assigned_snapshot:
                self.rejoin("the subscribed topics' partitions changed")
            elif racks and racks != self._assigned_racks:
                self.rejoin("the racks of the subscribed topics' replicas changed")

