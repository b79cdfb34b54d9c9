"""Transactions against both live brokers (Tansu and Apache Kafka, the
``broker`` fixture): commits visible to confluent-kafka (librdkafka) and
kwire read_committed readers, open transactions invisible to them, aborts,
fencing, abortable errors, and consume-transform-produce with offsets
committed in the transaction.

Tansu 0.6.0 sends no aborted-transaction list in Fetch responses, so a
read_committed reader of Tansu (librdkafka's as much as kwire's) returns
the records of aborted transactions. On Tansu the abort is therefore
checked on the log itself (the ABORT marker Tansu wrote, read from a real
Fetch response) and kwire's read_committed decoders (given an Aborter) on
that real Fetch response with the aborted list a Kafka broker would have
added (producer id, first offset of the aborted transaction). On Apache
Kafka the broker's own aborted list is checked, and read_committed readers
(kwire's and librdkafka's) must not return the aborted records.
(tests/kafka/test_read_committed.py covers read_committed on Kafka at
length.)

Each live test runs in both transaction protocols (KIP-890, the
``txn_protocol`` fixture): v2, Apache Kafka 4.4's own (``transaction.version``
2), and v1, with the cluster's ``transaction.version`` downgraded to 1 for
the test (tests/support/features.py) as on an older cluster. Tansu finalizes
no features: v1 only. ``test_the_protocol_on_the_wire`` checks the requests
each protocol sends and the epochs it adopts."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid

import pytest

from kwire import protocol
from kwire._codec import Aborter, ColumnarDecoder, Decoder, RecordBatchBuilder, decode, parse_control_key
from kwire.admin import Admin, NewTopic
from kwire.aio import AsyncProducer
from kwire.client import Client
from kwire.config import ADMIN, resolve
from kwire.consumer import Consumer, TopicPartition
from kwire.errors import InvalidProducerEpochError, ProducerFencedError
from kwire.group import OffsetAndMetadata
from kwire.producer import Producer
from kwire.protocol.api_keys import ApiKey, ErrorCode
from kwire.transactions import TransactionAbortedError, TransactionStateError
from support.features import transaction_version

COMMIT_MARKER, ABORT_MARKER = 1, 0


def _topic(bootstrap: str, partitions: int = 1) -> str:
    name = f"tx-{uuid.uuid4().hex[:10]}"
    with Admin(bootstrap_servers=bootstrap) as a:
        a.create_topics([NewTopic(name, partitions)])
    return name


@pytest.fixture(params=[2, 1], ids=["txv2", "txv1"])
def txn_protocol(request, broker):
    """The transaction protocol the test's producers speak: 2 (Apache Kafka 4.4 as it
    is) or 1 (its transaction.version downgraded for the test); Tansu: 1 only."""
    if broker.is_tansu:
        if request.param == 2:
            pytest.skip("Tansu 0.6.0 finalizes no transaction.version: transaction protocol v1 only")
        yield 1
        return
    with transaction_version(broker.bootstrap, request.param):
        yield request.param


def _txn_producer(kw, bootstrap: str, protocol_version: int, **cfg) -> Producer:
    p = kw.Producer(bootstrap_servers=bootstrap, transactional_id=f"tid-{uuid.uuid4().hex[:8]}", **cfg)
    p.init_transactions(20)
    assert p.transaction_version == protocol_version
    return p


def _inner(kw, producer):
    """The producer whose state a test reads: kwire.aio's own behind the bridge."""
    return producer.aio._p if kw.is_aio else producer


def _log_ends(bootstrap, tps):
    """The partitions' log ends (high watermarks): a read_committed reader gets there once no transaction is open."""
    with Consumer(bootstrap_servers=bootstrap, group_id=None) as c:
        return c.end_offsets(tps)


