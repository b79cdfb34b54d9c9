"""Transactions through the death of their transaction coordinator, on the
three-node cluster (tests/support/kafka_cluster.py; issue 17).

A topic of 3 partitions, replication factor 3, ``min.insync.replicas=2``
(the cluster's ``__transaction_state`` has replication factor 3 and min ISR
2). One transactional kwire producer runs ``KWIRE_CLUSTER_ROUNDS`` rounds
per fault (2 by default; half as many, at least one, for a coordinator
killed during the commit, hung or partitioned). Each round begins a transaction, sends
``PER_PARTITION`` records to every partition (the round, partition and
sequence number in each value), asks the cluster which broker coordinates
the transactional id (FindCoordinator, key type TRANSACTION, on the
harness's own listeners) and faults that broker:

- ``killed before commit``: SIGKILL once the records are written, then
  ``commit_transaction()`` (every other round ``abort_transaction()``: an
  application aborting across the kill); restarted on its directory;
- ``killed during commit``: the records lingering, ``commit_transaction()``
  called, and the coordinator SIGKILLed as the commit's EndTxn goes out
  (within 0-10 ms of it: before or while the coordinator takes it);
- ``hung``: SIGSTOP before the commit, SIGCONT once another broker
  coordinates the id (the controller fenced the hung one);
- ``partitioned``: its proxy black-holes the client (replication goes on)
  for ``PARTITION_HOLD`` s, then heals; the coordinator never moves.

The producer does what an application does: commit, or abort when the
commit says the transaction must be aborted (:class:`TransactionStateError`).
Every call must return within its timeout. Then every partition is read
back by kwire's read_committed consumer and by confluent-kafka's
(librdkafka, an independent reader), and the raw log (read_uncommitted, with
its control records) is read by a plain Fetch: each transaction is all or
none (every record of it carries the same COMMIT or ABORT marker, in every
partition); a transaction ``commit_transaction()`` reported committed is in
both read_committed readers whole, each record exactly once; an aborted one
is in neither, while kwire's read_uncommitted consumer returns the records
of it that were written, and the log marks them aborted. The time from the
fault to the commit's return is reported (p50 and max per fault).

Fencing: producer B takes producer A's transactional id (``init_transactions``)
while A is in a transaction (A's next send, then its commit and abort, must
raise a fencing error naming the id), after A's coordinator was killed and
moved (A's commit is refused), and while A is a zombie that calls nothing
until B has committed a transaction (A's commit is refused); A's open
transaction is aborted (no read_committed reader shows it, the log marks it
aborted), B's commit. Consume-transform-produce: records read from a source
topic, sent transformed with ``send_offsets_to_transaction`` (the group's
offsets in the transaction) and committed, the coordinator killed before
the commit in every other round (with more than one kill, every other kill
comes before ``send_offsets_to_transaction``): the group's
committed offsets move only with a committed transaction, and every source
record is in the output exactly once.

Also with the coordinator killed: B taking the id over while A's
coordinator is dead (``max(1, KWIRE_CLUSTER_ROUNDS // 2)`` rounds; its time
is from the kill to B's ``init_transactions()`` returning).

Transaction protocols (KIP-890): every test runs in protocol v2 (the
cluster's ``transaction.version`` 2, Apache Kafka 4.4's own); the
representative ones (the coordinator killed before the commit, fencing in
a transaction, consume-transform-produce across kills) run in v1 as well,
with the cluster's ``transaction.version`` downgraded to 1 for the test and
upgraded again after it (tests/support/features.py), so v1 adds a third
of the module's time rather than doubling it.

Long run (outside CI): ``KWIRE_CLUSTER_ROUNDS=16 pytest
tests/cluster/test_transaction_faults.py -s`` (about 11 minutes; CI's 2
rounds take about 100 s). Its figures on the 2-core development machine
(Kafka 4.4.0, confluent-kafka 2.16.1, kwire's request timeout 5 s,
broker.session.timeout.ms 6 s), "fault to end" from the fault to the
commit's return:

==========================  ======  =========  =======  ====  ===  =====  ===========  ===========
fault                       rounds  committed  aborted  lost  dup  split  to end p50   to end max
==========================  ======  =========  =======  ====  ===  =====  ===========  ===========
killed before commit        16      8          8 (a)    0     0    0      7.02 s       7.44 s
killed during commit        8 (b)   8          0        0     0    0      7.31 s       8.58 s
hung                        8       8          0        0     0    0      6.66 s       8.13 s
partitioned (8 s)           8       8          0        0     0    0      8.21 s       8.22 s
fenced after kill           8       8 (B)      8 (A)    0     0    0      7.34 s (c)   9.66 s
consume-transform-produce   24 (d)  24         0        0     0    0      7.20 s       8.51 s
==========================  ======  =========  =======  ====  ===  =====  ===========  ===========

(a) aborted by the application across the kill (every other round), each
abort completed; (b) in 2 of the 8 the coordinator answered the EndTxn
before the kill landed; (c) to B's ``init_transactions()``; (d) 8 of them
with a kill, 4 of those before ``send_offsets_to_transaction``. "lost":
records of a committed transaction missing from a read_committed reader;
"dup": a record twice in the log or a reader; "split": a transaction with
both markers or partly visible; each checked by kwire's and librdkafka's
readers and the raw log. The fencing figures: every fenced call raised
(ProducerFencedError, or at A's first send Apache Kafka's
INVALID_PRODUCER_EPOCH, abortable per KIP-588, then ProducerFencedError at
the abort), each naming the transactional id. Most of "fault to end" is the
brokers' session timeout (6 s) before another broker leads the
``__transaction_state`` partition; a partitioned coordinator keeps leading,
so its commit goes through when the partition heals.
"""

