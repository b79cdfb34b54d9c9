"""kwire.aio under cancellation, on both live brokers (``broker``): a wait
cancelled at any moment loses nothing and repeats nothing.

- Consuming: ``getmany`` cancelled by ``asyncio.wait_for`` with tiny
  timeouts and by ``task.cancel()`` after random delays; ``async for``
  broken out of and resumed, or cancelled in a task; ``getone`` cancelled:
  every record comes exactly once, in order per partition, and ``position``
  always says where the next one is.
- Producing: many ``send`` tasks (and ``enqueue`` + ``delivered``, which
  tell when the record was queued) cancelled at random moments, while they
  wait for a new topic's metadata, for room in a tiny ``buffer_memory``, or
  for the acknowledgement: no record is written twice, each one whose call
  returned metadata is where it says, each one queued before its wait was
  cancelled is written too, and none cancelled before it was queued is.
- ``close()`` sends what ``send_nowait`` queued; with the broker gone
  silent (a private broker behind a proxy it advertises, so that every
  connection goes through the proxy), ``close(timeout=1)`` returns on time
  and the records fail with ProducerClosedError.

The test bodies are coroutines run by ``asyncio.run`` (no pytest plugin).
"""

from __future__ import annotations

import asyncio
import collections
import random
import time
import uuid

import pytest

from kwire.admin import Admin, NewTopic
from kwire.aio import AsyncConsumer, AsyncProducer
from kwire.consumer import Consumer
from kwire.errors import ProducerClosedError
from kwire.producer import CLOSE_GRACE, Producer
from support.proxied_broker import proxied_broker
from support.proxies import FaultProxy

PARTITIONS = 4
RECORDS = 50_000


def _topic(bootstrap: str, partitions: int = PARTITIONS) -> str:
    name = f"cancel-{uuid.uuid4().hex[:10]}"
    with Admin(bootstrap_servers=bootstrap) as a:
        a.create_topics([NewTopic(name, partitions)])
    return name


def _read_all(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> dict:
    """Every record of the topic: {(partition, offset): value}. The end is
    the Fetch high watermark (Tansu 0.6.0's ListOffsets latest trails the
    log: the last batch's base offset + 1)."""
    tps = [(topic, p) for p in range(partitions)]
    out = {}
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign(tps)
        deadline = time.monotonic() + 60
        while not all(0 <= c.highwater(tp) <= c.position(tp) for tp in tps):
            assert time.monotonic() < deadline, f"{len(out)} records read"
            for tp, records in c.poll(200).items():
                for r in records:
                    assert (tp.partition, r.offset) not in out
                    out[(tp.partition, r.offset)] = r.value
        assert len(out) == sum(c.highwater(tp) for tp in tps)
    return out


# ------------------------------------------------------------ consuming
@pytest.fixture
def filled(broker):
    """A topic of RECORDS records: value i at partition i % 4, offset i // 4."""
    topic = _topic(broker.bootstrap)
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=5, batch_size=1024) as p:   # small batches
        for i in range(RECORDS):
            p.send(topic, b"%d" % i, partition=i % PARTITIONS)
        p.flush(60)
    return broker.bootstrap, topic


