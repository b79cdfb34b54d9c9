"""Incremental fetch sessions (KIP-227) on Apache Kafka: kwire's consumer
opens a session with its first (full) Fetch, then names only the partitions
that changed, and forgets those it stops fetching (paused, unassigned, read
ahead twice); every record still comes once, in order.

The session errors come from the real broker: sessions are not tied to a
connection, so a second client closes the consumer's session (the consumer's
next Fetch gets FETCH_SESSION_ID_NOT_FOUND) or takes the epoch it was to
send next (INVALID_FETCH_SESSION_EPOCH). The consumer then fetches in full
(a new session) and loses, repeats or skips no record. (Kafka's own
eviction cannot be used here: a consumer's session is evicted only after
two idle minutes, a constant of the broker.)

Each Fetch of an open session is said at DEBUG by the ``kwire.consumer``
logger (the full one that opens it is not: no session yet); the tests count
its partitions from those lines.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import re
import time
import uuid
from contextlib import contextmanager
from typing import Any, Dict, Iterable, Iterator, List, NamedTuple, Tuple

import pytest

from kwire import protocol
from kwire.admin import Admin, NewTopic
from kwire.aio import AsyncConsumer
from kwire.client import Client
from kwire.config import CONSUMER, resolve
from kwire.consumer import Consumer, TopicPartition
from kwire.producer import Producer
from kwire.protocol.api_keys import ErrorCode

pytestmark = pytest.mark.kafka

_LINE = re.compile(r"fetch session (\d+) \(epoch (-?\d+)\) to node (\d+): (\d+) of (\d+) partition\(s\) sent, "
                   r"(\d+) forgotten")


class Sent(NamedTuple):
    session_id: int
    epoch: int
    sent: int
    fetched: int
    forgotten: int


def session_fetches(caplog: Any) -> List[Sent]:
    """The Fetches of open sessions the consumer sent, in order (from its DEBUG lines)."""
    out = []
    for r in caplog.records:
        m = _LINE.fullmatch(r.getMessage())
        if m:
            sid, epoch, _, sent, fetched, forgotten = map(int, m.groups())
            out.append(Sent(sid, epoch, sent, fetched, forgotten))
    return out


def _topic(bootstrap: str, partitions: int) -> str:
    name = f"sessions-{uuid.uuid4().hex[:8]}"
    with Admin(bootstrap_servers=bootstrap) as a:
        a.create_topics([NewTopic(name, partitions)])
    return name


class Ledger:
    """What was produced to each partition and what the consumer returned:
    every record once, in order (``expect``: the next offset of each)."""

    def __init__(self, producer: Producer, topic: str) -> None:
        self.producer, self.topic = producer, topic
        self.produced: Dict[int, int] = collections.defaultdict(int)
        self.expect: Dict[TopicPartition, int] = {}

    def produce(self, partitions: Iterable[int], n: int) -> None:
        for part in partitions:
            for _ in range(n):
                self.producer.send(self.topic, b"%d-%d" % (part, self.produced[part]), partition=part)
                self.produced[part] += 1
        self.producer.flush(30)

    def take(self, c: Consumer, timeout_ms: int = 200) -> int:
        n = 0
        for tp, records in c.poll(timeout_ms).items():
            for r in records:
                assert r.offset == self.expect.get(tp, 0), (tp, r.offset, self.expect.get(tp, 0))
                assert r.value == b"%d-%d" % (tp.partition, r.offset)
                self.expect[tp] = r.offset + 1
                n += 1
        return n

    def drain(self, c: Consumer, tps: Iterable[TopicPartition], timeout: float = 30) -> None:
        """Poll until each of ``tps`` returned every record produced to it."""
        tps = list(tps)
        deadline = time.monotonic() + timeout
        while any(self.expect.get(tp, 0) < self.produced[tp.partition] for tp in tps):
            assert time.monotonic() < deadline, {tp: (self.expect.get(tp, 0), self.produced[tp.partition])
                                                 for tp in tps}
            self.take(c)


@contextmanager
def consuming(kafka: Any, caplog: Any, partitions: int, **cfg: Any) -> Iterator[Tuple[Ledger, Consumer, List[TopicPartition]]]:
    """A new topic of ``partitions``, a producer and a consumer of it (its
    session lines captured): (the ledger, the consumer, the partitions)."""
    caplog.set_level(logging.DEBUG, logger="kwire.consumer")
    bootstrap = kafka.bootstrap()
    topic = _topic(bootstrap, partitions)
    with Producer(bootstrap_servers=bootstrap, linger_ms=5) as p, \
            Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", **cfg) as c:
        yield Ledger(p, topic), c, [TopicPartition(topic, i) for i in range(partitions)]


def test_fetches_after_the_first_name_only_what_changed_and_every_record_comes_once(kafka, caplog):
    with consuming(kafka, caplog, 24, fetch_max_wait_ms=200) as (book, c, tps):
        topic = book.topic
        c.assign(tps[:16])
        book.produce(range(24), 20)
        book.drain(c, tps[:16])
        for _ in range(3):                      # caught up: long polls
            assert book.take(c) == 0
        caught_up = len(session_fetches(caplog))
        for i in range(4):                      # a trickle, a few partitions at a time
            book.produce([i, i + 7], 1)
            book.drain(c, tps[:16])
        trickle = session_fetches(caplog)[caught_up:]

        c.pause(*tps[:4])                       # paused: forgotten by the session, nothing returned
        book.produce(range(16), 5)
        book.drain(c, tps[4:16])
        for _ in range(3):
            book.take(c)
        assert all(book.expect[tp] == book.produced[tp.partition] - 5 for tp in tps[:4])
        c.resume(*tps[:4])
        book.drain(c, tps[:16])

        c.seek(tps[5], 3)                       # sought back: returned again from there, in order
        book.expect[tps[5]] = 3
        book.drain(c, [tps[5]])

        c.assign(tps[4:])                       # 4 partitions leave, 8 come (from their start)
        book.produce(range(24), 3)
        book.drain(c, tps[4:])

        node = c._client.cluster.leader_for(topic, 0)
        before = len(session_fetches(caplog))
        c._client.connection(node).close()      # a new connection: a full fetch first
        book.produce(range(4, 24), 2)
        book.drain(c, tps[4:])
        after_reconnect = session_fetches(caplog)[before:]
        assert c._sessions[node].id != 0

    fetches = session_fetches(caplog)
    assert fetches[0].epoch == 1, fetches[:3]      # the one before (opening the session) is not said
    incremental = [f for f in fetches if f.epoch > 0]
    assert len(incremental) > len(fetches) // 2, fetches
    assert any(f.sent == 0 and f.fetched == 16 for f in incremental), "a caught-up long poll names nothing"
    assert sum(f.sent for f in trickle) < sum(f.fetched for f in trickle) / 4, trickle
    assert any(f.forgotten for f in incremental), "paused and unassigned partitions are forgotten"
    assert all(f.epoch == prev.epoch + 1 for prev, f in zip(fetches, fetches[1:])
               if f.epoch > 0 and f.session_id == prev.session_id and prev.epoch >= 0), "epochs go up one by one"
    full_again = [f for f in after_reconnect if f.epoch == 0]
    assert full_again and full_again[0].sent == full_again[0].fetched and full_again[0].session_id != 0


def _session_fetch(client: Client, node: int, session_id: int, epoch: int) -> int:
    """A Fetch of session ``session_id`` at ``epoch`` naming no partition,
    from another client: the broker's error code."""
    if client.broker(node) is None:
        client.refresh_metadata(timeout=10)
    client.wait_ready(node, time.monotonic() + 10)
    req = protocol.message("FetchRequest")(replica_id=-1, max_wait_ms=0, min_bytes=1, session_id=session_id,
                                           session_epoch=epoch, topics=[], forgotten_topics_data=[])
    return client.request(node, req, timeout=10).error_code


