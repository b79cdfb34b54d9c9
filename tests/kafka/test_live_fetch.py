"""Fetch limits as Apache Kafka applies them (Tansu 0.6.0 does not: it
ignores the per-partition limit, so these run on Kafka only):

- ``fetch_max_wait_ms=0``: the broker answers at once, records or not; a
  poll of an empty partition returns when its timeout is up (not later),
  records produced meanwhile arrive promptly (``poll(0)`` alone, on both
  brokers: tests/client/test_producer_consumer.py);
- ``max_partition_fetch_bytes`` smaller than what a partition has: Kafka
  cuts its answer at the limit, inside a batch (a partial trailing batch);
  every record comes back exactly once, in order, the consumer fetching
  again from the first record not returned. A batch larger than the
  limit comes whole when it is the first of the response (KIP-74), so the
  consumer progresses with any limit; when another partition's data comes
  first in the response, Kafka sends nothing for it (no head of it), and
  the partition must still progress. Compressed and uncompressed.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest

from kwire._codec import split_batches
from kwire.admin import Admin, NewTopic
from kwire.consumer import Consumer, TopicPartition
from kwire.producer import Producer

pytestmark = pytest.mark.kafka


def _topic(bootstrap: str, partitions: int = 1) -> str:
    name = f"fetch-{uuid.uuid4().hex[:8]}"
    with Admin(bootstrap_servers=bootstrap) as a:
        a.create_topics([NewTopic(name, partitions)])
    return name


def _count_fetches(c: Consumer) -> list:
    """Appends (the fetch's partitions and their record bytes) for each Fetch answered."""
    seen = []
    take = c._take_fetch

    def recording(asked, resp, epochs):
        seen.append({(t.topic, p.partition_index): (bytes(p.records) if p.records is not None else b"")
                     for t in resp.responses for p in t.partitions})
        return take(asked, resp, epochs)

    c._take_fetch = recording
    return seen


# ------------------------------------------------------------ fetch_max_wait_ms=0
def test_no_fetch_wait_on_an_empty_partition_returns_on_time_and_gets_new_records(kafka):
    bootstrap = kafka.bootstrap()
    topic = _topic(bootstrap)
    tp = TopicPartition(topic, 0)
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=0) as c, \
            Producer(bootstrap_servers=bootstrap, linger_ms=0) as p:
        c.assign([tp])
        assert c.poll(2000) == {}               # connected, position looked up, fetching
        fetches = _count_fetches(c)
        for _ in range(5):
            t0 = time.monotonic()
            assert c.poll(200) == {}
            took = time.monotonic() - t0
            assert 0.2 <= took < 0.2 + 0.3, took
        # the broker did not hold the fetches (500 ms by default, 0 asked): many answered, each empty
        assert len(fetches) >= 5 and not any(data for f in fetches for data in f.values())
        for i in range(5):
            sent = p.send(topic, b"v%d" % i, partition=0)
            sent.get(10)
            t0 = time.monotonic()
            got = c.poll(5000).get(tp, [])
            assert time.monotonic() - t0 < 1.0
            assert [(r.offset, r.value) for r in got] == [(i, b"v%d" % i)]


# ------------------------------------------------------------ max_partition_fetch_bytes
def _fill(bootstrap: str, topic: str, partition: int, n: int, size: int, codec: str, batch_size: int) -> list:
    values = [b"%08d-" % i + os.urandom(size // 2).hex().encode()[: size - 9] for i in range(n)]
    with Producer(bootstrap_servers=bootstrap, compression_type=codec, batch_size=batch_size, linger_ms=50) as p:
        for v in values:
            p.send(topic, v, partition=partition)
        p.flush(30)
    return values


def _read_all(c: Consumer, tps, want: int, seconds: float = 30.0) -> dict:
    got = {tp: [] for tp in tps}
    deadline = time.monotonic() + seconds
    while sum(map(len, got.values())) < want and time.monotonic() < deadline:
        for tp, recs in c.poll(300).items():
            got[tp] += recs
    return got


def _cut_batches(fetches) -> int:
    """How many answered partitions ended inside a batch."""
    return sum(1 for f in fetches for data in f.values() if data and split_batches(data).incomplete_size)


@pytest.mark.parametrize("codec", ["none", "lz4", "zstd"])
def test_a_fetch_cut_inside_a_batch_returns_every_record_once(kafka, codec):
    """Batches of ~4 KiB, a per-partition limit of 10,000 bytes: most
    answers end inside a batch; the records come once and in order."""
    bootstrap = kafka.bootstrap()
    topic = _topic(bootstrap)
    tp = TopicPartition(topic, 0)
    values = _fill(bootstrap, topic, 0, 2000, 200, codec, batch_size=4096)
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                  max_partition_fetch_bytes=10_000) as c:
        c.assign([tp])
        fetches = _count_fetches(c)
        got = _read_all(c, [tp], len(values))[tp]
    assert [r.offset for r in got] == list(range(len(values)))
    assert [r.value for r in got] == values
    sizes = [len(data) for f in fetches for data in f.values() if data]
    assert sizes and max(sizes) <= 10_000          # Kafka kept to the limit...
    assert _cut_batches(fetches) >= len(sizes) // 2  # ...and cut inside batches to do so


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_batches_larger_than_the_partition_limit_still_progress(kafka, codec):
    """Batches of ~64 KiB and a per-partition limit of 8 KiB: the first
    batch of a response comes whole (KIP-74); a second partition of the
    same response gets nothing then (one fetch in flight: both partitions in
    each). Both partitions are read completely, once, in order, and take
    turns: the partition that brought data least recently goes first in the
    next fetch (in a fixed order the second partition waited until the first
    had nothing left, for ever while it is written to)."""
    bootstrap = kafka.bootstrap()
    topic = _topic(bootstrap, 2)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    values = {tp: _fill(bootstrap, topic, tp.partition, 300, 1000, codec, batch_size=65536) for tp in tps}
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", max_partition_fetch_bytes=8192,
                  max_in_flight_fetches=1, retry_backoff_ms=100) as c:
        c.assign(tps)
        fetches = _count_fetches(c)
        t0 = time.monotonic()
        got = _read_all(c, tps, 600)
        took = time.monotonic() - t0
    for tp in tps:
        assert [r.offset for r in got[tp]] == list(range(300)), tp
        assert [r.value for r in got[tp]] == values[tp]
    whole = [data for f in fetches for data in f.values() if len(data) > 8192]
    assert whole and all(not split_batches(d).incomplete_size for d in whole)   # KIP-74: whole, one batch
    # with a whole batch of the other partition first in the response, nothing for this one
    assert any(len([d for d in f.values() if d]) == 1 and len(f) == 2 for f in fetches)
    # turns: partition 1's first data came before partition 0's last
    with_data = [{tp[1] for tp, d in f.items() if d} for f in fetches]
    first_1 = next(i for i, parts in enumerate(with_data) if 1 in parts)
    last_0 = max(i for i, parts in enumerate(with_data) if 0 in parts)
    assert first_1 < last_0, with_data
    assert took < 20, took
