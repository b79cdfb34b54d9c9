"""KIP-320 live: a follower that missed writes becomes the leader under an
unclean election, and kwire's consumer detects that the log it read was
truncated.

The cluster here is the separate-controller shape of
tests/support/kafka_cluster.py (one controller-only node and three brokers;
``CLUSTER_CONTROLLERS = 1`` asks the ``kafka_cluster`` fixture for it):
the scenario has both replicas of a partition down at once, which in the
three-combined-node shape would also take two of the three controller voters
down, and the controller must stay up to run the election.

Each round, on a topic with one partition on two brokers, A (the leader)
and B, ``min.insync.replicas=1``:

1. ``OLD`` records are written with acks=all (both replicas have them), and
   the consumer under test reads them;
2. B is killed (SIGKILL); once the ISR is A alone, ``LOST`` more records are
   written (acknowledged: the ISR is A alone, and min ISR is 1), and the
   consumer reads those too: its position is ``OLD + LOST``, under A's
   leader epoch;
3. A is killed, B started: B becomes the leader, either by itself (the
   topic's ``unclean.leader.election.enable=true``) or by
   ``Admin.elect_leaders(..., "unclean")`` (the topic's setting false), with
   the log ending at ``OLD``. ``NEW`` records are written there (offsets
   ``OLD`` to ``OLD + NEW - 1``: the consumer's position, ``OLD + LOST``,
   is inside that range, so only the leader epoch tells that the log under
   it changed);
4. the consumer: with ``auto_offset_reset`` earliest or latest, it goes on
   from ``OLD`` (where the logs agree, which OffsetForLeaderEpoch gives)
   and returns the ``NEW`` records, each once; with ``none``, ``poll``
   raises :class:`LogTruncationError` naming the topic, partition, position
   and ``OLD``, and the application seeks there;
5. A is started again: it truncates its log to B's and rejoins the ISR; a
   preferred election makes A the leader again, and the consumer reads on
   from A without a false truncation, a gap or a repeat. An independent
   reader (confluent-kafka) then reads the partition from 0: the ``OLD`` and
   ``NEW`` records and what came after, and none of the ``LOST`` ones.

Checked throughout: no record of the ``LOST`` suffix is returned after the
truncation was detected (none twice, as two different records at the same
offset), the consumer's position after each poll is the offset after the
last record it returned, and each ``poll`` returns within its timeout (plus
slack for a loaded machine).

Rounds: ``KWIRE_CLUSTER_ROUNDS`` (2 by default: one automatic election with
``earliest``, one ``elect_leaders`` with ``none``; more rounds alternate
the four combinations). Long run: ``KWIRE_CLUSTER_ROUNDS=12 pytest
tests/cluster/test_unclean_election.py``.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import uuid
from typing import Dict, List, Tuple

import pytest

from kwire.admin import NewTopic
from kwire.consumer import Consumer, TopicPartition
from kwire.fetcher import LogTruncationError
from kwire.producer import Producer
from kwire.protocol.api_keys import ErrorCode

pytestmark = [pytest.mark.kafka, pytest.mark.cluster]
CLUSTER_CONTROLLERS = 1           # the kafka_cluster fixture's separate-controller shape (see the module doc)

ROUNDS = int(os.environ.get("KWIRE_CLUSTER_ROUNDS", "2"))
OLD, LOST, NEW, AFTER = 300, 200, 400, 100
POLL_MS = 500
POLL_SLACK = 1.5          # seconds a poll may overrun its timeout on a loaded 2-core machine
STEP = 90.0               # seconds for any one step (a node's death noticed, an election, a read)


class Reader:
    """The consumer under test, and what it returned: (offset, value) in order."""

    def __init__(self, cluster, topic: str, reset: str) -> None:
        self.tp = TopicPartition(topic, 0)
        self.consumer = Consumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset=reset,
                                 request_timeout_ms=10000, retry_backoff_ms=100, reconnect_backoff_max_ms=1000)
        self.consumer.assign([self.tp])
        self.consumer.seek(self.tp, 0)
        self.got: List[Tuple[int, bytes]] = []
        self.truncations: List[LogTruncationError] = []
        self.longest_poll = 0.0

    def poll_once(self) -> None:
        t0 = time.monotonic()
        try:
            batch = self.consumer.poll(POLL_MS)
        except LogTruncationError as e:
            self.truncations.append(e)
            self.consumer.seek(self.tp, e.end_offset)       # what an application does: go on where the logs agree
            return
        finally:
            took = time.monotonic() - t0
            self.longest_poll = max(self.longest_poll, took)
            assert took < POLL_MS / 1000 + POLL_SLACK, f"poll({POLL_MS}) took {took:.2f} s"
        for r in batch.get(self.tp, []):
            self.got.append((r.offset, r.value))
        if self.got:
            assert self.consumer.position(self.tp) == self.got[-1][0] + 1

    def read_until(self, what: str, check) -> None:
        deadline = time.monotonic() + STEP
        while not check():
            if time.monotonic() > deadline:
                tail = self.got[-3:]
                raise TimeoutError(f"consumer: {what} not within {STEP:g} s (read {len(self.got)}, last {tail}, "
                                   f"truncations {self.truncations})")
            self.poll_once()

    def close(self) -> None:
        self.consumer.close()


def _send(producer: Producer, topic: str, values: List[bytes]) -> None:
    futures = [producer.send(topic, v, partition=0) for v in values]
    producer.flush(STEP)
    for f in futures:
        f.result(0)    # raises what failed


def _wait_isr(cluster, topic: str, want: Tuple[int, ...], leader: int) -> None:
    def check():
        p = cluster.partitions(topic)[0]
        return p.leader == leader and tuple(sorted(p.isr)) == want
    cluster.wait_until(f"{topic}-0: leader {leader}, ISR {want}", check, STEP)


def _independent_read(cluster, topic: str) -> List[Tuple[int, bytes]]:
    import confluent_kafka

    c = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        end = c.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0), timeout=30)[1]
        c.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        out: List[Tuple[int, bytes]] = []
        deadline = time.monotonic() + STEP
        while len(out) < end and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                out.append((m.offset(), m.value()))
        return out
    finally:
        c.close()


def _round(cluster, rnd: int, automatic: bool, reset: str, caplog) -> Dict[str, float]:
    topic = f"unclean-{rnd}-{uuid.uuid4().hex[:6]}"
    brokers = [n.node_id for n in cluster.brokers]
    a_id, b_id = brokers[rnd % len(brokers)], brokers[(rnd + 1) % len(brokers)]
    a, b = cluster.broker(a_id), cluster.broker(b_id)
    with cluster.admin() as admin:
        admin.create_topics([NewTopic(topic, replica_assignment={0: [a_id, b_id]}, configs={
            "min.insync.replicas": "1", "unclean.leader.election.enable": "true" if automatic else "false"})])
    _wait_isr(cluster, topic, tuple(sorted((a_id, b_id))), a_id)
    figures: Dict[str, float] = {}
    reader = Reader(cluster, topic, reset)
    producer = Producer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=5, request_timeout_ms=10000,
                        delivery_timeout_ms=int(STEP * 1000))
    try:
        old = [b"old-%d" % i for i in range(OLD)]
        _send(producer, topic, old)
        reader.read_until(f"{OLD} old records", lambda: len(reader.got) >= OLD)

        # B misses writes
        b.kill()
        _wait_isr(cluster, topic, (a_id,), a_id)
        lost = [b"lost-%d" % i for i in range(LOST)]
        _send(producer, topic, lost)
        reader.read_until(f"{LOST} lost records", lambda: len(reader.got) >= OLD + LOST)
        assert reader.got == list(enumerate(old + lost))
        epoch_a = cluster.partitions(topic)[0].leader_epoch

        # A dies, B leads with the log ending at OLD
        a.kill()
        t_fault = time.monotonic()
        b.start()
        cluster.wait_for_node(b, STEP)
        with cluster.admin() as admin:
            if automatic:
                cluster.wait_until(f"{topic}-0 led by {b_id}", lambda: cluster.partitions(topic, admin)[0].leader == b_id,
                                   STEP)
            else:
                # the controller first notices A's death (its session times out): no leader then, as
                # B is not in the ISR; until then an election is "not needed", A still leading
                cluster.wait_until(f"{topic}-0 without a leader", lambda: cluster.partitions(topic, admin)[0].leader < 0,
                                   STEP)

                def elected():
                    err = admin.elect_leaders([(topic, 0)], "unclean", timeout=10)[TopicPartition(topic, 0)]
                    if err is not None and err.code != ErrorCode.ELECTION_NOT_NEEDED:
                        raise err
                    return cluster.partitions(topic, admin)[0].leader == b_id
                cluster.wait_until(f"an unclean election of {topic}-0", elected, STEP)
            info = cluster.partitions(topic, admin)[0]
        assert info.leader == b_id and info.leader_epoch > epoch_a, info
        figures["election"] = time.monotonic() - t_fault

        new = [b"new-%d" % i for i in range(NEW)]
        _send(producer, topic, new)        # the same producer: its sequence numbers past OLD are gone too
        with caplog.at_level(logging.WARNING, logger="kwire"):
            t_new = time.monotonic()
            reader.read_until(f"{NEW} new records", lambda: len(reader.got) >= OLD + LOST + NEW)
        figures["detected"] = time.monotonic() - t_new
        assert reader.got == list(enumerate(old + lost)) + [(OLD + i, v) for i, v in enumerate(new)]
        if reset == "none":
            assert len(reader.truncations) == 1, reader.truncations
            e = reader.truncations[0]
            assert (e.topic, e.partition, e.offset, e.end_offset) == (topic, 0, OLD + LOST, OLD)
            assert topic in str(e) and str(OLD + LOST) in str(e)
        else:
            assert not reader.truncations
            said = [r for r in caplog.records if "records were lost" in r.getMessage()]
            assert len(said) == 1 and topic in said[0].getMessage(), [r.getMessage() for r in said]

        # A returns, truncates to B's log, leads again
        a.start()
        cluster.wait_for_node(a, STEP)
        _wait_isr(cluster, topic, tuple(sorted((a_id, b_id))), b_id)
        with cluster.admin() as admin:
            def preferred():
                err = admin.elect_leaders([(topic, 0)], "preferred", timeout=10)[TopicPartition(topic, 0)]
                return (err is None or err.code == ErrorCode.ELECTION_NOT_NEEDED) and \
                    cluster.partitions(topic, admin)[0].leader == a_id
            cluster.wait_until(f"{topic}-0 led by {a_id} again", preferred, STEP)
        after = [b"after-%d" % i for i in range(AFTER)]
        _send(producer, topic, after)
        reader.read_until(f"{AFTER} records after A returned",
                          lambda: len(reader.got) >= OLD + LOST + NEW + AFTER)
        expected_log = list(enumerate(old + new + after))
        assert reader.got[OLD + LOST:] == expected_log[OLD:]
        assert len(reader.truncations) == (1 if reset == "none" else 0)
        assert _independent_read(cluster, topic) == expected_log
        figures["longest_poll"] = reader.longest_poll
    finally:
        reader.close()
        producer.close(10)
    with cluster.admin() as admin:
        admin.delete_topics([topic])
    return figures


def test_unclean_election_detected(kafka_cluster, caplog):
    cluster = kafka_cluster
    combos = [(True, "earliest"), (False, "none"), (True, "latest"), (False, "earliest")]
    seen = []
    for rnd in range(max(1, ROUNDS)):
        automatic, reset = combos[rnd % len(combos)]
        if rnd:
            cluster.restore()
            cluster.check_healthy()
        caplog.clear()
        f = _round(cluster, rnd, automatic, reset, caplog)
        seen.append(f)
        sys.stderr.write(f"[unclean] round {rnd} ({'automatic' if automatic else 'elect_leaders'}, {reset}): "
                         f"election {f['election']:.2f} s after A died, new records read "
                         f"{f['detected']:.2f} s after written, longest poll({POLL_MS}) {f['longest_poll']:.3f} s\n")
    sys.stderr.write(f"[unclean] {len(seen)} rounds, {len(seen) * (OLD + LOST + NEW + AFTER)} records, "
                     "every truncation detected, nothing lost from the surviving log, nothing repeated\n")
