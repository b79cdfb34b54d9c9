"""Kafka's own Java client (kafka-clients, the same version as the broker) as
kwire's peer on Apache Kafka's PLAINTEXT listener (tests/support/java_peer.py):

* the Java producer writes every codec (idempotent) and transactions it
  commits or aborts; kwire's Consumer reads exactly those records, with
  ``poll`` and ``poll_columnar``, read_committed and read_uncommitted;
* kwire's Producer writes the same; the Java consumer reads exactly them;
* Java and kwire members share consumer groups (``range``, eager, and
  ``cooperative-sticky``, incremental; classic protocol) while a member joins
  and one leaves, and every record is read exactly once across the group;
  the kwire members blocking ones, or kwire.aio's (``async def`` listeners).
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
import uuid
from typing import Dict, List, Optional, Tuple

import pyarrow as pa
import pytest

from kwire.admin import Admin, NewTopic
from kwire.aio import AsyncConsumer
from kwire.consumer import Consumer
from kwire.group import RebalanceListener
from kwire.producer import Producer
from support.java_peer import JavaGroupMember, PeerRecord, java_consume, java_produce, send_op

pytestmark = pytest.mark.kafka

PARTITIONS = 3
N = 600
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
BASE_TS = 1_700_000_000_000
# kwire's assignor names (partition_assignment_strategy) -> the Java class names
JAVA_ASSIGNORS = {"range": "org.apache.kafka.clients.consumer.RangeAssignor",
                  "cooperative-sticky": "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"}



def bounded(seconds: int):
    """The test fails (SIGALRM in the main thread) if it runs longer; every
    wait inside it has a bound of its own too."""
    def mark(fn):
        fn.time_limit = seconds
        return fn
    return mark


@pytest.fixture(autouse=True)
def _time_limit(request):
    limit = getattr(request.function, "time_limit", None)

    def expired(signum, frame):
        raise TimeoutError(f"{request.node.name} ran longer than {limit} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(limit or 0)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# (partition, offset) -> (key, value, headers, timestamp)
Expected = Dict[Tuple[int, int], Tuple]


def _topic(admin_cfg, prefix: str, partitions: int = PARTITIONS) -> str:
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    with Admin(admin_cfg) as admin:
        admin.create_topics([NewTopic(topic, partitions)])
    return topic


def _shapes(tag: str, n: int = N) -> List[dict]:
    """Keys and null keys, headers (one with a null value, repeated names),
    empty and null values, explicit partitions and timestamps for some."""
    out = []
    for i in range(n):
        key = None if i % 7 == 0 else b"key-%d" % (i % 40)
        value = None if i % 11 == 0 else (b"" if i % 13 == 0 else b"%s-%d" % (tag.encode(), i) * (1 + i % 5))
        headers = ((("n", b"%d" % i), ("empty", b""), ("none", None), ("n", b"again")) if i % 3 == 0 else
                   (("one", b"h%d" % i),) if i % 3 == 1 else ())
        out.append({"key": key, "value": value, "headers": headers,
                    "partition": i % PARTITIONS if i % 5 == 0 else None,
                    "timestamp": BASE_TS + i if i % 4 == 0 else None})
    return out


def _java_config(kafka, **extra) -> Dict[str, str]:
    cfg = {"bootstrap.servers": kafka.bootstrap("plaintext"), "client.id": "java-peer"}
    cfg.update({k: str(v) for k, v in extra.items()})
    return cfg


def _expected_from_java(shapes, sent) -> Expected:
    out: Expected = {}
    for s, e in zip(shapes, sent):
        assert "error" not in e, e
        if s["partition"] is not None:
            assert e["partition"] == s["partition"]
        if s["timestamp"] is not None:
            assert e["timestamp"] == s["timestamp"]
        out[(e["partition"], e["offset"])] = (s["key"], s["value"], tuple(s["headers"]), e["timestamp"])
    return out


def _kwire_read(kafka, topic, want: int, columnar: bool, isolation: str = "read_uncommitted",
                settle: float = 1.0) -> Tuple[Expected, Dict[int, List[int]]]:
    """Everything kwire's Consumer reads from the start of ``topic`` (and the
    offsets in the order each partition returned them), until ``want``
    records and ``settle`` s more without any, or 45 s."""
    got: Expected = {}
    order: Dict[int, List[int]] = {}
    with Consumer(kafka.client_config("plaintext"), auto_offset_reset="earliest",
                  isolation_level=isolation) as c:
        c.assign([(topic, p) for p in range(PARTITIONS)])
        deadline, quiet_until = time.monotonic() + 45, None
        while time.monotonic() < deadline:
            rows = []
            if columnar:
                for tp, rb in c.poll_columnar(300).items():
                    cols = [rb.column(n).to_pylist() for n in ("offset", "key", "value", "headers")]
                    stamps = rb.column("timestamp").cast(pa.int64()).to_pylist()
                    rows += [(tp.partition, o, k, v, tuple((h["key"], h["value"]) for h in hs or ()), ts)
                             for o, k, v, hs, ts in zip(*cols, stamps)]
            else:
                for tp, recs in c.poll(300).items():
                    rows += [(tp.partition, r.offset, r.key, r.value, tuple(r.headers), r.timestamp) for r in recs]
            for part, offset, *rest in rows:
                assert (part, offset) not in got, f"offset {offset} of partition {part} returned twice"
                got[(part, offset)] = tuple(rest)
                order.setdefault(part, []).append(offset)
            if len(got) >= want:
                quiet_until = quiet_until or time.monotonic() + settle
                if time.monotonic() > quiet_until:
                    break
    return got, order


def _java_read(kafka, topic, isolation: str = "read_uncommitted") -> Tuple[Expected, Dict[int, List[int]]]:
    records = java_consume(_java_config(kafka, **{"isolation.level": isolation}),
                           assign=[(topic, p) for p in range(PARTITIONS)], until_end=True)
    got: Expected = {}
    order: Dict[int, List[int]] = {}
    for r in records:
        assert (r.partition, r.offset) not in got
        got[(r.partition, r.offset)] = (r.key, r.value, r.headers, r.timestamp)
        order.setdefault(r.partition, []).append(r.offset)
    return got, order


def _ascending(order: Dict[int, List[int]]) -> None:
    for part, offsets in order.items():
        assert offsets == sorted(offsets), f"partition {part} out of offset order"


# ---------------------------------------------------- Java writes, kwire reads

@bounded(120)
@pytest.mark.parametrize("codec", CODECS)
def test_kwire_reads_exactly_what_the_java_idempotent_producer_wrote(kafka, codec):
    topic = _topic(kafka.client_config("plaintext"), f"jp-java-{codec}")
    shapes = _shapes(f"java-{codec}")
    sent = java_produce(_java_config(kafka, **{"compression.type": codec, "enable.idempotence": "true",
                                               "acks": "all", "linger.ms": 5, "batch.size": 4096}),
                        [send_op(topic, **s) for s in shapes] + [{"op": "flush"}])
    expected = _expected_from_java(shapes, sent)
    assert {p for p, _ in expected} == set(range(PARTITIONS))
    for columnar in (False, True):
        got, order = _kwire_read(kafka, topic, len(expected), columnar)
        assert got == expected, f"columnar={columnar}"
        _ascending(order)


def _transactions(topic: str, rounds: int = 10):
    """(ops for the Java producer, [(shape, fate)] per send in order): rounds
    of sends over every partition, committed or aborted."""
    ops, fates = [], []
    for t in range(rounds):
        fate = "aborted" if t % 3 == 1 else "committed"
        ops.append({"op": "begin"})
        for s in _shapes(f"txn{t}-{fate}", 15 + 7 * (t % 4)):
            s["partition"] = s["partition"] if s["partition"] is not None else (t + len(fates)) % PARTITIONS
            ops.append(send_op(topic, **s))
            fates.append((s, fate))
            if len(fates) % 9 == 0:
                ops.append({"op": "flush"})      # several batches per transaction
        ops.append({"op": "commit" if fate == "committed" else "abort"})
    return ops, fates


@bounded(150)
def test_kwire_read_committed_skips_what_the_java_transactional_producer_aborted(kafka):
    topic = _topic(kafka.client_config("plaintext"), "jp-java-txn")
    ops, fates = _transactions(topic)
    sent = java_produce(_java_config(kafka, **{"transactional.id": f"jp-{uuid.uuid4().hex[:8]}",
                                               "compression.type": "lz4", "linger.ms": 5}), ops)
    everything = _expected_from_java([s for s, _ in fates], sent)
    committed = {po: v for (po, v), (_, fate) in zip(everything.items(), fates) if fate == "committed"}
    assert 0 < len(committed) < len(everything)
    for p in range(PARTITIONS):
        assert {fate for (part, _), (_, fate) in zip(everything, fates) if part == p} == {"committed", "aborted"}
    for columnar in (False, True):
        got, order = _kwire_read(kafka, topic, len(committed), columnar, "read_committed")
        assert got == committed, f"read_committed columnar={columnar}"
        _ascending(order)
        got, _ = _kwire_read(kafka, topic, len(everything), columnar, "read_uncommitted")
        assert got == everything, f"read_uncommitted columnar={columnar}"


# ---------------------------------------------------- kwire writes, Java reads

def _kwire_send(p: Producer, topic: str, shapes) -> list:
    return [p.send(topic, s["value"], key=s["key"], headers=list(s["headers"]) or None,
                   partition=s["partition"], timestamp_ms=s["timestamp"]) for s in shapes]


def _expected_from_kwire(shapes, metas) -> Expected:
    out: Expected = {}
    for s, m in zip(shapes, metas):
        if s["partition"] is not None:
            assert m.partition == s["partition"]
        if s["timestamp"] is not None:
            assert m.timestamp == s["timestamp"]
        out[(m.partition, m.offset)] = (s["key"], s["value"], tuple(s["headers"]), m.timestamp)
    return out


@bounded(120)
@pytest.mark.parametrize("codec", CODECS)
def test_the_java_consumer_reads_exactly_what_the_kwire_idempotent_producer_wrote(kafka, codec):
    topic = _topic(kafka.client_config("plaintext"), f"jp-kwire-{codec}")
    shapes = _shapes(f"kwire-{codec}")
    with Producer(kafka.client_config("plaintext"), compression_type=codec, enable_idempotence=True,
                  linger_ms=5, batch_size=4096) as p:
        metas = [f.get(30) for f in _kwire_send(p, topic, shapes)]
    expected = _expected_from_kwire(shapes, metas)
    assert {p for p, _ in expected} == set(range(PARTITIONS))
    got, order = _java_read(kafka, topic)
    assert got == expected
    _ascending(order)


@bounded(150)
def test_the_java_read_committed_consumer_skips_what_kwire_aborted(kafka):
    topic = _topic(kafka.client_config("plaintext"), "jp-kwire-txn")
    ops, fates = _transactions(topic)
    shapes_sent, metas = [], []
    with Producer(kafka.client_config("plaintext"), transactional_id=f"jp-kw-{uuid.uuid4().hex[:8]}",
                  compression_type="zstd", linger_ms=5) as p:
        p.init_transactions(30)
        futures = []
        for op in ops:
            if op["op"] == "begin":
                p.begin_transaction()
            elif op["op"] == "flush":
                p.flush(30)
            elif op["op"] == "commit":
                p.commit_transaction(30)
            elif op["op"] == "abort":
                p.flush(30)                      # written (with offsets) before the abort
                p.abort_transaction(30)
            else:
                s, _ = fates[len(futures)]
                futures += _kwire_send(p, topic, [s])
        metas = [f.get(30) for f in futures]
        shapes_sent = [s for s, _ in fates]
    everything = _expected_from_kwire(shapes_sent, metas)
    committed = {po: v for (po, v), (_, fate) in zip(everything.items(), fates) if fate == "committed"}
    assert 0 < len(committed) < len(everything)
    got, order = _java_read(kafka, topic, "read_committed")
    assert got == committed
    _ascending(order)
    got, _ = _java_read(kafka, topic, "read_uncommitted")
    assert got == everything
    # subscribed in a group: the same committed records, until 2 s pass without any
    records = java_consume(_java_config(kafka, **{"isolation.level": "read_committed",
                                                  "group.id": f"jp-{uuid.uuid4().hex[:8]}",
                                                  "partition.assignment.strategy": JAVA_ASSIGNORS["range"]}),
                           subscribe=[topic], idle_ms=2000)
    assert {(r.partition, r.offset): (r.key, r.value, r.headers, r.timestamp) for r in records} == committed
    assert len(records) == len(committed)


# ------------------------------------------------- mixed Java and kwire groups
#
# "Exactly once" across the group, given the consumer's at-least-once
# semantics: a member commits the positions of what it has returned (and
# reported) for the partitions taken away before it gives them up, and
# everything it owns before it leaves, synchronously. Java members and the
# second kwire member do it themselves (auto commit off; a commit in the
# on-partitions-revoked callback and one before closing); the first kwire
# member leaves it to kwire (auto commit on: kwire commits before revoking and
# in close()). A partition's next owner starts at that commit, so with no
# member crashing, every record produced is reported by exactly one member:
# the union of the members' records equals what was produced, with no
# (partition, offset) twice.

GROUP_PARTITIONS = 6


class KwireMember:
    """A kwire Consumer in the group, polling in a thread of its own."""

    def __init__(self, kafka, group: str, topic: str, assignor: str, name: str, auto_commit: bool) -> None:
        self._start_state(name, auto_commit)
        self.consumer = Consumer(kafka.client_config("plaintext"), group_id=group, enable_auto_commit=auto_commit,
                                 auto_commit_interval_ms=300,
                                 auto_offset_reset="earliest", partition_assignment_strategy=[assignor],
                                 client_id=name, session_timeout_ms=10000, heartbeat_interval_ms=500)
        member = self

        class Listener(RebalanceListener):
            def on_partitions_revoked(self, revoked):
                if revoked and not auto_commit:
                    member.consumer.commit({tp: member.consumer.position(tp) for tp in revoked})
                member._note("revoked", revoked)

            def on_partitions_assigned(self, assigned):
                member._note("assigned", assigned)

            def on_partitions_lost(self, lost):
                member._note("lost", lost)

        self.consumer.subscribe([topic], listener=Listener())
        self._thread = threading.Thread(target=self._run, name=f"kwire-member-{name}", daemon=True)
        self._thread.start()

    def _start_state(self, name: str, auto_commit: bool) -> None:
        self.name = name
        self.auto_commit = auto_commit
        self.records: List[PeerRecord] = []
        self.assignment: set = set()
        self.events: List[tuple] = []
        self.error: Optional[BaseException] = None
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def _note(self, kind, tps) -> None:
        with self._lock:
            self.events.append((kind, sorted((tp.topic, tp.partition) for tp in tps)))
            tps = {(tp.topic, tp.partition) for tp in tps}
            self.assignment = self.assignment | tps if kind == "assigned" else self.assignment - tps

    def _run(self) -> None:
        c = self.consumer
        try:
            while not self._stop.is_set():
                for tp, recs in c.poll(100).items():
                    with self._lock:
                        self.records += [PeerRecord(tp.topic, tp.partition, r.offset, r.timestamp, r.key, r.value,
                                                    tuple(r.headers)) for r in recs]
            owned = c.assignment()
            if owned and not self.auto_commit:
                c.commit({tp: c.position(tp) for tp in owned})     # everything read, before leaving
        except BaseException as e:   # noqa: BLE001 - reported by stop()
            self.error = e
        finally:
            c.close()

    def snapshot(self):
        with self._lock:
            return list(self.records), set(self.assignment)

    def stop(self, timeout: float = 60.0) -> None:
        self._stop.set()
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"{self.name} did not stop"
        if self.error is not None:
            raise self.error


class AioKwireMember(KwireMember):
    """The same member on kwire.aio: an AsyncConsumer on an event loop in a
    thread of its own, its rebalance listener ``async def`` (committing
    before each revocation with ``await commit``, when auto commit is off)."""

    def __init__(self, kafka, group: str, topic: str, assignor: str, name: str, auto_commit: bool) -> None:
        self._start_state(name, auto_commit)
        self._args = (kafka.client_config("plaintext"), group, topic, assignor, name, auto_commit)
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name=f"aio-member-{name}",
                                        daemon=True)
        self._thread.start()

    async def _main(self) -> None:
        cfg, group, topic, assignor, name, auto_commit = self._args
        member = self
        try:
            c = AsyncConsumer(cfg, group_id=group, enable_auto_commit=auto_commit, auto_commit_interval_ms=300,
                              auto_offset_reset="earliest", partition_assignment_strategy=[assignor],
                              client_id=name, session_timeout_ms=10000, heartbeat_interval_ms=500)
        except BaseException as e:   # noqa: BLE001 - reported by stop()
            self.error = e
            return

        class Listener(RebalanceListener):
            async def on_partitions_revoked(self, revoked):
                if revoked and not auto_commit:
                    await c.commit({tp: await c.position(tp) for tp in revoked})
                member._note("revoked", revoked)

            async def on_partitions_assigned(self, assigned):
                member._note("assigned", assigned)

            def on_partitions_lost(self, lost):        # plain and async callbacks mix
                member._note("lost", lost)

        try:
            c.subscribe([topic], listener=Listener())
            while not self._stop.is_set():
                for tp, recs in (await c.getmany(100)).items():
                    with self._lock:
                        self.records += [PeerRecord(tp.topic, tp.partition, r.offset, r.timestamp, r.key, r.value,
                                                    tuple(r.headers)) for r in recs]
            owned = c.assignment()
            if owned and not self.auto_commit:
                await c.commit({tp: await c.position(tp) for tp in owned})
        except BaseException as e:   # noqa: BLE001 - reported by stop()
            self.error = e
        finally:
            await c.close()


def _wait(what: str, cond, timeout: float = 60.0, members=()) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            state = {m.name: sorted(m.snapshot()[1]) for m in members}
            raise AssertionError(f"timed out waiting for {what}; assignments: {state}")
        time.sleep(0.1)


def _settled(members, topic) -> bool:
    """Every partition owned by exactly one of ``members``, each owning some."""
    owned = [m.snapshot()[1] for m in members]
    flat = [tp for o in owned for tp in o]
    return (len(flat) == len(set(flat)) == GROUP_PARTITIONS and all(owned)
            and set(flat) == {(topic, p) for p in range(GROUP_PARTITIONS)})



@bounded(240)
@pytest.mark.parametrize("assignor, first, member", [
    ("range", "kwire", KwireMember), ("range", "java", KwireMember),
    ("cooperative-sticky", "kwire", KwireMember), ("cooperative-sticky", "java", KwireMember),
    ("cooperative-sticky", "kwire", AioKwireMember), ("range", "java", AioKwireMember),
], ids=["range-kwire-leads", "range-java-leads", "cooperative-sticky-kwire-leads", "cooperative-sticky-java-leads",
        "cooperative-sticky-aio-leads", "range-java-leads-aio"])
def test_a_mixed_java_and_kwire_group_reads_every_record_exactly_once(kafka, assignor, first, member):
    topic = _topic(kafka.client_config("plaintext"), f"jp-group-{assignor}", GROUP_PARTITIONS)
    group = f"jp-group-{assignor}-{uuid.uuid4().hex[:8]}"
    produced: Dict[Tuple[int, int], bytes] = {}
    producer = Producer(kafka.client_config("plaintext"), linger_ms=2)

    def produce(n: int, tag: str) -> None:
        futures = [(b"%s-%d" % (tag.encode(), i), producer.send(topic, b"%s-%d" % (tag.encode(), i),
                                                                 key=b"k%d" % i)) for i in range(n)]
        for value, f in futures:
            m = f.get(30)
            produced[(m.partition, m.offset)] = value

    steady = threading.Event()

    def keep_producing() -> None:
        """Records keep coming while members join and leave: 20 every 20 ms."""
        n = 0
        while not steady.is_set():
            produce(20, f"during-{n}")
            n += 1
            time.sleep(0.02)

    java_cfg = _java_config(kafka, **{"group.id": group, "enable.auto.commit": "false",
                                      "auto.offset.reset": "earliest", "group.protocol": "classic",
                                      "partition.assignment.strategy": JAVA_ASSIGNORS[assignor],
                                      "session.timeout.ms": 10000, "heartbeat.interval.ms": 500})
    members: list = []
    background = threading.Thread(target=keep_producing, name="producer", daemon=True)
    ok = False
    try:
        produce(2000, "before")
        joining = ("kwire", "java", "kwire") if first == "kwire" else ("java", "kwire", "kwire")
        join = {"kwire": lambda name: member(kafka, group, topic, assignor, name,
                                             auto_commit=not any(isinstance(m, KwireMember) for m in members)),
                "java": lambda name: JavaGroupMember(java_cfg, [topic], name=name)}
        for i, kind in enumerate(joining):        # the first to join leads the first generations
            members.append(join[kind](f"{kind}-{i + 1}"))
            _wait(f"{[m.name for m in members]} to share the partitions", lambda: _settled(members, topic),
                  members=members)
            if i == 0:
                background.start()
            time.sleep(0.5)
        members[0].stop()                       # the first member (the first leader) leaves
        _wait(f"{[m.name for m in members[1:]]} to share the partitions", lambda: _settled(members[1:], topic),
              members=members)
        time.sleep(0.5)
        steady.set()
        background.join(30)
        assert not background.is_alive()
        produce(500, "after")

        def read() -> int:
            return len({(r.partition, r.offset) for m in members for r in m.snapshot()[0]})

        _wait(f"{len(produced)} records read", lambda: read() >= len(produced), timeout=90, members=members)
        time.sleep(1.0)                                                    # to see nothing more comes
        for m in members[1:]:
            m.stop()
        ok = True
    finally:
        steady.set()
        background.join(30) if background.is_alive() else None
        producer.close()
        for m in members:
            if not ok:
                m.kill() if isinstance(m, JavaGroupMember) else m._stop.set()
    records = [r for m in members for r in m.snapshot()[0]]
    seen: Dict[Tuple[int, int], str] = {}
    duplicates = []
    for m in members:
        for r in m.snapshot()[0]:
            if (r.partition, r.offset) in seen:
                duplicates.append((r.partition, r.offset, seen[(r.partition, r.offset)], m.name))
            seen[(r.partition, r.offset)] = m.name
    assert not duplicates, f"read twice (partition, offset, first reader, second reader): {duplicates[:20]}"
    assert {(r.partition, r.offset): r.value for r in records} == produced
    for m in members:   # every member took part: it owned partitions and read records
        assert m.records, f"{m.name} read nothing"
    # the Java member saw the rebalances the others caused: eager (range), it gave up
    # everything each time; incremental (cooperative-sticky, whoever leads), only what moved
    java = next(m for m in members if isinstance(m, JavaGroupMember))
    kinds = [e["event"] for e in java.events]
    assert "lost" not in kinds and kinds.count("assigned") >= 2 and kinds[-1] == "closed"
    owned, partial = set(), []
    for e in java.events[:max(i for i, k in enumerate(kinds) if k == "revoked")]:    # not the one at close
        tps = {tuple(tp) for tp in e.get("partitions", ())}
        if e["event"] == "assigned":
            owned |= tps
        elif e["event"] == "revoked" and tps:
            partial.append(tps < owned)
            owned -= tps
    assert partial, "the Java member gave up nothing while others joined"
    assert all(partial) if assignor == "cooperative-sticky" else not any(partial), (assignor, java.events)


# ------------------------------------- large records beside small ones, both ways

def _large_and_small(n: int = 12) -> List[dict]:
    """Small records, each followed by one just under the broker's
    message.max.bytes (1048588 by default): each fits a batch of its own,
    not one with the small record before it."""
    return [{"key": b"k%d" % i, "value": (b"s%d-" % i) * 2000 if i % 2 == 0 else bytes([i]) * 1_045_000,
             "headers": (("i", b"%d" % i),), "partition": i // 2 % PARTITIONS, "timestamp": None}
            for i in range(n)]


@bounded(120)
def test_records_that_each_fit_the_broker_are_delivered_however_they_are_batched(kafka):
    """With max_request_size above the broker's message.max.bytes, Java's
    producer puts a record in an open batch only if the batch stays within
    batch.size (a larger record goes in a batch of its own), so every record
    the broker accepts alone is delivered. kwire did the same only up to
    max_request_size: a small record and a large one together made a batch
    the broker refused with MESSAGE_TOO_LARGE."""
    shapes = _large_and_small()
    topic = _topic(kafka.client_config("plaintext"), "jp-large-java")
    sent = java_produce(_java_config(kafka, **{"max.request.size": 3_000_000, "linger.ms": 50}),
                        [send_op(topic, **s) for s in shapes] + [{"op": "flush"}])
    expected = _expected_from_java(shapes, sent)
    got, _ = _kwire_read(kafka, topic, len(expected), columnar=False, settle=0.2)
    assert got == expected
    topic = _topic(kafka.client_config("plaintext"), "jp-large-kwire")
    with Producer(kafka.client_config("plaintext"), max_request_size=3_000_000, linger_ms=50) as p:
        metas = [f.get(30) for f in _kwire_send(p, topic, shapes)]
    expected = _expected_from_kwire(shapes, metas)
    got, _ = _java_read(kafka, topic)
    assert got == expected


def test_missing_javac_is_named(tmp_path, monkeypatch):
    """Without a JDK's javac the peer's tests fail naming it (they do not skip)."""
    from support.java_peer import compile_peer
    from support.kafka import KafkaUnavailable, ensure_kafka

    ensure_kafka()                                    # the assembly is there (the session's broker made it)
    monkeypatch.setenv("PATH", str(tmp_path))         # ... but no javac nor java on PATH
    with pytest.raises(KafkaUnavailable, match=r"javac and java on PATH \(javac, java not found\)"):
        compile_peer.__wrapped__()