from __future__ import annotations

import collections
import contextlib
import os
import random
import statistics
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import pytest

from kwire import protocol
from kwire._codec import decode, parse_control_key
from kwire.client import Client
from kwire.config import ADMIN, resolve
from kwire.consumer import Consumer
from kwire.errors import InvalidProducerEpochError, ProducerFencedError
from kwire.producer import Producer
from kwire.transactions import TransactionStateError
from support.features import transaction_version

pytestmark = [pytest.mark.kafka, pytest.mark.cluster]

ROUNDS = int(os.environ.get("KWIRE_CLUSTER_ROUNDS", "2"))
PARTITIONS = 3
PER_PARTITION = 40               # records per partition per transaction
REQUEST_TIMEOUT_MS = 5000
CALL_TIMEOUT = 60.0              # seconds given to each transactional call (commit, abort, init)
OVERRUN = 3.0                    # seconds past its timeout a call may take before the test calls it a hang
PARTITION_HOLD = 8.0             # seconds a black-holed coordinator stays cut off from the client
FAULT_DEADLINE = 90.0            # seconds for any one fault's recovery (a new coordinator, a restart)
COMMIT, ABORT = 1, 0             # control record types

RESULTS: Dict[str, dict] = {}    # fault -> figures, printed at the module's end
#: the tests run in transaction protocol v1 too (the others in v2 only: see the module doc)
BOTH_PROTOCOLS = pytest.mark.parametrize("txn_protocol", [2, 1], ids=["txv2", "txv1"], indirect=True)


@pytest.fixture
def txn_protocol(request, kafka_cluster):
    """The transaction protocol of the test's producers (2 unless parametrized)."""
    level = getattr(request, "param", 2)
    with transaction_version(kafka_cluster.bootstrap, level):
        yield level
FENCED = (ProducerFencedError, InvalidProducerEpochError)


# ---- what the test knows of each transaction ----

@dataclass
class Txn:
    """One transaction: its values (by partition), what the producer said
    of it (``committed``, ``aborted``) and the time from its fault to that."""

    name: str
    values: Dict[int, List[bytes]] = field(default_factory=lambda: collections.defaultdict(list))
    outcome: str = "open"
    fault_to_end: Optional[float] = None
    note: str = ""

    def all_values(self) -> List[bytes]:
        return [v for vs in self.values.values() for v in vs]


def _producer(cluster, tid: str, protocol_version: int, **extra) -> Producer:
    p = Producer(bootstrap_servers=cluster.bootstrap, transactional_id=tid, request_timeout_ms=REQUEST_TIMEOUT_MS,
                 linger_ms=5, **extra)
    _timed("init_transactions", CALL_TIMEOUT, lambda: p.init_transactions(CALL_TIMEOUT))
    assert p.transaction_version == protocol_version
    return p


def _timed(what: str, timeout: float, call: Callable[[], object]) -> object:
    """``call()``, which must return (or raise) within ``timeout`` s (and a little more)."""
    t0 = time.monotonic()
    try:
        return call()
    finally:
        took = time.monotonic() - t0
        assert took <= timeout + OVERRUN, f"{what} took {took:.1f} s, its timeout is {timeout:g} s"


