"""kwire.share.ShareConsumer on Apache Kafka 4.4 (share groups on by
default: share.version 2): every record delivered and accepted once across
a group, released records delivered again with their delivery count
raised, rejected ones never, explicit mode's rules, close releasing what
was not acknowledged, the acknowledgement callback and commit_sync's
outcomes."""

from __future__ import annotations

import collections
import time
import uuid

import pytest

from kwire.admin import Admin, NewTopic
from kwire.admin_ops.configs import AlterConfigOp
from kwire.config import ConfigError
from kwire.errors import IllegalStateError
from kwire.producer import Producer
from kwire.share import AcknowledgeType
from kwire.share import ShareConsumer

pytestmark = pytest.mark.kafka


def _topic(bootstrap: str, partitions: int, records: int) -> str:
    name = f"share-{uuid.uuid4().hex[:10]}"
    with Admin(bootstrap_servers=bootstrap) as a:
        a.create_topics([NewTopic(name, partitions)])
    with Producer(bootstrap_servers=bootstrap, linger_ms=2) as p:
        for i in range(records):
            p.send(name, b"v%d" % i, key=b"k%d" % i, partition=i % partitions)
    return name


def _group(bootstrap: str) -> str:
    """A new group that starts at the log's beginning (share.auto.offset.reset is the group's config)."""
    group = f"sg-{uuid.uuid4().hex[:10]}"
    with Admin(bootstrap_servers=bootstrap) as a:
        a.incremental_alter_configs({("group", group): [AlterConfigOp("share.auto.offset.reset", "earliest")]})
    return group


def _member(bootstrap: str, group: str, topic: str, **cfg) -> ShareConsumer:
    c = ShareConsumer(bootstrap_servers=bootstrap, group_id=group, **cfg)
    c.subscribe([topic])
    return c


def _drain(consumers, until, timeout: float = 60.0, each=None):
    """Poll the members in turn until ``until(seen)`` or ``timeout``; ``each(consumer, record)`` per record."""
    seen = collections.Counter()
    deadline = time.monotonic() + timeout
    while not until(seen):
        assert time.monotonic() < deadline, f"gave up with {sum(seen.values())} deliveries"
        for c in consumers:
            for tp, records in c.poll(200).items():
                for r in records:
                    assert (r.topic, r.partition) == (tp.topic, tp.partition)
                    seen[(r.partition, r.offset)] += 1
                    if each is not None:
                        each(c, r)
    return seen


def test_a_group_of_two_gets_every_record_once(kafka):
    bootstrap = kafka.bootstrap("plaintext")
    topic, group = _topic(bootstrap, 3, 600), _group(bootstrap)
    members = [_member(bootstrap, group, topic) for _ in range(2)]
    by_member = collections.Counter()
    try:
        seen = _drain(members, lambda s: len(s) == 600, each=lambda c, r: by_member.update([id(c)]))
        assert all(n == 1 for n in seen.values())
        for c in members:
            c.commit_sync(10)
    finally:
        for c in members:
            c.close()
    late = _member(bootstrap, group, topic)            # everything was accepted: nothing for a new member
    try:
        assert sum(len(v) for _ in range(10) for v in late.poll(300).values()) == 0
    finally:
        late.close()