class _Got:
    """The records returned so far, checked as they come: each partition's
    offsets 0, 1, 2, ... once each, with the value written there."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.next = [0] * PARTITIONS
        self.count = 0

    def add(self, partition: int, r) -> None:
        assert r.offset == self.next[partition], (partition, r.offset, self.next[partition])
        assert int(r.value) == r.offset * PARTITIONS + partition
        self.next[partition] += 1
        self.count += 1

    def add_one(self, r) -> None:
        """A record from getone or async for, which do not say its partition:
        the value does (value i is at partition i % 4)."""
        self.add(int(r.value) % PARTITIONS, r)

    def add_all(self, batch) -> None:
        for tp, records in batch.items():
            assert tp.topic == self.topic
            for r in records:
                self.add(tp.partition, r)

    async def check_positions(self, c: AsyncConsumer) -> None:
        assert [await c.position((self.topic, p)) for p in range(PARTITIONS)] == self.next

    def done(self) -> bool:
        return self.count >= RECORDS


async def _cancelled_at(coro, rng: random.Random):
    """``coro`` run as a task cancelled after a random delay (0: before it
    starts): its result, or None when the cancellation came first."""
    task = asyncio.ensure_future(coro)
    await asyncio.sleep(rng.choice([0, 0, rng.uniform(0, 0.0005), rng.uniform(0, 0.005)]))
    task.cancel()
    try:
        return await task
    except asyncio.CancelledError:
        return None


async def _timed_out(coro, rng: random.Random):
    """``coro`` under ``asyncio.wait_for`` with a tiny timeout: its result,
    or None when it timed out."""
    try:
        return await asyncio.wait_for(coro, rng.choice([0, 1e-5, 1e-4, 5e-4, 2e-3, 1e-2]))
    except asyncio.TimeoutError:
        return None


async def _consume_cancelling(bootstrap: str, topic: str, seed: int, turn) -> int:
    """Consume the whole topic, a turn at a time: ``turn(c, got, rng)``
    calls the consumer, hands what it returns to ``got``, and says whether
    the call ended by a cancellation. Then the positions are at the end.
    Returns the number of turns, and of those that ended by a cancellation."""
    rng = random.Random(seed)
    got = _Got(topic)
    turns = cancelled = 0
    deadline = time.monotonic() + 120
    # small fetches (of small batches): the buffer runs dry often, so that calls wait for a fetch
    async with AsyncConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             max_partition_fetch_bytes=2048, fetch_max_bytes=4096) as c:
        c.assign([(topic, p) for p in range(PARTITIONS)])
        while not got.done():
            assert time.monotonic() < deadline, f"{got.count} of {RECORDS} records"
            turns += 1
            if await turn(c, got, rng):
                cancelled += 1
            if rng.random() < 0.05:
                await got.check_positions(c)
        await got.check_positions(c)
        assert got.next == [RECORDS // PARTITIONS] * PARTITIONS
        assert await c.getmany(100) == {}          # nothing more, nothing held
    return turns, cancelled


async def _getmany_turn(c: AsyncConsumer, got: _Got, rng: random.Random) -> bool:
    call = c.getmany(rng.choice([0, 10, 200]), max_records=rng.choice([1, 7, 100, 500, None]))
    how = rng.random()
    if how < 0.45:
        batch = await _timed_out(call, rng)
    elif how < 0.9:
        batch = await _cancelled_at(call, rng)
    else:
        batch = await call                     # some calls not cancelled, so that it gets on
    if batch is None:
        return True
    got.add_all(batch)
    return False


async def _iterate_turn(c: AsyncConsumer, got: _Got, rng: random.Random) -> bool:
    how = rng.random()
    if how < 0.35:                             # async for, broken out of; resumed by the next turn
        left = min(rng.choice([1, 3, 50, 700, 3000]), RECORDS - got.count)   # never waits past the last
        async for r in c:
            got.add_one(r)
            left -= 1
            if left == 0:
                break
        await got.check_positions(c)           # the records taken but not handed out count as not returned
        return False
    if how < 0.6:                              # async for in a task, cancelled at a random moment
        async def drain() -> None:
            async for r in c:
                got.add_one(r)
        await _cancelled_at(drain(), rng)       # it never ends otherwise
        return True
    call = c.getone()
    r = await (_timed_out(call, rng) if how < 0.8 else _cancelled_at(call, rng))
    if r is None:
        return True
    got.add_one(r)
    return False


def test_getmany_cancelled_at_random_moments_loses_and_repeats_nothing(filled):
    bootstrap, topic = filled
    t0 = time.monotonic()
    turns, cancelled = asyncio.run(_consume_cancelling(bootstrap, topic, 1, _getmany_turn))
    assert cancelled > turns // 25          # typically 20-30 %; a call that finds records buffered returns at once
    print(f"getmany: {RECORDS} records, {turns} calls, {cancelled} cancelled, {time.monotonic() - t0:.1f} s")


def test_async_for_and_getone_cancelled_or_left_lose_and_repeat_nothing(filled):
    bootstrap, topic = filled
    t0 = time.monotonic()
    turns, cancelled = asyncio.run(_consume_cancelling(bootstrap, topic, 2, _iterate_turn))
    assert cancelled > turns // 10
    print(f"async for / getone: {RECORDS} records, {turns} turns, {cancelled} cancelled, "
          f"{time.monotonic() - t0:.1f} s")


# ------------------------------------------------------------ producing
# what each scenario's sends wait for when they are cancelled
SCENARIOS = {
    # a topic the producer has no metadata for: the first sends wait for it
    "metadata": dict(n=400, size=10, delay=0.004, warm=False, options={}),
    # buffer_memory for 32 records of 1 KB: most sends wait for room
    "room": dict(n=3000, size=1000, delay=0.3, warm=True,
                 options={"buffer_memory": 32768, "batch_size": 4096, "linger_ms": 0}),
    # every record queued at once (metadata known, room plenty): the cancellations hit the wait for the ack
    "ack": dict(n=3000, size=10, delay=0.05, warm=True, options={"linger_ms": 20}),
}


async def _send_storm(bootstrap: str, topic: str, api: str, scenario: dict, seed: int):
    """One task per record (``api``: "send", or "enqueue" then "delivered"),
    half of them cancelled at random moments. Returns the state each
    record's task was in when it ended ("new": not started; "queuing":
    waiting for metadata or room; "queued": waiting for the ack; "acked";
    with "send", "sending" for both of these), whether it was cancelled, the
    metadata it returned, and the futures ``enqueue`` returned."""
    rng = random.Random(seed)
    state, metas, futures = {}, {}, {}

    async def one(i: int, value: bytes) -> None:
        if api == "send":
            state[i] = "sending"
            metas[i] = await p.send(topic, value)
        else:
            state[i] = "queuing"
            futures[i] = fut = await p.enqueue(topic, value)
            state[i] = "queued"
            metas[i] = await p.delivered(fut)
        state[i] = "acked"

    p = AsyncProducer(bootstrap_servers=bootstrap, **scenario["options"])
    try:
        if scenario["warm"]:
            await p.partitions_for(topic)
        loop = asyncio.get_running_loop()
        tasks = []
        for i in range(scenario["n"]):
            state[i] = "new"
            t = loop.create_task(one(i, b"%0*d" % (scenario["size"], i)))
            if rng.random() < 0.5:
                loop.call_later(rng.uniform(0, scenario["delay"]), t.cancel)
            tasks.append(t)
        await asyncio.gather(*tasks, return_exceptions=True)
        cancelled = {i for i, t in enumerate(tasks) if t.cancelled()}
        assert not [t.exception() for t in tasks if not t.cancelled() and t.exception()]
        await p.flush(60)
    finally:
        await p.close()
    return state, cancelled, metas, futures


@pytest.mark.parametrize("api", ["send", "enqueue"])
@pytest.mark.parametrize("waiting", sorted(SCENARIOS))
def test_sends_cancelled_at_random_moments_write_each_record_once(broker, waiting, api):
    """A send cancelled before its record is queued writes nothing; once
    queued, the record is written exactly once however the wait for its ack
    ends. ``send`` itself is ``enqueue`` then ``delivered``, and its caller
    cannot tell which of the two a cancellation hit: a cancelled ``send``'s
    record may be in the topic (exactly once) or not. Measured (printed
    below): while waiting for metadata, none of the cancelled sends' records
    is written; while waiting for the ack, all are; with a tiny
    buffer_memory, a few (those queued before the cancellation)."""
    scenario = SCENARIOS[waiting]
    topic = _topic(broker.bootstrap)
    t0 = time.monotonic()
    state, cancelled, metas, futures = asyncio.run(_send_storm(broker.bootstrap, topic, api, scenario, 3))
    written = _read_all(broker.bootstrap, topic)
    where = collections.Counter(int(v) for v in written.values())
    assert not [i for i, k in where.items() if k > 1], "a record written twice"
    for i, meta in metas.items():                       # what a call said is where it is
        assert int(written[(meta.partition, meta.offset)]) == i
    ended = collections.Counter(state[i] for i in cancelled)
    for i in cancelled:
        if state[i] == "queued":                        # cancelled waiting for the ack: written all the same
            meta = futures[i].get(0)
            assert int(written[(meta.partition, meta.offset)]) == i
        elif state[i] == "new":
            assert i not in where
        elif api == "enqueue":
            assert state[i] == "queuing" and i not in where, (i, state[i])   # cancelled before it was queued
    assert set(where) <= {i for i in state if state[i] != "new"}
    assert all(state[i] == "acked" for i in state if i not in cancelled)
    in_flight_cancels = [i for i in cancelled if state[i] != "new"]
    written_anyway = sum(i in where for i in in_flight_cancels)
    # the cancellations hit the wait this scenario is about
    if api == "enqueue":
        assert ended["queuing" if waiting != "ack" else "queued"] > 0, ended
    else:
        assert in_flight_cancels, ended
    print(f"{waiting}/{api}: {scenario['n']} sends, {len(cancelled)} cancelled ({dict(ended)}); "
          f"{written_anyway} of {len(in_flight_cancels)} cancelled while under way written; "
          f"{len(written)} records in {time.monotonic() - t0:.1f} s")


# ------------------------------------------------------------ close
@pytest.mark.parametrize("timeout", [None, 30])
def test_close_sends_what_send_nowait_queued(broker, timeout):
    topic = _topic(broker.bootstrap)
    n = 5000

    async def run():
        # one open batch per partition, lingering: nothing goes before close()
        p = AsyncProducer(bootstrap_servers=broker.bootstrap, linger_ms=60_000, batch_size=1 << 20)
        await p.partitions_for(topic)
        futures = [p.send_nowait(topic, b"%d" % i) for i in range(n)]
        await asyncio.sleep(0.1)
        assert not any(f.done() for f in futures)
        await p.close(timeout)
        assert p._p._sender.done()
        return futures

    futures = asyncio.run(run())
    written = _read_all(broker.bootstrap, topic)
    assert len(written) == n
    for i, f in enumerate(futures):
        meta = f.get(0)
        assert int(written[(meta.partition, meta.offset)]) == i


@pytest.fixture(scope="module", params=[pytest.param("tansu", marks=pytest.mark.broker),
                                        pytest.param("kafka", marks=pytest.mark.kafka)])
def proxied(request):
    """(proxy, broker name): a private broker behind a FaultProxy, advertising
    it, so that black_hole() silences every connection the client has or makes."""
    with proxied_broker(request.param, FaultProxy) as proxy:
        yield proxy, request.param


def test_close_with_a_timeout_returns_on_time_with_the_broker_silent(proxied):
    proxy, _ = proxied
    topic = _topic(proxy.address)

    async def run():
        p = AsyncProducer(bootstrap_servers=proxy.address, request_timeout_ms=20_000, delivery_timeout_ms=30_000)
        assert (await p.send(topic, b"warm")).offset == 0
        proxy.black_hole()
        futures = [p.send_nowait(topic, b"x-%d" % i) for i in range(100)]
        await asyncio.sleep(0.2)                      # sent, or being sent: nothing comes back
        t0 = time.monotonic()
        await p.close(timeout=1)
        took = time.monotonic() - t0
        assert p._p._sender.done()
        return futures, took

    try:
        futures, took = asyncio.run(run())
    finally:
        proxy.heal()
    assert 0.9 < took < 1 + CLOSE_GRACE + 0.3, took
    assert all(isinstance(f.exception(), ProducerClosedError) for f in futures)
    print(f"close(timeout=1) with the broker silent: {took:.2f} s")

