"""The producer's partitioners and compression levels on Apache Kafka,
beside the clients that define them: records land in the partitions Java's
producer (its built-in partitioner, ``RoundRobinPartitioner``,
``partitioner.ignore.keys``) or librdkafka (its named partitioners, through
confluent-kafka) puts them in; every compression level is read back by
kwire and by Java's consumer, and a higher gzip / zstd level gives smaller
batches of compressible records.
"""

from __future__ import annotations

import random
import time
import uuid
from typing import Dict, List, Optional, Tuple

import pytest

from kwire.admin import Admin, NewTopic
from kwire.consumer import Consumer
from kwire.producer import Producer
from support.java_peer import java_consume, java_produce, send_op

pytestmark = pytest.mark.kafka

PARTITIONS = 7
ROUND_ROBIN = "org.apache.kafka.clients.producer.RoundRobinPartitioner"


def _topic(kafka, prefix: str, partitions: int = PARTITIONS) -> str:
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    with Admin(kafka.client_config("plaintext")) as admin:
        admin.create_topics([NewTopic(topic, partitions)])
    return topic


def _keys(n: int) -> List[Optional[bytes]]:
    rnd = random.Random(33)
    return [bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 40))) for _ in range(n)]


def _kwire_partitions(kafka, topic: str, keys: List[Optional[bytes]], **options) -> List[int]:
    with Producer(kafka.client_config("plaintext"), **options) as p:
        futs = [p.send(topic, b"v%d" % i, key) for i, key in enumerate(keys)]
        p.flush(30)
        return [f.get(30).partition for f in futs]


def _java_partitions(kafka, topic: str, keys: List[Optional[bytes]], **options) -> List[int]:
    cfg = {"bootstrap.servers": kafka.bootstrap("plaintext"), "client.id": "java-partitioner"}
    cfg.update({k: str(v) for k, v in options.items()})
    sent = java_produce(cfg, [send_op(topic, b"v%d" % i, key) for i, key in enumerate(keys)] + [{"op": "flush"}])
    return [e["partition"] for e in sent]


def test_keyed_records_land_where_javas_producer_puts_them(kafka):
    topic = _topic(kafka, "part-java")
    keys = _keys(300)
    assert _kwire_partitions(kafka, topic, keys) == _java_partitions(kafka, topic, keys)


def _cycles(seq: List[int]) -> bool:
    """Whether ``seq`` walks every partition once, then again in the same order."""
    return sorted(seq[:PARTITIONS]) == list(range(PARTITIONS)) and all(
        p == seq[i % PARTITIONS] for i, p in enumerate(seq))


@pytest.mark.parametrize("option", ["partitioner", "partitioner.class"])
def test_round_robin_walks_the_partitions_as_javas(kafka, option):
    """Java's RoundRobinPartitioner: each record, keyed or not, to the next
    partition of one fixed cycle. Java's cycle follows the order of its
    metadata's partition list (a hash map's); kwire's is the partitions'
    order, from 0."""
    topic = _topic(kafka, "part-rr")
    keys = _keys(100) + [None] * 40
    ours = _kwire_partitions(kafka, topic, keys, **{option: ROUND_ROBIN})
    java = _java_partitions(kafka, topic, keys, **{"partitioner.class": ROUND_ROBIN})
    assert _cycles(java) and _cycles(ours) and ours[:PARTITIONS] == list(range(PARTITIONS)), (ours, java)


def test_ignore_keys_sends_keyed_records_to_one_sticky_partition_as_java(kafka):
    """``partitioner.ignore.keys``: keyed records go where keyless ones do,
    a sticky partition, until ``batch.size`` bytes went to it."""
    topic = _topic(kafka, "part-ignore")
    keys = [b"key-%d" % i for i in range(60)]         # ~1.5 KiB in all: far below batch.size
    java = _java_partitions(kafka, topic, keys, **{"partitioner.ignore.keys": "true", "linger.ms": 500})
    ours = _kwire_partitions(kafka, topic, keys, partitioner_ignore_keys=True, linger_ms=500)
    assert len(set(java)) == 1 and len(set(ours)) == 1
    assert len(set(_kwire_partitions(kafka, topic, keys, linger_ms=500))) > 1   # keys hashed otherwise


def test_the_aio_producer_takes_the_same_options(kafka):
    """kwire.aio's producer: the same partitioners (a callable, Java's round
    robin) and compression levels as the blocking one."""
    import asyncio

    from kwire.aio import AsyncProducer

    topic = _topic(kafka, "part-aio")
    keys = _keys(30)

    async def run(**options) -> List[int]:
        async with AsyncProducer(kafka.client_config("plaintext"), **options) as p:
            futs = [await p.enqueue(topic, b"v", key) for key in keys]
            return [(await p.delivered(f)).partition for f in futs]

    assert asyncio.run(run(partitioner=ROUND_ROBIN, compression_type="zstd",
                           compression_zstd_level=19)) == [i % PARTITIONS for i in range(len(keys))]
    assert asyncio.run(run(partitioner=lambda topic, key, value, n: len(key or b"") % n)) == [
        len(k or b"") % PARTITIONS for k in keys]
    assert asyncio.run(run()) == _kwire_partitions(kafka, topic, keys)