def _kwire_read(bootstrap, topic, isolation, seconds=2.0, partitions=1):
    """Every value kwire's consumer returns, read until its position reaches
    the log's end, or for ``seconds`` (a read_committed one stops short of
    it behind an open transaction, or a moment, until the markers of one
    just ended are written)."""
    tps = [(topic, p) for p in range(partitions)]
    ends = _log_ends(bootstrap, tps)
    got = []
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", isolation_level=isolation) as c:
        c.assign(tps)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for recs in c.poll(200).values():
                got.extend(r.value for r in recs)
            if all(c.position(tp) >= ends[TopicPartition(*tp)] for tp in tps):
                break
    return got


def _librdkafka_read(bootstrap, topic, isolation, seconds=3.0):
    """As :func:`_kwire_read`, with confluent-kafka's consumer (partition 0)."""
    ck = pytest.importorskip("confluent_kafka")
    end = _log_ends(bootstrap, [(topic, 0)])[TopicPartition(topic, 0)]
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"rd-{uuid.uuid4().hex[:6]}",
                     "auto.offset.reset": "earliest", "isolation.level": isolation, "enable.auto.commit": False,
                     "enable.partition.eof": True})
    c.assign([ck.TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if not m.error():
                got.append(m.value())
            elif m.error().code() == ck.KafkaError._PARTITION_EOF and m.offset() >= end:
                break
    finally:
        c.close()
    return got


def _fetch(bootstrap, topic, isolation_level=0):
    """A real Fetch response of partition 0 from offset 0 (read_uncommitted: everything;
    read_committed: up to the last stable offset, with the aborted transactions)."""
    client = Client(resolve(ADMIN, {"bootstrap.servers": bootstrap}))
    try:
        client.add_topics([topic])
        md = client.refresh_metadata(timeout=10)
        leader = md.leader_for(topic, 0)
        cls = protocol.message("FetchRequest")
        req = cls(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, isolation_level=isolation_level,
                  session_id=0, session_epoch=-1,
                  topics=[cls.FetchTopic(topic=topic, topic_id=md.topic_ids.get(topic), partitions=[
                      cls.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])],
                  forgotten_topics_data=[], rack_id="")
        client.wait_ready(leader, time.monotonic() + 10)
        return client.request(leader, req, timeout=10).responses[0].partitions[0]
    finally:
        client.close()


def test_commit_visible_to_kwire_and_librdkafka_open_transaction_is_not(kw, broker, txn_protocol):
    topic = _topic(broker.bootstrap)
    p = _txn_producer(kw, broker.bootstrap, txn_protocol)
    p.begin_transaction()
    for i in range(10):
        p.send(topic, b"t1-%d" % i)
    p.flush(10)                      # written, not committed
    assert _kwire_read(broker.bootstrap, topic, "read_committed") == []
    assert _librdkafka_read(broker.bootstrap, topic, "read_committed") == []
    assert len(_kwire_read(broker.bootstrap, topic, "read_uncommitted")) == 10
    p.commit_transaction(20)
    want = [b"t1-%d" % i for i in range(10)]
    assert _kwire_read(broker.bootstrap, topic, "read_committed") == want
    assert _librdkafka_read(broker.bootstrap, topic, "read_committed") == want
    p.close()


def test_abort_writes_an_abort_marker_and_read_committed_drops_the_aborted_records(kw, broker, txn_protocol):
    topic = _topic(broker.bootstrap)
    p = _txn_producer(kw, broker.bootstrap, txn_protocol)
    p.begin_transaction()
    p.send(topic, b"kept-1")
    p.commit_transaction(20)
    p.begin_transaction()
    for i in range(4):
        p.send(topic, b"dropped-%d" % i)
    p.flush(10)
    p.abort_transaction(20)
    p.begin_transaction()
    p.send(topic, b"kept-2")
    p.commit_transaction(20)
    pid = _inner(kw, p)._producer_id
    p.close()

    part = _fetch(broker.bootstrap, topic)
    everything = decode(part.records, include_control=True).records
    markers = [(r.offset, parse_control_key(r.key)[1]) for r in everything if r.batch.is_control]
    assert [kind for _, kind in markers] == [COMMIT_MARKER, ABORT_MARKER, COMMIT_MARKER]
    first_aborted = next(r.offset for r in everything if r.value == b"dropped-0")
    assert all(r.batch.is_transactional and r.batch.producer_id == pid for r in everything)
    if broker.is_tansu:
        # Tansu 0.6.0 sends no aborted list, even to read_committed: what it should have sent is
        # one aborted transaction (producer id, first offset)
        assert not _fetch(broker.bootstrap, topic, isolation_level=1).aborted_transactions
        aborted = [(pid, first_aborted)]
    else:
        # Apache Kafka sends it with a read_committed Fetch (and none with read_uncommitted)
        assert not part.aborted_transactions
        committed = _fetch(broker.bootstrap, topic, isolation_level=1)
        aborted = [(a.producer_id, a.first_offset) for a in committed.aborted_transactions]
        assert aborted == [(pid, first_aborted)]
        assert bytes(committed.records) == bytes(part.records)     # all stable: the same log
        # and the read_committed readers drop the aborted records
        assert _kwire_read(broker.bootstrap, topic, "read_committed") == [b"kept-1", b"kept-2"]
        assert _librdkafka_read(broker.bootstrap, topic, "read_committed") == [b"kept-1", b"kept-2"]
        assert _kwire_read(broker.bootstrap, topic, "read_uncommitted") == (
            [b"kept-1"] + [b"dropped-%d" % i for i in range(4)] + [b"kept-2"])
    # read_committed's decoders (as the consumer's fetcher calls them) with that list
    res = Decoder().decode(part.records, aborter=Aborter(aborted))
    assert [r.value for r in res.records] == [b"kept-1", b"kept-2"]
    cols = ColumnarDecoder().decode(part.records, aborter=Aborter(aborted))
    assert cols.record_batch.column("value").to_pylist() == [b"kept-1", b"kept-2"]
    assert res.next_offset == cols.next_offset == everything[-1].offset + 1   # past the last COMMIT marker


def test_the_transaction_context_managers(broker):
    """``with producer.transaction():`` (and kwire.aio's ``async with``, as
    aiokafka's): committed when the block ends, aborted when it raises, the
    block's exception going on."""
    topic = _topic(broker.bootstrap)

    def block(p, value, fail):
        p.send(topic, value)
        p.flush(10)
        if fail:
            raise RuntimeError("the block failed")

    with Producer(bootstrap_servers=broker.bootstrap, transactional_id=f"tid-{uuid.uuid4().hex[:8]}") as p:
        p.init_transactions(20)
        for value, fail in ((b"kept-1", False), (b"dropped-1", True)):
            with pytest.raises(RuntimeError) if fail else contextlib.nullcontext():
                with p.transaction(20):
                    block(p, value, fail)

    async def aio():
        async with AsyncProducer(bootstrap_servers=broker.bootstrap,
                                 transactional_id=f"tid-{uuid.uuid4().hex[:8]}") as p:
            await p.init_transactions(20)
            async with p.transaction(20):
                await p.send(topic, b"kept-2")
            with pytest.raises(RuntimeError):
                async with p.transaction(20):
                    await p.send(topic, b"dropped-2")
                    raise RuntimeError("the block failed")

    asyncio.run(aio())
    everything = [b"kept-1", b"dropped-1", b"kept-2", b"dropped-2"]
    assert _kwire_read(broker.bootstrap, topic, "read_uncommitted") == everything
    if not broker.is_tansu:      # Tansu 0.6.0 sends no aborted-transactions list
        assert _kwire_read(broker.bootstrap, topic, "read_committed") == [b"kept-1", b"kept-2"]


def test_fencing_a_zombie_producer(kw, broker, txn_protocol):
    topic = _topic(broker.bootstrap)
    tid = f"tid-{uuid.uuid4().hex[:8]}"
    old = kw.Producer(bootstrap_servers=broker.bootstrap, transactional_id=tid)
    old.init_transactions(20)
    old.begin_transaction()
    old.send(topic, b"zombie-open").get(10)
    new = kw.Producer(bootstrap_servers=broker.bootstrap, transactional_id=tid)
    new.init_transactions(20)        # fences old and aborts its open transaction
    assert _inner(kw, new)._producer_epoch > _inner(kw, old)._producer_epoch
    if broker.is_tansu:
        # Tansu 0.6.0 says PRODUCER_FENCED at Produce: fatal there and then
        with pytest.raises(ProducerFencedError):
            old.send(topic, b"zombie-late").get(10)
        with pytest.raises(ProducerFencedError):
            old.commit_transaction(10)
    else:
        # Apache Kafka says INVALID_PRODUCER_EPOCH at Produce: a partition leader cannot tell a fenced
        # producer from one whose transaction timed out (tests/kafka/test_live_transactions.py), so the
        # transaction is abortable, and the abort asks the coordinator, which says PRODUCER_FENCED: to
        # InitProducerId with the old epoch (v1, KIP-588), to EndTxn(abort) with it (v2: no client bump)
        with pytest.raises(InvalidProducerEpochError):
            old.send(topic, b"zombie-late").get(10)
        with pytest.raises(TransactionStateError, match="aborted first"):
            old.commit_transaction(10)
        with pytest.raises(ProducerFencedError, match="InitProducerId" if txn_protocol == 1 else "EndTxn"):
            old.abort_transaction(10)
    with pytest.raises(ProducerFencedError):
        old.begin_transaction()
    new.begin_transaction()
    new.send(topic, b"from-new")
    new.commit_transaction(20)
    old.close(5)
    new.close()
    assert _kwire_read(broker.bootstrap, topic, "read_committed")[-1:] == [b"from-new"]


def test_state_errors(kw, broker, txn_protocol):
    topic = _topic(broker.bootstrap)
    p = kw.Producer(bootstrap_servers=broker.bootstrap, transactional_id=f"tid-{uuid.uuid4().hex[:8]}")
    with pytest.raises(TransactionStateError, match="init_transactions"):
        p.send(topic, b"x")
    with pytest.raises(TransactionStateError):
        p.begin_transaction()
    p.init_transactions(20)
    with pytest.raises(TransactionStateError, match="begin_transaction"):
        p.send(topic, b"x")
    with pytest.raises(TransactionStateError):
        p.commit_transaction()
    p.begin_transaction()
    with pytest.raises(TransactionStateError):
        p.begin_transaction()
    p.commit_transaction(10)          # an empty transaction: nothing to end on the broker
    p.begin_transaction()
    for i in range(20):               # records into an open batch: no send may skip the state check
        p.send(topic, b"in-%d" % i, key=b"k")
    p.commit_transaction(20)
    with pytest.raises(TransactionStateError, match="begin_transaction"):
        p.send(topic, b"after", key=b"k")
    p.close()
    with pytest.raises(Exception, match="transactional_id"):
        kw.Producer(bootstrap_servers=broker.bootstrap).begin_transaction()


def test_abortable_error_then_abort_and_continue(kw, broker, txn_protocol):
    """A record that cannot be delivered (a partition without a leader, so it
    expires) makes the transaction abortable: commit refuses, abort cleans
    up, the next transaction commits. (send() refuses a partition the topic
    does not have at once, so the metadata is given leaderless partitions.)"""
    topic = _topic(broker.bootstrap)
    p = _txn_producer(kw, broker.bootstrap, txn_protocol, delivery_timeout_ms=1500)
    p.begin_transaction()
    # written (its partition added to the transaction) before the bad record: Apache Kafka adds no
    # partition of an AddPartitionsToTxn naming one it does not have (Tansu 0.6.0 adds the others)
    good = p.send(topic, b"good")
    assert good.get(10).offset >= 0
    def leaderless():
        cluster = _inner(kw, p)._client.cluster
        info = cluster.partitions[topic][0]
        cluster.partitions[topic].update({i: dataclasses.replace(info, partition=i, leader=-1) for i in range(1, 10)})
        cluster.partition_counts[topic] = 10
        cluster.generation.bump()

    p._call(leaderless) if kw.is_aio else leaderless()     # (the aio client's own thread changes it)
    bad = p.send(topic, b"bad", partition=9)
    with pytest.raises(TransactionStateError, match="abort"):
        p.commit_transaction(20)
    assert bad.exception() is not None
    with pytest.raises(TransactionStateError):
        p.send(topic, b"more")
    p.abort_transaction(20)
    p.begin_transaction()
    p.send(topic, b"next", partition=0)    # not to one of the made-up partitions
    p.commit_transaction(20)
    p.close()
    assert good.get(1).offset >= 0
    # the log's markers (on Tansu, which sends no aborted list, the only check of the abort)
    part = _fetch(broker.bootstrap, topic)
    kinds = [parse_control_key(r.key)[1] for r in decode(part.records, include_control=True).records
             if r.batch.is_control]
    assert kinds == [ABORT_MARKER, COMMIT_MARKER]
    if broker.is_kafka:
        # "good" went out in the aborted transaction: read_committed readers drop it
        assert _kwire_read(broker.bootstrap, topic, "read_uncommitted") == [b"good", b"next"]
        assert _kwire_read(broker.bootstrap, topic, "read_committed") == [b"next"]
        assert _librdkafka_read(broker.bootstrap, topic, "read_committed") == [b"next"]


def test_abort_fails_unsent_records(kw, broker, txn_protocol):
    topic = _topic(broker.bootstrap)
    p = _txn_producer(kw, broker.bootstrap, txn_protocol, linger_ms=60000, batch_size=1 << 20)
    p.begin_transaction()
    f = p.send(topic, b"never sent")          # lingers: not sent when the abort comes
    p.abort_transaction(20)
    assert isinstance(f.exception(), TransactionAbortedError)
    p.close()


def test_consume_transform_produce_commits_offsets_in_the_transaction(kw, broker, txn_protocol):
    src, dst = _topic(broker.bootstrap, 2), _topic(broker.bootstrap)
    group = f"ctp-{uuid.uuid4().hex[:6]}"
    with kw.Producer(bootstrap_servers=broker.bootstrap) as plain:
        for i in range(20):
            plain.send(src, b"%d" % i, partition=i % 2)
    # (6 s: Apache Kafka's smallest session timeout by default, group.min.session.timeout.ms)
    c = kw.Consumer(bootstrap_servers=broker.bootstrap, group_id=group, auto_offset_reset="earliest",
                 enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=300,
                 isolation_level="read_committed")
    c.subscribe([src])
    p = _txn_producer(kw, broker.bootstrap, txn_protocol)
    seen = []
    deadline = time.monotonic() + 30
    while len(seen) < 20 and time.monotonic() < deadline:
        batch = c.poll(300)
        if not batch:
            continue
        p.begin_transaction()
        for tp, recs in batch.items():
            for r in recs:
                p.send(dst, r.value + b"-out")
                seen.append(r.value)
        p.send_offsets_to_transaction({tp: c.position(tp) for tp in batch}, c.group_metadata())
        p.commit_transaction(20)
    assert sorted(int(v) for v in seen) == list(range(20))
    tps = [TopicPartition(src, 0), TopicPartition(src, 1)]
    assert {tp: om.offset for tp, om in c.committed(tps).items()} == {tps[0]: 10, tps[1]: 10}
    # an aborted transaction's offsets are not committed
    p.begin_transaction()
    p.send_offsets_to_transaction({tps[0]: OffsetAndMetadata(3)}, c.group_metadata())
    p.abort_transaction(20)
    assert c.committed([tps[0]])[tps[0]].offset == 10
    c.close()
    p.close()
    assert sorted(_kwire_read(broker.bootstrap, dst, "read_committed")) == sorted(v + b"-out" for v in seen)


def _spy_requests(producer) -> list:
    """(request name, version) of every request the producer's client sends from now on."""
    sent = []
    client = producer._client
    original = client.send

    def send(node, request, version=None, **kwargs):
        sent.append((type(request).__name__[:-len("Request")], version))
        return original(node, request, version, **kwargs)
    client.send = send
    return sent


def _java_read_committed(bootstrap, topic):
    from support.java_peer import java_consume
    got = java_consume({"bootstrap.servers": bootstrap, "isolation.level": "read_committed"},
                       assign=[(topic, 0)], until_end=True)
    return [r.value for r in got]


def test_the_protocol_on_the_wire(kw, broker, txn_protocol):
    """What each transaction protocol sends and which epochs the producer takes:
    v2 sends no AddPartitionsToTxn nor AddOffsetsToTxn (Produce v12+ and
    TxnOffsetCommit v5 add the partition and the group), ends with EndTxn v5 and
    adopts the epoch it answers, one higher after every transaction, committed or
    aborted; v1 adds both explicitly, sends Produce v11, TxnOffsetCommit v4 and
    EndTxn v4 at most, and keeps its epoch. A commit, an abort, a commit, each
    with the group's offsets: kwire's, librdkafka's and Java's read_committed
    readers return the committed records exactly once, and the group's offset
    is the last committed transaction's."""
    topic, group = _topic(broker.bootstrap), f"wire-{uuid.uuid4().hex[:6]}"
    p = _txn_producer(kw, broker.bootstrap, txn_protocol)
    inner = _inner(kw, p)
    sent = _spy_requests(inner)
    stamps = [(inner._producer_id, inner._producer_epoch)]
    for n, end in enumerate(("commit", "abort", "commit")):
        p.begin_transaction()
        p.send(topic, b"%s-%d" % (end.encode(), n), partition=0)
        p.send_offsets_to_transaction({TopicPartition(topic, 0): OffsetAndMetadata(n + 1)}, group, 20)
        p.flush(10)
        (p.commit_transaction if end == "commit" else p.abort_transaction)(20)
        stamps.append((inner._producer_id, inner._producer_epoch))
    p.close()
    names = {name for name, _ in sent}
    top = {name: max(v for n, v in sent if n == name) for name in names}
    pid, epoch = stamps[0]
    if txn_protocol == 2:
        assert not names & {"AddPartitionsToTxn", "AddOffsetsToTxn"}, sorted(names)
        assert top["Produce"] >= 12 and top["TxnOffsetCommit"] == 5 and top["EndTxn"] == 5, top
        assert stamps == [(pid, epoch + i) for i in range(4)]
    else:
        assert {"AddPartitionsToTxn", "AddOffsetsToTxn"} <= names, sorted(names)
        assert top["Produce"] <= 11 and top["TxnOffsetCommit"] <= 4 and top["EndTxn"] <= 4, top
        assert stamps == [(pid, epoch)] * 4
    want = [b"commit-0", b"commit-2"]
    if broker.is_kafka:         # (Tansu 0.6.0 sends no aborted list: read_committed shows aborts there)
        assert _kwire_read(broker.bootstrap, topic, "read_committed") == want
        assert _librdkafka_read(broker.bootstrap, topic, "read_committed") == want
        if not kw.is_aio:       # (one Java reader per protocol)
            assert _java_read_committed(broker.bootstrap, topic) == want
    with Admin(bootstrap_servers=broker.bootstrap) as a:
        offsets = a.list_group_offsets(group, [TopicPartition(topic, 0)], timeout=10)
    assert offsets[TopicPartition(topic, 0)].offset == 3


def test_a_late_write_of_an_ended_transaction_is_refused(broker, txn_protocol):
    """The broker's defence against hanging transactions (KIP-890): a batch of a
    transaction that has ended, arriving late (held by the network, or a zombie
    thread), must not open a transaction nobody will end. In v2 it carries the
    epoch the EndTxn left behind and is refused as from an old epoch; in v1 the
    leader asks the coordinator whether the partition is in an ongoing transaction
    (part 1's verification) and refuses it as TRANSACTION_ABORTABLE (what Kafka
    answers a Produce v11 whose verification failed). Either way the log has no record of it
    and nothing is left open (the last stable offset reaches the end)."""
    if broker.is_tansu:
        pytest.skip("Tansu 0.6.0 implements neither part of KIP-890")
    topic = _topic(broker.bootstrap)
    p = Producer(bootstrap_servers=broker.bootstrap, transactional_id=f"tid-{uuid.uuid4().hex[:8]}")
    p.init_transactions(20)
    pid, epoch = p._producer_id, p._producer_epoch
    p.begin_transaction()
    p.send(topic, b"on-time", partition=0)
    p.commit_transaction(20)
    # the late batch: the ended transaction's producer id and epoch, the sequence after its one record
    late = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=1, transactional=True)
    late.append(b"late")
    client = Client(resolve(ADMIN, {"bootstrap.servers": broker.bootstrap}))
    try:
        client.add_topics([topic])
        md = client.refresh_metadata(timeout=10)
        leader = md.leader_for(topic, 0)
        conn = client.wait_ready(leader, time.monotonic() + 10)
        version = min(conn.versions[ApiKey.PRODUCE], 11 if txn_protocol == 1 else 99)
        cls = protocol.message("ProduceRequest")
        td = cls.TopicProduceData(partition_data=[cls.PartitionProduceData(index=0, records=late.build())])
        if version >= 13:
            td.topic_id = md.topic_ids[topic]
        else:
            td.name = topic
        req = cls(transactional_id=p.cfg["transactional_id"], acks=-1, timeout_ms=10000, topic_data=[td])
        code = client.request(leader, req, version, timeout=10).responses[0].partition_responses[0].error_code
    finally:
        client.close()
        p.close()
    refused = {2: ErrorCode.INVALID_PRODUCER_EPOCH, 1: ErrorCode.TRANSACTION_ABORTABLE}[txn_protocol]
    assert code == refused, protocol.error_for(code, api="Produce")
    assert _kwire_read(broker.bootstrap, topic, "read_uncommitted") == [b"on-time"]
    assert _kwire_read(broker.bootstrap, topic, "read_committed") == [b"on-time"]


def test_a_producer_moves_to_v2_when_the_cluster_does(broker):
    """A producer of protocol v1 whose cluster is upgraded to transaction.version 2
    (seen on its next connection: idle ones close after a second here) finishes
    the transaction it is in with v1, bumps its epoch once (InitProducerId, as
    Java's client does, so nothing of the v1 transaction counts as added in v2),
    and speaks v2 from the next transaction: Produce v12+, EndTxn v5, the epoch
    one higher after it."""
    if broker.is_tansu:
        pytest.skip("Tansu 0.6.0 finalizes no transaction.version")
    topic = _topic(broker.bootstrap)
    with transaction_version(broker.bootstrap, 1):
        p = Producer(bootstrap_servers=broker.bootstrap, transactional_id=f"tid-{uuid.uuid4().hex[:8]}",
                     connections_max_idle_ms=1000)
        try:
            p.init_transactions(20)
            assert p.transaction_version == 1
            pid, epoch = p._producer_id, p._producer_epoch
            with transaction_version(broker.bootstrap, 2):
                time.sleep(2.5)                     # its connections to the v1 cluster close idle
                p.begin_transaction()
                p.send(topic, b"v1", partition=0).get(10)
                sent = _spy_requests(p)
                p.commit_transaction(20)
                assert p.transaction_version == 2
                assert "InitProducerId" in dict(sent) and (p._producer_id, p._producer_epoch) == (pid, epoch + 1)
                sent.clear()
                p.begin_transaction()
                p.send(topic, b"v2", partition=0)
                p.commit_transaction(20)
                assert (p._producer_id, p._producer_epoch) == (pid, epoch + 2)
                top = {n: v for n, v in sent if n in ("Produce", "EndTxn")}
                assert top["Produce"] >= 12 and top["EndTxn"] == 5 and "AddPartitionsToTxn" not in dict(sent), sent
        finally:
            p.close()
    assert _kwire_read(broker.bootstrap, topic, "read_committed") == [b"v1", b"v2"]


def test_a_transactional_batch_is_valid():
    """A transactional producer builds its batches transactional (the
    builder sets the attribute before the CRC is computed)."""
    b = RecordBatchBuilder(producer_id=5, producer_epoch=1, base_sequence=0, transactional=True)
    b.append(b"v", key=b"k")
    marked = b.build()
    rec = decode(marked).records[0]          # CRC checked on decode
    assert rec.batch.is_transactional and rec.batch.producer_id == 5 and rec.value == b"v"
