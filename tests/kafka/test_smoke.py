"""kwire's producer, consumer and admin on Apache Kafka's PLAINTEXT listener:
every codec with keys, null keys, headers and null values, read back exactly
with poll and poll_columnar."""

from __future__ import annotations

import time
import uuid

import pytest

from kwire.admin import Admin, NewTopic
from kwire.consumer import Consumer
from kwire.errors import UnknownTopicOrPartitionError
from kwire.producer import Producer

pytestmark = pytest.mark.kafka

PARTITIONS = 3
N = 2000


def _records(codec):
    out = []
    for i in range(N):
        key = None if i % 7 == 0 else b"key-%d" % (i % 50)
        value = None if i % 11 == 0 else (b"" if i % 13 == 0 else b"%s-value-%d" % (codec.encode(), i))
        headers = ((("n", b"%d" % i), ("none", None)) if i % 3 == 0 else ())
        out.append((key, value, headers))
    return out


def _drain(consumer, want, columnar=False):
    got = {}
    deadline = time.monotonic() + 30
    while sum(len(v) for v in got.values()) < want and time.monotonic() < deadline:
        if columnar:
            for tp, rb in consumer.poll_columnar(500).items():
                rows = zip(rb.column("offset").to_pylist(), rb.column("key").to_pylist(),
                           rb.column("value").to_pylist(), rb.column("headers").to_pylist())
                got.setdefault(tp.partition, []).extend(
                    (o, k, v, tuple((h["key"], h["value"]) for h in hs or ())) for o, k, v, hs in rows)
        else:
            for tp, recs in consumer.poll(500).items():
                got.setdefault(tp.partition, []).extend((r.offset, r.key, r.value, r.headers) for r in recs)
    return got


def _described(admin, topic, timeout=10.0):
    """The topic as DescribeTopics sees it: CreateTopics answers once the
    controller has it, and the broker's metadata may lag by a moment
    (UNKNOWN_TOPIC_OR_PARTITION meanwhile)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return admin.describe_topics([topic])[topic]
        except UnknownTopicOrPartitionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_every_codec_round_trips_exactly(kafka, codec):
    cfg = kafka.client_config("plaintext")
    topic = f"smoke-{codec}-{uuid.uuid4().hex[:8]}"
    with Admin(cfg) as admin:
        admin.create_topics([NewTopic(topic, PARTITIONS)])
        assert len(_described(admin, topic).partitions) == PARTITIONS
    sent = _records(codec)
    with Producer(cfg, compression_type=codec, linger_ms=5) as p:
        futures = [p.send(topic, v, key=k, headers=list(h) or None) for k, v, h in sent]
        metas = [f.get(30) for f in futures]
    assert {m.partition for m in metas} == set(range(PARTITIONS))
    expected = {}
    for (k, v, h), m in zip(sent, metas):
        expected.setdefault(m.partition, []).append((m.offset, k, v, tuple(h)))
    for columnar in (False, True):
        with Consumer(cfg, auto_offset_reset="earliest") as c:
            c.assign([(topic, p) for p in range(PARTITIONS)])
            got = _drain(c, N, columnar=columnar)
        assert got == expected, f"columnar={columnar}"