def test_released_records_return_counted_and_rejected_ones_never(kafka):
    bootstrap = kafka.bootstrap("plaintext")
    topic, group = _topic(bootstrap, 1, 20), _group(bootstrap)
    outcomes = []
    c = _member(bootstrap, group, topic, share_acknowledgement_mode="explicit")
    c.set_acknowledgement_commit_callback(lambda offsets, error: outcomes.append((offsets, error)))
    deliveries = []

    def judge(consumer, r):
        deliveries.append((r.offset, r.delivery_count))
        if r.offset % 5 == 0 and r.delivery_count < 3:
            consumer.acknowledge(r, AcknowledgeType.RELEASE)
        elif r.offset == 7:
            consumer.acknowledge(r, AcknowledgeType.REJECT)
        else:
            consumer.acknowledge(r)

    try:
        _drain([c], lambda s: sum(s.values()) == 28, each=judge)
        assert all(e is None for e in c.commit_sync(10).values())
        assert sorted(d for d in deliveries if d[0] % 5 == 0) == [(o, n) for o in (0, 5, 10, 15) for n in (1, 2, 3)]
        assert [d for d in deliveries if d[0] == 7] == [(7, 1)]
        assert all(error is None for _, error in outcomes)
        acked = sorted(o for offsets, _ in outcomes for os in offsets.values() for o in os)
        assert acked == sorted(list(range(20)) + [0, 5, 10, 15] * 2)
    finally:
        c.close()


def test_explicit_mode_wants_every_record_acknowledged(kafka):
    bootstrap = kafka.bootstrap("plaintext")
    topic, group = _topic(bootstrap, 1, 10), _group(bootstrap)
    c = _member(bootstrap, group, topic, share_acknowledgement_mode="explicit")
    try:
        records = []
        deadline = time.monotonic() + 30
        while not records:
            assert time.monotonic() < deadline
            records = [r for v in c.poll(200).values() for r in v]
        with pytest.raises(IllegalStateError, match="not acknowledged"):
            c.poll(0)
        for r in records:
            c.acknowledge(r, AcknowledgeType.ACCEPT)
        c.poll(0)                                     # now it may
        with pytest.raises(IllegalStateError, match="cannot be acknowledged"):
            c.acknowledge(records[0])                 # taken by that poll already
    finally:
        c.close()
    implicit = ShareConsumer(bootstrap_servers=bootstrap, group_id=group)
    try:
        with pytest.raises(IllegalStateError, match="explicit"):
            implicit.acknowledge(records[0])
        with pytest.raises(IllegalStateError, match="not subscribed"):
            implicit.poll(0)
    finally:
        implicit.close()


def test_close_releases_what_was_not_acknowledged(kafka):
    """An implicit member's last poll is not accepted by close (as Java's):
    the closed session releases those records, and another member gets them
    with their delivery count raised."""
    bootstrap = kafka.bootstrap("plaintext")
    topic, group = _topic(bootstrap, 1, 30), _group(bootstrap)
    first = _member(bootstrap, group, topic)
    got = _drain([first], lambda s: len(s) == 30)
    first.close()
    assert len(got) == 30
    second = _member(bootstrap, group, topic)
    counts = []
    try:
        _drain([second], lambda s: len(s) == 30,
               each=lambda c, r: counts.append(r.delivery_count))
        assert counts == [2] * 30
    finally:
        second.close()


def test_options_a_share_group_decides_are_refused():
    for option in ("auto_offset_reset", "enable_auto_commit", "isolation_level", "group_instance_id",
                   "session_timeout_ms", "heartbeat_interval_ms", "group_protocol"):
        with pytest.raises(ConfigError):
            ShareConsumer(bootstrap_servers="127.0.0.1:9", group_id="g", **{option: "x"})
    with pytest.raises(ConfigError, match="group_id"):
        ShareConsumer(bootstrap_servers="127.0.0.1:9")
    with pytest.raises(ConfigError):
        ShareConsumer(bootstrap_servers="127.0.0.1:9", group_id="g", share_acknowledgement_mode="sometimes")


