"""kwire.aio's fast path under backpressure, on both live brokers
(``broker``): ``send_nowait``, falling back to ``await enqueue()`` when it
raises WouldBlockError (docs/guide/asyncio.md's pattern), through a tiny
``buffer_memory`` delivers every record exactly once and in order per
partition; each wait for room lasts until a share of the buffer is free, so
the sends after it queue in a run (at least that share of bytes between two
refusals).

The test bodies are coroutines run by ``asyncio.run`` (no pytest plugin).
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from typing import Dict, List, Tuple

from kwire.admin import Admin, NewTopic
from kwire.aio import AsyncProducer, WouldBlockError
from kwire.aio.producer import resume_at
from kwire.consumer import Consumer

PARTITIONS = 4


def _topic(bootstrap: str) -> str:
    name = f"backpressure-{uuid.uuid4().hex[:10]}"
    with Admin(bootstrap_servers=bootstrap) as a:
        a.create_topics([NewTopic(name, PARTITIONS)])
    return name


def _read(bootstrap: str, topic: str, n: int) -> Dict[int, List[Tuple[int, bytes]]]:
    """partition -> [(offset, value)] of the topic's first ``n`` records."""
    out: Dict[int, List[Tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign([(topic, p) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 60
        got = 0
        while got < n:
            assert time.monotonic() < deadline, f"{got} of {n} records read"
            for tp, records in c.poll(200).items():
                out[tp.partition].extend((r.offset, r.value) for r in records)
                got += len(records)
    return out


async def _send_nowait_or_enqueue(p: AsyncProducer, topic: str, records: List[Tuple[bytes, bytes]]):
    """docs/guide/asyncio.md's pattern; returns the futures and how many sends were refused for room."""
    futures, refused = [], 0
    for key, value in records:
        try:
            fut = p.send_nowait(topic, value, key=key)
        except WouldBlockError as e:
            assert e.reason == "room" and "buffer_memory (65536 bytes) is full" in str(e)
            refused += 1
            fut = await p.enqueue(topic, value, key=key)
        futures.append(fut)
    return futures, refused


def test_send_nowait_falling_back_to_enqueue_delivers_each_record_once_in_order(broker):
    topic = _topic(broker.bootstrap)
    rng = random.Random(32)
    n = 6000
    records = [(b"k%d" % rng.randrange(64), b"%06d:" % i + bytes(rng.randrange(50, 1001) - 7)) for i in range(n)]
    buffer_memory, batch_size = 64 << 10, 2048

    async def main():
        async with AsyncProducer(bootstrap_servers=broker.bootstrap, buffer_memory=buffer_memory,
                                 batch_size=batch_size, linger_ms=1) as p:
            await p.partitions_for(topic)
            futures, refused = await _send_nowait_or_enqueue(p, topic, records)
            await p.flush(60)
        return [f.get(0) for f in futures], refused

    metas, refused = asyncio.run(main())
    by_partition = _read(broker.bootstrap, topic, n)
    assert sum(map(len, by_partition.values())) == n
    sent: Dict[int, List[bytes]] = {p: [] for p in range(PARTITIONS)}
    for (key, value), meta in zip(records, metas):
        sent[meta.partition].append(value)
        assert by_partition[meta.partition][len(sent[meta.partition]) - 1] == (meta.offset, value)
    for p, got in by_partition.items():
        assert [v for _, v in got] == sent[p]                # each once, in the order sent
    # a refusal needs a full buffer, and each wait for room ends with a share of it free
    share = buffer_memory - resume_at(buffer_memory, batch_size)
    queued = sum(len(k) + len(v) + 80 for k, v in records)  # bytes buffered, at most (record and batch overhead)
    assert 0 < refused <= queued // share + 1, (refused, queued // share)
