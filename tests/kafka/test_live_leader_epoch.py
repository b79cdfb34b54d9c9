"""The consumer's position check (KIP-320, OffsetForLeaderEpoch) after a
real leader epoch change, on Apache Kafka: a private single KRaft node
restarted on its own data (``KafkaBroker.restart``) bumps the leader epoch
of its partitions (by two: the controlled shutdown leaves them leaderless,
the restart elects the node again).

- a consumer that was mid-read when the broker restarted goes on reading
  after it: its fetch under the old epoch is fenced, the new leader
  (the same node) confirms the position with OffsetForLeaderEpoch, and no
  record is skipped or repeated (no false truncation); the idempotent
  producer that wrote before the restart writes after it, each record once;
- a position claimed under an epoch at an offset past that epoch's real end
  in the log is truncation: the position goes to the epoch's end offset
  (whatever ``auto_offset_reset``, as Kafka's clients do), or
  :class:`LogTruncationError` with ``auto_offset_reset="none"``; positions
  within the epoch, or at its very end, are kept.

The handling of answers a real broker cannot be made to give is tested on
constructed answers in tests/client/test_leader_epoch.py."""

from __future__ import annotations

import logging
import time
import uuid

import pytest

from kwire.admin import Admin, NewTopic
from kwire.consumer import Consumer, LogTruncationError, TopicPartition
from kwire.producer import Producer
from support.kafka import start_kafka

pytestmark = pytest.mark.kafka

FIRST, SECOND = 50, 50        # records produced before and after the restart


@pytest.fixture(scope="module")
def restartable():
    """A private broker: restarting the session's would disturb the other tests."""
    broker = start_kafka()
    try:
        yield broker
    finally:
        broker.stop()       # by its PID (SIGTERM, then SIGKILL), and its directory deleted


def _topic(bootstrap: str) -> str:
    name = f"epoch-{uuid.uuid4().hex[:8]}"
    with Admin(bootstrap_servers=bootstrap) as a:
        a.create_topics([NewTopic(name, 1)])
    return name


def _producer(bootstrap: str) -> Producer:
    return Producer(bootstrap_servers=bootstrap, linger_ms=0, batch_size=1024, reconnect_backoff_ms=50,
                    reconnect_backoff_max_ms=500)


def _send(p: Producer, topic: str, values) -> None:
    futures = [p.send(topic, v, partition=0) for v in values]
    p.flush(30)
    assert all(f.get(0).offset >= 0 for f in futures)


def _produce(bootstrap: str, topic: str, values) -> None:
    with _producer(bootstrap) as p:
        _send(p, topic, values)


def _metadata_epoch(c: Consumer, tp: TopicPartition) -> int:
    c._client.add_topics([tp.topic])
    return c._client.refresh_metadata(timeout=10).partitions[tp.topic][tp.partition].leader_epoch


def _record_epoch_checks(c: Consumer) -> list:
    """(asked: {tp: (position, epoch, current epoch)}, answer) of each OffsetForLeaderEpoch."""
    seen = []
    on_end = c._on_epoch_end

    def recording(asked, fut):
        seen.append((dict(asked), None if fut.failed() else fut.value))
        return on_end(asked, fut)

    c._on_epoch_end = recording
    return seen


def _read(c: Consumer, tp: TopicPartition, n: int, seconds: float = 30.0) -> list:
    got = []
    deadline = time.monotonic() + seconds
    while len(got) < n and time.monotonic() < deadline:
        got += c.poll(300, max_records=n - len(got)).get(tp, [])
    return got


