"""Producer and consumer against both live brokers (Tansu and Apache Kafka,
the ``broker`` fixture), and interop with confluent-kafka (librdkafka),
kafka-python and aiokafka both ways on each."""

from __future__ import annotations

import time
import uuid

import pytest

import kwire
from kwire.admin import Admin, NewTopic
from kwire.consumer import Consumer, NoOffsetForPartitionError, TopicPartition
from kwire.producer import Producer


def _topic(admin_bootstrap: str, partitions: int = 1) -> str:
    name = f"c-{uuid.uuid4().hex[:10]}"
    with Admin(bootstrap_servers=admin_bootstrap) as a:
        a.create_topics([NewTopic(name, partitions)])
    return name


class _SYNC:      # the blocking clients, for the tests that are not run with both kinds (kw)
    Producer = Producer
    Consumer = Consumer


def _consume_all(kw, bootstrap, topic, partitions, n, **cfg):
    got = []
    with kw.Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", **cfg) as c:
        c.assign([(topic, p) for p in range(partitions)])
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            for tp, recs in c.poll(500).items():
                got += [(tp.partition, r) for r in recs]
    return got


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_round_trip_every_codec(kw, broker, codec):
    topic = _topic(broker.bootstrap, 3)
    sent = []
    with kw.Producer(bootstrap_servers=broker.bootstrap, compression_type=codec, linger_ms=2) as p:
        futs = []
        for i in range(3000):
            key = None if i % 7 == 0 else b"key-%d" % (i % 50)
            value = None if i % 11 == 0 else b"value-%d" % i
            headers = [("n", b"%d" % i), ("none", None)] if i % 3 == 0 else None
            futs.append(p.send(topic, value, key=key, headers=headers))
            sent.append((key, value, tuple(headers or ())))
        metas = [f.get(30) for f in futs]
    got = _consume_all(kw, broker.bootstrap, topic, 3, len(sent))
    assert len(got) == len(sent)
    by_pos = {(p, r.offset): r for p, r in got}
    for (key, value, headers), meta in zip(sent, metas):
        r = by_pos[(meta.partition, meta.offset)]
        assert (r.key, r.value, r.headers) == (key, value, headers)
    # keyed records all land where murmur2 says
    for (key, _, _), meta in zip(sent, metas):
        if key is not None:
            assert meta.partition == kwire.partition_for_key(key, 3)


def test_keyed_partitioning_matches_librdkafka(broker):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = _topic(broker.bootstrap, 7)
    keys = [b"user-%d" % i for i in range(200)]
    placed = {}
    p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "partitioner": "murmur2_random"})
    for k in keys:
        p.produce(topic, b"x", key=k, on_delivery=lambda err, msg: placed.__setitem__(msg.key(), msg.partition()))
    p.flush(30)
    assert len(placed) == len(keys)
    with Producer(bootstrap_servers=broker.bootstrap) as kp:
        ours = {k: kp.send(topic, b"y", key=k).get(30).partition for k in keys}
    assert ours == placed


def test_acks_and_idempotence(kw, broker):
    topic = _topic(broker.bootstrap, 1)
    for acks in ("0", "1", "all"):
        with kw.Producer({"bootstrap.servers": broker.bootstrap, "acks": acks}) as p:
            metas = [p.send(topic, b"a%s" % acks.encode(), partition=0) for _ in range(10)]
            p.flush(30)
            assert all(m.done() for m in metas)      # flush waited for every batch, in flight too
            offs = [m.get(10).offset for m in metas]
        if acks == "0":
            assert offs == [-1] * 10          # no response: offsets unknown, as in Kafka's clients
        else:
            assert offs == list(range(offs[0], offs[0] + 10))
    got = _consume_all(kw, broker.bootstrap, topic, 1, 30)
    assert len(got) == 30
    idem = [r for _, r in got if r.batch.producer_id >= 0]
    assert idem and all(r.batch.base_sequence >= 0 for r in idem)   # acks=all: idempotent batches


