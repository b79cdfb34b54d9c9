"""Reading from the nearest replica (KIP-392), offline: two nodes of the
hostile broker (:mod:`support.hostile_broker`), node 0 leading the partition
(rack "a"), node 1 its follower (rack "b"), serving the same log; the
consumer's ``client_rack`` is "b".

Why a fake broker: a real single broker cannot name a preferred read
replica (it has no other replica), and the faults below are scripted at a
chosen offset (one error from the follower, its connection cut, its death
while the leader still names it, the metadata dropping it), which a real
cluster gives only by chance. The live case, on a three-broker Apache Kafka
cluster with ``RackAwareReplicaSelector``, is tests/cluster/test_follower_fetch.py.

Each test reads every record exactly once (no offset skipped or repeated
across the switches), says which node served the record bytes, and bounds
its time."""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, List, Optional, Tuple

import pytest

from client.test_consumer_hostile import TXN_COMMITTED, TXN_LOG
from kwire.consumer import Consumer, TopicPartition
from kwire.protocol import messages as m
from kwire.protocol.api_keys import ApiKey, ErrorCode
from support.hostile_broker import CLOSE, DEFAULT_VERSIONS, HostileBroker, Request, records_batch

TOPIC = "t"
TP = TopicPartition(TOPIC, 0)
N = 200          # records, in batches of 10


@contextmanager
def two_nodes(versions: Optional[dict] = None) -> Iterator[Tuple[HostileBroker, HostileBroker]]:
    """Node 0 leads (rack "a") and prefers node 1 (rack "b") for a client
    that names a rack; both serve the same log of N records."""
    leader = HostileBroker({TOPIC: 1}, node_id=0, rack="a", versions=versions, fetch_wait_cap=0.2)
    follower = HostileBroker(node_id=1, rack="b", replica_of=leader, versions=versions, fetch_wait_cap=0.2)
    for base in range(0, N, 10):
        leader.log(TOPIC, 0).append(records_batch([b"v%d" % i for i in range(base, base + 10)]))
    leader.preferred_read_replica = 1
    with leader, follower:
        yield leader, follower


def consumer(leader: HostileBroker, **cfg: Any) -> Consumer:
    cfg = {"client_rack": "b", "auto_offset_reset": "earliest", "fetch_max_wait_ms": 100, "retry_backoff_ms": 50,
           "max_partition_fetch_bytes": 300, **cfg}
    c = Consumer(bootstrap_servers=leader.bootstrap, **cfg)
    c.assign([TP])
    return c


