"""Reading from the nearest replica (KIP-392), live: the three-node Apache
Kafka cluster of tests/support/kafka_cluster.py (racks rack-a/b/c,
``replica.selector.class=RackAwareReplicaSelector``), a topic replicated
three times, and a consumer whose ``client_rack`` is the rack of one of the
partition's followers.

- every record is read exactly once, and the record bytes come from that
  follower (the leader's answers carry none: it names the follower);
- the follower killed (SIGKILL) in the middle: the consumer falls back to
  the leader (once the cluster has fenced the dead node, the leader no
  longer names it) and reads on, without a gap or a repeat;
- read_committed through ``poll_columnar``: the follower lists the aborted
  transactions as the leader does; the committed records once each.

Which node served the bytes is counted on kwire's side: every Fetch answer's
record bytes, by the node it was sent to (:func:`_count_served`). The
offline cases (each error from the follower, the metadata dropping it, the
expiry) are tests/client/test_follower_fetch.py.

The same racks carry rack-aware assignment (KIP-881): a mixed group of kwire
and Java consumers, one per rack, each ends with its rack's partitions; a
KIP-848 member's rack reaches the coordinator. ``kwire reassign-partitions``
moves a replica between the nodes here too."""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import threading
import time
import uuid
from typing import Any, Dict, List, Tuple

import pytest

from kwire.admin import NewTopic
from kwire.consumer import Consumer, TopicPartition
from kwire.producer import Producer

pytestmark = [pytest.mark.kafka, pytest.mark.cluster]

N = 20_000


def _produce(cluster, topic: str, values) -> None:
    with Producer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=5) as prod:
        for i in values:
            prod.send(topic, b"%d" % i, partition=0)
        prod.flush(30)


def _transactions(cluster, topic: str) -> List[bytes]:
    """20 transactions of 50 records, every third aborted; returns the
    committed values in order."""
    committed: List[bytes] = []
    with Producer(bootstrap_servers=cluster.bootstrap, transactional_id=f"kip392-{uuid.uuid4().hex[:6]}",
                  linger_ms=1) as prod:
        prod.init_transactions(30)
        for txn in range(20):
            prod.begin_transaction()
            values = [b"%d-%d" % (txn, i) for i in range(50)]
            for v in values:
                prod.send(topic, v, partition=0)
            if txn % 3 == 1:
                prod.abort_transaction(30)
            else:
                prod.commit_transaction(30)
                committed += values
    return committed


def _count_served(c: Consumer) -> Dict[int, int]:
    """Record bytes of the Fetch answers, by the node that sent them."""
    served: Dict[int, int] = collections.Counter()
    send = c._client.send

    def counting(node: int, request: Any, *args: Any, **kwargs: Any) -> Any:
        fut = send(node, request, *args, **kwargs)
        if type(request).__name__ == "FetchRequest":
            def count(f: Any) -> None:
                if not f.failed():
                    served[node] += sum(len(p.records or b"") for t in f.value.responses for p in t.partitions)
            fut.add_done_callback(count)
        return fut

    c._client.send = counting
    return served


