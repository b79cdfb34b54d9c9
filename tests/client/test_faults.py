"""A proxy between client and broker cuts connections mid-frame at random
points while kwire produces (idempotent) and consumes 1,000,000 records:
nothing is lost, nothing is duplicated, every offset is exact. On both
brokers: Tansu and Apache Kafka, each a private one advertising the proxy,
so every connection the client makes goes through it.

Restarting the broker is not the fault (Tansu keeps its data in memory;
Kafka's restarts are tests/kafka/test_live_leader_epoch.py's); cutting the
TCP connections is. KWIRE_FAULT_RECORDS changes the count.

Each broker's test runs twice: with the blocking clients, and with kwire.aio
natively (one coroutine: send_nowait, awaiting enqueue when it would block,
then flush, then getmany), the same assertions on both."""

from __future__ import annotations

import asyncio
import functools
import os
import time
import uuid

import pytest

from kwire.admin import Admin, NewTopic
from kwire.aio import AsyncConsumer, AsyncProducer, WouldBlockError
from kwire.consumer import Consumer
from kwire.producer import Producer
from support.proxied_broker import proxied_broker
from support.proxies import FaultProxy

pytestmark = pytest.mark.slow

N = int(os.environ.get("KWIRE_FAULT_RECORDS", "1000000"))
PARTITIONS = 4


@pytest.fixture(scope="module", params=[pytest.param("tansu", marks=pytest.mark.broker),
                                        pytest.param("kafka", marks=pytest.mark.kafka)])
def faulty(request):
    """(proxy, broker name): a private broker behind a FaultProxy, advertising it."""
    make = functools.partial(FaultProxy, seed=20261123, min_bytes=200_000, max_bytes=4_000_000)
    with proxied_broker(request.param, make) as proxy:
        yield proxy, request.param


PRODUCER = {"compression_type": "lz4", "linger_ms": 5, "batch_size": 65536}


def _record(i: int):
    return b"%099d" % i, b"%016d" % i


def _take(seen: dict, tp, records) -> None:
    for r in records:
        assert (tp.partition, r.offset) not in seen, "a record came twice"
        seen[(tp.partition, r.offset)] = int(r.value)


def _run_sync(proxy, cfg, topic, limit):
    """The blocking clients: (futures, produce cuts, seen, positions)."""
    start = proxy.cuts
    with Producer(cfg, **PRODUCER) as p:
        assert p.cfg["enable_idempotence"]
        futures = [p.send(topic, value, key=key) for value, key in map(_record, range(N))]
        p.flush(300)
    produce_cuts = proxy.cuts - start
    seen = {}
    with Consumer(cfg, auto_offset_reset="earliest", **limit) as c:
        c.assign([(topic, p) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 300
        while len(seen) < N and time.monotonic() < deadline:
            for tp, records in c.poll(500, max_records=20000).items():
                _take(seen, tp, records)
        positions = [c.position((topic, p)) for p in range(PARTITIONS)]
    return futures, produce_cuts, seen, positions


async def _run_aio(proxy, cfg, topic, limit):
    """kwire.aio, natively on one loop: send_nowait (await enqueue when it
    would block), flush, then getmany; as :func:`_run_sync` returns."""
    start = proxy.cuts
    p = AsyncProducer(cfg, **PRODUCER)
    try:
        assert p.cfg["enable_idempotence"]
        futures, blocked = [], 0
        for i in range(N):
            value, key = _record(i)
            try:
                futures.append(p.send_nowait(topic, value, key=key))
            except WouldBlockError:
                blocked += 1
                futures.append(await p.enqueue(topic, value, key=key))
        await p.flush(300)
    finally:
        await p.close()
    assert blocked > 0           # the loop did wait: for the topic's metadata at least
    produce_cuts = proxy.cuts - start
    seen = {}
    c = AsyncConsumer(cfg, auto_offset_reset="earliest", **limit)
    try:
        c.assign([(topic, p) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 300
        while len(seen) < N and time.monotonic() < deadline:
            for tp, records in (await c.getmany(500, max_records=20000)).items():
                _take(seen, tp, records)
        positions = [await c.position((topic, p)) for p in range(PARTITIONS)]
    finally:
        await c.close()
    return futures, produce_cuts, seen, positions


def _check(futures, seen, positions) -> int:
    """Every record acknowledged, consumed exactly once, at the offset its
    producer was told; the positions past them all. The number acknowledged
    as duplicates (offset unknown)."""
    where, unknown = {}, 0
    for i, f in enumerate(futures):
        meta = f.get(0)                          # every record acknowledged, none failed
        if meta.offset < 0:
            # a re-sent batch the broker had already written answers DUPLICATE_SEQUENCE_NUMBER
            # without its offset; Kafka's clients report offset -1 then, and so does kwire
            unknown += 1
        else:
            assert (meta.partition, meta.offset) not in where
            where[(meta.partition, meta.offset)] = i
    assert len(where) + unknown == N

    assert len(seen) == N
    assert sorted(seen.values()) == list(range(N))          # each record exactly once
    assert all(seen[pos] == i for pos, i in where.items())  # at the offset its producer was told
    for p in range(PARTITIONS):
        offsets = sorted(o for (q, o) in seen if q == p)
        assert offsets == list(range(len(offsets)))
    assert sum(positions) == N
    return unknown


@pytest.mark.parametrize("kind", ["sync", "aio"])
def test_idempotent_produce_and_consume_through_cut_connections(faulty, kind):
    proxy, name = faulty
    topic = f"fault-{uuid.uuid4().hex[:8]}"
    cfg = {"bootstrap.servers": proxy.address, "request.timeout.ms": 5000, "reconnect.backoff.ms": 20}
    with Admin(cfg) as admin:
        admin.create_topics([NewTopic(topic, PARTITIONS)])

    # Fetch responses are kept below the cut interval, so every cut is mid-frame and progress
    # is possible: by the per-partition limit on Kafka; by the request's on Tansu 0.6.0, which
    # ignores the per-partition limit.
    limit = {"fetch_max_bytes": 1 << 20} if name == "tansu" else {"max_partition_fetch_bytes": 1 << 18}
    start = proxy.cuts
    proxy.cutting = True
    try:
        if kind == "sync":
            futures, produce_cuts, seen, positions = _run_sync(proxy, cfg, topic, limit)
        else:
            futures, produce_cuts, seen, positions = asyncio.run(_run_aio(proxy, cfg, topic, limit))
    finally:
        proxy.cutting = False
    consume_cuts = proxy.cuts - start - produce_cuts

    unknown = _check(futures, seen, positions)
    assert produce_cuts > 0 and consume_cuts > 0, (produce_cuts, consume_cuts)
    print(f"{kind}: {N} records; produce: {produce_cuts} cuts, {unknown} acknowledged as duplicates; "
          f"consume: {consume_cuts} cuts")
