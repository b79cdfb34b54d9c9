"""Admin calls whose live behaviour only Apache Kafka shows, on both brokers
(the ``broker`` fixture): CreatePartitions (a running producer and a
subscribed group take the new partitions), DeleteRecords (the log start
moves; a consumer before it is reset per ``auto_offset_reset``), ListOffsets
by timestamp and MAX_TIMESTAMP over records with explicit, non-monotonic
timestamps.

Tansu 0.6.0 lacks CreatePartitions (refused before sending: no common
version), answers DeleteRecords and MAX_TIMESTAMP by closing the
connection and ignores ListOffsets' timestamps: on Tansu these tests check
that each fails clearly, or what it answers; the constructed responses
stay in tests/client/test_admin_offline.py."""

from __future__ import annotations

import time
import uuid

import pytest

from kwire.admin import Admin, NewTopic
from kwire.consumer import Consumer, TopicPartition
from kwire.errors import InvalidPartitionsError, KwireError, OffsetOutOfRangeError
from kwire.fetcher import NoOffsetForPartitionError, PositionOutOfRangeError
from kwire.producer import Producer
from kwire.protocol.versions import NoCommonVersionError


def _topic(bootstrap: str, partitions: int, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    with Admin(bootstrap_servers=bootstrap) as a:
        a.create_topics([NewTopic(name, partitions)])
    return name


def _until(cond, timeout: float, what: str, step=None) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out: {what}"
        if step is not None:
            step()
        else:
            time.sleep(0.05)


def test_create_partitions_reach_a_running_producer_and_a_group(broker):
    """On Kafka: a running producer (its metadata not refreshed on a timer)
    sends to partition=new at once, by looking again when the partition is
    past its count, and keyless (sticky) records then spread over every
    partition; a subscribed group takes the new partitions after a refresh;
    a count below the current one is INVALID_PARTITIONS, naming the topic."""
    topic = _topic(broker.bootstrap, 1, "grow")
    if broker.is_tansu:
        # Tansu 0.6.0 offers no CreatePartitions: refused before anything is sent
        with Admin(bootstrap_servers=broker.bootstrap, request_timeout_ms=5000) as a:
            with pytest.raises(NoCommonVersionError, match="CreatePartitions .*the broker does not offer it"):
                a.create_partitions({topic: 3})
        return
    got = []
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=0, batch_size=400) as p, \
            Consumer(bootstrap_servers=broker.bootstrap, group_id=f"grow-{uuid.uuid4().hex[:8]}",
                     auto_offset_reset="earliest", metadata_max_age_ms=300, session_timeout_ms=6000,
                     heartbeat_interval_ms=300) as c:
        c.subscribe([topic])
        for i in range(20):
            p.send(topic, b"a%03d" % i).get(10)

        def poll():
            for part, recs in c.poll(50).items():
                got.extend((part.partition, r.value) for r in recs)

        _until(lambda: len(got) >= 20 and c.assignment() == [TopicPartition(topic, 0)], 30, "first records", poll)
        with Admin(bootstrap_servers=broker.bootstrap) as a:
            a.create_partitions({topic: 3})
            # the brokers take the controller's new partitions into their metadata a moment after it answers
            # (KRaft propagates it): an immediate Metadata may still list 1
            deadline = time.monotonic() + 10
            while len(a.describe_topics([topic])[topic].partitions) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(a.describe_topics([topic])[topic].partitions) == 3
            with pytest.raises(InvalidPartitionsError) as e:
                a.create_partitions({topic: 2})
            assert e.value.topic == topic and e.value.code == 37 and topic in str(e.value)
        # explicit partition=2 at once: the producer's metadata lacks it, so send() looks again before
        # refusing it (as Java's producer waits for metadata that has it)
        assert p.send(topic, b"explicit", partition=2).get(10).partition == 2
        # keyless: the sticky partition moves on after batch_size bytes (KIP-794), over every partition it knows now
        seen = set()

        def send_more():
            futs = [p.send(topic, b"s" + b"x" * 90) for _ in range(20)]
            seen.update(f.get(10).partition for f in futs)

        _until(lambda: seen == {0, 1, 2}, 30, f"keyless records on every partition (saw {seen})", send_more)
        # the group's member gets the new partitions (the metadata-change rejoin) and reads them
        _until(lambda: sorted(c.assignment()) == [TopicPartition(topic, q) for q in range(3)], 30,
               f"assignment of 3 partitions (has {c.assignment()})", poll)
        p.flush(10)
        with Admin(bootstrap_servers=broker.bootstrap) as a:
            ends = a.list_offsets({(topic, q): "latest" for q in range(3)})
        total = sum(o for o, _ in ends.values())
        assert all(o > 0 for o, _ in ends.values())
        _until(lambda: len(got) >= total, 30, f"{total} records read (got {len(got)})", poll)
        assert len(got) == total and b"explicit" in {v for _, v in got}