def test_adaptive_partitioning_measures_the_queues_and_avoids_unavailable_leaders(kafka):
    """KIP-794 on a live producer: once every partition had a batch, the
    queues (batches waiting, the open one included) weigh the next sticky
    partition; with ``partitioner_availability_timeout_ms``, a leader that
    had batches ready and took none for that long is left out; without
    adaptive partitioning nothing is measured."""
    topic = _topic(kafka, "part-adaptive", 3)
    with Producer(kafka.client_config("plaintext"), linger_ms=60_000,
                  partitioner_availability_timeout_ms=1000) as p:
        p.send(topic, b"v", None, None, 0)
        p.flush(30)                                       # 0 had a batch, sent: its queue is empty
        p.send(topic, b"v", None, None, 1)
        p.send(topic, b"v", None, None, 2)                # 1 and 2 hold an open batch each
        with p._lock:
            p._measure_load(time.monotonic())
            assert p._acc.partition_load(topic) == ((0, 1, 2), (2, 3, 4))   # weights 2, 1, 1
            leader = p._client.cluster.leader_for(topic, 0)
            p._node_ready_at[leader], p._node_drained_at[leader] = time.monotonic(), time.monotonic() - 2
            p._measure_load(time.monotonic())
            assert p._acc.partition_load(topic) is None   # its one leader unavailable: no figures, uniform
    with Producer(kafka.client_config("plaintext"), linger_ms=60_000,
                  partitioner_adaptive_partitioning_enable=False) as p:
        for part in (0, 1, 2):
            p.send(topic, b"v", None, None, part)
        time.sleep(0.3)                                  # sender turns
        assert p._acc.partition_load(topic) is None


@pytest.mark.parametrize("name", ["murmur2", "murmur2_random", "consistent", "consistent_random", "fnv1a",
                                  "fnv1a_random"])
def test_librdkafkas_named_partitioners_agree_with_librdkafka(kafka, name):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = _topic(kafka, f"part-rd-{name.replace('_', '-')}")
    keys: List[Optional[bytes]] = _keys(200)
    if name == "consistent_random":
        keys = [k for k in keys if k]                  # an empty key goes to a random partition there
    if not name.endswith("_random"):
        keys.append(None)                              # a null key has one partition: the empty key's
    got: Dict[int, int] = {}
    rd = confluent_kafka.Producer({"bootstrap.servers": kafka.bootstrap("plaintext"), "partitioner": name})
    try:
        for i, key in enumerate(keys):
            rd.produce(topic, b"v", key, on_delivery=lambda err, msg, i=i: got.__setitem__(i, msg.partition()))
        assert rd.flush(30) == 0
    finally:
        rd.flush(1)
    ours = _kwire_partitions(kafka, topic, keys, partitioner=name)
    assert ours == [got[i] for i in range(len(keys))]


# ------------------------------------------------------------ compression levels

#: (kwire's options, the codec): each written to a partition of its own.
LEVELS: List[Tuple[Dict, str]] = [
    ({"compression.gzip.level": 1}, "gzip"), ({"compression.gzip.level": 9}, "gzip"),
    ({"compression.zstd.level": 1}, "zstd"), ({"compression.zstd.level": 19}, "zstd"),
    ({"compression.zstd.level": -5}, "zstd"),
    ({"compression.lz4.level": 9}, "lz4"), ({"compression.lz4.level": 17}, "lz4"),
    ({"compression.level": 12}, "lz4"), ({"compression.level": 0}, "gzip"), ({}, "snappy"),
]


def _compressible(n: int) -> List[bytes]:
    rnd = random.Random(390)
    words = [b"alpha", b"beta", b"gamma", b"delta", b"kafka", b"kwire", b"level", b"batch", b"zstd", b"gzip"]
    return [b'{"id": %d, "text": "%s"}' % (i, b" ".join(rnd.choice(words) for _ in range(20))) for i in range(n)]


def test_every_compression_level_is_read_back_and_higher_levels_compress_more(kafka):
    topic = _topic(kafka, "part-levels", len(LEVELS))
    values = _compressible(400)
    for p, (options, codec) in enumerate(LEVELS):
        with Producer(kafka.client_config("plaintext"), compression_type=codec, batch_size=1 << 20,
                      linger_ms=2000, **{k.replace(".", "_"): v for k, v in options.items()}) as prod:
            for v in values:
                prod.send(topic, v, None, None, p)
            prod.flush(30)
    sizes: Dict[int, int] = {}
    got: Dict[int, List[bytes]] = {}
    with Consumer(kafka.client_config("plaintext"), auto_offset_reset="earliest") as c:
        c.assign([(topic, p) for p in range(len(LEVELS))])
        deadline = time.monotonic() + 45
        while sum(map(len, got.values())) < len(values) * len(LEVELS) and time.monotonic() < deadline:
            for tp, recs in c.poll(500).items():
                for r in recs:
                    got.setdefault(tp.partition, []).append(r.value)
                    if r.offset == r.batch.base_offset:
                        sizes[tp.partition] = sizes.get(tp.partition, 0) + r.batch.size_in_bytes
    assert all(got.get(p) == values for p in range(len(LEVELS))), {p: len(v) for p, v in got.items()}
    java = java_consume({"bootstrap.servers": kafka.bootstrap("plaintext"), "client.id": "java-levels"},
                        assign=[(topic, p) for p in range(len(LEVELS))], until_end=True)
    assert {p: [r.value for r in java if r.partition == p] for p in range(len(LEVELS))} == got
    assert sizes[0] > sizes[1], sizes                  # gzip 1 > gzip 9
    assert sizes[2] > sizes[3] and sizes[4] > sizes[2], sizes      # zstd -5 > zstd 1 > zstd 19
    assert sizes[5] > sizes[6], sizes                  # lz4's fast mode > its high compression
    assert sizes[8] > sizes[0], sizes                  # gzip level 0 stores
