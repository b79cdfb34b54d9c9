"""kwire.aio's API against the blocking clients': the same names and
parameters (moving between them is mechanical), every admin call there,
no blocking wait left on the event loop's client; and a consumer group of
AsyncConsumers (classic and KIP-848 protocols) natively on the loop, with
the cancellation of a getmany, on both brokers.

The behaviour suite runs with both kinds of client through the ``kw``
fixture (tests/conftest.py, tests/support/aio_bridge.py)."""

from __future__ import annotations

import asyncio
import inspect
import time
import uuid

import pytest

from kwire.admin import Admin, NewTopic
from kwire.aio import AsyncAdmin, AsyncConsumer, AsyncProducer
from kwire.aio.client import AioClient
from kwire.config import CONSUMER, resolve
from kwire.consumer import Consumer
from kwire.errors import KwireError
from kwire.producer import Producer


def _params(fn):
    return [p for p in inspect.signature(fn).parameters if p != "self"]


def test_async_admin_has_every_admin_call_with_its_parameters():
    calls = {n for n, f in vars(Admin).items() if hasattr(f, "steps")}
    assert len(calls) > 20
    for name in calls:
        ours = getattr(AsyncAdmin, name, None)
        assert inspect.iscoroutinefunction(ours), name
        assert _params(ours) == _params(getattr(Admin, name).steps), name


@pytest.mark.parametrize("blocking, ours, renamed", [
    (Producer, AsyncProducer, {}),
    (Consumer, AsyncConsumer, {"poll": "getmany"}),
])
def test_the_async_clients_keep_the_blocking_names_and_parameters(blocking, ours, renamed):
    public = {n for n in dir(blocking) if not n.startswith("_") and callable(getattr(blocking, n))}
    for name in sorted(public):
        mine = getattr(ours, renamed.get(name, name), None)
        assert mine is not None, f"{ours.__name__} lacks {name}"
        theirs = getattr(blocking, name)
        if name in ("send",):
            continue                # compiled: no signature to read; checked below
        if inspect.isfunction(theirs):
            assert _params(mine)[:len(_params(theirs))] == _params(theirs) or name == "commit", name
    assert _params(AsyncProducer.send) == ["topic", "value", "key", "headers", "partition", "timestamp_ms"]
    assert _params(AsyncProducer.send_nowait) == _params(AsyncProducer.send)


def test_a_blocking_wait_on_the_loops_client_is_a_loud_error():
    async def main():
        client = AioClient(resolve(CONSUMER, {"bootstrap.servers": "127.0.0.1:9"}, {}, what="consumer"))
        try:
            with pytest.raises(KwireError, match="blocking wait on an asyncio client"):
                client.poll(0.1)
            with pytest.raises(KwireError, match="blocking wait on an asyncio client"):
                client.refresh_metadata(timeout=0.1)
        finally:
            client.close()

    asyncio.run(main())


def _topic(bootstrap, partitions):
    name = f"aio-{uuid.uuid4().hex[:10]}"
    with Admin(bootstrap_servers=bootstrap) as a:
        a.create_topics([NewTopic(name, partitions)])
    return name


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_group_of_async_consumers_shares_the_partitions_and_commits(broker, protocol):
    """Two AsyncConsumers on one loop in one group: each gets a share, every
    record is read once (the hand-overs commit first: auto commit), a
    cancelled getmany loses nothing, and a third
    consumer after both closed resumes at what they committed."""
    if protocol == "consumer" and broker.is_tansu:
        pytest.skip("Tansu 0.6.0 has no KIP-848 consumer groups")
    topic, group = _topic(broker.bootstrap, 4), f"g-{uuid.uuid4().hex[:8]}"
    n = 2000
    session = {"session_timeout_ms": 3000 if broker.is_tansu else 6000, "heartbeat_interval_ms": 300}
    if protocol == "consumer":
        session = {}

    async def main():
        async with AsyncProducer(bootstrap_servers=broker.bootstrap, linger_ms=2) as p:
            await p.partitions_for(topic)
            for i in range(n):
                p.send_nowait(topic, b"%d" % i, key=b"k%d" % i)
            await p.flush(30)
        members = [AsyncConsumer(bootstrap_servers=broker.bootstrap, group_id=group, group_protocol=protocol,
                                 auto_offset_reset="earliest", **session)
                   for _ in range(2)]
        for m in members:
            m.subscribe([topic])
        seen = []
        deadline = time.monotonic() + 90
        cancelled = 0
        while time.monotonic() < deadline:
            for m in members:
                task = asyncio.ensure_future(m.getmany(100))
                if cancelled < 20 and len(seen) % 3 == 0:
                    await asyncio.sleep(0.001)
                    if not task.done():
                        task.cancel()
                        cancelled += 1
                try:
                    got = await task
                except asyncio.CancelledError:
                    continue
                for records in got.values():
                    seen.extend(int(r.value) for r in records)
            owned = [tp for m in members for tp in m.assignment()]
            if len(seen) >= n and len(owned) == 4 and all(m.assignment() for m in members):
                break
        assert sorted(seen) == list(range(n)), (len(seen), len(set(seen)))
        assert sorted(tp.partition for m in members for tp in m.assignment()) == [0, 1, 2, 3]
        for m in members:
            await m.commit()
            committed = await m.committed(m.assignment())
            for tp in m.assignment():
                assert committed[tp].offset == await m.position(tp)
            await m.close()
        async with AsyncConsumer(bootstrap_servers=broker.bootstrap, group_id=group, group_protocol=protocol,
                                 auto_offset_reset="earliest", **session) as late:
            late.subscribe([topic])
            got = await late.getmany(3000)
            assert not got                 # everything was committed: nothing to read again

    asyncio.run(main())


def test_async_admin_round_trip(broker):
    async def main():
        async with AsyncAdmin(bootstrap_servers=broker.bootstrap) as a:
            name = f"aio-{uuid.uuid4().hex[:10]}"
            await a.create_topics([NewTopic(name, 3)])
            assert name in await a.list_topics()
            desc = (await a.describe_topics([name]))[name]
            assert len(desc.partitions) == 3
            cluster = await a.describe_cluster()
            assert cluster.brokers
            ends = await a.list_offsets({(name, p): "latest" for p in range(3)})
            assert {o for o, _ in ends.values()} == {0}

    asyncio.run(main())
