"""KIP-848's consumer group protocol (``group_protocol="consumer"``) on Apache
Kafka: the coordinator assigns, members join and leave without a
stop-the-world rebalance, a crashed member is found by the session timeout,
commits carry the member epoch, the rebalance listener sees what Java's
does. A broker of this module's own, with short consumer-group timeouts
(``group.consumer.*``), so that a crash is found in seconds: the fixture
``kip848`` (not ``broker``, the conftest fixture every suite shares)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from typing import Dict, List, Set, Tuple

import pytest

from kwire.admin import Admin, NewTopic
from kwire.consumer import Consumer, TopicPartition
from kwire.producer import Producer

pytestmark = pytest.mark.kafka

PARTITIONS = 4
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_MS = 500
OVERRIDES = {
    "group.consumer.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "group.consumer.min.session.timeout.ms": "3000",
    "group.consumer.heartbeat.interval.ms": str(HEARTBEAT_MS),
    "group.consumer.min.heartbeat.interval.ms": str(HEARTBEAT_MS),
}


@pytest.fixture(scope="module")
def kip848():
    from support.kafka import start_kafka

    b = start_kafka(overrides=OVERRIDES, progress=lambda msg: sys.stderr.write(f"[kafka 848] {msg}\n"))
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def topic(kip848):
    name = f"kip848-{uuid.uuid4().hex[:8]}"
    with Admin(kip848.client_config("plaintext")) as admin:
        admin.create_topics([NewTopic(name, PARTITIONS)])
    return name


class Listener:
    """Records every callback, in order, as (name, partitions)."""

    def __init__(self) -> None:
        self.calls: List[Tuple[str, List[int]]] = []

    def on_partitions_revoked(self, tps):
        self.calls.append(("revoked", sorted(tp.partition for tp in tps)))

    def on_partitions_assigned(self, tps):
        self.calls.append(("assigned", sorted(tp.partition for tp in tps)))

    def on_partitions_lost(self, tps):
        self.calls.append(("lost", sorted(tp.partition for tp in tps)))


def _consumer(kip848, group, **kw):
    return Consumer(kip848.client_config("plaintext"), group_id=group, group_protocol="consumer",
                    auto_offset_reset="earliest", **kw)


def _produce(kip848, topic, n, start=0):
    with Producer(kip848.client_config("plaintext"), linger_ms=2) as p:
        futs = [p.send(topic, b"v%d" % i, partition=i % PARTITIONS) for i in range(start, start + n)]
        for f in futs:
            f.get(30)


def _poll_until(consumers, cond, timeout, got=None):
    """Poll every consumer until ``cond()``; records go to ``got[index]``
    as (partition, offset, value, monotonic time)."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        for i, c in enumerate(consumers):
            for tp, recs in c.poll(50).items():
                if got is not None:
                    now = time.monotonic()
                    got.setdefault(i, []).extend((tp.partition, r.offset, r.value, now) for r in recs)


def _past_empty(calls):
    """The listener's calls after the first reconciliations that assigned
    nothing."""
    i = 0
    while i < len(calls) and calls[i] == ("assigned", []):
        i += 1
    return calls[i:]


def _owned(c) -> Set[int]:
    return {tp.partition for tp in c.assignment()}