@pytest.mark.parametrize("error", ["FETCH_SESSION_ID_NOT_FOUND", "INVALID_FETCH_SESSION_EPOCH"])
def test_a_session_error_fetches_in_full_and_loses_no_record(kafka, caplog, error):
    """Kafka answers the consumer's next Fetch with ``error``, caused by a
    second client: closing the session (epoch -1), or sending the epoch the
    consumer was to send next. The consumer fetches in full (a new session)
    and every record comes once, in order."""
    other = Client(resolve(CONSUMER, {"bootstrap.servers": kafka.bootstrap()}))
    try:
        with consuming(kafka, caplog, 8, fetch_max_wait_ms=100) as (book, c, tps):
            topic = book.topic
            c.assign(tps)
            book.produce(range(8), 10)
            book.drain(c, tps)
            book.take(c)
            node = c._client.cluster.leader_for(topic, 0)
            session = c._sessions[node]
            old_id = session.id
            assert old_id != 0
            if error == "FETCH_SESSION_ID_NOT_FOUND":
                assert _session_fetch(other, node, old_id, -1) == 0        # closed on the broker
            else:
                deadline = time.monotonic() + 10
                # the epoch the consumer sends next (after the one in flight, if any, which the broker may
                # not have taken yet: then it says INVALID_FETCH_SESSION_EPOCH to us, and we try again)
                while _session_fetch(other, node, old_id, session.epoch + (1 if session.busy else 0)) != 0:
                    assert time.monotonic() < deadline
                    time.sleep(0.05)
            book.produce(range(8), 5)
            book.drain(c, tps)
            book.produce(range(8), 5)
            book.drain(c, tps)
            assert session.id not in (0, old_id) and session.epoch > 0
        name = type(protocol.error_for(getattr(ErrorCode, error), api="Fetch")).__name__
        said = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO and "fetch session" in r.getMessage()]
        assert any(f"fetch session {old_id} " in s and name in s for s in said), said
        fetches = session_fetches(caplog)
        i = max(k for k, f in enumerate(fetches) if f.session_id == old_id and f.epoch > 0)
        redo = fetches[i + 1]
        if error == "FETCH_SESSION_ID_NOT_FOUND":      # a full fetch without an id (not said), then a new session
            assert redo.session_id not in (0, old_id) and redo.epoch == 1, redo
        else:                                           # a full fetch closing the old session, opening a new one
            assert (redo.session_id, redo.epoch) == (old_id, 0) and redo.sent == redo.fetched, redo
    finally:
        other.close()


