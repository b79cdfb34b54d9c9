"""kwire.aio on uvloop: AsyncProducer and AsyncConsumer on
``uvloop.new_event_loop()``, written natively as coroutines (each test runs
one on a fresh uvloop loop, :func:`_on_uvloop`).

A plain round trip with every codec, headers and null keys and values on
both brokers; TLS (mutual) and SASL SCRAM round trips, and their refusals,
on Apache Kafka; a cancelled ``getmany`` losing nothing. Skipped when
uvloop is not installed (it is a test extra; not on Windows)."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from typing import Any, Awaitable, Callable

import pytest

import kwire
from kwire.admin import Admin, NewTopic
from kwire.aio import AsyncConsumer, AsyncProducer
from kwire.net import TlsError
from kwire.sasl import SaslAuthenticationError

uvloop = pytest.importorskip("uvloop")

TEST_TIMEOUT = 120.0


def _on_uvloop(test: Callable[[], Awaitable[Any]]) -> Any:
    """Run the coroutine ``test()`` on a new uvloop loop (at most
    TEST_TIMEOUT s), checking it is uvloop's, and close the loop."""
    async def checked() -> Any:
        assert isinstance(asyncio.get_running_loop(), uvloop.Loop)
        return await asyncio.wait_for(test(), TEST_TIMEOUT)

    loop = uvloop.new_event_loop()
    try:
        return loop.run_until_complete(checked())
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def _topic(cfg: dict, partitions: int = 1) -> str:
    name = f"uv-{uuid.uuid4().hex[:10]}"
    with Admin(cfg) as a:
        a.create_topics([NewTopic(name, partitions)])
    return name


async def _consume(cfg: dict, topic: str, partitions: int, n: int, deadline_s: float = 30.0) -> list:
    """Up to ``n`` records of ``topic`` from the start, as (partition, record)."""
    got = []
    async with AsyncConsumer(cfg, auto_offset_reset="earliest") as c:
        c.assign([(topic, p) for p in range(partitions)])
        deadline = time.monotonic() + deadline_s
        while len(got) < n and time.monotonic() < deadline:
            for tp, recs in (await c.getmany(500)).items():
                got += [(tp.partition, r) for r in recs]
    return got


# ------------------------------------------------------- both brokers
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_round_trip_every_codec(broker, codec):
    cfg = {"bootstrap.servers": broker.bootstrap}
    topic = _topic(cfg, 3)
    sent = []
    for i in range(2000):
        key = None if i % 7 == 0 else b"key-%d" % (i % 50)
        value = None if i % 11 == 0 else b"value-%d" % i
        headers = [("n", b"%d" % i), ("none", None)] if i % 3 == 0 else None
        sent.append((key, value, headers))

    async def test():
        async with AsyncProducer(cfg, compression_type=codec, linger_ms=2) as p:
            assert isinstance(p._p._client._loop, uvloop.Loop)
            key, value, headers = sent[0]
            first = await p.send(topic, value, key=key, headers=headers)     # awaited: the metadata is known after it
            futs = [p.send_nowait(topic, value, key=key, headers=headers) for key, value, headers in sent[1:]]
            await p.flush(30)
            metas = [first] + [f.get(0) for f in futs]
        return metas, await _consume(cfg, topic, 3, len(sent))

    metas, got = _on_uvloop(test)
    assert len(got) == len(sent)
    by_pos = {(part, r.offset): r for part, r in got}
    for (key, value, headers), meta in zip(sent, metas):
        r = by_pos[(meta.partition, meta.offset)]
        assert (r.key, r.value, r.headers) == (key, value, tuple(headers or ()))
        if key is not None:
            assert meta.partition == kwire.partition_for_key(key, 3)


def test_cancelled_getmany_loses_nothing(broker):
    """getmany cancelled at random points (mid-wait, or before its first
    turn) while records keep arriving: every record comes out once, in
    order, from the calls that were not cancelled."""
    cfg = {"bootstrap.servers": broker.bootstrap}
    topic = _topic(cfg)
    n = 3000

    async def test():
        got, cancelled = [], 0
        async with AsyncProducer(cfg, linger_ms=1) as p, \
                AsyncConsumer(cfg, auto_offset_reset="earliest", max_poll_records=50) as c:
            await p.partitions_for(topic)

            async def produce():
                for i in range(n):
                    p.send_nowait(topic, b"%d" % i, partition=0)
                    if i % 100 == 99:
                        await p.flush(30)
                        await asyncio.sleep(0.01)
                await p.flush(30)

            producing = asyncio.ensure_future(produce())
            c.assign([(topic, 0)])
            rnd = random.Random(19)
            deadline = time.monotonic() + 60
            while len(got) < n and time.monotonic() < deadline:
                task = asyncio.ensure_future(c.getmany(200))
                if rnd.random() < 0.6:
                    await asyncio.sleep(rnd.choice([0, 0, 0.0005, 0.002, 0.01]))
                    task.cancel()
                try:
                    recs = await task
                except asyncio.CancelledError:
                    cancelled += 1
                    continue
                got += [r.value for r in recs.get((topic, 0), [])]
            await producing
        return got, cancelled

    got, cancelled = _on_uvloop(test)
    assert cancelled >= 5          # cancellations that hit a call (the others came too late: it had returned)
    assert got == [b"%d" % i for i in range(n)]


# ------------------------------------------------------- Apache Kafka
async def _round_trip(cfg: dict, topic: str) -> bytes:
    async with AsyncProducer(cfg) as p:
        meta = await p.send(topic, b"secret-value", key=b"k", partition=0)
    assert meta.offset == 0
    got = await _consume(cfg, topic, 1, 1, 20)
    assert len(got) == 1
    return got[0][1].value


async def _refused(cfg: dict, error: type, match: str) -> None:
    """An AsyncConsumer's call that needs a broker raises ``error`` at once, not retriable."""
    t0 = time.monotonic()
    async with AsyncConsumer({**cfg, "request.timeout.ms": 10000}) as c:
        with pytest.raises(error, match=match) as info:
            await c.end_offsets([("refused", 0)], timeout=10)
    assert time.monotonic() - t0 < 5.0
    assert info.value.retriable is False


@pytest.mark.kafka
def test_tls_round_trip_and_refusals(kafka):
    cfg = kafka.client_config("ssl")          # mutual TLS, the broker's certificate checked (host name too)
    topic = _topic(cfg)
    port = kafka.bootstrap("ssl").rsplit(":", 1)[1]

    async def test():
        assert await _round_trip(cfg, topic) == b"secret-value"
        await _refused({**cfg, "bootstrap.servers": f"127.0.0.1:{port}"}, TlsError,
                       "certificate was refused: IP address mismatch")
        await _refused({**cfg, "ssl.ca.location": kafka.pki.other_ca}, TlsError,
                       "certificate was refused: unable to get local issuer")
        await _refused(kafka.client_config("ssl", client_cert=False), TlsError, "client certificate")

    _on_uvloop(test)


@pytest.mark.kafka
@pytest.mark.parametrize("listener", ["sasl_plaintext", "sasl_ssl"])
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_scram_round_trip_and_wrong_password(kafka, listener, mechanism):
    cfg = kafka.client_config(listener, user=("alice", kafka.users["alice"]), mechanism=mechanism)
    topic = _topic(cfg)

    async def test():
        assert await _round_trip(cfg, topic) == b"secret-value"
        await _refused(kafka.client_config(listener, user=("alice", "wrong-password"), mechanism=mechanism),
                       SaslAuthenticationError, f"refused SASL {mechanism}")

    _on_uvloop(test)