def _send_all(p: Producer, topic: str, txn: Txn, tag: bytes, per_partition: int = PER_PARTITION) -> list:
    futures = []
    for part in range(PARTITIONS):
        for seq in range(per_partition):
            value = b"%s-p%d-s%d" % (tag, part, seq)
            txn.values[part].append(value)
            futures.append(p.send(topic, value, partition=part))
    return futures


def _commit_or_abort(p: Producer, txn: Txn, abort: bool = False) -> None:
    """As an application: commit (or abort, when it wants to), and abort when the commit
    says the transaction must be aborted."""
    if not abort:
        try:
            _timed("commit_transaction", CALL_TIMEOUT, lambda: p.commit_transaction(CALL_TIMEOUT))
            txn.outcome = "committed"
            return
        except TransactionStateError as e:       # abortable: this transaction cannot commit
            txn.note = f"commit refused: {e}"
    _timed("abort_transaction", CALL_TIMEOUT, lambda: p.abort_transaction(CALL_TIMEOUT))
    txn.outcome = "aborted"


# ---- the faults ----

def _hook_end_txn(p: Producer, reached: threading.Event) -> None:
    """Set ``reached`` as the producer's commit sends its EndTxn (the test's only look inside)."""
    txn = p._txn
    original = txn._end

    def end(commit, deadline, send=True):
        if commit:
            reached.set()
        return original(commit, deadline, send)
    txn._end = end


def _aside(name: str, work: Callable[[], None], errors: List[BaseException]) -> threading.Thread:
    """``work()`` on a daemon thread; what it raises goes to ``errors``, for the main thread to raise."""
    def run():
        try:
            work()
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)
    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


def _fault_round(cluster, p: Producer, topic: str, tid: str, fault: str, rnd: int) -> Txn:
    txn = Txn(f"{fault}-r{rnd}")
    p.begin_transaction()
    futures = _send_all(p, topic, txn, b"%s-r%d" % (fault.encode(), rnd))
    if fault != "during_commit":
        _timed("flush", CALL_TIMEOUT, lambda: p.flush(CALL_TIMEOUT))      # written: the fault comes between
        assert all(f.exception() is None for f in futures), [f.exception() for f in futures if f.exception()][:3]
    victim = cluster.broker(cluster.transaction_coordinator(tid))
    t_fault = [0.0]
    over: List[bool] = []           # the commit returned: no kill after that
    reached = threading.Event()
    side_error: List[BaseException] = []

    def moved() -> bool:
        return cluster.transaction_coordinator(tid) != victim.node_id

    def kill_at_end_txn():
        reached.wait(CALL_TIMEOUT)
        if not over:
            time.sleep(random.Random(rnd).uniform(0.0, 0.01))
            victim.kill()
            t_fault[0] = time.monotonic()

    def resume_once_moved():
        try:
            cluster.wait_until(f"round {rnd}: another coordinator for {tid!r}", moved, FAULT_DEADLINE)
        finally:
            victim.resume()

    def heal_later():
        time.sleep(PARTITION_HOLD)
        victim.heal()

    # each fault: what is done now (the fault is on from then), and what a side thread does meanwhile
    now, aside = {"before_commit": (victim.kill, None),
                  "during_commit": (lambda: _hook_end_txn(p, reached), kill_at_end_txn),
                  "hung": (victim.pause, resume_once_moved),
                  "partitioned": (victim.black_hole, heal_later)}[fault]
    now()
    if fault != "during_commit":
        t_fault[0] = time.monotonic()
    side = None if aside is None else _aside(f"{fault}-side", aside, side_error)
    try:
        _commit_or_abort(p, txn, abort=fault == "before_commit" and rnd % 2 == 1)
        t_end = time.monotonic()
    finally:
        over.append(True)
        reached.set()
        if side is not None:
            side.join(FAULT_DEADLINE + PARTITION_HOLD)
        if fault == "during_commit":
            p._txn.__dict__.pop("_end", None)
    if side_error:
        raise side_error[0]
    if t_fault[0] and t_fault[0] < t_end:
        txn.fault_to_end = t_end - t_fault[0]
    else:
        txn.note += " (the commit ended before the kill)"
    # whole again before the next round: a second fault before the first healed would be two faults
    if fault in ("before_commit", "during_commit") and not victim.alive:
        victim.restart(cluster)
    elif fault == "hung":
        cluster.wait_for_node(victim)
    cluster.check_healthy(FAULT_DEADLINE)
    return txn