def read(c: Consumer, n: int = N, *, columnar: bool = False, timeout: float = 15.0,
         each: Optional[Callable[[int], None]] = None) -> List[Tuple[int, bytes]]:
    """(offset, value) of the records polled until ``n`` came or ``timeout``
    passed; ``each(count)`` after every poll."""
    got: List[Tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        if columnar:
            for rb in c.poll_columnar(50, max_records=7).values():
                got += zip(rb.column("offset").to_pylist(), rb.column("value").to_pylist())
        else:
            got += [(r.offset, r.value) for recs in c.poll(50, max_records=7).values() for r in recs]
        if each is not None:
            each(len(got))
    return got


def every_record(n: int = N) -> List[Tuple[int, bytes]]:
    return [(i, b"v%d" % i) for i in range(n)]


def fetch_offset(req: Request) -> int:
    return req.body.topics[0].partitions[0].fetch_offset


def said(caplog: Any, text: str) -> List[str]:
    return [r.getMessage() for r in caplog.records
            if r.name.startswith("kwire") and r.levelno >= logging.INFO and text in r.getMessage()]


def fail_once_then_lead(leader: HostileBroker, follower: HostileBroker, reply: Any, at: int, back_at: int) -> dict:
    """The follower answers ``reply`` (or ``reply(request)``) to its first
    Fetch at an offset >= ``at``; the leader then serves the records itself
    (it names no replica, as a real one that no longer prefers the follower)
    until a Fetch at ``back_at`` or beyond, from where it prefers the
    follower again."""
    state = {"failed_at": None, "leader_served": []}

    def on_follower(req: Request) -> Any:
        if state["failed_at"] is None and fetch_offset(req) >= at:
            state["failed_at"] = fetch_offset(req)
            leader.preferred_read_replica = -1
            return reply(req) if callable(reply) else reply
        return None

    def on_leader(req: Request) -> Any:
        if state["failed_at"] is not None and leader.preferred_read_replica < 0:
            if fetch_offset(req) >= back_at:
                leader.preferred_read_replica = 1
            else:
                state["leader_served"].append(fetch_offset(req))
        return None

    follower.on("Fetch", on_follower)
    leader.on("Fetch", on_leader)
    return state


def partition_error(code: int) -> Callable[[Request], Any]:
    def reply(req: Request) -> Any:
        r = m.FetchResponse
        return r(responses=[r.FetchableTopicResponse(topic=t.topic, topic_id=t.topic_id, partitions=[
            r.PartitionData(partition_index=p.partition, error_code=code, high_watermark=-1, records=None)
            for p in t.partitions]) for t in req.body.topics])
    return reply


# ================================================================== tests
@pytest.mark.parametrize("columnar", [False, True])
def test_the_leader_names_the_follower_and_every_record_comes_from_it(caplog, columnar):
    """The leader's first answer names node 1 and carries no records; every
    record then comes from node 1 (the leader serves no record byte), once
    each, in order, through poll() and poll_columnar(); the move is said once.
    Before KIP-392 support the empty answer was dropped and the partition
    never advanced."""
    caplog.set_level(logging.INFO, logger="kwire")
    with two_nodes() as (leader, follower):
        with consumer(leader) as c:
            assert read(c, columnar=columnar) == every_record()
            assert c.position(TP) == N
            assert c._replicas.get(TP, (-1,))[0] == 1
        assert leader.bytes_served == 0 and follower.bytes_served > 0
        assert all(r.body.rack_id == "b" for r in leader.received("Fetch"))
        assert len(follower.received("Fetch")) >= N // 10 // 3      # several fetches (300 bytes a partition)
        assert not follower.received("ListOffsets")                  # positions come from the leader
        assert len(said(caplog, "from node 1 from now on")) == 1
        assert not leader.errors and not follower.errors


def test_without_a_rack_the_leader_serves():
    """No ``client_rack``: the leader names no replica (the consumer sends
    an empty rack_id) and serves every record; nothing goes to node 1."""
    with two_nodes() as (leader, follower):
        with Consumer(bootstrap_servers=leader.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100) as c:
            c.assign([TP])
            assert read(c) == every_record()
            assert c._replicas.get(TP, (-1,))[0] == -1
        assert follower.bytes_served == 0 and not follower.received("Fetch")


@pytest.mark.parametrize("code", [ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REPLICA_NOT_AVAILABLE,
                                  ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
                                  ErrorCode.OFFSET_OUT_OF_RANGE])
def test_an_error_from_the_follower_falls_back_to_the_leader(caplog, code):
    """The follower answers ``code`` at offset 60 or beyond: the partition is
    fetched from the leader at the same offset (which serves 60 to 120), then
    from the follower again once the leader names it. No record skipped or
    repeated. OFFSET_OUT_OF_RANGE from a follower is the follower's (it
    lags): the position is kept, not reset (a reset to earliest would
    repeat 0..59), and no ListOffsets is sent for it, as in Java's client."""
    caplog.set_level(logging.INFO, logger="kwire")
    with two_nodes() as (leader, follower):
        state = fail_once_then_lead(leader, follower, partition_error(code), at=60, back_at=120)
        with consumer(leader) as c:
            assert read(c) == every_record()
            lookups = len(leader.received("ListOffsets"))
        assert state["failed_at"] is not None and state["leader_served"][0] == state["failed_at"]
        assert leader.bytes_served > 0 and follower.bytes_served > 0
        assert lookups == 1                                       # the first position only
        name = {ErrorCode.NOT_LEADER_OR_FOLLOWER: "NotLeaderOrFollower", ErrorCode.REPLICA_NOT_AVAILABLE: "Replica",
                ErrorCode.FENCED_LEADER_EPOCH: "Fenced", ErrorCode.UNKNOWN_LEADER_EPOCH: "UnknownLeaderEpoch",
                ErrorCode.OFFSET_OUT_OF_RANGE: "OffsetOutOfRange"}[code]
        back = said(caplog, "from their leader again")
        assert len(back) == 1 and name in back[0]
        assert len(said(caplog, "from node 1 from now on")) == 2   # moved, and moved back after the leader's turn
        assert not said(caplog, "resetting")


def test_a_follower_that_keeps_failing_is_not_said_again_at_each_turn(caplog):
    """The follower answers REPLICA_NOT_AVAILABLE to every Fetch past offset
    30 while the leader keeps naming it (so it answers without records, as
    a leader naming a replica does): the partition goes to and fro at each
    retry backoff and does not advance, and each of the two moves is said
    (INFO) once, not at every turn. (A fake broker: a real leader stops
    naming a replica its cluster has fenced.)"""
    caplog.set_level(logging.INFO, logger="kwire")
    with two_nodes() as (leader, follower):
        turns = []

        def on_follower(req: Request) -> Any:
            if fetch_offset(req) >= 30:
                turns.append(fetch_offset(req))
                return partition_error(ErrorCode.REPLICA_NOT_AVAILABLE)(req)
            return None
        follower.on("Fetch", on_follower)
        with consumer(leader, retry_backoff_ms=20) as c:
            assert read(c, 30) == every_record(30)
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline:
                assert not c.poll(50)
        assert len(turns) >= 10                                    # many turns back and forth
        assert len(said(caplog, "from their leader again")) == 1
        assert len(said(caplog, "from node 1 from now on")) == 2   # the first move, and the first move back


def test_out_of_range_from_the_follower_with_no_reset_policy_raises_nothing():
    """auto_offset_reset="none": an out-of-range answer from the follower is
    not the position's, so poll raises no PositionOutOfRangeError."""
    with two_nodes() as (leader, follower):
        fail_once_then_lead(leader, follower, partition_error(ErrorCode.OFFSET_OUT_OF_RANGE), at=30, back_at=90)
        c = Consumer(bootstrap_servers=leader.bootstrap, client_rack="b", auto_offset_reset="none",
                     fetch_max_wait_ms=100, retry_backoff_ms=50, max_partition_fetch_bytes=300)
        with c:
            c.assign([TP])
            c.seek(TP, 0)
            assert read(c) == every_record()


def test_a_cut_connection_to_the_follower_falls_back_at_once(caplog):
    """The follower closes the connection instead of answering at offset 80
    or beyond: the fetch fails, the partition goes back to the leader at
    once (no backoff) and on from the same offset, and to the follower
    again once the leader names it."""
    caplog.set_level(logging.INFO, logger="kwire")
    with two_nodes() as (leader, follower):
        state = fail_once_then_lead(leader, follower, CLOSE, at=80, back_at=150)
        with consumer(leader) as c:
            assert read(c) == every_record()
        assert state["leader_served"][0] == state["failed_at"]
        back = said(caplog, "from their leader again")
        assert len(back) == 1 and "the fetch from it failed" in back[0]


def test_a_dead_follower_the_leader_still_names_waits_for_the_cluster_then_reads_the_leader(caplog):
    """The follower dies (its sockets closed, nothing listening) at offset
    100 while the leader goes on naming it, as a real leader does until the
    controller fences the dead broker: the consumer falls back, is sent to
    the follower again, cannot connect and waits (no loop of Fetches to the
    leader meanwhile); once the cluster drops the node (Metadata no longer
    lists it, the leader names no replica) the rest comes from the leader."""
    caplog.set_level(logging.INFO, logger="kwire")
    with two_nodes() as (leader, follower):
        with consumer(leader) as c:
            dead = {}

            def kill(count: int) -> None:
                if count >= 100 and not dead:
                    follower.stop()
                    dead["at"] = (time.monotonic(), len(leader.received("Fetch")))

            got = read(c, 100, each=kill)
            while time.monotonic() - dead["at"][0] < 1.5:
                got += [(r.offset, r.value) for recs in c.poll(50).values() for r in recs]
            stalled = len(leader.received("Fetch")) - dead["at"][1]
            assert stalled <= 10                     # waiting, not asking the leader in a loop
            leader.cluster.remove(follower)          # the controller fenced it: gone from the metadata
            leader.preferred_read_replica = -1       # and no longer a replica the leader may name
            got += read(c, N - len(got))
            assert got == every_record()
        assert leader.bytes_served > 0
        assert said(caplog, "from their leader again")


def test_a_follower_the_metadata_no_longer_lists_is_left_for_the_leader(caplog):
    """A metadata refresh that no longer lists node 1 while the partition
    is fetched from it: the next fetch goes to the leader (and a refresh is
    asked for), as Java's selectReadReplica does."""
    caplog.set_level(logging.INFO, logger="kwire")
    with two_nodes() as (leader, follower):
        with consumer(leader) as c:
            got = read(c, 50)
            assert c._replicas.get(TP, (-1,))[0] == 1
            leader.cluster.remove(follower)
            leader.preferred_read_replica = -1
            c._client.refresh_metadata(timeout=5)
            got += read(c, N - len(got))
            assert got == every_record()
            assert c._replicas.get(TP, (-1,))[0] == -1
        assert leader.bytes_served > 0
        back = said(caplog, "from their leader again")
        assert len(back) == 1 and "no longer lists" in back[0]


def test_the_preference_expires_after_metadata_max_age_and_the_leader_is_asked_again(caplog):
    """``metadata_max_age_ms`` 300: the follower's turn expires, the next
    fetch goes to the leader, which names it again; the records come from
    the follower throughout, once each, and the move is said once (an
    expiry that changes nothing is not news)."""
    caplog.set_level(logging.INFO, logger="kwire")
    with two_nodes() as (leader, follower):
        with consumer(leader, metadata_max_age_ms=300) as c:
            got = read(c, each=lambda n: time.sleep(0.04))     # about 1.2 s in all
            assert got == every_record()
            asked_leader = len(leader.received("Fetch"))
        assert asked_leader >= 3                     # the first, and after each expiry
        assert leader.bytes_served == 0
        assert len(said(caplog, "from node 1 from now on")) == 1
        assert not said(caplog, "from their leader again")


@pytest.mark.parametrize("columnar", [False, True])
def test_read_committed_through_the_follower_and_a_switch(columnar):
    """read_committed over a log of two transactional producers, one
    aborting: the follower lists the aborted transactions as the leader
    does; the follower fails once in the middle (the leader serves some
    batches, an aborted transaction spanning the switch) and is used again.
    The committed records come once each, the aborted ones never."""
    with two_nodes() as (leader, follower):
        plog = leader.log(TOPIC, 0)
        plog.entries.clear()
        for b in TXN_LOG:
            plog.append(b, keep_offsets=True)
        plog.aborted = [(1, 0, 12)]
        end = plog.end_offset
        state = fail_once_then_lead(leader, follower, partition_error(ErrorCode.NOT_LEADER_OR_FOLLOWER),
                                    at=3, back_at=13)
        with consumer(leader, isolation_level="read_committed", max_partition_fetch_bytes=1) as c:
            offsets: List[int] = []
            deadline = time.monotonic() + 15
            while c.position(TP) < end and time.monotonic() < deadline:
                if columnar:
                    offsets += [o for rb in c.poll_columnar(50).values() for o in rb.column("offset").to_pylist()]
                else:
                    offsets += [r.offset for recs in c.poll(50).values() for r in recs]
            assert offsets == TXN_COMMITTED
            assert c.position(TP) == end
        assert state["leader_served"] and leader.bytes_served > 0 and follower.bytes_served > 0
        assert all(r.body.isolation_level == 1 for r in follower.received("Fetch"))


def test_positions_are_looked_up_and_checked_at_the_leader():
    """The first position (ListOffsets) and the check after a leader epoch
    change (OffsetForLeaderEpoch, KIP-320) go to the leader, never to the
    follower the records come from."""
    versions = {**DEFAULT_VERSIONS, ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4)}
    with two_nodes(versions) as (leader, follower):
        epoch = {"now": 0}

        def metadata(req: Request) -> Any:
            resp = req.default()
            for t in resp.topics:
                for p in t.partitions:
                    p.leader_epoch = epoch["now"]
            return resp

        def end_of_epoch(req: Request) -> Any:
            r = m.OffsetForLeaderEpochResponse
            return r(topics=[r.OffsetForLeaderTopicResult(topic=t.topic, partitions=[
                r.EpochEndOffset(partition=p.partition, leader_epoch=p.leader_epoch, end_offset=N)
                for p in t.partitions]) for t in req.body.topics])

        for node in (leader, follower):
            node.on("Metadata", metadata)
        leader.on("OffsetForLeaderEpoch", end_of_epoch)
        follower.on("OffsetForLeaderEpoch", CLOSE)
        with consumer(leader) as c:
            got = read(c, 80)
            epoch["now"] = 1
            c._client.refresh_metadata(timeout=5)
            got += read(c, N - len(got))
            assert got == every_record()
            assert c._states[TP].epoch == 1
        assert len(leader.received("OffsetForLeaderEpoch")) == 1 and leader.received("ListOffsets")
        assert not follower.received("OffsetForLeaderEpoch") and not follower.received("ListOffsets")
        assert leader.bytes_served == 0