def test_sessions_off_sends_every_partition_every_time(kafka, caplog):
    """``enable_fetch_sessions=False``: sessionless Fetches (no session line), records as usual."""
    with consuming(kafka, caplog, 4, enable_fetch_sessions=False) as (book, c, tps):
        c.assign(tps)
        book.produce(range(4), 10)
        book.drain(c, tps)
        assert not c._sessions
    assert session_fetches(caplog) == []


def _in_use(c: Consumer) -> bool:
    """Whether ``c`` (a Consumer, or an AsyncConsumer's) has a session past its first incremental Fetch."""
    return any(s.id and s.epoch > 1 for s in c._sessions.values())


def _idle(c: Consumer) -> Tuple[int, int]:
    """The (node, session id) of ``c``'s one session, checked idle (no Fetch of it in flight)."""
    (node, session), = c._sessions.items()
    assert session.id and not session.busy
    return node, session.id


@pytest.mark.parametrize("driver", ["sync", "aio"])
def test_close_closes_the_session_on_the_broker(kafka, driver):
    """close() ends an idle session (epoch -1, as Java's consumer), on both
    drivers: the broker no longer knows its id. (All partitions paused: no
    Fetch is in flight at the close; one in flight would leave the session
    to the broker's cache, not make close() wait out its long poll.)"""
    bootstrap = kafka.bootstrap()
    topic = _topic(bootstrap, 2)
    tps = [(topic, 0), (topic, 1)]
    cfg = {"bootstrap_servers": bootstrap, "auto_offset_reset": "earliest", "fetch_max_wait_ms": 100}
    other = Client(resolve(CONSUMER, {"bootstrap.servers": bootstrap}))
    try:
        with Producer(bootstrap_servers=bootstrap) as p:
            p.send(topic, b"x", partition=0).get(30)
        deadline = time.monotonic() + 20
        t = 0.0
        if driver == "sync":
            c = Consumer(**cfg)
            c.assign(tps)
            while not _in_use(c):
                assert time.monotonic() < deadline
                c.poll(100)
            c.pause(*tps)
            c.poll(500)                          # the Fetch in flight answered; none sent after it
            node, sid = _idle(c)
            t = time.monotonic()
            c.close()
        else:
            async def run() -> Tuple[int, int]:
                nonlocal t
                ac = AsyncConsumer(**cfg)
                ac.assign(tps)
                while not _in_use(ac._c):
                    assert time.monotonic() < deadline
                    await ac.getmany(100)
                ac.pause(*tps)
                await ac.getmany(500)
                found = _idle(ac._c)
                t = time.monotonic()
                await ac.close()
                return found
            node, sid = asyncio.run(run())
        assert time.monotonic() - t < 5
        assert _session_fetch(other, node, sid, 1) == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    finally:
        other.close()