# ---- reading back ----

def _raw_log(cluster, topic: str) -> Dict[int, list]:
    """Every record of every partition with its control records (read_uncommitted, plain
    Fetch requests through the INTERNAL listeners): (offset, producer id, is_control,
    control type or None, value)."""
    client = Client(resolve(ADMIN, {"bootstrap.servers": cluster.internal_bootstrap, "request.timeout.ms": 10000}))
    out: Dict[int, list] = {}
    try:
        client.add_topics([topic])
        md = client.refresh_metadata(timeout=10)
        cls = protocol.message("FetchRequest")
        for part in range(PARTITIONS):
            leader = md.leader_for(topic, part)
            client.wait_ready(leader, time.monotonic() + 10)
            rows, offset, deadline = [], 0, time.monotonic() + 60
            while True:
                assert time.monotonic() < deadline, f"raw read of {topic}-{part} stuck at {offset}"
                req = cls(replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=4 << 20, isolation_level=0,
                          session_id=0, session_epoch=-1,
                          topics=[cls.FetchTopic(topic=topic, topic_id=md.topic_ids.get(topic), partitions=[
                              cls.FetchPartition(partition=part, fetch_offset=offset, partition_max_bytes=4 << 20)])],
                          forgotten_topics_data=[], rack_id="")
                resp = client.request(leader, req, timeout=10).responses[0].partitions[0]
                assert not resp.error_code, protocol.error_for(resp.error_code, api="Fetch", topic=topic, partition=part)
                if offset >= resp.high_watermark:
                    break
                res = decode(resp.records, include_control=True)
                for r in res.records:
                    if r.offset >= offset:
                        kind = parse_control_key(r.key)[1] if r.batch.is_control else None
                        rows.append((r.offset, r.batch.producer_id, r.batch.is_control, kind, r.value))
                if res.next_offset is not None and res.next_offset > offset:
                    offset = res.next_offset
            out[part] = rows
    finally:
        client.close()
    return out


def _markers(log: Dict[int, list]) -> Dict[bytes, Tuple[int, int]]:
    """Each data record's value -> (its count in the log, the marker that ended its transaction: COMMIT,
    ABORT, or -1 for none yet)."""
    seen: Dict[bytes, List[int]] = {}
    for rows in log.values():
        open_by_pid: Dict[int, List[bytes]] = collections.defaultdict(list)
        for _, pid, is_control, kind, value in rows:
            if is_control:
                for v in open_by_pid.pop(pid, []):
                    seen[v][1] = kind
            else:
                if value in seen:
                    seen[value][0] += 1
                else:
                    seen[value] = [1, -1]
                open_by_pid[pid].append(value)
    return {v: (n, kind) for v, (n, kind) in seen.items()}


def _kwire_read(cluster, topic: str, isolation: str) -> List[bytes]:
    """Every record value kwire's consumer returns, reading each partition up to its end."""
    got: List[bytes] = []
    with Consumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest", isolation_level=isolation,
                  request_timeout_ms=10000) as c:
        tps = [(topic, p) for p in range(PARTITIONS)]
        c.assign(tps)
        ends = cluster.wait_until(f"{topic}'s end offsets", lambda: c.end_offsets(tps, timeout=10), 60)
        deadline = time.monotonic() + 120
        while any(c.position(tp, timeout=10) < ends[tp] for tp in ends):
            assert time.monotonic() < deadline, f"kwire {isolation}: {[(tp, c.position(tp), ends[tp]) for tp in ends]}"
            for recs in c.poll(500).values():
                got.extend(r.value for r in recs)
    return got


def _librdkafka_read(cluster, topic: str) -> List[bytes]:
    """Every record value confluent-kafka's read_committed consumer returns, to each partition's end."""
    import confluent_kafka

    c = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"rd-{uuid.uuid4().hex[:6]}",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                  "isolation.level": "read_committed", "enable.partition.eof": True})
    got: List[bytes] = []
    try:
        c.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        at_end = set()
        deadline = time.monotonic() + 120
        while len(at_end) < PARTITIONS:
            assert time.monotonic() < deadline, f"librdkafka read_committed: at the end of {sorted(at_end)} only"
            for m in c.consume(10000, 1.0):
                if m.error() is None:
                    got.append(m.value())
                elif m.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
                else:
                    raise confluent_kafka.KafkaException(m.error())
    finally:
        c.close()
    return got