def test_consumer_positions_seek_and_reset(kw, broker):
    topic = _topic(broker.bootstrap, 1)
    with kw.Producer(bootstrap_servers=broker.bootstrap, linger_ms=0) as p:
        for i in range(20):
            p.send(topic, b"%d" % i, partition=0, timestamp_ms=1_700_000_000_000 + i * 1000).get(10)
    tp = TopicPartition(topic, 0)
    with kw.Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([tp])
        assert c.position(tp) == 0
        c.seek(tp, 15)
        recs = []
        while len(recs) < 5:
            recs += c.poll(1000).get(tp, [])
        assert [r.value for r in recs] == [b"%d" % i for i in range(15, 20)]
        assert c.position(tp) == 20
        c.seek_to_beginning(tp)
        first = []
        while not first:
            first = c.poll(1000, max_records=3).get(tp, [])
        assert [r.offset for r in first] == [0, 1, 2] and c.position(tp) == 3
        c.seek(tp, 10_000)
        if broker.is_tansu:
            # Tansu 0.6.0 answers a fetch past the end with no data and no error, so feed the
            # consumer a constructed answer carrying OFFSET_OUT_OF_RANGE, as Kafka sends
            inner = c.aio._c if kw.is_aio else c
            (c._loop.call if kw.is_aio else (lambda f, *a: f(*a)))(_deliver_fetch_error, inner, tp, 1)
            assert inner._states[tp].position is None
        # (Apache Kafka answers OFFSET_OUT_OF_RANGE itself: the polls below reset the position)
        again = []
        deadline = time.monotonic() + 10
        while not again and time.monotonic() < deadline:
            again = c.poll(1000, max_records=1).get(tp, [])
        assert again[0].offset == 0
    with kw.Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="none") as c:
        c.assign([tp])
        with pytest.raises(NoOffsetForPartitionError):
            c.poll(100)
    if broker.is_kafka:
        # a position past the end with auto_offset_reset="none": Kafka's OFFSET_OUT_OF_RANGE is raised
        with kw.Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="none") as c:
            c.assign([tp])
            c.seek(tp, 10_000)
            deadline = time.monotonic() + 10
            with pytest.raises(NoOffsetForPartitionError, match="offset 10000 is out of range"):
                while time.monotonic() < deadline:
                    c.poll(100)


@pytest.mark.parametrize("wait_ms", [0, 500])
def test_poll_zero_alone_gets_records(kw, broker, wait_ms):
    """A caller that only ever polls with timeout 0 (a loop of its own) gets
    every record: poll(0) gives the I/O a turn. (It gave none: requests
    went unsent and answers unread, and such a caller never got a record.)"""
    if broker.is_tansu and wait_ms == 0:
        # Tansu 0.6.0 answers a Fetch with max_wait_ms=0 with no partitions at all (never a record)
        wait_ms = 1
    topic = _topic(broker.bootstrap, 1)
    tp = TopicPartition(topic, 0)
    with kw.Producer(bootstrap_servers=broker.bootstrap) as p:
        for i in range(100):
            p.send(topic, b"v%d" % i, partition=0)
    with kw.Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=wait_ms) as c:
        c.assign([tp])
        got = []
        deadline = time.monotonic() + 15
        while len(got) < 100 and time.monotonic() < deadline:
            got += c.poll(0).get(tp, [])
            time.sleep(0.001)
        assert [r.offset for r in got] == list(range(100))


def _deliver_fetch_error(consumer, tp, code):
    """Hand the consumer a decoded Fetch response (built with the generated
    classes, encoded and decoded as on the wire) whose partition has ``code``."""
    from kwire.future import Future
    from kwire.protocol import messages as m

    r = m.FetchResponse
    wire = r.encode_bytes(r(responses=[r.FetchableTopicResponse(topic=tp.topic, partitions=[
        r.PartitionData(partition_index=tp.partition, error_code=code, high_watermark=-1, records=None)])]), 11)
    fut = Future()
    fut.set_result(r.decode(wire, 11))
    node = 12345
    consumer._node_fetches[node] += 1
    consumer._in_flight[tp] = node
    consumer._on_fetch(node, {tp: consumer.position(tp)}, fut, {tp: -1})


def test_columnar_poll(kw, broker):
    topic = _topic(broker.bootstrap, 2)
    with kw.Producer(bootstrap_servers=broker.bootstrap, compression_type="lz4") as p:
        for i in range(1000):
            p.send(topic, b"v%d" % i, key=b"k%d" % i, headers=[("h", b"x")] if i % 2 else None)
    for unit in ("ms", "us"):
        rows = 0
        with kw.Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest") as c:
            c.assign([(topic, 0), (topic, 1)])
            deadline = time.monotonic() + 20
            while rows < 1000 and time.monotonic() < deadline:
                for tp, rb in c.poll_columnar(500, timestamp_unit=unit).items():
                    rb.validate(full=True)
                    assert rb.schema.names == ["offset", "timestamp", "timestamp_type", "key", "value", "headers"]
                    assert rb.schema.field("timestamp").type.unit == unit
                    ts = rb.column(1).cast("int64").to_pylist()
                    assert all(abs(t / (1000 if unit == "us" else 1) - time.time() * 1000) < 600_000 for t in ts)
                    rows += rb.num_rows
        assert rows == 1000