def test_renewed_records_keep_their_lock_and_come_back_to_be_acknowledged(kafka):
    """RENEW (KIP-1222): a record held past the lock duration (15 s, the
    least a group may set) by renewing it is not delivered to another
    member meanwhile; each renewed record comes back from the next poll, to
    be acknowledged again, and once accepted it is gone."""
    bootstrap = kafka.bootstrap("plaintext")
    topic, group = _topic(bootstrap, 1, 5), _group(bootstrap)
    with Admin(bootstrap_servers=bootstrap) as a:
        a.incremental_alter_configs({("group", group): [AlterConfigOp("share.record.lock.duration.ms", "15000")]})
    slow = _member(bootstrap, group, topic, share_acknowledgement_mode="explicit")
    other = _member(bootstrap, group, topic)
    stolen = []
    try:
        held = []
        deadline = time.monotonic() + 30
        while not held:
            assert time.monotonic() < deadline
            held = [r for v in slow.poll(200).values() for r in v]
            stolen += [r.offset for v in other.poll(0).values() for r in v]
        assert [r.offset for r in held] == list(range(5))
        started = time.monotonic()
        for renew_at in (9, 18):                          # past the 15 s lock only by renewing
            while time.monotonic() - started < renew_at:
                stolen += [r.offset for v in other.poll(300).values() for r in v]
            for r in held:
                slow.acknowledge(r, AcknowledgeType.RENEW)
            back = []
            while len(back) < 5:
                assert time.monotonic() - started < renew_at + 10, back
                back += [r for v in slow.poll(200).values() for r in v]
            assert [(r.offset, r.delivery_count) for r in back] == [(o, 1) for o in range(5)]
            held = back
        for r in held:
            slow.acknowledge(r, AcknowledgeType.ACCEPT)
        assert all(e is None for e in slow.commit_sync(10).values())
        stolen += [r.offset for _ in range(5) for v in other.poll(300).values() for r in v]
        assert time.monotonic() - started > 18 and stolen == []
    finally:
        slow.close()
        other.close()


def test_poll_columnar_rows_carry_their_delivery_count(kafka):
    """poll_columnar: one Arrow batch per partition with the decoder's
    columns and delivery_count; explicit acknowledgement by offset (the
    offset column of a filter's rows): released rows come back with their
    count raised, accepted and rejected ones never; implicit mode accepts
    the last poll's rows. metrics() counts what was returned and
    acknowledged, under Java's names."""
    import pyarrow.compute as pc

    bootstrap = kafka.bootstrap("plaintext")
    topic, group = _topic(bootstrap, 2, 40), _group(bootstrap)
    counts = collections.Counter()
    with _member(bootstrap, group, topic, share_acknowledgement_mode="explicit") as c:
        deadline = time.monotonic() + 60
        while sum(counts.values()) < 40 + 20:          # each record once, the odd ones twice (released once)
            assert time.monotonic() < deadline, counts
            for tp, batch in c.poll_columnar(200).items():
                assert batch.schema.names == ["offset", "timestamp", "timestamp_type", "key", "value", "headers",
                                              "delivery_count"]
                assert str(batch.schema.field("delivery_count").type) == "int16"
                for off, n in zip(batch.column("offset").to_pylist(), batch.column("delivery_count").to_pylist()):
                    counts[(tp.partition, off)] += 1
                    assert n == counts[(tp.partition, off)]
                odd = pc.equal(pc.bit_wise_and(batch.column("offset"), 1), 1)
                first = pc.equal(batch.column("delivery_count"), 1)
                again = batch.filter(pc.and_(odd, first)).column("offset")
                c.acknowledge_offsets(tp, again, AcknowledgeType.RELEASE)
                c.acknowledge_offsets(tp, batch.filter(pc.invert(pc.and_(odd, first))).column("offset"))
            with pytest.raises(IllegalStateError, match="not a record of the last poll"):
                c.acknowledge_offsets((topic, 0), [10_000])
        assert c.poll_columnar(1000) == {}
        c.commit_sync()
        m = c.metrics()                                           # Java's KafkaShareConsumer's names
        fm = m["consumer-share-fetch-manager-metrics"]
        assert fm["records-consumed-total"] == 60 and fm["bytes-consumed-total"] > 0
        assert fm["acknowledgements-send-total"] == 60 and fm["acknowledgements-error-total"] == 0
        assert fm["fetch-total"] >= 2 and fm["records-per-request-max"] >= 1
        assert m["consumer-share-metrics"]["request-total"] > 0
        assert any(k.startswith("consumer-share-node-metrics,node-id=node-") for k in m)
    assert sorted(counts.values()) == [1] * 20 + [2] * 20
    with _member(bootstrap, group, topic) as c:                  # implicit: nothing left for another member
        assert c.poll_columnar(2000) == {}