def _check(cluster, topic: str, txns: List[Txn]) -> dict:
    """The log against what the producers said (see the module doc); returns the counts."""
    def ended():        # a marker is written after the commit returns: every transaction's, first
        marks = _markers(_raw_log(cluster, topic))
        return marks if all(kind != -1 for _, kind in marks.values()) else None
    marks = cluster.wait_until(f"every transaction of {topic} ended in the log", ended, 60)
    committed_kwire = collections.Counter(_kwire_read(cluster, topic, "read_committed"))
    committed_rdk = collections.Counter(_librdkafka_read(cluster, topic))
    uncommitted = collections.Counter(_kwire_read(cluster, topic, "read_uncommitted"))
    known = {v for t in txns for v in t.all_values()}
    problems: List[str] = []
    for reader, counts in (("kwire read_committed", committed_kwire), ("librdkafka read_committed", committed_rdk)):
        foreign = [v for v in counts if v not in known]
        if foreign:
            problems.append(f"{reader}: {len(foreign)} values no transaction sent, e.g. {foreign[:3]}")
    for t in txns:
        values = t.all_values()
        kinds = {marks[v][1] for v in values if v in marks}
        in_log = sum(1 for v in values if v in marks)
        if len(kinds) > 1:
            problems.append(f"{t.name}: split: its records carry markers {kinds} (all-or-none broken)")
        dup_log = [v for v in values if marks.get(v, (0, 0))[0] > 1]
        if dup_log:
            problems.append(f"{t.name}: {len(dup_log)} records more than once in the log, e.g. {dup_log[:3]}")
        for reader, counts in (("kwire", committed_kwire), ("librdkafka", committed_rdk)):
            visible = [v for v in values if counts[v]]
            if t.outcome == "committed":
                if len(visible) != len(values):
                    problems.append(f"{t.name}: committed, but {reader} read_committed shows {len(visible)} of "
                                    f"{len(values)} records")
                twice = [v for v in visible if counts[v] > 1]
                if twice:
                    problems.append(f"{t.name}: {reader} read_committed returns {len(twice)} records twice")
            elif visible:
                problems.append(f"{t.name}: {t.outcome}, but {reader} read_committed shows {len(visible)} records")
        if t.outcome == "committed" and (kinds != {COMMIT} or in_log != len(values)):
            problems.append(f"{t.name}: committed, but its markers are {kinds} on {in_log} of {len(values)} records")
        if t.outcome == "aborted":
            if kinds - {ABORT}:
                problems.append(f"{t.name}: aborted, but its records carry markers {kinds}")
            unseen = [v for v in values if v in marks and not uncommitted[v]]
            if unseen:
                problems.append(f"{t.name}: aborted records in the log that read_uncommitted does not return: "
                                f"{len(unseen)}")
    assert not problems, "\n".join(problems)
    return {"transactions": len(txns), "committed": sum(t.outcome == "committed" for t in txns),
            "aborted": sum(t.outcome == "aborted" for t in txns),
            "aborted_in_log": sum(1 for t in txns if t.outcome == "aborted" and any(v in marks for v in t.all_values())),
            "records_read_committed": sum(committed_kwire.values())}


def _figures(fault: str, txns: List[Txn], counts: dict) -> dict:
    """The figures of a fault's rounds (``txns``: one a round) with the log's ``counts``."""
    def times(outcome: str) -> List[float]:
        return [t.fault_to_end for t in txns if t.fault_to_end is not None and t.outcome == outcome]
    to_commit, to_abort = times("committed"), times("aborted")
    f = {**counts, "rounds": len(txns), "committed": sum(t.outcome == "committed" for t in txns),
         "aborted": sum(t.outcome == "aborted" for t in txns),
         "fault_to_commit_p50_s": statistics.median(to_commit) if to_commit else None,
         "fault_to_commit_max_s": max(to_commit) if to_commit else None,
         "fault_to_abort_p50_s": statistics.median(to_abort) if to_abort else None,
         "notes": [f"{t.name}: {t.note.strip()}" for t in txns if t.note]}
    RESULTS[fault] = f
    sys.stderr.write(f"\n[txn-faults] {fault}: {f}\n")
    return f


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    if RESULTS:
        rows = [f"{'fault':<26} {'rounds':>6} {'committed':>9} {'aborted':>7} {'p50 s':>6} {'max s':>6}"]
        for fault, f in RESULTS.items():
            p50, mx = f.get("fault_to_commit_p50_s"), f.get("fault_to_commit_max_s")
            rows.append(f"{fault:<26} {f['rounds']:>6} {f['committed']:>9} {f['aborted']:>7} "
                        f"{'-' if p50 is None else f'{p50:.2f}':>6} {'-' if mx is None else f'{mx:.2f}':>6}")
        sys.stderr.write("\n[txn-faults] fault -> the commit's return (committed transactions)\n"
                         + "\n".join(rows) + "\n")