def _read(c: Consumer, tp: TopicPartition, n: int, timeout: float) -> List[Tuple[int, bytes]]:
    got: List[Tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got += [(r.offset, r.value) for r in c.poll(200).get(tp, [])]
    return got


def _every(start: int, end: int) -> List[Tuple[int, bytes]]:
    return [(i, b"%d" % i) for i in range(start, end)]


def _setup(cluster, caplog, fill: Any = None, **cfg: Any) -> Tuple[TopicPartition, int, int, Consumer, Dict[int, int]]:
    """A topic of one partition on all three nodes, written by ``fill(topic)``
    (default: N records); its leader, a follower, a consumer of it in that
    follower's rack and its count of the record bytes each node served."""
    caplog.set_level(logging.INFO, logger="kwire")
    topic = f"kip392-{uuid.uuid4().hex[:8]}"
    with cluster.admin() as a:
        a.create_topics([NewTopic(topic, 1, 3)])
    cluster.wait_until_isr(topic, 0, 3, timeout=30)
    (fill or (lambda t: _produce(cluster, t, range(N))))(topic)
    cluster.wait_until_isr(topic, 0, 3, timeout=30)
    p = cluster.partitions(topic)[0]
    follower = next(n for n in sorted(p.replicas) if n != p.leader)
    tp = TopicPartition(topic, 0)
    c = Consumer(bootstrap_servers=cluster.bootstrap, client_rack=cluster.broker(follower).rack,
                 auto_offset_reset="earliest", max_partition_fetch_bytes=64 * 1024, fetch_max_wait_ms=200,
                 reconnect_backoff_max_ms=500, **cfg)
    c.assign([tp])
    return tp, p.leader, follower, c, _count_served(c)


def test_records_come_from_the_follower_in_the_client_rack(kafka_cluster, caplog):
    tp, leader, follower, c, served = _setup(kafka_cluster, caplog)
    with c:
        assert _read(c, tp, N, 60) == _every(0, N)
        assert c._replicas.get(tp, (-1,))[0] == follower
    assert served[follower] > 0 and served[leader] == 0, dict(served)
    assert [m for m in caplog.messages if f"fetched from node {follower} from now on" in m]


def test_the_follower_killed_falls_back_to_the_leader_without_a_gap(kafka_cluster, caplog):
    tp, leader, follower, c, served = _setup(kafka_cluster, caplog)
    with c:
        got = _read(c, tp, N // 2, 60)
        assert served[follower] > 0 and served[leader] == 0, dict(served)
        kafka_cluster.broker(follower).kill()
        t0 = time.monotonic()
        _produce(kafka_cluster, tp.topic, range(N, N + 1000))          # more while the follower is dead
        got += _read(c, tp, N + 1000 - len(got), 90)
        took = time.monotonic() - t0
        assert got == _every(0, N + 1000)
        assert c._replicas.get(tp, (-1,))[0] == -1
    assert served[leader] > 0, dict(served)
    assert [m for m in caplog.messages if "from their leader again" in m]
    print(f"follower {follower} killed: the rest read from leader {leader} within {took:.1f} s")


def test_read_committed_and_columnar_through_the_follower(kafka_cluster, caplog):
    """The follower lists the aborted transactions as the leader does: a
    read_committed consumer in its rack, polling columns, gets the committed
    records once each, none of the aborted ones, all bytes from the follower."""
    committed: List[bytes] = []
    tp, leader, follower, c, served = _setup(kafka_cluster, caplog, lambda t: committed.extend(
        _transactions(kafka_cluster, t)), isolation_level="read_committed")
    with c:
        got: List[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < len(committed) and time.monotonic() < deadline:
            rb = c.poll_columnar(200).get(tp)
            if rb is not None:
                got += rb.column("value").to_pylist()
        assert got == committed
        assert c.position(tp) == c.end_offsets([tp], timeout=10)[tp]     # past the last marker
    assert served[follower] > 0 and served[leader] == 0, dict(served)


# ------------------------------------------------ rack-aware assignment (KIP-881)
class _KwireMember:
    """A kwire Consumer in a group, polling in a thread of its own; its
    assignment as of its last poll."""

    def __init__(self, cluster, group: str, topic: str, assignor: str, rack: str, **cfg: Any) -> None:
        self.name = f"kwire-{rack}"
        self.consumer = Consumer(bootstrap_servers=cluster.bootstrap, group_id=group, client_id=self.name,
                                 client_rack=rack, partition_assignment_strategy=[assignor],
                                 session_timeout_ms=10000, heartbeat_interval_ms=500, **cfg)
        self.consumer.subscribe([topic])
        self.assignment: set = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.consumer.poll(100)
            self.assignment = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.consumer.close()


class _AioMember:
    """The same as :class:`_KwireMember` with kwire.aio's consumer: an
    ``AsyncConsumer`` on an event loop of its own thread, awaiting ``getmany``."""

    def __init__(self, cluster, group: str, topic: str, assignor: str, rack: str, **cfg: Any) -> None:
        self.name = f"kwire-{rack}"
        self.assignment: set = set()
        self._args = dict(bootstrap_servers=cluster.bootstrap, group_id=group, client_id=f"aio-{rack}",
                          client_rack=rack, partition_assignment_strategy=[assignor],
                          session_timeout_ms=10000, heartbeat_interval_ms=500, **cfg)
        self._topic = topic
        self._stop = threading.Event()
        self.error: Any = None
        self._thread = threading.Thread(target=asyncio.run, args=(self._run(),), name=f"aio-{rack}", daemon=True)
        self._thread.start()

    async def _run(self) -> None:
        from kwire.aio import AsyncConsumer

        try:
            async with AsyncConsumer(**self._args) as c:
                c.subscribe([self._topic])
                while not self._stop.is_set():
                    await c.getmany(100)
                    self.assignment = {(tp.topic, tp.partition) for tp in c.assignment()}
        except BaseException as e:        # said by stop()
            self.error = e

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert self.error is None, f"{self.name}: {self.error!r}"


@pytest.mark.parametrize("assignor, leader, driver", [("range", "java", "sync"), ("cooperative-sticky", "kwire", "sync"),
                                                      ("cooperative-sticky", "kwire", "aio")])
def test_a_mixed_group_gives_each_member_the_partitions_of_its_rack(kafka_cluster, assignor, leader, driver):
    """KIP-881 live: a topic of six partitions, each with its one replica on
    node 1, 2, 3, 1, 2, 3 (racks rack-a, b, c); a classic group of two kwire
    consumers and a Java one, one per rack. Whoever leads (a Java leader reads
    the kwire members' racks from their subscriptions; a kwire leader, the
    Java member's) each member ends with exactly the two partitions of its
    rack, as Java's assignor computes for these members and racks. Then
    (kwire leading) partitions 0 and 1 swap nodes: the leader sees the racks
    change (its metadata refresh, every second here) and rejoins, and the
    partitions follow their racks as Java's assignor moves them (two
    cooperative rounds: revoked, then assigned). ``driver`` "aio": the kwire
    members are kwire.aio's consumers."""
    from support.java_peer import JavaGroupMember, java_assign

    cluster = kafka_cluster
    tag = uuid.uuid4().hex[:8]
    topic, group = f"kip881-{tag}", f"kip881-{assignor}-{tag}"
    placement = {p: [1 + p % 3] for p in range(6)}
    with cluster.admin() as a:
        a.create_topics([NewTopic(topic, replica_assignment=placement)])
    racks = {n: cluster.broker(n).rack for n in (1, 2, 3)}
    java_rack = racks[2]
    java_cfg = {"bootstrap.servers": cluster.bootstrap, "group.id": group, "client.id": f"java-{java_rack}",
                "client.rack": java_rack, "group.protocol": "classic", "auto.offset.reset": "earliest",
                "partition.assignment.strategy": {"range": "org.apache.kafka.clients.consumer.RangeAssignor",
                                                  "cooperative-sticky": "org.apache.kafka.clients.consumer."
                                                                        "CooperativeStickyAssignor"}[assignor],
                "session.timeout.ms": "10000", "heartbeat.interval.ms": "500"}
    want = java_assign([{"assignor": assignor, "brokers": racks, "topics": {topic: [placement[p] for p in range(6)]},
                         "members": {r: {"topics": [topic], "rack": r, "owned": [], "generation": -1}
                                     for r in racks.values()}}])[0]
    members: list = []
    member = _AioMember if driver == "aio" else _KwireMember
    t0 = time.monotonic()
    try:
        if leader == "java":          # the first to join leads
            members.append(JavaGroupMember(java_cfg, [topic], name=java_cfg["client.id"]))
            members[0].wait_for("assigned", 60)
        else:
            members.append(member(cluster, group, topic, assignor, racks[1], metadata_max_age_ms=1000))
            _until(lambda: len(members[0].assignment) == 6, 60, "the first member to take every partition")
        joined = time.monotonic()
        for rack in (racks[1], racks[3]) if leader == "java" else (racks[3],):
            members.append(member(cluster, group, topic, assignor, rack))
        if leader == "kwire":
            members.append(JavaGroupMember(java_cfg, [topic], name=java_cfg["client.id"]))
        owned = {}

        def settled(want: Dict[str, List[Tuple[str, int]]] = want) -> bool:
            owned.clear()
            for m in members:
                rack = m.name.split("-", 1)[1]
                owned[rack] = sorted(m.snapshot()[1] if isinstance(m, JavaGroupMember) else m.assignment)
            return owned == want

        _until(settled, 60, f"each member to own its rack's partitions {want} (owned: {owned})")
        print(f"{assignor}, {leader} leads: in-rack assignment {time.monotonic() - joined:.1f} s after "
              f"the first member's ({joined - t0:.1f} s)")
        if leader == "kwire":
            _swap_and_follow(cluster, topic, placement, racks, members, owned, settled)
    finally:
        for m in members:
            m.stop()
    assert want == {r: [(topic, p) for p in range(6) if racks[placement[p][0]] == r] for r in racks.values()}


def _swap_and_follow(cluster, topic: str, placement, racks, members, owned, settled) -> None:
    from support.java_peer import java_assign

    placement = {**placement, 0: [2], 1: [1]}
    t0 = time.monotonic()
    with cluster.admin() as a:
        a.alter_partition_reassignments({(topic, 0): [2], (topic, 1): [1]}, timeout=10)
    want = dict(owned)
    for generation in (1, 2):           # the round that revokes, the round that assigns
        want = java_assign([{"assignor": "cooperative-sticky", "brokers": racks,
                             "topics": {topic: [placement[p] for p in range(6)]},
                             "members": {r: {"topics": [topic], "rack": r, "owned": [list(tp) for tp in want[r]],
                                             "generation": generation} for r in racks.values()}}])[0]
    assert want == {racks[1]: [(topic, 1), (topic, 3)], racks[2]: [(topic, 0), (topic, 4)],
                    racks[3]: [(topic, 2), (topic, 5)]}
    _until(lambda: settled(want), 60, f"the partitions to follow their racks to {want} (owned: {owned})")
    print(f"partitions 0 and 1 swapped racks: reassigned in rack {time.monotonic() - t0:.1f} s later")


def test_the_cli_reassigns_a_partition(kafka_cluster, capsys, tmp_path):
    """``kwire reassign-partitions --execute`` moves a partition's replica to
    another broker; ``--verify`` says so once the move is done, ``--list``
    shows no move left."""
    from support.cli_run import cli_runner

    cluster = kafka_cluster
    topic = f"reassign-{uuid.uuid4().hex[:8]}"
    with cluster.admin() as a:
        a.create_topics([NewTopic(topic, 1, replica_assignment={0: [1]})])
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [2]}]}))
    run = cli_runner(capsys, cluster.bootstrap)
    run("reassign-partitions", "--execute", "--reassignment-json-file", str(plan))

    def state() -> str:
        return json.loads(run("reassign-partitions", "--verify", "--reassignment-json-file", str(plan),
                              "--json")[1])["state"]
    _until(lambda: state() == "complete", 60, "the replica to move to broker 2")
    assert not [r for r in map(json.loads, run("reassign-partitions", "--list", "--json")[1].splitlines())
                if r["topic"] == topic]


def test_a_consumer_protocol_member_tells_the_coordinator_its_rack(kafka_cluster):
    """KIP-848: the coordinator's assignor reads the member's rack from its
    ConsumerGroupHeartbeat (RackId): ConsumerGroupDescribe names it."""
    cluster = kafka_cluster
    tag = uuid.uuid4().hex[:8]
    topic, group = f"kip881-848-{tag}", f"kip881-848-{tag}"
    with cluster.admin() as a:
        a.create_topics([NewTopic(topic, 3, 1)])
        c = Consumer(bootstrap_servers=cluster.bootstrap, group_id=group, group_protocol="consumer",
                     client_rack="rack-b")
        with c:
            c.subscribe([topic])
            _until(lambda: c.poll(100) is not None and len(c.assignment()) == 3, 60, "the member's assignment")
            (member,) = a.describe_groups([group])[group].members
        assert member.rack_id == "rack-b"


def _until(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