def test_delete_records_moves_the_log_start(broker):
    """On Kafka: the low watermark moves; ListOffsets earliest shows it; a
    consumer positioned before it is reset to it (earliest) or gets
    OFFSET_OUT_OF_RANGE (none); deleting past the end is OFFSET_OUT_OF_RANGE."""
    topic = _topic(broker.bootstrap, 1, "trim")
    tp = TopicPartition(topic, 0)
    if broker.is_tansu:
        # Tansu 0.6.0 answers DeleteRecords by closing the connection: the call fails promptly, located
        with Admin(bootstrap_servers=broker.bootstrap, request_timeout_ms=5000) as a:
            t = time.monotonic()
            with pytest.raises(KwireError):
                a.delete_records({(topic, 0): 0}, timeout=5)
            assert time.monotonic() - t < 10
        return
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=2) as p:
        for i in range(100):
            p.send(topic, b"%d" % i)
        p.flush(10)
    with Admin(bootstrap_servers=broker.bootstrap) as a:
        assert a.delete_records({(topic, 0): 40}) == {tp: 40}
        assert a.list_offsets({tp: "earliest"})[tp][0] == 40
        assert a.list_offsets({tp: "latest"})[tp][0] == 100
        with pytest.raises(OffsetOutOfRangeError) as e:
            a.delete_records({(topic, 0): 500})
        assert (e.value.topic, e.value.partition) == (topic, 0)
    with Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([tp])
        c.seek(tp, 10)
        got = []
        _until(lambda: got, 30, "records after the reset",
               lambda: got.extend(r for recs in c.poll(100).values() for r in recs))
        assert got[0].offset == 40 and got[0].value == b"40"
        assert c.beginning_offsets([tp]) == {tp: 40}
    with Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="none") as c:
        c.assign([tp])
        c.seek(tp, 10)
        # Java's OffsetOutOfRangeException: an OffsetOutOfRangeError naming the position, which is also a
        # NoOffsetForPartitionError (what kwire raised before)
        with pytest.raises(PositionOutOfRangeError, match=rf"offset 10 is out of range for {topic}\[0\]") as e:
            _until(lambda: False, 30, "the OffsetOutOfRange error", lambda: c.poll(100))
        assert isinstance(e.value, OffsetOutOfRangeError) and isinstance(e.value, NoOffsetForPartitionError)
        assert (e.value.topic, e.value.partition, e.value.offset, e.value.retriable) == (topic, 0, 10, False)
        c.seek(tp, 95)
        got = []
        _until(lambda: len(got) >= 5, 30, "records after a seek in range",
               lambda: got.extend(r.offset for recs in c.poll(100).values() for r in recs))
        assert got == [95, 96, 97, 98, 99]


# explicit timestamps, not in order; in one batch (linger) and one record a batch
BASE = 1_700_000_000_000
STAMPS = [BASE + d for d in (1000, 3000, 2000, 6000, 4000, 5000, 2500)]


@pytest.mark.parametrize("batched", [True, False], ids=["one-batch", "batch-each"])
def test_list_offsets_by_timestamp_and_max_timestamp(kw, broker, batched):
    """The earliest offset whose timestamp is at least t (in log order, so
    with timestamps out of order it may be an offset whose timestamp is far
    above t), none past the last one; MAX_TIMESTAMP: the offset of the
    record with the largest timestamp; latest: the high watermark."""
    topic = _topic(broker.bootstrap, 1, "times")
    tp = TopicPartition(topic, 0)
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=200 if batched else 0) as p:
        futs = []
        for i, ts in enumerate(STAMPS):
            futs.append(p.send(topic, b"%d" % i, timestamp_ms=ts))
            if not batched:
                futs[-1].get(10)            # sent before the next: one record a batch
        p.flush(10)
        assert [f.get(10).offset for f in futs] == list(range(len(STAMPS)))

    def first_at_least(t):
        for off, ts in enumerate(STAMPS):
            if ts >= t:
                return off, ts
        return None

    lookups = (BASE, BASE + 1000, BASE + 1500, BASE + 2000, BASE + 2200, BASE + 3500, BASE + 5500, BASE + 6000)
    with kw.Admin(bootstrap_servers=broker.bootstrap) as a, kw.Consumer(bootstrap_servers=broker.bootstrap) as c:
        if broker.is_tansu:
            # Tansu 0.6.0 ignores the timestamp: every lookup answers the log start (offset 0, with the first
            # batch's append time), even past the last record; "latest" is the last batch's base offset + 1,
            # the log end only for one-record batches; MAX_TIMESTAMP closes the connection
            assert {a.list_offsets({tp: t})[tp][0] for t in lookups + (BASE + 6001,)} == {0}
            assert a.list_offsets({tp: "latest"})[tp][0] == (1 if batched else len(STAMPS))
            with pytest.raises(KwireError):
                a.list_offsets({tp: "max_timestamp"}, timeout=5)
            return
        for t in lookups:
            want = first_at_least(t)
            assert a.list_offsets({tp: t})[tp] == want, t
            found = c.offsets_for_times({tp: t})[tp]
            assert (found.offset, found.timestamp) == want
        assert a.list_offsets({tp: BASE + 6001})[tp][0] == -1
        assert c.offsets_for_times({tp: BASE + 6001}) == {tp: None}
        assert a.list_offsets({tp: "latest"})[tp][0] == len(STAMPS)          # the high watermark
        assert c.end_offsets([tp]) == {tp: len(STAMPS)}
        assert a.list_offsets({tp: "max_timestamp"})[tp] == (3, STAMPS[3])