@pytest.mark.parametrize("columnar", [False, True])
def test_poll_decodes_a_bounded_chunk(kw, broker, columnar):
    """A fetch brings ~1 MB of zstd data that decompresses to ~4 MB; with
    max_poll_bytes=256 KiB each poll decodes at most that much (plus one
    batch) and the rest stays compressed in the buffer: every record comes
    back once, in order, with no refetch needed."""
    topic = _topic(broker.bootstrap, 1)
    value = b"0123456789abcdef" * 64
    n = 4000
    with kw.Producer(bootstrap_servers=broker.bootstrap, compression_type="zstd", batch_size=32768, linger_ms=5) as p:
        for i in range(n):
            p.send(topic, value, key=b"%08d" % i, partition=0)
    budget, batch_bytes = 256 * 1024, 32768 * 2
    offsets = []
    with kw.Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", max_poll_bytes=budget,
                  max_poll_records=n) as c:
        c.assign([(topic, 0)])
        deadline = time.monotonic() + 30
        while len(offsets) < n and time.monotonic() < deadline:
            if columnar:
                got = c.poll_columnar(500)
                chunks = [(rb.column("offset").to_pylist(), sum(len(v) for v in rb.column("value").to_pylist()))
                          for rb in got.values()]
            else:
                got = c.poll(500)
                chunks = [([r.offset for r in recs], sum(len(r.value) for r in recs)) for recs in got.values()]
            for offs, nbytes in chunks:
                assert nbytes <= budget + batch_bytes
                offsets += offs
        assert offsets == list(range(n))
        assert c.position((topic, 0)) == n


def test_peers_read_what_kwire_writes_and_kwire_reads_theirs(broker):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = _topic(broker.bootstrap, 1)
    with Producer(bootstrap_servers=broker.bootstrap, compression_type="zstd") as p:
        for i in range(100):
            p.send(topic, b"kw-%d" % i, key=None if i % 2 else b"k%d" % i, headers=[("a", b"b")], partition=0)
    c = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-" + topic,
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    seen = []
    deadline = time.monotonic() + 30
    while len(seen) < 100 and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is not None and not m.error():
            seen.append((m.offset(), m.key(), m.value(), m.headers()))
    c.close()
    assert seen == [(i, None if i % 2 else b"k%d" % i, b"kw-%d" % i, [("a", b"b")]) for i in range(100)]

    from kafka import KafkaConsumer, TopicPartition as KTP

    kc = KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    kc.assign([KTP(topic, 0)])
    kseen = []
    deadline = time.monotonic() + 30
    while len(kseen) < 100 and time.monotonic() < deadline:
        for recs in kc.poll(1000).values():
            kseen += [(r.offset, r.value) for r in recs]
    kc.close()
    assert kseen == [(i, b"kw-%d" % i) for i in range(100)]

    # and the other way: librdkafka (idempotent, lz4) writes, kwire reads
    other = _topic(broker.bootstrap, 1)
    p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                                  "compression.type": "lz4"})
    for i in range(100):
        p.produce(other, b"rd-%d" % i, key=b"k", partition=0, headers=[("x", b"%d" % i)])
    p.flush(30)
    got = _consume_all(_SYNC, broker.bootstrap, other, 1, 100)
    assert [(r.offset, r.value, r.headers) for _, r in got] == [(i, b"rd-%d" % i, (("x", b"%d" % i),)) for i in range(100)]