def test_a_consumer_mid_read_goes_on_after_the_leader_epoch_changes(restartable, caplog):
    caplog.set_level(logging.INFO, logger="kwire")
    bootstrap = restartable.bootstrap()
    topic = _topic(bootstrap)
    tp = TopicPartition(topic, 0)
    # one idempotent producer across the restart too: it reconnects, nothing is lost or written twice
    p = _producer(bootstrap)
    _send(p, topic, [b"before-%d" % i for i in range(FIRST)])
    # small fetches: the consumer has fetches left to make when the broker restarts
    with p, Consumer(bootstrap_servers=bootstrap, auto_offset_reset="none", max_partition_fetch_bytes=256,
                     fetch_max_bytes=256, reconnect_backoff_ms=50, reconnect_backoff_max_ms=500) as c:
        c.assign([tp])
        c.seek(tp, 0)
        checks = _record_epoch_checks(c)
        got = _read(c, tp, 20)
        assert [r.offset for r in got] == list(range(20))
        old_epoch = c._states[tp].epoch
        assert old_epoch >= 0 and all(r.batch.partition_leader_epoch == old_epoch for r in got)

        restartable.restart()
        _send(p, topic, [b"after-%d" % i for i in range(SECOND)])
        new_epoch = _metadata_epoch(c, tp)
        assert new_epoch > old_epoch

        got += _read(c, tp, FIRST + SECOND - len(got))
        assert [r.offset for r in got] == list(range(FIRST + SECOND))      # none skipped, none repeated
        assert [r.value for r in got] == ([b"before-%d" % i for i in range(FIRST)] +
                                          [b"after-%d" % i for i in range(SECOND)])
        assert {r.batch.partition_leader_epoch for r in got[FIRST:]} == {new_epoch}
        assert c.poll(300) == {}
        assert c._states[tp].epoch == new_epoch and c._states[tp].error is None
    # the new leader was asked where the old epoch ends: at the end of the log as it was
    answered = [(asked[tp], ans.topics[0].partitions[0]) for asked, ans in checks if ans is not None]
    assert answered, f"no OffsetForLeaderEpoch answered; checks: {checks}"
    for (position, epoch, current), part in answered:
        assert epoch == old_epoch and current == new_epoch and position <= FIRST
        assert (part.error_code, part.leader_epoch, part.end_offset) == (0, old_epoch, FIRST)
    assert "records were lost" not in caplog.text


@pytest.fixture(scope="module")
def two_epochs(restartable):
    """A topic with FIRST records written under one leader epoch and SECOND
    under the next (the broker restarted in between): (topic, old, new epoch)."""
    bootstrap = restartable.bootstrap()
    topic = _topic(bootstrap)
    _produce(bootstrap, topic, [b"before-%d" % i for i in range(FIRST)])
    restartable.restart()
    _produce(bootstrap, topic, [b"after-%d" % i for i in range(SECOND)])
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        records = _read(c, tp, FIRST + SECOND)
    epochs = [r.batch.partition_leader_epoch for r in records]
    old, new = epochs[0], epochs[-1]
    assert epochs == [old] * FIRST + [new] * SECOND and old < new
    return topic, old, new


@pytest.mark.parametrize("policy", ["earliest", "latest", "none"])
def test_a_position_past_the_end_of_its_epoch_is_truncation(restartable, two_epochs, policy, caplog):
    caplog.set_level(logging.INFO, logger="kwire")
    topic, old, new = two_epochs
    tp = TopicPartition(topic, 0)
    claimed = FIRST + 30          # "read up to here under the old epoch": that epoch ended at FIRST
    with Consumer(bootstrap_servers=restartable.bootstrap(), auto_offset_reset=policy) as c:
        c.assign([tp])
        assert _metadata_epoch(c, tp) == new
        checks = _record_epoch_checks(c)
        c.seek(tp, claimed)
        c._states[tp].epoch = old    # as a consumer that read there under the old leader would have it
        if policy == "none":
            deadline = time.monotonic() + 20
            with pytest.raises(LogTruncationError, match=f"ends at {FIRST}, before the position {claimed}") as e:
                while time.monotonic() < deadline:
                    c.poll(200)
            assert (e.value.offset, e.value.end_offset) == (claimed, FIRST)
            return
        got = _read(c, tp, SECOND)
        # the records from where the logs agree (the old epoch's end), in order, once
        assert [r.offset for r in got] == list(range(FIRST, FIRST + SECOND))
        assert [r.value for r in got] == [b"after-%d" % i for i in range(SECOND)]
    assert [(a[tp], ans.topics[0].partitions[0].end_offset) for a, ans in checks] == [((claimed, old, new), FIRST)]
    assert f"ends at {FIRST}, before the position {claimed}" in caplog.text


@pytest.mark.parametrize("position", [0, FIRST // 2, FIRST])
def test_a_position_within_its_epoch_is_kept(restartable, two_epochs, position):
    topic, old, new = two_epochs
    tp = TopicPartition(topic, 0)
    with Consumer(bootstrap_servers=restartable.bootstrap(), auto_offset_reset="none") as c:
        c.assign([tp])
        assert _metadata_epoch(c, tp) == new
        checks = _record_epoch_checks(c)
        c.seek(tp, position)
        c._states[tp].epoch = old
        got = _read(c, tp, FIRST + SECOND - position)
        assert [r.offset for r in got] == list(range(position, FIRST + SECOND))
    assert [(a[tp], ans.topics[0].partitions[0].end_offset) for a, ans in checks] == [((position, old, new), FIRST)]
