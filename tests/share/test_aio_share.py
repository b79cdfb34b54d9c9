"""kwire.aio.AsyncShareConsumer on Kafka 4.4: the blocking share consumer's
logic on an event loop; a poll cancelled at any moment loses nothing (each
record comes once, none is accepted without having been returned), and
acknowledgements made before a cancelled poll are committed (poll and
poll_columnar alike)."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from kwire.aio import AsyncShareConsumer
from kwire.share import AcknowledgeType

from .test_share_consumer import _group, _member, _topic

pytestmark = pytest.mark.kafka


async def _cancelled_polls(bootstrap: str, group: str, topic: str, records: int) -> list:
    rng = random.Random(7)
    got = []
    async with AsyncShareConsumer(bootstrap_servers=bootstrap, group_id=group) as c:
        c.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(got) < records:
            assert time.monotonic() < deadline, len(got)
            columns = rng.random() < 0.5                    # records or Arrow batches, alike
            task = asyncio.ensure_future(c.poll_columnar(500) if columns else c.poll(500))
            await asyncio.sleep(rng.choice((0, 0, 0.001, 0.01, 0.05, 0.2)))
            if not task.done():
                task.cancel()
            try:
                out = await task
            except asyncio.CancelledError:
                continue
            if columns:
                got += [(tp.partition, o, n) for tp, b in out.items()
                        for o, n in zip(b.column("offset").to_pylist(), b.column("delivery_count").to_pylist())]
            else:
                got += [(r.partition, r.offset, r.delivery_count) for rs in out.values() for r in rs]
        await c.commit_sync(10)
    return got


def test_a_cancelled_poll_loses_nothing(kafka):
    bootstrap = kafka.bootstrap("plaintext")
    topic, group = _topic(bootstrap, 2, 400), _group(bootstrap)
    got = asyncio.run(_cancelled_polls(bootstrap, group, topic, 400))
    assert sorted((p, o) for p, o, _ in got) == sorted((i % 2, i // 2) for i in range(400))
    assert {n for _, _, n in got} == {1}
    late = _member(bootstrap, group, topic)
    try:
        assert sum(len(v) for _ in range(8) for v in late.poll(300).values()) == 0
    finally:
        late.close()


async def _acknowledged_then_cancelled(bootstrap: str, group: str, topic: str) -> int:
    async with AsyncShareConsumer(bootstrap_servers=bootstrap, group_id=group,
                                  share_acknowledgement_mode="explicit") as c:
        c.subscribe([topic])
        records = []
        deadline = time.monotonic() + 30
        while not records:
            assert time.monotonic() < deadline
            records = [r for rs in (await c.poll(200)).values() for r in rs]
        for r in records:
            c.acknowledge(r, AcknowledgeType.ACCEPT)
        task = asyncio.ensure_future(c.poll(5000))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return len(records)


def test_acknowledgements_made_before_a_cancelled_poll_are_committed(kafka):
    bootstrap = kafka.bootstrap("plaintext")
    topic, group = _topic(bootstrap, 1, 50), _group(bootstrap)
    n = asyncio.run(_acknowledged_then_cancelled(bootstrap, group, topic))
    late = _member(bootstrap, group, topic)
    try:
        left = [r.offset for _ in range(10) for v in late.poll(300).values() for r in v]
    finally:
        late.close()
    assert len(left) == 50 - n and not set(left) & set(range(n))
