"""Flow control on Apache Kafka, with both kinds of client (the ``kw``
fixture): ``pause`` / ``resume`` / ``paused`` (a paused partition is left out
of every Fetch and returns nothing, not even what was buffered, while the
others flow; resumed, it goes on from its position, nothing lost or
repeated; in a group the pause lasts while the partition stays assigned, as
in Java's consumer, which the last test runs through the same rebalances
as the reference), ``current_lag`` (an unknown end asked for without
waiting), and ``enforce_rebalance`` (a new generation, the reason in the
coordinator's log, with the classic protocol; logged and ignored with
KIP-848's, as Java does)."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Dict, List

import pytest

from kwire.admin import Admin, NewTopic
from kwire.errors import IllegalStateError
from kwire.fetcher import Fetcher
from kwire.producer import Producer
from kwire.types import TopicPartition

pytestmark = pytest.mark.kafka

SESSION = dict(session_timeout_ms=6000, heartbeat_interval_ms=300)   # Kafka's shortest session


def _topic(bootstrap: str, partitions: int) -> str:
    name = f"flow-{uuid.uuid4().hex[:10]}"
    with Admin(bootstrap_servers=bootstrap) as a:
        a.create_topics([NewTopic(name, partitions)])
    return name


def _produce(bootstrap: str, topic: str, counts: Dict[int, int]) -> None:
    with Producer(bootstrap_servers=bootstrap, linger_ms=1) as p:
        for partition, n in counts.items():
            for i in range(n):
                p.send(topic, b"v%d" % i, partition=partition)
        p.flush(30)


def _take(c, how: str) -> Dict[TopicPartition, List[int]]:
    """One poll's offsets per partition, as records or as Arrow batches."""
    if how == "records":
        return {tp: [r.offset for r in recs] for tp, recs in c.poll(100).items()}
    return {tp: batch.column("offset").to_pylist() for tp, batch in c.poll_columnar(100, max_records=5).items()}


@pytest.fixture
def fetched(monkeypatch):
    """The partitions of every Fetch sent from now on (those it fetches: with
    a fetch session, the ones it names and the ones the session holds)."""
    asked: List[TopicPartition] = []
    send = Fetcher._send_fetch

    def spy(self, node, conn, share, *args, **kw):
        asked.extend(share)
        return send(self, node, conn, share, *args, **kw)

    monkeypatch.setattr(Fetcher, "_send_fetch", spy)
    return asked


@pytest.mark.parametrize("how", ["records", "columnar"])
def test_a_paused_partition_is_neither_fetched_nor_returned_and_resumes_where_it_was(kw, kafka, how, fetched):
    bootstrap = kafka.bootstrap("plaintext")
    topic = _topic(bootstrap, 3)
    _produce(bootstrap, topic, {0: 40, 1: 40, 2: 40})
    tps = [TopicPartition(topic, p) for p in range(3)]
    got: Dict[TopicPartition, List[int]] = {tp: [] for tp in tps}
    with kw.Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", max_poll_records=5) as c:
        c.assign(tps)
        assert c.current_lag(tps[0]) is None            # nothing fetched yet
        _read_until(c, how, got, tps[0], 1)             # some of partition 0 out, the rest of its fetch buffered
        position = c.position(tps[0])
        assert 0 < position < 40
        assert c.current_lag(tps[0]) == c.highwater(tps[0]) - position == 40 - position
        c.pause(tps[0])
        assert c.paused() == {tps[0]}
        _produce(bootstrap, topic, {0: 10})              # more for the paused partition meanwhile
        fetched.clear()
        deadline = time.monotonic() + 30
        while len(got[tps[1]]) < 40 or len(got[tps[2]]) < 40:
            assert time.monotonic() < deadline
            out = _take(c, how)
            assert tps[0] not in out
            for tp, offsets in out.items():
                got[tp].extend(offsets)
        for _ in range(5):                               # caught up: long polls of the others only
            assert tps[0] not in _take(c, how)
        assert fetched and tps[0] not in fetched and set(fetched) == set(tps[1:])
        assert c.position(tps[0]) == position and c.paused() == {tps[0]}
        assert c.current_lag(tps[1]) == 0
        with pytest.raises(IllegalStateError, match="no current assignment"):
            c.pause(TopicPartition(topic, 7))
        with pytest.raises(IllegalStateError, match="no current assignment"):
            c.resume(tps[1], TopicPartition("elsewhere", 0))
        assert c.paused() == {tps[0]}
        c.resume(tps[0])
        assert c.paused() == set()
        _read_until(c, how, got, tps[0], 50)
        _produce(bootstrap, topic, {0: 5})               # fetched again
        _read_until(c, how, got, tps[0], 55)
        assert tps[0] in fetched
    assert got == {tps[0]: list(range(55)), tps[1]: list(range(40)), tps[2]: list(range(40))}


