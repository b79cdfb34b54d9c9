"""kwire's ShareConsumer and Kafka's Java KafkaShareConsumer (4.4) in one
share group: every record is delivered and accepted once across the
mixed group, and with releases each record's deliveries are counted the
same way on both sides (1 when released, 2 when accepted)."""

from __future__ import annotations

import collections
import threading
import time

import pytest

from kwire.admin import Admin
from kwire.errors import GroupIdNotFoundError
from kwire.producer import Producer
from kwire.share import AcknowledgeType

from .test_share_consumer import _group, _member, _topic

pytestmark = pytest.mark.kafka

RECORDS, PARTITIONS = 2000, 4


def _mixed_run(kafka, explicit: bool):
    from support.java_peer import java_share_consume

    bootstrap = kafka.bootstrap("plaintext")
    topic, group = _topic(bootstrap, PARTITIONS, 0), _group(bootstrap)
    mode = "explicit" if explicit else "implicit"
    java_got = []
    java = threading.Thread(target=lambda: java_got.extend(java_share_consume(
        {"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": mode}, [topic],
        idle_ms=8000, timeout_ms=90000, release_below=2 if explicit else 0, timeout=120)))
    java.start()
    kwire_got = []
    member = _member(bootstrap, group, topic, share_acknowledgement_mode=mode, max_poll_records=100)
    try:
        with Admin(bootstrap_servers=bootstrap) as admin:     # both in the group, each assigned, before any record
            deadline = time.monotonic() + 60
            while True:
                member.poll(100)
                try:
                    desc = admin.describe_share_groups([group]).get(group)
                except GroupIdNotFoundError:
                    desc = None                               # no member joined yet
                if desc is not None and len(desc.members) == 2 and all(m.assignment for m in desc.members):
                    break
                assert time.monotonic() < deadline, desc
        with Producer(bootstrap_servers=bootstrap, linger_ms=5) as p:
            for i in range(RECORDS):
                p.send(topic, b"v%d" % i, partition=i % PARTITIONS)
        idle_since = time.monotonic()
        while time.monotonic() - idle_since < 8:
            for tp, records in member.poll(200).items():
                for r in records:
                    idle_since = time.monotonic()
                    kwire_got.append((r.partition, r.offset, r.delivery_count))
                    if explicit:
                        member.acknowledge(r, AcknowledgeType.RELEASE if r.delivery_count < 2
                                           else AcknowledgeType.ACCEPT)
        member.commit_sync(10)
    finally:
        member.close()
        java.join(150)
    assert not java.is_alive()
    return kwire_got, [(r.partition, r.offset, n) for r, n in java_got]


def test_a_mixed_group_gets_every_record_once(kafka):
    kwire_got, java_got = _mixed_run(kafka, explicit=False)
    every = collections.Counter((p, o) for p, o, _ in kwire_got + java_got)
    assert len(every) == RECORDS and set(every.values()) == {1}
    assert {n for _, _, n in kwire_got + java_got} == {1}
    assert kwire_got and java_got, (len(kwire_got), len(java_got))


def test_delivery_counts_agree_across_the_mixed_group(kafka):
    """Every member releases a record delivered for the first time and
    accepts it the second: each record comes exactly twice in the group,
    counted 1 then 2, whichever client got it each time."""
    kwire_got, java_got = _mixed_run(kafka, explicit=True)
    deliveries = collections.defaultdict(list)
    for p, o, n in kwire_got + java_got:
        deliveries[(p, o)].append(n)
    assert len(deliveries) == RECORDS
    assert all(sorted(ns) == [1, 2] for ns in deliveries.values()), [
        (k, v) for k, v in deliveries.items() if sorted(v) != [1, 2]][:5]
    assert kwire_got and java_got
