"""The bookkeeping of a fetch session (KIP-227, :mod:`kwire.fetch_session`),
without I/O: what each request names and forgets, and how answers, errors
and failures move the id and the epoch (as Java's ``FetchSessionHandler``).
The behaviour against Apache Kafka itself: tests/kafka/test_fetch_sessions.py."""

from __future__ import annotations

import uuid

from kwire.fetch_session import FetchSession
from kwire.protocol.api_keys import ErrorCode
from kwire.types import TopicPartition

A, B, C = (TopicPartition("t", p) for p in range(3))
ID, OTHER_ID = uuid.uuid4(), uuid.uuid4()


def part(offset: int, epoch: int = 5, topic_id: uuid.UUID = ID) -> tuple:
    return (topic_id, offset, epoch, 1048576)


def opened(sid: int = 42) -> FetchSession:
    s = FetchSession(1)
    s.use_on("conn")
    s.next_request({A: part(0), B: part(0)})
    s.answered(0, sid)
    return s


def test_a_full_fetch_opens_the_session_and_the_next_names_only_what_changed():
    s = FetchSession(1)
    s.use_on("conn")
    assert s.next_request({A: part(0), B: part(0)}) == (0, 0, {A: part(0), B: part(0)}, [])
    assert s.busy
    s.answered(0, 42)
    assert (s.id, s.epoch, s.busy) == (42, 1, False)
    # A moved on, B unchanged, C added
    assert s.next_request({A: part(10), B: part(0), C: part(3)}) == (42, 1, {A: part(10), C: part(3)}, [])
    s.answered(0, 42)
    # nothing changed: a request naming nothing; then B leaves
    assert s.next_request({A: part(10), B: part(0), C: part(3)})[2:] == ({}, [])
    s.answered(0, 42)
    assert s.next_request({A: part(10), C: part(3, epoch=6)}) == (42, 3, {C: part(3, epoch=6)}, [(B, ID)])


def test_no_session_granted_means_full_fetches():
    s = FetchSession(1)
    s.use_on("conn")
    s.next_request({A: part(0)})
    s.answered(0, 0)
    assert s.next_request({A: part(5)}) == (0, 0, {A: part(5)}, [])


def test_session_errors_failures_and_reconnects_fetch_in_full():
    s = opened()
    s.next_request({A: part(1), B: part(0)})
    s.answered(ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0)
    assert s.next_request({A: part(1), B: part(0)}) == (42, 0, {A: part(1), B: part(0)}, [])   # closes 42
    s.answered(0, 43)
    s.next_request({A: part(1), B: part(0)})
    s.answered(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0)
    assert s.next_request({A: part(1)})[:2] == (0, 0)                                          # 43 is gone
    s.answered(0, 44)
    s.next_request({A: part(1)})
    s.failed()
    assert s.next_request({A: part(1)})[:3] == (44, 0, {A: part(1)})
    s.answered(0, 45)
    s.use_on("another conn")
    assert s.next_request({A: part(1)})[:3] == (45, 0, {A: part(1)})


def test_the_epoch_wraps_to_one_and_a_closed_session_starts_again():
    s = opened()
    s.epoch = 2**31 - 1
    s.next_request({A: part(0), B: part(0)})
    s.answered(0, 42)
    assert s.epoch == 1
    s.next_request({A: part(0), B: part(0)})
    s.answered(0, 0)                     # the broker closed it
    assert (s.id, s.epoch) == (0, 0)


def test_a_recreated_topic_starts_a_new_session():
    s = opened()
    assert s.next_request({A: part(0, topic_id=OTHER_ID), B: part(0)})[:2] == (42, 0)