def _read_until(c, how: str, got: Dict[TopicPartition, List[int]], tp: TopicPartition, n: int) -> None:
    deadline = time.monotonic() + 30
    while len(got[tp]) < n:
        assert time.monotonic() < deadline
        for t, offsets in _take(c, how).items():
            got[t].extend(offsets)


def _drive(consumers, until, timeout=60.0):
    """Poll every consumer in turn (each must poll to take part in a rebalance) until ``until()``."""
    deadline = time.monotonic() + timeout
    got: List[TopicPartition] = []
    while not until():
        assert time.monotonic() < deadline, [sorted(c.assignment()) for c in consumers]
        for c in consumers:
            got.extend(c.poll(50))
    return got


@pytest.mark.parametrize("strategy", ["cooperative-sticky", "range", "consumer"])
def test_a_rebalance_keeps_the_pause_of_the_partitions_that_stay_assigned(kw, kafka, strategy):
    """Cooperative and KIP-848's protocol ("consumer"): the partitions a
    member keeps stay paused, those handed to the new member are not paused
    there. Eager (range): every partition is revoked before the JoinGroup,
    so every pause ends, as in Java's consumer (``onJoinPrepare`` assigns
    nothing before rejoining)."""
    bootstrap = kafka.bootstrap("plaintext")
    topic, group = _topic(bootstrap, 4), f"grp-{uuid.uuid4().hex[:8]}"
    _produce(bootstrap, topic, {p: 5 for p in range(4)})
    membership = (dict(group_protocol="consumer") if strategy == "consumer"
                  else dict(partition_assignment_strategy=strategy, **SESSION))
    make = lambda: kw.Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                               **membership)
    a = make()
    b = make()
    try:
        a.subscribe([topic])
        _drive([a], lambda: len(a.assignment()) == 4)
        a.pause(*a.assignment())
        assert len(a.paused()) == 4
        b.subscribe([topic])
        returned = _drive([a, b], lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2)
        kept = set(a.assignment())
        assert b.paused() == set()
        if strategy != "range":
            assert a.paused() == kept
            assert not kept & set(returned)          # a's partitions stayed quiet through the rebalance
        else:
            assert a.paused() == set()
    finally:
        a.close()
        b.close()


def test_enforce_rebalance_makes_a_new_generation(kw, kafka):
    bootstrap = kafka.bootstrap("plaintext")
    topic, group = _topic(bootstrap, 2), f"grp-{uuid.uuid4().hex[:8]}"
    with kw.Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as plain:
        with pytest.raises(IllegalStateError, match="group_id"):
            plain.enforce_rebalance()
    with kw.Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest", **SESSION) as c:
        c.enforce_rebalance("not subscribed: nothing happens")
        c.subscribe([topic])
        _drive([c], lambda: len(c.assignment()) == 2)
        generation = c.group_metadata().generation_id
        assert generation >= 1
        c.pause(TopicPartition(topic, 0))
        c.enforce_rebalance("the test asks")
        _drive([c], lambda: c.group_metadata().generation_id > generation and len(c.assignment()) == 2)
        with open(kafka.log_path) as log:         # the JoinGroup's reason, as the coordinator logs it
            assert "the test asks" in log.read()
        assert c.paused() == set()      # eager (range first, Java's default): revoked, so no longer paused


def test_enforce_rebalance_is_ignored_by_the_consumer_protocol(kw, kafka, caplog):
    bootstrap = kafka.bootstrap("plaintext")
    topic, group = _topic(bootstrap, 2), f"grp-{uuid.uuid4().hex[:8]}"
    with kw.Consumer(bootstrap_servers=bootstrap, group_id=group, group_protocol="consumer",
                     auto_offset_reset="earliest") as c:
        c.subscribe([topic])
        _drive([c], lambda: len(c.assignment()) == 2)
        c.pause(TopicPartition(topic, 1))
        epoch = c.group_metadata().generation_id
        with caplog.at_level(logging.WARNING, logger="kwire.group"):
            c.enforce_rebalance()
        assert "no effect with group_protocol='consumer'" in caplog.text
        for _ in range(5):
            c.poll(50)
        assert c.group_metadata().generation_id == epoch
        assert c.paused() == {TopicPartition(topic, 1)}