def test_aiokafka_both_ways(broker):
    import asyncio

    aiokafka = pytest.importorskip("aiokafka")
    topic = _topic(broker.bootstrap, 1)
    with Producer(bootstrap_servers=broker.bootstrap, compression_type="gzip") as p:
        for i in range(50):
            p.send(topic, b"kw-%d" % i, key=b"k%d" % i, headers=[("h", b"%d" % i)], partition=0)

    async def read_and_write():
        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                                      enable_auto_commit=False)
        await c.start()
        seen = []
        try:
            c.assign([aiokafka.TopicPartition(topic, 0)])
            await c.seek_to_beginning()
            while len(seen) < 50:
                for records in (await c.getmany(timeout_ms=1000)).values():
                    seen += [(r.offset, r.key, r.value, tuple(r.headers)) for r in records]
        finally:
            await c.stop()
        # Tansu 0.6.0 fails InitProducerId v0-2, which aiokafka asks: not idempotent there
        # (librdkafka's idempotent batches are read in test_peers_read_what_kwire_writes...);
        # Apache Kafka answers it: idempotent
        pr = aiokafka.AIOKafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="snappy",
                                       enable_idempotence=broker.is_kafka)
        await pr.start()
        try:
            for i in range(50):
                await pr.send_and_wait(other, b"aio-%d" % i, key=None if i % 2 else b"x", partition=0)
        finally:
            await pr.stop()
        return seen

    other = _topic(broker.bootstrap, 1)
    seen = asyncio.run(read_and_write())
    assert seen == [(i, b"k%d" % i, b"kw-%d" % i, (("h", b"%d" % i),)) for i in range(50)]
    got = _consume_all(_SYNC, broker.bootstrap, other, 1, 50)
    assert [(r.offset, r.key, r.value) for _, r in got] == [(i, None if i % 2 else b"x", b"aio-%d" % i)
                                                          for i in range(50)]
    if broker.is_kafka:
        assert all(r.batch.producer_id >= 0 and r.batch.base_sequence >= 0 for _, r in got)


def _wait_for_read_ahead(c, tp):
    """Pump the consumer's I/O until the fetch after the buffered one is in."""
    deadline = time.monotonic() + 10
    while tp not in c._ahead and time.monotonic() < deadline:
        c._client.poll(0.05)
    assert tp in c._ahead and tp in c._buffer
    assert c._buffer[tp].end_offset is not None and c._ahead[tp].rest.nbytes


def _fill_partition_0(kw, bootstrap: str, topic: str, n: int) -> TopicPartition:
    """``n`` records of 206 bytes in partition 0, in 16 KiB batches."""
    with kw.Producer(bootstrap_servers=bootstrap, batch_size=16384, linger_ms=2) as p:
        for i in range(n):
            p.send(topic, b"%05d" % i + b"-" * 200, partition=0)
    return TopicPartition(topic, 0)


def test_caught_up_partitions_do_not_hold_up_the_fetches_behind_them(kw, broker):
    """A broker answers a connection's requests one at a time (Apache Kafka
    and Tansu alike), and a fetch of partitions with nothing to read waits
    ``fetch_max_wait_ms`` there. So partitions without records to read (or
    not answered for yet) must ride along with ones that have records, not
    hold a fetch of their own that the others queue behind: here three of
    four partitions stay empty, the wait is 20 s, and every record must
    still arrive in less than one wait."""
    topic = _topic(broker.bootstrap, 4)
    n = 6000
    tp = _fill_partition_0(kw, broker.bootstrap, topic, n)
    with kw.Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=20000,
                  fetch_max_bytes=4 * 65536, max_in_flight_fetches=4) as c:
        c.assign([(topic, p) for p in range(4)])
        start = time.monotonic()
        offsets: list = []
        while len(offsets) < n and time.monotonic() - start < 15:
            offsets += [r.offset for r in c.poll(500).get(tp, [])]
        assert offsets == list(range(n)), f"{len(offsets)} of {n} records within 15 s"


def test_read_ahead_keeps_order_and_drops_on_seek(broker):
    """While one fetch of a partition is buffered the next is already asked
    for (from where the buffered one ends): records come back once and in
    order, and a seek forgets both."""
    topic = _topic(broker.bootstrap, 1)
    n = 6000
    tp = _fill_partition_0(_SYNC, broker.bootstrap, topic, n)
    with Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", fetch_max_bytes=4 * 65536,
                  max_poll_records=20) as c:
        c.assign([tp])
        offsets = []
        while not offsets:
            offsets = [r.offset for r in c.poll(1000).get(tp, [])]
        _wait_for_read_ahead(c, tp)
        deadline = time.monotonic() + 30
        while len(offsets) < n and time.monotonic() < deadline:
            offsets += [r.offset for r in c.poll(500).get(tp, [])]
        assert offsets == list(range(n))
        c.seek(tp, 0)
        first = []
        while not first:      # a fetch still waiting at the end of the log is dropped when it answers
            first = [r.offset for r in c.poll(1000).get(tp, [])]
        assert first == list(range(20))
        _wait_for_read_ahead(c, tp)
        c.seek(tp, 10)
        assert tp not in c._buffer and tp not in c._ahead
        again = []
        while not again:
            again = c.poll(1000, max_records=5).get(tp, [])
        assert [r.offset for r in again] == list(range(10, 10 + len(again)))
