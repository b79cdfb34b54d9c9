"""Fetch sessions (KIP-227) against the hostile broker (:mod:`support.hostile_broker`),
for what the real broker cannot be made to send to kwire's consumer:
FETCH_SESSION_TOPIC_ID_ERROR (Kafka says it to a session's Fetch whose use
of topic ids differs from the session's, which one consumer never does), and
a broker that grants a session and then answers without one. The other
session errors, the incremental requests and close() are tested on Apache
Kafka itself (tests/kafka/test_fetch_sessions.py).

The fake grants session 7 to the first (full) Fetch, then scripts the next
answers; every record comes once, in order, whatever it does."""

from __future__ import annotations

import time
from typing import Any, List, Tuple

from kwire.consumer import Consumer, TopicPartition
from kwire.protocol import messages as m
from kwire.protocol.api_keys import ErrorCode
from support.hostile_broker import HostileBroker, Request, records_batch

TOPIC = "t"
TPS = [TopicPartition(TOPIC, p) for p in range(3)]
N = 60           # records per partition, in batches of 10


def _fill(b: HostileBroker, start: int, end: int) -> None:
    for p in range(len(TPS)):
        for base in range(start, end, 10):
            b.log(TOPIC, p).append(records_batch([b"%d-%d" % (p, i) for i in range(base, base + 10)]))


def _read(c: Consumer, n: int, timeout: float = 15.0) -> List[Tuple[int, int, bytes]]:
    got: List[Tuple[int, int, bytes]] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got += [(tp.partition, r.offset, r.value) for tp, recs in c.poll(50).items() for r in recs]
    return got


def _every(start: int, end: int) -> List[Tuple[int, int, bytes]]:
    return sorted((p, i, b"%d-%d" % (p, i)) for p in range(len(TPS)) for i in range(start, end))


def _named(req: Request) -> int:
    return sum(len(t.partitions) for t in req.body.topics)


def test_a_topic_id_error_and_a_dropped_session_fetch_in_full_again():
    script: List[Any] = []     # (session id, epoch, partitions named) of each Fetch

    def on_fetch(req: Request) -> Any:
        body = req.body
        script.append((body.session_id, body.session_epoch, _named(req)))
        answer = req.default()
        if len(script) == 1:
            answer.session_id = 7                      # a session for the first, full, Fetch
        elif len(script) == 2:
            return m.FetchResponse(error_code=ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        elif len(script) == 3:
            answer.session_id = 8                      # the full Fetch again: a new session
        # later: answered without a session id (the broker dropped it): full Fetches from then on
        return answer

    with HostileBroker({TOPIC: len(TPS)}, fetch_wait_cap=0.1) as b:
        _fill(b, 0, N)
        b.on("Fetch", on_fetch)
        with Consumer(bootstrap_servers=b.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100,
                      max_in_flight_fetches=1, max_partition_fetch_bytes=200) as c:
            c.assign(TPS)
            got = _read(c, len(TPS) * N)
            _fill(b, N, 2 * N)
            got += _read(c, len(TPS) * N)
    assert sorted(got) == _every(0, 2 * N) and len(got) == len(set(got))
    assert script[0] == (0, 0, 3)                         # full: opens a session
    assert script[1][:2] == (7, 1)                        # incremental, answered FETCH_SESSION_TOPIC_ID_ERROR
    assert script[2] == (7, 0, 3)                         # full again, closing session 7
    assert script[3][:2] == (8, 1)                        # incremental in session 8, answered with id 0
    assert all(s[:2] == (0, 0) and s[2] == 3 for s in script[4:])   # full from then on, every partition


def test_a_broker_refusing_every_fetch_with_a_session_error_is_asked_after_a_backoff():
    """A session error answered to a full Fetch too (no session left to drop:
    a broken broker) is a failed Fetch like any other: asked again after
    retry_backoff_ms, never in a loop. Only an incremental Fetch's session
    error is retried at once, in full."""
    fetches: List[Tuple[int, int]] = []

    def on_fetch(req: Request) -> Any:
        fetches.append((req.body.session_id, req.body.session_epoch))
        return m.FetchResponse(error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)

    with HostileBroker({TOPIC: len(TPS)}, fetch_wait_cap=0.1) as b:
        b.on("Fetch", on_fetch)
        with Consumer(bootstrap_servers=b.bootstrap, auto_offset_reset="earliest", retry_backoff_ms=100,
                      max_in_flight_fetches=1) as c:
            c.assign(TPS)
            t0 = time.monotonic()
            while time.monotonic() - t0 < 1.0:
                assert c.poll(20) == {}
    assert 3 <= len(fetches) <= 15, len(fetches)
    assert all(f == (0, 0) for f in fetches)