def test_current_lag_asks_for_an_unknown_end_without_waiting(kw, kafka):
    """A paused partition is never fetched, so only current_lag's own
    ListOffsets (answered during later polls) gives it an end."""
    bootstrap = kafka.bootstrap("plaintext")
    topic = _topic(bootstrap, 1)
    _produce(bootstrap, topic, {0: 12})
    tp = TopicPartition(topic, 0)
    with kw.Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign([tp])
        c.pause(tp)
        c.seek(tp, 5)
        deadline = time.monotonic() + 30
        lag = c.current_lag(tp)
        assert lag is None
        while lag is None:
            assert time.monotonic() < deadline
            assert c.poll(50) == {}
            lag = c.current_lag(tp)
        assert lag == c.highwater(tp) - 5 == 7


def test_pause_gives_back_what_getone_holds(kafka):
    """AsyncConsumer: records a poll took for ``getone`` but not handed out
    are given back by ``pause`` and come, once each, after ``resume``."""
    import asyncio

    from kwire.aio import AsyncConsumer

    bootstrap = kafka.bootstrap("plaintext")
    topic = _topic(bootstrap, 2)
    _produce(bootstrap, topic, {0: 20, 1: 20})
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]

    async def main() -> Dict[TopicPartition, List[int]]:
        got: Dict[TopicPartition, List[int]] = {tp: [] for tp in tps}
        async with AsyncConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
            c.assign(tps)
            first = await c.getone(30000)
            tp = TopicPartition(first.topic, first.partition)
            got[tp].append(first.offset)
            c.pause(tp)
            assert await c.position(tp) == first.offset + 1
            deadline = time.monotonic() + 30
            while len(got[tps[0]]) + len(got[tps[1]]) < 21:
                assert time.monotonic() < deadline
                for t, recs in (await c.getmany(100)).items():
                    assert t != tp
                    got[t].extend(r.offset for r in recs)
            c.resume(tp)
            while len(got[tp]) < 20:
                assert time.monotonic() < deadline
                got[tp].append((await c.getone(30000)).offset)
        return got

    assert asyncio.run(main()) == {tps[0]: list(range(20)), tps[1]: list(range(20))}


JAVA_ASSIGNORS = {"cooperative-sticky": "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
                  "range": "org.apache.kafka.clients.consumer.RangeAssignor"}


@pytest.mark.parametrize("strategy", ["cooperative-sticky", "range"])
def test_javas_consumer_keeps_a_pause_through_a_rebalance_as_kwire_does(kafka, strategy):
    """The reference for the test above: a Java member pauses its four
    partitions, a kwire member joins; afterwards Java's paused partitions are
    those it kept (cooperative) or none (eager)."""
    from kwire.consumer import Consumer
    from support.java_peer import JavaGroupMember

    bootstrap = kafka.bootstrap("plaintext")
    topic, group = _topic(bootstrap, 4), f"grp-{uuid.uuid4().hex[:8]}"
    java = JavaGroupMember({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                            "partition.assignment.strategy": JAVA_ASSIGNORS[strategy],
                            "session.timeout.ms": "6000", "heartbeat.interval.ms": "300"}, [topic], name="java-pause")
    kwire = Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                     partition_assignment_strategy=strategy, **SESSION)
    try:
        while len(java.snapshot()[1]) < 4:
            java.wait_for("assigned")
        assert len(java.pause()) == 4
        kwire.subscribe([topic])

        def settled():
            rebalances = [e for e in list(java.events) if e["event"] in ("assigned", "revoked")]
            return (len(kwire.assignment()) == 2 and len(java.snapshot()[1]) == 2 and len(rebalances) > 1
                    and rebalances[-1]["event"] == "assigned")

        _drive([kwire], settled)
        last = [e for e in list(java.events) if e["event"] == "assigned"][-1]
        kept = java.snapshot()[1]
        assert {tuple(tp) for tp in last["paused"]} == (kept if strategy == "cooperative-sticky" else set())
    finally:
        kwire.close()
        java.stop()