def test_one_member_gets_every_partition_reads_every_record_and_commits(kip848, topic):
    _produce(kip848, topic, 400)
    group = f"g-{uuid.uuid4().hex[:8]}"
    listener = Listener()
    got: Dict[int, list] = {}
    with _consumer(kip848, group, enable_auto_commit=False, group_remote_assignor="uniform") as c:
        c.subscribe([topic], listener=listener)
        _poll_until([c], lambda: len(got.get(0, ())) >= 400, 30, got)
        assert _owned(c) == set(range(PARTITIONS))
        assert _past_empty(listener.calls) == [("assigned", list(range(PARTITIONS)))]
        meta = c.group_metadata()
        assert meta.generation_id > 0 and meta.member_id       # the member epoch and the client's member id
        assert sorted(v for _, _, v, _ in got[0]) == sorted(b"v%d" % i for i in range(400))
        c.commit()
        committed = c.committed([(topic, p) for p in range(PARTITIONS)])
        assert {tp.partition: om.offset for tp, om in committed.items()} == {p: 100 for p in range(PARTITIONS)}
        # explicit offsets, synchronous and asynchronous
        c.commit({(topic, 0): 7})
        c.commit_async({(topic, 1): 9}).result(10)
        committed = c.committed([(topic, 0), (topic, 1)])
        assert (committed[TopicPartition(topic, 0)].offset, committed[TopicPartition(topic, 1)].offset) == (7, 9)
    # leaving: revoked as Java's client does, nothing lost
    assert listener.calls[-1] == ("revoked", list(range(PARTITIONS)))
    # a new member of the group starts at the committed offsets
    with _consumer(kip848, group) as c:
        c.subscribe([topic])
        got = {}
        _poll_until([c], lambda: len(got.get(0, ())) >= 100 - 7 + 100 - 9, 30, got)
        assert min(o for p, o, _, _ in got[0] if p == 0) == 7