# ---- the coordinator's faults ----

def _scenario(cluster, fault: str, rounds: int, protocol_version: int) -> dict:
    topic, = cluster.replicated_topics("txf")
    tid = f"txf-{fault}-{uuid.uuid4().hex[:6]}"
    p = _producer(cluster, tid, protocol_version)
    txns = []
    try:
        for rnd in range(rounds):
            txns.append(_fault_round(cluster, p, topic, tid, fault, rnd))
        # the producer goes on after the faults: one more transaction, no fault
        last = Txn("after")
        p.begin_transaction()
        _send_all(p, topic, last, b"%s-after" % fault.encode())
        _commit_or_abort(p, last)
        txns.append(last)
    finally:
        p.close(10)
    assert txns[-1].outcome == "committed", txns[-1]
    return _figures(f"{fault} v{protocol_version}", txns[:-1], _check(cluster, topic, txns))


@BOTH_PROTOCOLS
def test_coordinator_killed_before_commit(kafka_cluster, txn_protocol):
    f = _scenario(kafka_cluster, "before_commit", ROUNDS, txn_protocol)
    assert f["committed"] == (ROUNDS + 1) // 2, f       # (the aborted rounds are the application's choice)


def test_coordinator_killed_during_commit(kafka_cluster, txn_protocol):
    _scenario(kafka_cluster, "during_commit", max(1, ROUNDS // 2), txn_protocol)


def test_coordinator_hung(kafka_cluster, txn_protocol):
    _scenario(kafka_cluster, "hung", max(1, ROUNDS // 2), txn_protocol)


def test_coordinator_partitioned(kafka_cluster, txn_protocol):
    _scenario(kafka_cluster, "partitioned", max(1, ROUNDS // 2), txn_protocol)


# ---- fencing: producer B takes producer A's transactional id ----

def _fenced(error: BaseException, tid: str) -> None:
    """``error`` is a fencing error (or says it comes from one) and names the transactional id."""
    cause = error if isinstance(error, FENCED) else error.__cause__
    assert isinstance(cause, FENCED), f"not a fencing error: {error!r}"
    assert repr(tid) in str(cause), f"the fencing error does not name {tid!r}: {cause}"


@dataclass
class Fencing:
    """Producer A in a transaction whose records are written (flushed), not committed, on a
    transactional id of its own; ``take_over()`` starts producer B with the same id."""

    topic: str
    tid: str
    a: Producer
    a_txn: Txn
    take_over: Callable[[], Producer]


@contextlib.contextmanager
def _fencing(cluster, prefix: str, protocol_version: int):
    topic, = cluster.replicated_topics(prefix)
    tid = f"{prefix}-{uuid.uuid4().hex[:6]}"
    a = _producer(cluster, tid, protocol_version)
    made: List[Producer] = []

    def take_over() -> Producer:
        made.append(_producer(cluster, tid, protocol_version))
        return made[-1]
    try:
        txn = Txn("A-open")
        a.begin_transaction()
        futures = _send_all(a, topic, txn, b"A-open")
        _timed("flush", CALL_TIMEOUT, lambda: a.flush(CALL_TIMEOUT))
        assert all(f.exception() is None for f in futures)
        txn.outcome = "aborted"           # what fencing must make of it
        yield Fencing(topic, tid, a, txn, take_over)
    finally:
        _timed("close", 10, lambda: a.close(5))      # a fenced producer closes within its timeout too
        for b in made:
            b.close(10)


def _b_commits(b: Producer, topic: str, name: str) -> Txn:
    txn = Txn(name)
    b.begin_transaction()
    _send_all(b, topic, txn, name.encode(), per_partition=5)
    _commit_or_abort(b, txn)
    assert txn.outcome == "committed", txn
    return txn


def _a_commit_is_fenced(f: Fencing, refused=(ProducerFencedError,)) -> None:
    with pytest.raises(refused) as info:
        _timed("commit_transaction", CALL_TIMEOUT, lambda: f.a.commit_transaction(CALL_TIMEOUT))
    _fenced(info.value, f.tid)


@BOTH_PROTOCOLS
def test_fenced_in_a_transaction(kafka_cluster, txn_protocol):
    """B's init_transactions while A is in a transaction: A's next send fails fenced, its
    commit is refused, its abort says it was fenced; B's transaction commits, A's is aborted."""
    with _fencing(kafka_cluster, "txfence", txn_protocol) as f:
        b = f.take_over()                                 # fences A and aborts its open transaction
        late = f.a.send(f.topic, b"A-late", partition=0)
        f.a_txn.values[0].append(b"A-late")
        with pytest.raises(FENCED) as info:
            late.get(CALL_TIMEOUT)
        _fenced(info.value, f.tid)
        # (Apache Kafka says INVALID_PRODUCER_EPOCH to the send: abortable, KIP-588; the abort finds out)
        _a_commit_is_fenced(f, (TransactionStateError,) + FENCED)
        with pytest.raises(ProducerFencedError) as info:
            _timed("abort_transaction", CALL_TIMEOUT, lambda: f.a.abort_transaction(CALL_TIMEOUT))
        _fenced(info.value, f.tid)
        with pytest.raises(ProducerFencedError):
            f.a.begin_transaction()                       # fatal: only close() is left
        b_txn = _b_commits(b, f.topic, "B-after")
    _check(kafka_cluster, f.topic, [f.a_txn, b_txn])


def test_fenced_after_the_coordinator_was_killed(kafka_cluster, txn_protocol):
    """A in a transaction, its coordinator killed; B's init_transactions finds the new
    coordinator (which aborts A's transaction); A's commit says A was fenced; B commits.
    ``max(1, KWIRE_CLUSTER_ROUNDS // 2)`` rounds, each with its own id and topic."""
    cluster = kafka_cluster
    took = []                   # from the kill to B's init_transactions returning
    checked = []
    for _ in range(max(1, ROUNDS // 2)):
        with _fencing(cluster, "txfkill", txn_protocol) as f:
            victim = cluster.broker(cluster.transaction_coordinator(f.tid))
            victim.kill()
            t0 = time.monotonic()
            b = f.take_over()
            took.append(time.monotonic() - t0)
            assert cluster.transaction_coordinator(f.tid) != victim.node_id
            _a_commit_is_fenced(f)
            b_txn = _b_commits(b, f.topic, "B-after")
        victim.restart(cluster)
        cluster.check_healthy(FAULT_DEADLINE)
        checked.append(_check(cluster, f.topic, [f.a_txn, b_txn]))
    RESULTS[f"fenced after kill v{txn_protocol}"] = {"rounds": len(took), "committed": sum(c["committed"] for c in checked),
                                    "aborted": sum(c["aborted"] for c in checked),
                                    "fault_to_commit_p50_s": statistics.median(took), "fault_to_commit_max_s": max(took)}


def test_a_zombie_commits_after_it_was_fenced(kafka_cluster, txn_protocol):
    """A stops calling anything mid-transaction (a zombie: paused, or cut off) while B takes
    its id over and commits a transaction; then A commits: refused, A was fenced."""
    with _fencing(kafka_cluster, "txzombie", txn_protocol) as f:
        b = f.take_over()
        b_txn = _b_commits(b, f.topic, "B-took-over")
        _a_commit_is_fenced(f)
        with pytest.raises(ProducerFencedError):
            f.a.send(f.topic, b"A-later", partition=0)
        b_txn2 = _b_commits(b, f.topic, "B-again")
    _check(kafka_cluster, f.topic, [f.a_txn, b_txn, b_txn2])


# ---- consume-transform-produce: the group's offsets in the transaction ----

CTP_BATCH = 20                                               # source records per transaction, at most
SOURCE_PER_PARTITION = max(30, 20 * max(1, ROUNDS // 2))      # enough for a kill every other round


@BOTH_PROTOCOLS
def test_consume_transform_produce_across_coordinator_kills(kafka_cluster, txn_protocol):
    """Source records are read, sent transformed and their offsets committed in the same
    transaction (``send_offsets_to_transaction`` with the group id); in every other round
    the transaction coordinator is killed before the commit (the first, third... kill of the
    long run: before ``send_offsets_to_transaction`` already). The group's
    committed offsets move with committed transactions only, and each source record is in
    the output (read_committed) exactly once."""
    cluster = kafka_cluster
    src, dst = cluster.replicated_topics("txsrc", "txdst")
    with Producer(bootstrap_servers=cluster.bootstrap, acks="all") as plain:
        for part in range(PARTITIONS):
            for seq in range(SOURCE_PER_PARTITION):
                plain.send(src, b"in-p%d-s%d" % (part, seq), partition=part)
        plain.flush(CALL_TIMEOUT)
    group = f"txf-ctp-{uuid.uuid4().hex[:6]}"
    tid = f"txf-ctp-{uuid.uuid4().hex[:6]}"
    kills = max(1, ROUNDS // 2)
    p = _producer(cluster, tid, txn_protocol)
    c = Consumer(bootstrap_servers=cluster.bootstrap, group_id=group, enable_auto_commit=False,
                 auto_offset_reset="earliest", request_timeout_ms=10000)
    tps = [(src, part) for part in range(PARTITIONS)]
    committed = {tp: 0 for tp in tps}
    txns: List[Txn] = []

    def group_offsets():
        with cluster.admin() as a:
            got = a.list_group_offsets(group, tps, timeout=10)
        return {(tp.topic, tp.partition): om.offset if om is not None else 0 for tp, om in got.items()}

    try:
        c.assign(tps)
        deadline = time.monotonic() + 300
        rnd = 0
        while any(committed[tp] < SOURCE_PER_PARTITION for tp in tps):
            assert time.monotonic() < deadline, f"consume-transform-produce: {committed} after {rnd} rounds"
            batch = c.poll(500, max_records=CTP_BATCH)
            if not batch:
                continue
            txn = Txn(f"ctp-r{rnd}")
            p.begin_transaction()
            for tp, recs in batch.items():
                for r in recs:
                    value = b"out-r%d-%s" % (rnd, r.value)
                    txn.values[tp.partition].append(value)
                    p.send(dst, value, partition=tp.partition)
            positions = {(tp.topic, tp.partition): c.position(tp) for tp in batch}
            # the coordinator killed in every other round: before the commit, and (every other
            # kill) before send_offsets_to_transaction already
            victim = None
            if rnd % 2 == 1 and kills > 0:
                kills -= 1
                _timed("flush", CALL_TIMEOUT, lambda: p.flush(CALL_TIMEOUT))
                victim = cluster.broker(cluster.transaction_coordinator(tid))
                if kills % 2 == 1:
                    victim.kill()
                    t0 = time.monotonic()
                    txn.note = "killed before send_offsets_to_transaction"
            _timed("send_offsets_to_transaction", CALL_TIMEOUT,
                   lambda: p.send_offsets_to_transaction(positions, group, CALL_TIMEOUT))
            if victim is not None and victim.alive:
                victim.kill()
                t0 = time.monotonic()
            _commit_or_abort(p, txn)
            if victim is not None:
                txn.fault_to_end = time.monotonic() - t0
            txns.append(txn)
            if txn.outcome == "committed":
                committed.update(positions)
            else:
                for tp in tps:
                    c.seek(tp, committed[tp])             # read again what the aborted transaction took
            want = dict(committed)
            cluster.wait_until(f"round {rnd}: the group's offsets {want}", lambda: group_offsets() == want, 60)
            if victim is not None:
                victim.restart(cluster)
                cluster.check_healthy(FAULT_DEADLINE)
            rnd += 1
    finally:
        c.close(10)
        p.close(10)
    assert kills == 0, f"{kills} kills left: too few rounds"
    counts = _check(cluster, dst, txns)
    out = collections.Counter(v.split(b"-", 2)[2] for v in _kwire_read(cluster, dst, "read_committed"))
    want = {b"in-p%d-s%d" % (part, seq) for part in range(PARTITIONS) for seq in range(SOURCE_PER_PARTITION)}
    assert set(out) == want and all(n == 1 for n in out.values()), \
        f"missing {sorted(want - set(out))[:5]}, twice {[v for v, n in out.items() if n > 1][:5]}"
    assert group_offsets() == {tp: SOURCE_PER_PARTITION for tp in tps}
    _figures(f"consume-transform-produce v{txn_protocol}", txns, counts)