def test_a_poll_hands_out_at_most_max_poll_records_of_a_larger_fetch(kafka):
    """ShareFetch asks for more than a poll returns (share_fetch_max_records, once the application is seen to
    keep up): each poll takes max_poll_records at most and leaves the rest buffered, decoded, for the next,
    as records or as Arrow rows alike; explicit acknowledgements of a partial take count as any others."""
    bootstrap = kafka.bootstrap("plaintext")
    topic, group = _topic(bootstrap, 1, 600), _group(bootstrap)
    counts = collections.Counter()
    polls = 0
    with _member(bootstrap, group, topic, share_acknowledgement_mode="explicit", max_poll_records=50,
                 share_fetch_max_records=600) as c:
        deadline = time.monotonic() + 60
        while sum(counts.values()) < 600 + 86:          # each record once, those at multiples of 7 twice
            assert time.monotonic() < deadline, sum(counts.values())
            polls += 1
            if polls % 2:
                got = {tp: [(r.offset, r.delivery_count) for r in rs] for tp, rs in c.poll(200).items()}
            else:
                got = {tp: list(zip(b.column("offset").to_pylist(), b.column("delivery_count").to_pylist()))
                       for tp, b in c.poll_columnar(200).items()}
            assert sum(len(rows) for rows in got.values()) <= 50
            for tp, rows in got.items():
                for offset, n in rows:
                    counts[offset] += 1
                    assert n == counts[offset]
                again = [o for o, n in rows if o % 7 == 0 and n == 1]
                c.acknowledge_offsets(tp, again, AcknowledgeType.RELEASE)
                c.acknowledge_offsets(tp, [o for o, n in rows if o not in again])
        c.commit_sync(10)
        assert c.metrics()["consumer-share-fetch-manager-metrics"]["records-per-request-max"] > 50
    assert sorted(counts) == list(range(600))
    assert all(n == (2 if o % 7 == 0 else 1) for o, n in counts.items())


def test_buffered_records_whose_lock_lapsed_are_not_handed_out(kafka):
    """Records a fetch acquired but no poll took before the group's lock duration ran out: the broker has
    released them, so kwire drops them from its buffer (another member may have them) and they come back
    from the broker with their delivery count raised."""
    bootstrap = kafka.bootstrap("plaintext")
    topic, group = _topic(bootstrap, 1, 100), _group(bootstrap)
    with Admin(bootstrap_servers=bootstrap) as a:
        a.incremental_alter_configs({("group", group): [AlterConfigOp("share.record.lock.duration.ms", "2000")]})
    with _member(bootstrap, group, topic, max_poll_records=10, share_acquire_mode="record_limit",
                 share_fetch_max_records=100) as c:
        first = []
        deadline = time.monotonic() + 30
        while not first:
            assert time.monotonic() < deadline
            first = [r for rs in c.poll(200).values() for r in rs]
        assert len(first) == 10 and all(r.delivery_count == 1 for r in first)
        time.sleep(2.5)       # meanwhile the next 10 (the ShareFetch sent as the poll returned) lapse unread
        later = []
        while len(later) < 100 and time.monotonic() < deadline + 10:
            later += [r for rs in c.poll(200).values() for r in rs]
    # nothing that lapsed in the buffer was handed out: the first poll's 10 records and the 10 buffered came
    # back from the broker delivered a second time, the rest once
    got = [(r.offset, r.delivery_count) for r in later]
    assert sorted(got) == [(o, 2 if o < 20 else 1) for o in range(100)], got