def test_auto_offset_reset_by_duration(kw, broker):
    """Java 4.x's ``by_duration:<duration>`` (KIP-1106): a partition without
    a position starts at the first record written at most that long ago (a
    ListOffsets by the timestamp then), and at the end when none is that
    recent; a poll and position() agree."""
    if broker.is_tansu:
        pytest.skip("Tansu 0.6.0 ignores ListOffsets' timestamps (test_list_offsets_by_timestamp_and_max_timestamp)")
    topic = _topic(broker.bootstrap, 1, "by-duration")
    tp = TopicPartition(topic, 0)
    now = int(time.time() * 1000)
    stamps = [now - 3 * 3600_000, now - 2 * 3600_000, now - 90 * 60_000, now - 30 * 60_000, now - 20 * 60_000]
    with Producer(bootstrap_servers=broker.bootstrap) as p:
        for i, ts in enumerate(stamps):
            p.send(topic, b"%d" % i, timestamp_ms=ts).get(10)
    for reset, start in [("by_duration:PT1H", 3), ("by_duration:P1D", 0), ("by_duration:PT2H30M", 1),
                         ("by_duration:PT5M", len(stamps))]:
        with kw.Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset=reset) as c:
            c.assign([tp])
            assert c.position(tp, timeout=10) == start, reset
        with kw.Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset=reset) as c:
            c.assign([tp])
            got: list = []
            if start < len(stamps):
                _until(lambda: got, 30, f"records after the {reset} reset",
                       lambda: got.extend(r.offset for recs in c.poll(100).values() for r in recs))
                assert got[0] == start, reset
            else:
                _until(lambda: c.position(tp) == start, 30, "the end", lambda: c.poll(100))


def test_the_consumer_lists_topics_and_partitions(kw, broker):
    """Java's listTopics / partitionsFor, kafka-python's topics() and
    partitions_for_topic(): a Metadata request now; an unknown topic is None
    (and not created when allow_auto_create_topics is off)."""
    topic = _topic(broker.bootstrap, 3, "listed")
    missing = f"listed-missing-{uuid.uuid4().hex[:8]}"
    with kw.Consumer(bootstrap_servers=broker.bootstrap, allow_auto_create_topics=False) as c:
        names = c.topics()
        assert topic in names and not any(n.startswith("__") for n in names)
        assert c.partitions_for_topic(topic) == {0, 1, 2}
        assert c.partitions_for_topic(missing) is None
        assert missing not in c.topics() and c.assignment() == []


def test_iterating_ends_after_consumer_timeout_ms(broker):
    """kafka-python's ``consumer_timeout_ms``: ``for record in consumer``
    yields every record, then ends after that long without one."""
    topic = _topic(broker.bootstrap, 2, "iter")
    with Producer(bootstrap_servers=broker.bootstrap) as p:
        for i in range(30):
            p.send(topic, b"%d" % i, partition=i % 2)
        p.flush(10)
    with Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=1500) as c:
        c.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        t0 = time.monotonic()
        values = sorted(int(r.value) for r in c)
        assert values == list(range(30))
        assert time.monotonic() - t0 < 30


def test_incremental_assign_and_unassign(kw, broker):
    """confluent-kafka's incremental_assign / incremental_unassign: the
    partitions kept go on from where they were."""
    topic = _topic(broker.bootstrap, 2, "incremental")
    with Producer(bootstrap_servers=broker.bootstrap) as p:
        for i in range(20):
            p.send(topic, b"%d" % i, partition=i % 2)
        p.flush(10)
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with kw.Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", max_poll_records=4) as c:
        c.assign([p0])
        got: list = []
        _until(lambda: len(got) >= 4, 30, "records of p0",
               lambda: got.extend(int(r.value) for recs in c.poll(100).values() for r in recs))
        kept = c.position(p0)
        c.incremental_assign([(topic, 1), (topic, 0)])
        assert sorted(c.assignment()) == [p0, p1] and c.position(p0) == kept
        c.incremental_unassign([p0])
        assert c.assignment() == [p1]
        rest: list = []
        _until(lambda: len(rest) >= 10, 30, "records of p1",
               lambda: rest.extend(int(r.value) for recs in c.poll(100).values() for r in recs))
        assert rest == list(range(1, 20, 2))
