"""The consumer's position check after a leader change (KIP-320:
OffsetForLeaderEpoch), on answers a live broker cannot be made to give.

The live check, after a real leader epoch change (a restarted Apache Kafka
node), is tests/kafka/test_live_leader_epoch.py. Here: Tansu 0.6.0 lacks the
API (key 23), so against it the check is skipped, as Kafka's clients skip
it for brokers without the API; and the handling of every answer (valid,
fenced, truncated) is tested on responses built by the generated classes
and passed through the same encode/decode a broker's bytes go through, on
a consumer of either live broker (``broker``)."""

from __future__ import annotations

import time
import uuid

import pytest

from kwire.admin import Admin, NewTopic
from kwire.consumer import Consumer, LogTruncationError, TopicPartition
from kwire.future import Future
from kwire.producer import Producer
from kwire.protocol import messages as m

REQ, RESP = m.OffsetForLeaderEpochRequest, m.OffsetForLeaderEpochResponse


def _wire(obj, version):
    cls = type(obj)
    return cls.decode(cls.encode_bytes(obj, version), version)


def _topic_with_records(bootstrap, n=20):
    topic = f"epoch-{uuid.uuid4().hex[:8]}"
    with Admin(bootstrap_servers=bootstrap) as a:
        a.create_topics([NewTopic(topic, 1)])
    with Producer(bootstrap_servers=bootstrap) as p:
        for i in range(n):
            p.send(topic, b"v%d" % i, partition=0)
    return topic


def _read(c, tp, n):
    got = []
    deadline = time.monotonic() + 20
    while len(got) < n and time.monotonic() < deadline:
        got += [r.offset for r in c.poll(500, max_records=n - len(got)).get(tp, [])]
    return got


def _bump_leader_epoch(c, tp, to):
    info = c._client.cluster.partitions[tp.topic][tp.partition]
    c._client.cluster.partitions[tp.topic][tp.partition] = type(info)(**{**info.__dict__, "leader_epoch": to})


@pytest.mark.broker
def test_a_leader_change_on_a_broker_without_the_api_keeps_the_position(tansu):
    # Tansu only: it lacks OffsetForLeaderEpoch (Apache Kafka has it: the live test checks with it)
    topic = _topic_with_records(tansu.bootstrap)
    tp = TopicPartition(topic, 0)
    with Consumer(bootstrap_servers=tansu.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([tp])
        assert _read(c, tp, 10) == list(range(10))
        st = c._states[tp]
        _bump_leader_epoch(c, tp, max(st.epoch, 0) + 5)
        if st.epoch < 0:
            st.epoch = 0                       # Tansu sends no leader epoch: pretend it did
        assert _read(c, tp, 10) == list(range(10, 20))
        deadline = time.monotonic() + 10
        while c._states[tp].epoch != c._leader_epoch(tp) and time.monotonic() < deadline:
            c.poll(100)                        # the check runs once nothing fetched is left
        assert c._states[tp].epoch == c._leader_epoch(tp)


@pytest.mark.parametrize("version", range(REQ.MIN_VERSION, REQ.MAX_VERSION + 1))
@pytest.mark.parametrize("policy", ["earliest", "none"])
def test_answers_to_offset_for_leader_epoch(broker, version, policy):
    topic = _topic_with_records(broker.bootstrap)
    tp = TopicPartition(topic, 0)
    with Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset=policy) as c:
        c.assign([tp])
        c.seek(tp, 0)
        assert _read(c, tp, 15) == list(range(15))
        st = c._states[tp]
        st.epoch = 3

        def answer(error_code=0, end_offset=15, leader_epoch=3, current=4):
            asked = {tp: (st.position, st.epoch, current)}
            req = _wire(c._epoch_request(asked), version)
            part = req.topics[0].partitions[0]
            assert (req.topics[0].topic, part.partition, part.leader_epoch, part.current_leader_epoch) == (topic, 0, 3, 4)
            if version >= 3:
                assert req.replica_id == -1
            fut = Future()
            fut.set_result(_wire(RESP(topics=[RESP.OffsetForLeaderTopicResult(topic=topic, partitions=[
                RESP.EpochEndOffset(error_code=error_code, partition=0, leader_epoch=leader_epoch,
                                    end_offset=end_offset)])]), version))
            c._validating.add(tp)
            c._on_epoch_end(asked, fut)
            assert tp not in c._validating

        answer(end_offset=15)                                  # the log goes on past the position: valid
        assert (st.position, st.epoch, st.error) == (15, 4, None)
        st.epoch = 3
        answer(error_code=74)                                  # FENCED_LEADER_EPOCH: our metadata is old
        assert (st.position, st.epoch, st.error) == (15, 3, None)
        answer(end_offset=12)                                  # truncated at 12
        if policy == "none":
            assert isinstance(st.error, LogTruncationError) and st.error.end_offset == 12
            with pytest.raises(LogTruncationError, match="ends at 12, before the position 15"):
                c.poll(100)
        else:
            assert (st.position, st.error) == (12, None)
            assert _read(c, tp, 8) == list(range(12, 20))      # re-read from where the logs agree
