"""``poll(timeout)`` and ``close(timeout)`` keep their bound while the group
coordinator is slow to answer (issue 13, defect 9).

The coordinator is the scripted hostile broker (tests/support/hostile_broker.py)
speaking the group APIs as well: it answers OffsetFetch and OffsetCommit only
after a delay (a connection answers in order, one request at a time, as
Kafka's do). Each ``poll(100)`` must return within :data:`BOUND` meanwhile,
and once the coordinator answers, the consumer goes on from the committed
positions: no record lost, none repeated, partitions being revoked neither
fetched nor returned until their commit is answered, listener callbacks in
order.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest

from kwire.consumer import Consumer, TopicPartition
from kwire.future import KafkaTimeoutError
from kwire.group import RebalanceListener
from kwire.protocol import messages as m
from support.hostile_broker import CLOSE, DEFAULT_VERSIONS, Delay, HostileBroker, Request, records_batch

#: The longest a ``poll(100)`` may take (the aim is 0.1-0.3 s; slack for a loaded test machine).
BOUND = 0.4

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 8, 9, 10, 11, 12, 13, 14
COORDINATOR_LOAD_IN_PROGRESS, REBALANCE_IN_PROGRESS = 14, 27
GROUP_VERSIONS = {OFFSET_COMMIT: (2, 7), OFFSET_FETCH: (1, 7), FIND_COORDINATOR: (0, 3), JOIN_GROUP: (0, 5),
                  HEARTBEAT: (0, 3), LEAVE_GROUP: (0, 3), SYNC_GROUP: (0, 3)}
TOPIC = "t"


class Coordinator:
    """The group APIs for one member on a :class:`HostileBroker`, which is
    its own coordinator. The member leads and its assignment is echoed back,
    unless ``sync_override`` names the partitions to answer instead.
    ``fetch_replies`` / ``commit_replies``: how the next OffsetFetch /
    OffsetCommit requests are answered (a function of the default answer,
    taken in order; then the default at once)."""

    def __init__(self, broker: HostileBroker) -> None:
        self.broker = broker
        self.generation = 0
        self.committed: Dict[Tuple[str, int], int] = {}
        self.commits: List[Dict[Tuple[str, int], int]] = []      # the offsets of each OffsetCommit, in order
        self.rebalance = threading.Event()     # the next Heartbeat answers REBALANCE_IN_PROGRESS
        self.sync_override: Optional[List[int]] = None
        self.fetch_replies: List[Callable[[Any], Any]] = []
        self.commit_replies: List[Callable[[Any], Any]] = []
        self.on_commit: Optional[Callable[[], None]] = None        # runs when an OffsetCommit arrives
        for api, handler in (("FindCoordinator", self._find), ("JoinGroup", self._join), ("SyncGroup", self._sync),
                             ("Heartbeat", self._heartbeat), ("LeaveGroup", self._leave),
                             ("OffsetFetch", self._offset_fetch), ("OffsetCommit", self._offset_commit)):
            broker.on(api, handler)

    def _find(self, req: Request) -> Any:
        b = self.broker
        return m.FindCoordinatorResponse(error_code=0, error_message=None, node_id=b.node_id, host=b.host, port=b.port)

    def _join(self, req: Request) -> Any:
        self.generation += 1
        proto = req.body.protocols[0]
        member = req.body.member_id or "member-1"
        r = m.JoinGroupResponse
        return r(error_code=0, generation_id=self.generation, protocol_name=proto.name, leader=member,
                 member_id=member, members=[r.JoinGroupResponseMember(member_id=member, group_instance_id=None,
                                                                      metadata=bytes(proto.metadata))])

    def _sync(self, req: Request) -> Any:
        from kwire.group import encode_assignment

        if self.sync_override is not None:
            assignment = encode_assignment([(TOPIC, p) for p in self.sync_override])
        else:
            assignment = next(bytes(a.assignment) for a in req.body.assignments if a.member_id == req.body.member_id)
        return m.SyncGroupResponse(error_code=0, assignment=assignment)

    def _heartbeat(self, req: Request) -> Any:
        code = REBALANCE_IN_PROGRESS if self.rebalance.is_set() else 0
        self.rebalance.clear()
        return m.HeartbeatResponse(error_code=code)

    def _leave(self, req: Request) -> Any:
        return m.LeaveGroupResponse(error_code=0, members=[])

    def _offset_fetch(self, req: Request) -> Any:
        r = m.OffsetFetchResponse
        topics = []
        for t in req.body.topics:
            topics.append(r.OffsetFetchResponseTopic(name=t.name, partitions=[
                r.OffsetFetchResponsePartition(partition_index=p, committed_offset=self.committed.get((t.name, p), -1),
                                               committed_leader_epoch=-1, metadata="", error_code=0)
                for p in t.partition_indexes]))
        answer = r(topics=topics, error_code=0)
        reply = self.fetch_replies.pop(0)(answer) if self.fetch_replies else answer
        return reply

    def _offset_commit(self, req: Request) -> Any:
        offsets = {(t.name, p.partition_index): p.committed_offset for t in req.body.topics for p in t.partitions}
        self.commits.append(offsets)
        self.committed.update(offsets)
        if self.on_commit is not None:
            self.on_commit()
        r = m.OffsetCommitResponse
        answer = r(topics=[r.OffsetCommitResponseTopic(name=t.name, partitions=[
            r.OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=0) for p in t.partitions])
            for t in req.body.topics])
        reply = self.commit_replies.pop(0)(answer) if self.commit_replies else answer
        return reply


class Recorder(RebalanceListener):
    def __init__(self, got: List[Tuple[int, int]]) -> None:
        self.got = got
        self.events: List[Tuple[str, List[int], float, int]] = []   # (kind, partitions, when, records returned so far)

    def _note(self, kind: str, tps: List[TopicPartition]) -> None:
        self.events.append((kind, [tp.partition for tp in tps], time.monotonic(), len(self.got)))

    def on_partitions_revoked(self, revoked: List[TopicPartition]) -> None:
        self._note("revoked", revoked)

    def on_partitions_assigned(self, assigned: List[TopicPartition]) -> None:
        self._note("assigned", assigned)

    def on_partitions_lost(self, lost: List[TopicPartition]) -> None:
        self._note("lost", lost)


@pytest.fixture
def broker():
    b = HostileBroker({TOPIC: 2}, versions={**DEFAULT_VERSIONS, **GROUP_VERSIONS}, fetch_wait_cap=0.1)
    b.start()
    try:
        yield b
    finally:
        b.stop()
    assert not b.errors, b.errors


def _fill(broker: HostileBroker, partition: int, start: int, n: int) -> None:
    broker.log(TOPIC, partition).append(records_batch([b"%d-%d" % (partition, i) for i in range(start, start + n)]))


def _consumer(broker: HostileBroker, **cfg: Any) -> Consumer:
    settings = dict(bootstrap_servers=broker.bootstrap, group_id="g", auto_offset_reset="earliest",
                    session_timeout_ms=10000, heartbeat_interval_ms=100, max_poll_interval_ms=10000,
                    retry_backoff_ms=50, fetch_max_wait_ms=100, auto_commit_interval_ms=60000)
    settings.update(cfg)
    return Consumer(**settings)


def _poll_until(c: Consumer, until: Callable[[], bool], got: List[Tuple[int, int]], durations: List[float],
                seconds: float = 10.0) -> None:
    """poll(100) until ``until()``, timing each call; the records as (partition, offset)."""
    deadline = time.monotonic() + seconds
    while not until():
        assert time.monotonic() < deadline, f"not reached in {seconds} s; got {got}"
        start = time.monotonic()
        out = c.poll(100)
        durations.append(time.monotonic() - start)
        for tp, records in out.items():
            got.extend((tp.partition, r.offset) for r in records)


def _two_partitions_in_a_group(broker: HostileBroker, strategy: str
                               ) -> Tuple[Coordinator, List[Tuple[int, int]], List[float], Recorder, Consumer]:
    """10 records in each partition, a scripted coordinator and a consumer
    with ``strategy``: (coordinator, records got, poll durations, listener,
    consumer)."""
    for p in (0, 1):
        _fill(broker, p, 0, 10)
    coord = Coordinator(broker)
    got: List[Tuple[int, int]] = []
    listener = Recorder(got)
    return coord, got, [], listener, _consumer(broker, partition_assignment_strategy=strategy)


def _answer_the_next_commit_late(broker: HostileBroker, coord: Coordinator) -> None:
    """The next OffsetCommit is answered after 2 s; 5 records are written to
    each partition while it is in flight."""
    def more() -> None:
        for p in (0, 1):
            _fill(broker, p, 10, 5)
    coord.on_commit = more
    coord.commit_replies = [lambda answer: Delay(2.0, answer)]


def _no_errors_logged(caplog: Any) -> None:
    bad = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR and r.name.startswith("kwire")]
    assert not bad, bad


def test_poll_keeps_its_bound_while_the_committed_offsets_are_not_answered(broker, caplog):
    """The OffsetFetch of the new assignment's committed offsets fails twice
    (retriable: logged once), then is answered after 2 s. Meanwhile every
    poll(100) returns on time, the partition is neither fetched nor reset by
    auto_offset_reset; then records flow from the committed offset."""
    caplog.set_level(logging.INFO, logger="kwire")
    _fill(broker, 0, 0, 10)
    coord = Coordinator(broker)
    coord.committed[(TOPIC, 0)] = 4
    loading = lambda answer: m.OffsetFetchResponse(topics=[], error_code=COORDINATOR_LOAD_IN_PROGRESS)  # noqa: E731
    coord.fetch_replies = [loading, loading, lambda answer: Delay(2.0, answer)]
    c = _consumer(broker, enable_auto_commit=False)
    try:
        c.subscribe([TOPIC])
        got: List[Tuple[int, int]] = []
        durations: List[float] = []
        _poll_until(c, lambda: len(got) >= 6, got, durations)
        assert got == [(0, o) for o in range(4, 10)]
        answered = broker.received("OffsetFetch")[-1].at + 2.0
        assert len(broker.received("OffsetFetch")) == 3
        assert max(durations) <= BOUND, sorted(durations)[-5:]
        assert len(durations) >= 10          # polled (and returned) repeatedly while the answer was awaited
        # partition 0 never reset by auto_offset_reset (earliest would be 0), never fetched before the answer;
        # partition 1 (nothing committed) is reset once the answer says so
        reset = [(r.at, p.partition_index) for r in broker.received("ListOffsets") for t in r.body.topics
                 for p in t.partitions]
        assert [partition for _, partition in reset] == [1] and reset[0][0] >= answered - 0.05, (answered, reset)
        fetched = [(r.at, p.partition, p.fetch_offset) for r in broker.received("Fetch") for t in r.body.topics
                   for p in t.partitions]
        assert all(offset >= 4 and at >= answered - 0.05 for at, partition, offset in fetched if partition == 0), \
            (answered, fetched)
        failures = [r for r in caplog.records if "OffsetFetch" in r.getMessage() and r.levelno >= logging.WARNING]
        assert len(failures) == 1, [r.getMessage() for r in failures]
        _no_errors_logged(caplog)
    finally:
        c.close(timeout=2)


def test_poll_keeps_its_bound_while_the_commit_before_an_eager_revocation_is_not_answered(broker, caplog):
    """A rebalance: the eager member commits its positions before revoking
    everything, and the coordinator answers that commit after 2 s. Every
    poll(100) returns on time meanwhile; records written meanwhile are not
    returned until the partitions are assigned again (then once each, from
    the committed positions); the listener sees revoked (after the commit
    was answered), then assigned, and the JoinGroup goes after the commit."""
    caplog.set_level(logging.INFO, logger="kwire")
    coord, got, durations, listener, c = _two_partitions_in_a_group(broker, "range")
    try:
        c.subscribe([TOPIC], listener=listener)
        _poll_until(c, lambda: len(got) >= 20, got, durations)
        _answer_the_next_commit_late(broker, coord)
        coord.rebalance.set()
        _poll_until(c, lambda: len(got) >= 30 and len(listener.events) >= 3, got, durations)
        for _ in range(5):                   # nothing more comes (nothing twice)
            start = time.monotonic()
            assert not c.poll(100)
            durations.append(time.monotonic() - start)

        assert max(durations) <= BOUND, sorted(durations)[-5:]
        assert sorted(got) == sorted(set(got)) == [(p, o) for p in (0, 1) for o in range(15)]
        assert coord.commits[0] == {(TOPIC, 0): 10, (TOPIC, 1): 10}
        committed_at = broker.received("OffsetCommit")[0].at + 2.0
        kinds = [(kind, parts) for kind, parts, _, _ in listener.events]
        assert kinds == [("assigned", [0, 1]), ("revoked", [0, 1]), ("assigned", [0, 1])]
        _, _, revoked_at, returned_before = listener.events[1]
        assert revoked_at >= committed_at
        assert returned_before == 20         # nothing of what was written during the commit, before the revocation
        joins = broker.received("JoinGroup")
        assert len(joins) == 2 and joins[1].at >= committed_at
        _no_errors_logged(caplog)
    finally:
        c.close(timeout=2)


def test_poll_keeps_its_bound_while_the_commit_before_a_cooperative_revocation_is_not_answered(broker, caplog):
    """Cooperative: a SyncGroup takes partition 1 away; its commit is
    answered after 2 s. Polls keep their bound, partition 0 keeps flowing
    meanwhile, partition 1 is neither fetched nor returned past its
    committed position; then it is revoked and the member rejoins."""
    caplog.set_level(logging.INFO, logger="kwire")
    coord, got, durations, listener, c = _two_partitions_in_a_group(broker, "cooperative-sticky")
    try:
        c.subscribe([TOPIC], listener=listener)
        _poll_until(c, lambda: len(got) >= 20, got, durations)
        _answer_the_next_commit_late(broker, coord)
        coord.sync_override = [0]
        coord.rebalance.set()
        _poll_until(c, lambda: len(listener.events) >= 4 and len(broker.received("JoinGroup")) >= 3
                    and c.assignment() == [TopicPartition(TOPIC, 0)] and (0, 14) in got, got, durations)

        assert max(durations) <= BOUND, sorted(durations)[-5:]
        assert coord.commits[0] == {(TOPIC, 1): 10}        # only the revoked partition, at what was returned
        committed_at = broker.received("OffsetCommit")[0].at + 2.0
        kinds = [(kind, parts) for kind, parts, _, _ in listener.events]
        # generation 2 revokes 1 and adds nothing; generation 3 (the rejoin after a revocation) adds nothing
        assert kinds == [("assigned", [0, 1]), ("revoked", [1]), ("assigned", []), ("assigned", [])]
        _, _, revoked_at, returned_before = listener.events[1]
        assert revoked_at >= committed_at
        # partition 0 kept flowing while the commit was awaited; partition 1 gave nothing past 9
        assert set(got[20:returned_before]) == {(0, o) for o in range(10, 15)}
        assert sorted(got) == sorted(set(got)) == [(0, o) for o in range(15)] + [(1, o) for o in range(10)]
        _no_errors_logged(caplog)
    finally:
        c.close(timeout=2)


def test_close_keeps_its_timeout_when_the_coordinator_does_not_answer(broker, caplog):
    """close(timeout=1) commits, revokes and leaves within one budget of 1 s
    even when neither the OffsetCommit nor the LeaveGroup is answered."""
    caplog.set_level(logging.INFO, logger="kwire")
    _fill(broker, 0, 0, 10)
    coord = Coordinator(broker)
    got: List[Tuple[int, int]] = []
    c = _consumer(broker)
    c.subscribe([TOPIC])
    try:
        _poll_until(c, lambda: len(got) >= 10, got, [])
    except BaseException:
        c.close(timeout=1)
        raise
    coord.commit_replies = [lambda answer: Delay(5.0, CLOSE)]
    start = time.monotonic()
    c.close(timeout=1.0)
    took = time.monotonic() - start
    assert took <= 1.0 + 0.3, took
    assert broker.received("OffsetCommit")
    _no_errors_logged(caplog)


def test_wait_for_positions_waits_for_the_committed_offsets_within_its_timeout(broker):
    """The hook for Consumer.position: waits for the awaited committed
    offsets up to its timeout, then the partition's position is the
    committed one."""
    _fill(broker, 0, 0, 10)
    coord = Coordinator(broker)
    coord.committed[(TOPIC, 0)] = 7
    coord.fetch_replies = [lambda answer: Delay(1.0, answer)]
    c = _consumer(broker, enable_auto_commit=False)
    tp = TopicPartition(TOPIC, 0)
    try:
        c.subscribe([TOPIC])
        deadline = time.monotonic() + 10
        while len(c.assignment()) != 2:
            assert time.monotonic() < deadline
            c.poll(50)
        start = time.monotonic()
        with pytest.raises(KafkaTimeoutError):
            c._group.wait_for_positions([tp], timeout=0.2)
        assert time.monotonic() - start <= 0.2 + 0.2
        c._group.wait_for_positions([tp], timeout=5)
        assert c._states[tp].position == 7
        assert c.position(tp) == 7
        assert all(p.partition_index != 0 for r in broker.received("ListOffsets") for t in r.body.topics
                   for p in t.partitions)
    finally:
        c.close(timeout=2)