def test_members_join_and_leave_without_stopping_the_world(kip848, topic):
    group = f"g-{uuid.uuid4().hex[:8]}"
    stop = threading.Event()
    sent = [0]

    def produce():
        with Producer(kip848.client_config("plaintext"), linger_ms=1) as p:
            while not stop.is_set():
                for part in range(PARTITIONS):
                    p.send(topic, b"v%d" % sent[0], partition=part)
                    sent[0] += 1
                p.flush(10)
                time.sleep(0.01)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    la, lb = Listener(), Listener()
    got: Dict[int, list] = {}
    a = _consumer(kip848, group)
    b = _consumer(kip848, group)
    try:
        a.subscribe([topic], listener=la)
        _poll_until([a], lambda: _owned(a) == set(range(PARTITIONS)) and len(got.get(0, ())) > 50, 30, got)
        # b joins: some of a's partitions move to b, a keeps consuming the rest meanwhile
        joined_at = time.monotonic()
        b.subscribe([topic], listener=lb)
        _poll_until([a, b], lambda: len(_owned(a)) == PARTITIONS // 2 and len(_owned(b)) == PARTITIONS // 2, 30, got)
        moved_at = time.monotonic()
        kept = _owned(a)
        assert kept | _owned(b) == set(range(PARTITIONS)) and not kept & _owned(b)
        during = [p for p, _, _, t in got[0] if joined_at <= t <= moved_at and p in kept]
        assert during, "the member stopped consuming the partitions it kept while others moved"
        moved = sorted(set(range(PARTITIONS)) - kept)
        # (a first reconciliation may come before the coordinator sees the new topic: assigned([]) then)
        assert _past_empty(la.calls) == [("assigned", list(range(PARTITIONS))), ("revoked", moved), ("assigned", [])]
        assert _past_empty(lb.calls) == [("assigned", moved)]
        _poll_until([a, b], lambda: len(got.get(1, ())) > 50, 30, got)
        # b leaves: its partitions move back to a, which never stops
        b.close()
        left_at = time.monotonic()
        _poll_until([a], lambda: _owned(a) == set(range(PARTITIONS)), 30, got)
        back_at = time.monotonic()
        assert la.calls[-1] == ("assigned", moved) and lb.calls[-1] == ("revoked", moved)
        assert [p for p, _, _, t in got[0] if left_at <= t <= back_at and p in kept] or back_at - left_at < 0.5
        # everything produced is read once: the commits before each revocation hand the positions over
        stop.set()
        producer.join(30)
        total = sent[0]
        _poll_until([a], lambda: sum(len(v) for v in got.values()) >= total, 30, got)
        time.sleep(0.5)
        _poll_until([a], lambda: True, 1, got)
        values = [v for recs in got.values() for _, _, v, _ in recs]
        assert sorted(values) == sorted(b"v%d" % i for i in range(total)), "lost or duplicated records"
    finally:
        stop.set()
        a.close()
        b.close()


_CRASHER = textwrap.dedent("""
    import sys, time
    from kwire.consumer import Consumer
    c = Consumer({"bootstrap.servers": sys.argv[1]}, group_id=sys.argv[2], group_protocol="consumer",
                 auto_offset_reset="earliest")
    c.subscribe([sys.argv[3]])
    while True:
        c.poll(100)
        if c.assignment():
            print("owns", len(c.assignment()), flush=True)
""")


def test_a_crashed_member_is_found_by_the_session_timeout(kip848, topic):
    group = f"g-{uuid.uuid4().hex[:8]}"
    listener = Listener()
    with _consumer(kip848, group) as a:
        a.subscribe([topic], listener=listener)
        _poll_until([a], lambda: _owned(a) == set(range(PARTITIONS)), 30)
        child = subprocess.Popen([sys.executable, "-c", _CRASHER, kip848.bootstrap(), group, topic],
                                 stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        owns = threading.Event()

        def read() -> None:
            for line in child.stdout:
                if line.startswith("owns"):
                    owns.set()

        threading.Thread(target=read, daemon=True).start()
        try:
            # a keeps polling (it hands partitions over to the child meanwhile)
            _poll_until([a], lambda: owns.is_set() and len(_owned(a)) == PARTITIONS // 2, 30)
        finally:
            os.kill(child.pid, signal.SIGKILL)      # no leave: only the session timeout tells the coordinator
            child.wait(10)
        killed_at = time.monotonic()
        _poll_until([a], lambda: _owned(a) == set(range(PARTITIONS)), SESSION_TIMEOUT_MS / 1000 + 20)
        took = time.monotonic() - killed_at
        assert took >= SESSION_TIMEOUT_MS / 1000 * 0.5, f"partitions moved back after {took:.1f} s, before the session timeout"
        assert listener.calls[-1][0] == "assigned" and "lost" not in [n for n, _ in listener.calls]


def test_offset_fetch_names_the_member_and_a_stale_epoch_is_refused_then_retried(kip848, topic, monkeypatch):
    """KIP-848: a member's OffsetFetch (v9) carries its member id and epoch;
    the coordinator refuses a stale epoch (STALE_MEMBER_EPOCH) and an unknown
    member (UNKNOWN_MEMBER_ID), and answers a fetch without a member (the
    admin client's). kwire retries a refused fetch with the epoch it has
    then: ``committed()``, and the committed positions of new partitions."""
    import kwire.group as group_module
    from kwire.commit import offset_fetch_request
    from kwire.protocol.api_keys import ErrorCode

    _produce(kip848, topic, 40)
    group = f"g-{uuid.uuid4().hex[:8]}"
    want = {p: 3 + p for p in range(PARTITIONS)}
    sent: List[Tuple] = []

    def stale_first(v, group_id, partitions, require_stable=True, member=(None, -1)):
        if member[0] is not None and not any(m[0] for m in sent):
            member = (member[0], member[1] - 1)        # the first fetch of a member: one epoch behind
        sent.append(member)
        return offset_fetch_request(v, group_id, partitions, require_stable, member)

    with _consumer(kip848, group, enable_auto_commit=False) as c:
        c.subscribe([topic])
        _poll_until([c], lambda: _owned(c) == set(range(PARTITIONS)), 30)
        c.commit({(topic, p): o for p, o in want.items()})
        member, epoch = c.group_metadata().member_id, c.group_metadata().generation_id
        with Admin(kip848.client_config("plaintext")) as admin:
            def answer(who):
                resp = admin._client.run(admin._group_request(
                    group, lambda v: offset_fetch_request(v, group, [(topic, 0)], member=who), "OffsetFetch", 10,
                    lambda r: 0))
                return resp.groups[0].error_code

            assert answer((member, epoch)) == 0 and answer((None, -1)) == 0
            assert answer((member, epoch - 1)) == ErrorCode.STALE_MEMBER_EPOCH
            assert answer(("no-such-member", epoch)) == ErrorCode.UNKNOWN_MEMBER_ID
        monkeypatch.setattr(group_module, "offset_fetch_request", stale_first)
        committed = c.committed([(topic, p) for p in range(PARTITIONS)])
        assert {tp.partition: om.offset for tp, om in committed.items()} == want
        assert sent[0] == (member, epoch - 1) and sent[-1] == (member, epoch)
    # a new member's positions: its first OffsetFetch is refused as stale, the retry gives the committed offsets
    sent.clear()
    got: Dict[int, list] = {}
    with _consumer(kip848, group) as d:
        d.subscribe([topic])
        _poll_until([d], lambda: len(got.get(0, ())) >= 40 - sum(want.values()), 30, got)
        first = {p: min(o for q, o, _, _ in got[0] if q == p) for p in range(PARTITIONS)}
        assert first == want
        members = [m for m in sent if m[0] is not None]
        assert len(members) >= 2 and members[0][1] < members[1][1], sent


def test_a_static_member_comes_back_to_its_partitions(kip848, topic):
    """A static member closes with epoch -2: the coordinator keeps its
    assignment for the session timeout, and gives it back when it returns,
    without moving it to the other member meanwhile."""
    group = f"g-{uuid.uuid4().hex[:8]}"
    with _consumer(kip848, group) as a:
        a.subscribe([topic])
        b = _consumer(kip848, group, group_instance_id="b-1")
        b.subscribe([topic])
        _poll_until([a, b], lambda: len(_owned(a)) == len(_owned(b)) == PARTITIONS // 2, 30)
        kept = _owned(b)
        b.close()
        # a does not get b's partitions while b may come back
        until = time.monotonic() + 2
        _poll_until([a], lambda: time.monotonic() >= until, 5)
        assert len(_owned(a)) == PARTITIONS // 2
        with _consumer(kip848, group, group_instance_id="b-1") as b:
            b.subscribe([topic])
            _poll_until([a, b], lambda: _owned(b) == kept, 15)
            assert len(_owned(a)) == PARTITIONS // 2


def test_a_pattern_subscription_is_matched_by_the_coordinator(kip848):
    prefix = f"kip848re-{uuid.uuid4().hex[:6]}"
    with Admin(kip848.client_config("plaintext")) as admin:
        admin.create_topics([NewTopic(f"{prefix}-a", 2), NewTopic(f"{prefix}-b", 1), NewTopic(f"x{prefix}", 1)])
    group = f"g-{uuid.uuid4().hex[:8]}"
    with _consumer(kip848, group) as c:
        c.subscribe(pattern=f"{prefix}-.*")
        want = {TopicPartition(f"{prefix}-a", 0), TopicPartition(f"{prefix}-a", 1), TopicPartition(f"{prefix}-b", 0)}
        _poll_until([c], lambda: set(c.assignment()) == want, 30)
        assert c.subscription() == {f"{prefix}-a", f"{prefix}-b"}


@pytest.fixture(scope="module")
def java_member(tmp_path_factory):
    """The command line of tests/kafka/java/GroupMember.java, compiled
    against the kafka-clients jar of the kip848's Maven assembly."""
    import shutil

    from support.kafka import kafka_home

    if not shutil.which("javac"):
        pytest.fail("the Java peer tests need a JDK's javac on PATH")
    libs = os.path.join(str(kafka_home()), "libs", "*")
    out = str(tmp_path_factory.mktemp("java848"))
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "java", "GroupMember.java")
    subprocess.run(["javac", "-cp", libs, "-d", out, src], check=True, capture_output=True, timeout=120)
    return ["java", "-Xmx256m", "-cp", os.pathsep.join([out, libs]), "GroupMember"]


def test_java_and_kwire_members_share_a_consumer_group(kip848, topic, java_member):
    group = f"g-{uuid.uuid4().hex[:8]}"
    _produce(kip848, topic, 400)
    lines: List[str] = []
    got: Dict[int, list] = {}
    with _consumer(kip848, group) as a:
        a.subscribe([topic])
        _poll_until([a], lambda: len(got.get(0, ())) >= 400, 30, got)
        java = subprocess.Popen(java_member + [kip848.bootstrap(), group, topic], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        threading.Thread(target=lambda: lines.extend(java.stdout), daemon=True).start()
        try:
            def java_owns():
                owned = [ln.split()[1].split(",") for ln in lines if ln.startswith("assigned ") and ln.split()[1:]]
                return owned[-1] if owned else []

            # the Java member joins: half the partitions move to it, a keeps the rest
            _poll_until([a], lambda: len(_owned(a)) == PARTITIONS // 2 and len(java_owns()) == PARTITIONS // 2, 60)
            assert {int(p) for p in java_owns()} == set(range(PARTITIONS)) - _owned(a)
            _produce(kip848, topic, 400, start=400)

            def java_records():
                return [ln.split()[3].encode() for ln in lines if ln.startswith("record ")]

            _poll_until([a], lambda: len(got[0]) + len(java_records()) >= 800, 30, got)
            # the Java member leaves: its partitions come back to a
            java.stdin.write("stop\n")
            java.stdin.flush()
            _poll_until([a], lambda: _owned(a) == set(range(PARTITIONS)), 30, got)
            java.wait(30)
        finally:
            if java.poll() is None:
                java.kill()
                java.wait(10)
        assert any(ln.startswith("closed") for ln in lines)
        _produce(kip848, topic, 200, start=800)
        _poll_until([a], lambda: len(got[0]) + len(java_records()) >= 1000, 30, got)
        values = [v for _, _, v, _ in got[0]] + java_records()
        assert sorted(values) == sorted(b"v%d" % i for i in range(1000)), "lost or duplicated records"


def test_java_and_kwire_members_share_a_range_assigned_group(kip848, topic):
    """The coordinator's ``range`` assignor (both members ask for it) over a
    kwire member and Java's (tests/support/java_peer.py, committing before
    each revocation and before it leaves): contiguous halves while both are
    in, and every record read once across the Java member's join and leave."""
    from support.java_peer import JavaGroupMember

    group = f"g-{uuid.uuid4().hex[:8]}"
    _produce(kip848, topic, 200)
    got: Dict[int, list] = {}
    java_cfg = {"bootstrap.servers": kip848.bootstrap(), "group.id": group, "group.protocol": "consumer",
                "group.remote.assignor": "range", "auto.offset.reset": "earliest", "enable.auto.commit": "false"}
    with _consumer(kip848, group, group_remote_assignor="range") as a:
        a.subscribe([topic])
        _poll_until([a], lambda: len(got.get(0, ())) >= 200, 30, got)
        java = JavaGroupMember(java_cfg, [topic])
        try:
            _poll_until([a], lambda: len(_owned(a)) == PARTITIONS // 2
                        and len(java.snapshot()[1]) == PARTITIONS // 2, 60)
            theirs = {p for _, p in java.snapshot()[1]}
            assert theirs == set(range(PARTITIONS)) - _owned(a)
            # range: each member a contiguous run of partitions
            assert {frozenset(_owned(a)), frozenset(theirs)} == {frozenset({0, 1}), frozenset({2, 3})}
            with Admin(kip848.client_config("plaintext")) as admin:
                d = admin.describe_groups([group])[group]
            assert (d.group_type, d.protocol, len(d.members)) == ("consumer", "range", 2)
            _produce(kip848, topic, 200, start=200)
            _poll_until([a], lambda: len(got[0]) + len(java.snapshot()[0]) >= 400, 30, got)
            java.stop()
        finally:
            java.kill()
        _poll_until([a], lambda: _owned(a) == set(range(PARTITIONS)), 30, got)
        _produce(kip848, topic, 200, start=400)
        _poll_until([a], lambda: len(got[0]) + len(java.records) >= 600, 30, got)
        time.sleep(0.5)
        _poll_until([a], lambda: True, 1, got)
    values = [v for _, _, v, _ in got[0]] + [r.value for r in java.records]
    assert java.records and sorted(values) == sorted(b"v%d" % i for i in range(600)), "lost or duplicated records"


def test_describe_shows_a_consumer_group_and_a_classic_one(kip848, topic, capsys):
    from kwire.__main__ import main

    _produce(kip848, topic, 40)
    group, classic = f"g-{uuid.uuid4().hex[:8]}", f"c-{uuid.uuid4().hex[:8]}"
    with _consumer(kip848, group, group_remote_assignor="range") as a, \
            Consumer(kip848.client_config("plaintext"), group_id=classic, auto_offset_reset="earliest") as c:
        a.subscribe([topic])
        c.subscribe([topic])
        got: Dict[int, list] = {}
        _poll_until([a, c], lambda: len(got.get(0, ())) >= 40 and len(got.get(1, ())) >= 40, 30, got)
        a.commit()
        with Admin(kip848.client_config("plaintext")) as admin:
            descs = admin.describe_groups([group, classic])
        d = descs[group]
        assert (d.group_type, d.protocol, d.state, d.epoch > 0) == ("consumer", "range", "Stable", True)
        (m,) = d.members
        assert (m.member_id, m.member_epoch, m.subscription) == (a.group_metadata().member_id,
                                                                 a.group_metadata().generation_id, (topic,))
        assert set(m.assignment) == {TopicPartition(topic, p) for p in range(PARTITIONS)}
        assert descs[classic].group_type == "classic" and len(descs[classic].members) == 1
        # ListGroups v5: each group's type, and the types filter
        with Admin(kip848.client_config("plaintext")) as admin:
            listed = {g.group_id: g for g in admin.list_groups()}
            consumer_only = {g.group_id: g for g in admin.list_groups(types=["consumer"])}
            classic_only = {g.group_id for g in admin.list_groups(types=["classic"])}
        assert (listed[group].group_type, listed[classic].group_type) == ("consumer", "classic")
        assert (listed[group].state, listed[group].protocol_type) == ("Stable", "consumer")
        assert group in consumer_only and classic not in consumer_only
        assert classic in classic_only and group not in classic_only
        assert main(["groups", "list", "--type", "consumer", "-b", kip848.bootstrap()]) == 0
        rows = {line.split("\t")[0]: line.split("\t")[1:] for line in capsys.readouterr().out.splitlines()}
        assert rows.get(group) == ["consumer", "Stable", "consumer"] and classic not in rows
        assert main(["groups", "describe", group, "-b", kip848.bootstrap()]) == 0
        out = capsys.readouterr().out
        assert f"group {group}  type=consumer  state=Stable  protocol=consumer/range" in out
        rows = [line.split("\t") for line in out.splitlines() if line.startswith(f"  {topic}")]
        assert [(r[2], r[5]) for r in rows] == [("10", m.member_id)] * PARTITIONS     # committed, owner


def test_a_member_that_stops_polling_leaves_and_rejoins_at_its_next_poll(kip848, topic):
    group = f"g-{uuid.uuid4().hex[:8]}"
    lb = Listener()
    with _consumer(kip848, group) as a, _consumer(kip848, group, max_poll_interval_ms=2000) as b:
        a.subscribe([topic])
        b.subscribe([topic], listener=lb)
        _poll_until([a, b], lambda: len(_owned(a)) == len(_owned(b)) == PARTITIONS // 2, 30)
        mine = sorted(_owned(b))
        # b does not poll for longer than max_poll_interval_ms: it leaves, a gets everything
        _poll_until([a], lambda: _owned(a) == set(range(PARTITIONS)), 20)
        # b's next poll reports its partitions lost, and it rejoins and gets some back
        _poll_until([a, b], lambda: len(_owned(a)) == len(_owned(b)) == PARTITIONS // 2, 30)
        assert ("lost", mine) in lb.calls and lb.calls.index(("lost", mine)) < len(lb.calls) - 1
