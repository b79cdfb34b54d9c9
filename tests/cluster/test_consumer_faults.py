"""kwire's consumer through real broker failures, on the three-node cluster
(tests/support/kafka_cluster.py): a consumer with manual assignment, a
consumer group of two kwire members (classic protocol and KIP-848's
``consumer`` protocol), and the group coordinator's broker killed mid-group.

A topic of 3 partitions, replication factor 3, ``min.insync.replicas=2``
(``_topic`` of test_producer_faults.py), filled with ``PREFILL`` records
before the consumers start, and written on by a live idempotent producer
(acks=all) at ``RATE`` records/s all through the run, so the consumers read
a backlog first and then live data. Record ``seq`` goes to partition
``seq % 3`` with key ``k<seq % 64>`` and value ``seq``; the producer notes
when each one is acknowledged. The faults are test_producer_faults.py's
(``_inject``), on the broker that leads partition ``round % 3`` at the time:
SIGKILL and restart, SIGSTOP until another replica leads and SIGCONT, and
the client's side of a network partition at its proxy for 12 s. The
consumers' ``request_timeout_ms`` is 10 s, as the producer's there.

Checked as the consumer reads (each ``poll(POLL_MS)`` call timed):

- every record is returned exactly once per partition, in offset order,
  with no gap: each poll's records of a partition start where the last ones
  ended and go up by one (the log has no control records);
- ``position()`` equals the last returned offset + 1 after every poll (of
  every assigned partition, for the assigned consumer);
- no ``poll`` call returns later than its timeout + ``POLL_SLACK`` + the
  machine's own lateness (the worst overrun of a bare ``sleep`` in a
  thread of the same process, measured alongside: on a loaded 2-core CI
  machine the interpreter itself wakes threads a second late); the max
  overrun is reported;
- no ``poll`` raises;

and at the end, once the cluster is whole and the producer has stopped,
what the consumer returned, per partition, is the log as an independent
reader (confluent-kafka, ``_read_back``) reads it: the same offsets, keys and
values, from offset 0 to the end.

Reported per fault: the time from the fault to the first record of each
partition the faulted broker led that was *sent after* the fault (p50, max;
it includes the producer's own recovery: a record must be written before it
can be read), and the time from that record's acknowledgment to its read
(the consumer's own part). For a network partition the leader stays the
leader, so both wait for the heal at 12 s.

The group (``test_group_through_leader_faults``): two kwire members
(``enable_auto_commit=False``) subscribe, each in its own thread, and after
every poll process its records and commit exactly what they processed
(synchronous ``commit({tp: last + 1})``) before polling again. Through every
fault (kill, pause and partition rounds in one run) each record must be
processed exactly once by the group, as a whole: a member that is handed a
partition starts at its committed offset, which is where its processing
stopped. Exactly once holds here, not merely at least once, because a record
can only be processed twice when a commit of it failed and its partition
then moved to the other member; the faults are on partition leaders, which
with 45 s sessions end no member's session (a fault that also hits the
group's coordinator, which lives on one of the three brokers, is over in
well under 45 s: the new coordinator loads the group's members and
generation from ``__consumer_offsets``), so no partition moves, and a commit
that fails is retried by the next one. A replay would be a bug, and fails
the test with the failed commits listed.

The coordinator (``test_coordinator_killed``, classic and KIP-848): the two
members consume and commit until every partition has progressed; then they
are held (they stop polling after their last commit is answered), their
commits noted, and the broker that coordinates the group (the leader of the
``__consumer_offsets`` partition of the group id, which the members' own
coordinator must be) is killed. ``committed()`` of a member and of a fresh
consumer of the group (not a member) must read back exactly the commits made
before the kill, from the new coordinator. Then the members go on: the group
recovers (each member finds the new coordinator; between them they own the
3 partitions; each partition is processed and committed again), the killed
broker is restarted, and over the whole run each record is processed
exactly once (no repeat beyond the last commit: there was none to repeat).

The poll overruns have a baseline: a thread that only sleeps ``POLL_MS``
over and over during each run (``Book.probe``) notes how late this machine
wakes a thread anyway (three JVMs, the proxies' threads and the producer on
two cores); the report shows both.

Long run (outside CI): ``KWIRE_CLUSTER_ROUNDS=4 KWIRE_CLUSTER_LOOPS=3
pytest tests/cluster/test_consumer_faults.py -s`` (16 min). Its figures on
the 2-core development machine (Kafka 4.4.0; 21 runs: 72 leader-fault
rounds, 6 coordinator kills; 1.98 million records returned or processed):
no record skipped, repeated or missing, every position exact, no poll
raised, the longest poll 0.067 s past its timeout over 21,156 polls (a bare
sleep: 0.049 s), and

==========  =========  ======  ===============  ============
reader      fault      rounds  read p50 / max   ack>read max
==========  =========  ======  ===============  ============
assigned    kill       12      7.94 / 10.04 s   0.80 s
assigned    pause      6       7.09 / 9.53 s    0.08 s
assigned    partition  6       12.03 / 12.05 s  0.05 s
classic     kill       12      8.09 / 9.09 s    0.87 s
classic     pause      6       7.47 / 9.90 s    0.39 s
classic     partition  6       12.05 / 12.14 s  0.13 s
consumer    kill       12      8.16 / 10.57 s   0.86 s
consumer    pause      6       8.24 / 9.67 s    0.98 s
consumer    partition  6       12.06 / 12.08 s  0.07 s
==========  =========  ======  ===============  ============

The fault-to-read times are the cluster's and the producer's: a killed or
hung leader's partitions get a new leader once the controller fences it
(``broker.session.timeout.ms`` 6 s) and the producer finds it; a
partitioned leader stays the leader until the heal at 12 s. The consumer's
own part, from the acknowledgment to the read, is 0.3 s or less at the
median. A consumer's Fetch in flight to a hung leader is given up once the
metadata names another leader (``Client.drop_replaced_leaders``), not after
``request_timeout_ms``; the new leader is then fetched from (after
OffsetForLeaderEpoch checks the position). The group's failed commits (6
and 5 in the two protocols' 3 runs: a sync commit's 10 s ran out while the
group's coordinator was the faulted broker, black-holed or hung) were each
followed by one that succeeded, and no partition moved: no replay.
Coordinator killed: ``committed()`` answered from the new coordinator
5.8-9.5 s after the kill (classic 5.8-8.0, KIP-848 7.9-9.5), with exactly
the commits made before it; once the members went on, every partition was
committed again within 0.2-0.7 s; every member kept its assignment (the
same generation or member epoch).
"""

from __future__ import annotations

import collections
import contextlib
import os
import statistics
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import pytest

from kwire.consumer import Consumer, TopicPartition
from kwire.producer import Producer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))    # its neighbour, whatever pytest's import mode
from test_producer_faults import FAULT_DEADLINE, _inject, _read_back, _topic  # noqa: E402 - the same faults

pytestmark = [pytest.mark.kafka, pytest.mark.cluster]

ROUNDS = int(os.environ.get("KWIRE_CLUSTER_ROUNDS", "1"))     # CI: one kill, one pause, one partition per run
LOOPS = int(os.environ.get("KWIRE_CLUSTER_LOOPS", "1"))        # each test this many times (the long run)
PREFILL = int(os.environ.get("KWIRE_CLUSTER_CONSUMER_RECORDS", "30000"))   # records written before reading
PARTITIONS = 3
KEYS = 64
RATE = 1500                      # records/s the live producer writes while the consumers read
REQUEST_TIMEOUT_MS = 10000       # the consumers' and the producer's, as in test_producer_faults.py
POLL_MS = 200                    # each poll's timeout
POLL_SLACK = 0.5                 # seconds a poll may return after its timeout
RUN_DEADLINE = 300.0             # seconds for one run's faults
CATCH_UP = 120.0                 # seconds for the readers to reach the end once the producer stopped

RESULTS: Dict[str, List[dict]] = collections.defaultdict(list)   # reader -> each run's figures, printed at the end


def _value(seq: int) -> bytes:
    return b"%d" % seq


def _key(seq: int) -> bytes:
    return b"k%d" % (seq % KEYS)


# ---- the live producer ----

class LiveProducer:
    """Writes records ``seq`` = 0, 1, ... (partition ``seq % 3``) from a thread: ``prefill`` at once,
    then ``RATE`` a second until :meth:`stop`; ``acked[seq]`` is when each was acknowledged."""

    def __init__(self, cluster, topic: str, prefill: int) -> None:
        self.topic = topic
        self.p = Producer(bootstrap_servers=cluster.bootstrap, acks="all", enable_idempotence=True,
                          request_timeout_ms=REQUEST_TIMEOUT_MS, linger_ms=5)
        self.acked: Dict[int, float] = {}
        self.failed = 0
        self.next_seq = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        for _ in range(prefill):
            self._send()
        self.p.flush(60)
        # flush() returns once the batches are acknowledged, maybe before their records' callbacks ran
        deadline = time.monotonic() + 10
        while len(self.acked) + self.failed < prefill and time.monotonic() < deadline:
            time.sleep(0.01)
        self._thread = threading.Thread(target=self._run, name="live-producer", daemon=True)
        self._thread.start()

    def _send(self) -> None:
        with self._lock:
            seq = self.next_seq
            self.next_seq += 1

        def done(md, err, seq=seq):
            if err is None:
                self.acked[seq] = time.monotonic()
            else:
                self.failed += 1
        try:
            self.p.send(self.topic, _value(seq), key=_key(seq), partition=seq % PARTITIONS).add_callback(done)
        except Exception:  # noqa: BLE001 - a record that could not be sent is simply not in the log
            self.failed += 1

    def first_after(self) -> int:
        """The first sequence number sent from now on."""
        with self._lock:
            return self.next_seq

    def _run(self) -> None:
        t0 = time.monotonic()
        sent = 0
        while not self._stop.wait(0.01):
            due = int((time.monotonic() - t0) * RATE)
            while sent < due and not self._stop.is_set():
                self._send()
                sent += 1

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(30)
        self.p.flush(60)
        self.p.close(10)


# ---- what the readers saw ----

@dataclass
class Book:
    """Every record the readers returned (or, in a group, processed), by partition, in the order they did,
    with the checks made as they went; shared by a group's members (under ``lock``)."""

    read: Dict[int, List[Tuple[int, bytes, bytes, float, str]]] = field(
        default_factory=lambda: {p: [] for p in range(PARTITIONS)})   # (offset, key, value, when, who)
    next: Dict[int, int] = field(default_factory=lambda: {p: 0 for p in range(PARTITIONS)})
    last_seq: Dict[int, int] = field(default_factory=lambda: {p: -1 for p in range(PARTITIONS)})
    problems: List[str] = field(default_factory=list)    # gaps, repeats, wrong positions, as found
    errors: List[str] = field(default_factory=list)      # what poll raised
    polls: int = 0
    max_overrun: float = 0.0
    late_polls: List[Tuple[float, float]] = field(default_factory=list)   # (when, overrun) past the slack
    max_sleep_overrun: float = 0.0                        # the machine's part: a bare sleep(POLL_MS)'s worst
    ends: Optional[Dict[int, int]] = None                 # where the log ends, once the producer stopped
    lock: threading.Lock = field(default_factory=threading.Lock)

    def timed_poll(self, consumer: Consumer) -> Dict[TopicPartition, list]:
        t = time.monotonic()
        try:
            out = consumer.poll(POLL_MS)
        except Exception as e:  # noqa: BLE001 - counted and reported: no poll should raise here
            out = {}
            with self.lock:
                self.errors.append(f"{time.monotonic():.1f}: {type(e).__name__}: {e}")
        over = time.monotonic() - t - POLL_MS / 1000.0
        with self.lock:
            self.polls += 1
            self.max_overrun = max(self.max_overrun, over)
            if over > POLL_SLACK:
                self.late_polls.append((t, over))
        return out

    def take(self, who: str, out: Dict[TopicPartition, list]) -> None:
        """Records one poll returned: each partition's must start where the last ones ended, one apart."""
        now = time.monotonic()
        with self.lock:
            for tp, records in out.items():
                p = tp.partition
                expect = self.next[p]
                for r in records:
                    if r.offset != expect:
                        what = "repeated" if r.offset < expect else "skipped"
                        self.problems.append(f"{who}: partition {p}: offset {r.offset} where {expect} was due "
                                             f"({what})")
                    self.read[p].append((r.offset, r.key, r.value, now, who))
                    expect = max(expect, r.offset + 1)
                self.next[p] = expect
                self.last_seq[p] = max(self.last_seq[p], int(records[-1].value))

    def check_positions(self, who: str, consumer: Consumer, tps) -> None:
        for tp in tps:
            with self.lock:
                expect = self.next[tp.partition]
            got = consumer.position(tp)
            if got != expect:
                with self.lock:
                    self.problems.append(f"{who}: position({tp.partition}) is {got}, {expect} after the last record")

    def probe(self) -> threading.Thread:
        """A thread that sleeps POLL_MS over and over while the readers run, noting its worst overrun: how
        late this busy machine (three JVMs, the proxies' threads, the producer, on two cores) wakes a thread
        anyway, the baseline of the polls' overruns."""
        def run():
            while not self.done():
                t = time.monotonic()
                time.sleep(POLL_MS / 1000.0)
                self.max_sleep_overrun = max(self.max_sleep_overrun, time.monotonic() - t - POLL_MS / 1000.0)
        thread = threading.Thread(target=run, name="sleep-probe", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        """Let the readers stop now (whatever happened), if the end is not known yet."""
        with self.lock:
            if self.ends is None:
                self.ends = {}

    def done(self) -> bool:
        with self.lock:
            return self.ends is not None and all(self.next[p] >= self.ends[p] for p in self.ends)

    def caught_up(self, seq: int) -> bool:
        """Whether every partition was read up to the records sent from ``seq`` on."""
        with self.lock:
            return all(last >= seq for last in self.last_seq.values())


@dataclass
class Faults:
    """The rounds of a run: (fault, when, the partitions the faulted broker led, first seq sent after)."""

    done: List[Tuple[str, float, Tuple[int, ...], int]] = field(default_factory=list)
    faults: list = field(default_factory=list)           # _inject appends (when, led, first) here

    def inject(self, cluster, topic: str, fault: str, rnd: int, producer: LiveProducer) -> None:
        _inject(cluster, topic, fault, rnd, self, producer.first_after)
        t0, led, first = self.faults[-1]
        self.done.append((fault, t0, led, first))


def _wait_read(book: Book, producer: LiveProducer, what: str, deadline: float) -> None:
    """Until the readers returned, on every partition, a record sent after this call began."""
    seq = producer.first_after()
    while not book.caught_up(seq):
        assert time.monotonic() < deadline, (f"{what}: the readers are at {book.last_seq} (seq), not yet at {seq}; "
                                             f"poll errors {book.errors[-3:]}")
        time.sleep(0.05)


def _finish(cluster, topic: str, producer: LiveProducer, book: Book, threads: Sequence[threading.Thread]):
    """Stop the producer, read the log back, let the readers reach its end; the log."""
    producer.stop()
    log = _read_back(cluster, topic)
    with book.lock:
        book.ends = {p: (records[-1][0] + 1 if records else 0) for p, records in log.items()}
    deadline = time.monotonic() + CATCH_UP
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), (
        f"the readers did not reach the end {book.ends} in {CATCH_UP:g} s: at {book.next}; "
        f"poll errors {book.errors[-3:]}")
    return log


def _figures(book: Book, log: Dict[int, list], faults: Faults, producer: LiveProducer) -> dict:
    """The run's checks against the log, and per fault the delays (see the module doc)."""
    mismatched = []
    for p, records in log.items():
        got = [(o, k, v) for o, k, v, _, _ in book.read[p]]
        if got != [(o, k, v) for o, k, v in records]:
            first = next((i for i, (a, b) in enumerate(zip(got, records)) if a != tuple(b)), min(len(got), len(records)))
            mismatched.append(f"partition {p}: {len(got)} read, {len(records)} in the log, first difference at "
                              f"index {first}: read {got[first:first + 2]}, log {records[first:first + 2]}")
    by_fault: Dict[str, dict] = {}
    for fault, t0, led, first in faults.done:
        f = by_fault.setdefault(fault, {"rounds": 0, "first_read": [], "ack_to_read": []})
        f["rounds"] += 1
        for p in led:
            after = [(when, int(v)) for _, _, v, when, _ in book.read[p] if int(v) >= first]
            if not after:
                f["first_read"].append(float("inf"))
                continue
            when, seq = after[0]
            f["first_read"].append(when - t0)
            # (the producer's callback may note the acknowledgment after the consumer returned the record)
            f["ack_to_read"].append(max(0.0, when - producer.acked.get(seq, when)))
    return {"records": sum(len(r) for r in book.read.values()), "log": sum(len(r) for r in log.values()),
            "rounds": len(faults.done), "problems": len(book.problems), "mismatched": mismatched,
            "poll_errors": len(book.errors), "polls": book.polls, "max_overrun_s": book.max_overrun,
            "late_polls": len(book.late_polls), "max_sleep_overrun_s": book.max_sleep_overrun,
            "commit_failures": 0, "faults": by_fault,
            "examples": {"problems": book.problems[:5], "errors": book.errors[:5],
                         "late_polls": [round(o, 2) for _, o in book.late_polls[:5]]}}


def _record(reader: str, figures: dict) -> None:
    RESULTS[reader].append(figures)
    sys.stderr.write(f"\n[consumer faults] {reader}: {figures}\n")


def _assert_sound(f: dict) -> None:
    assert f["problems"] == 0, f
    assert not f["mismatched"], f
    assert f["records"] == f["log"], f
    assert f["poll_errors"] == 0, f
    assert f["max_overrun_s"] <= POLL_SLACK + f["max_sleep_overrun_s"], f
    for fault in f["faults"].values():
        assert float("inf") not in fault["first_read"], f   # each faulted partition was read again after it


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    if not RESULTS:
        return
    rows = [f"{'reader':<18} {'runs':>4} {'rounds':>6} {'records':>8} {'skip/rep':>8} {'polls':>6} {'poll over s':>11} "
            f"{'sleep over s':>12} {'commit fail':>11}"]
    for reader, runs in sorted(RESULTS.items()):
        rows.append(f"{reader:<18} {len(runs):>4} {sum(f['rounds'] for f in runs):>6} "
                    f"{sum(f['records'] for f in runs):>8} "
                    f"{sum(f['problems'] + len(f['mismatched']) for f in runs):>8} {sum(f['polls'] for f in runs):>6} "
                    f"{max(f['max_overrun_s'] for f in runs):>11.3f} {max(f['max_sleep_overrun_s'] for f in runs):>12.3f} "
                    f"{sum(f['commit_failures'] for f in runs):>11}")
    rows += ["", f"{'reader':<18} {'fault':<11} {'rounds':>6} {'read p50 s':>10} {'read max s':>10} "
                 f"{'ack>read p50':>12} {'ack>read max':>12}"]
    for reader, runs in sorted(RESULTS.items()):
        for fault in sorted({k for f in runs for k in f["faults"]}):
            those = [f["faults"][fault] for f in runs if fault in f["faults"]]
            reads = [x for f in those for x in f["first_read"]]
            acks = [x for f in those for x in f["ack_to_read"]]
            rows.append(f"{reader:<18} {fault:<11} {sum(f['rounds'] for f in those):>6} {_s(_median(reads)):>10} "
                        f"{_s(max(reads, default=None)):>10} {_s(_median(acks)):>12} {_s(max(acks, default=None)):>12}")
    coordinator = [(reader, f) for reader, runs in sorted(RESULTS.items()) for f in runs if "committed_s" in f]
    if coordinator:
        rows += ["", f"{'reader':<18} {'committed() s':>13} {'recommit s':>10} {'assignment':>10}"]
        rows += [f"{reader:<18} {f['committed_s']:>13.2f} {f['recommitted_s']:>10.2f} "
                 f"{'kept' if all(f['kept'].values()) else 'regained':>10}" for reader, f in coordinator]
    sys.stderr.write("\n[consumer faults] each reader's runs; then per fault, the first record sent after it: from the "
                     "fault to its read, and from its acknowledgment to its read (per faulted partition)\n"
                     + "\n".join(rows) + "\n")


def _median(xs: List[float]) -> Optional[float]:
    return statistics.median(xs) if xs else None


def _s(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.2f}"


@contextlib.contextmanager
def _setting(cluster) -> Iterator[Tuple[str, LiveProducer, Book]]:
    """A new topic, its live producer and the book of what its readers return; on the way out (whatever
    happened) the readers are told to stop and the producer stops."""
    topic = _topic(cluster)
    producer = LiveProducer(cluster, topic, PREFILL)
    book = Book()
    book.probe()
    try:
        yield topic, producer, book
    finally:
        book.stop()
        producer.stop()


def _schedule(fault: str) -> List[str]:
    if fault == "all":
        return ["kill"] * ROUNDS + ["pause"] * max(1, ROUNDS // 2) + ["partition"] * max(1, ROUNDS // 2)
    return [fault] * (ROUNDS if fault == "kill" else max(1, ROUNDS // 2))


def _faults_while_reading(cluster, topic: str, producer: LiveProducer, book: Book, schedule: List[str]) -> Faults:
    faults = Faults()
    deadline = time.monotonic() + RUN_DEADLINE
    _wait_read(book, producer, "before the first fault", deadline)     # the backlog read: live reading
    for rnd, fault in enumerate(schedule):
        faults.inject(cluster, topic, fault, rnd, producer)
        _wait_read(book, producer, f"round {rnd} ({fault})", deadline)   # the next round starts from live reading
    return faults


# ---- the assigned consumer ----

def _assigned_run(cluster, fault: str) -> dict:
    failure: List[BaseException] = []
    with _setting(cluster) as (topic, producer, book):
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer = Consumer(bootstrap_servers=cluster.bootstrap, request_timeout_ms=REQUEST_TIMEOUT_MS,
                            auto_offset_reset="none")
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)

        def reader():
            try:
                while not book.done():
                    out = book.timed_poll(consumer)
                    book.take("assigned", out)
                    book.check_positions("assigned", consumer, tps)
            except BaseException as e:  # noqa: BLE001 - reported by the main thread
                failure.append(e)

        thread = threading.Thread(target=reader, name="assigned-reader", daemon=True)
        thread.start()
        try:
            faults = _faults_while_reading(cluster, topic, producer, book, _schedule(fault))
            log = _finish(cluster, topic, producer, book, [thread])
        finally:
            book.stop()
            thread.join(10)
            consumer.close()
    if failure:
        raise failure[0]
    return _figures(book, log, faults, producer)


@pytest.mark.parametrize("loop", range(LOOPS))
@pytest.mark.parametrize("fault", ["kill", "pause", "partition"])
def test_assigned_through_leader_faults(kafka_cluster, fault, loop):
    figures = _assigned_run(kafka_cluster, fault)
    _record("assigned", figures)
    _assert_sound(figures)


# ---- the group ----

class Member:
    """A kwire group member in a thread of its own: poll, process (the book), commit exactly what it
    processed (synchronously), poll again; held (no poll) while ``hold`` is set."""

    def __init__(self, name: str, cluster, topic: str, group: str, protocol: str, book: Book,
                 hold: threading.Event) -> None:
        self.name = name
        self.book = book
        self.hold = hold
        self.idle = threading.Event()
        self.c = Consumer(bootstrap_servers=cluster.bootstrap, group_id=group, group_protocol=protocol,
                          enable_auto_commit=False, auto_offset_reset="earliest",
                          request_timeout_ms=REQUEST_TIMEOUT_MS)
        self.commits: Dict[int, Tuple[int, float]] = {}     # partition -> (offset, when) of its last commit answered
        self.commit_failures: List[str] = []
        self.events: List[Tuple[float, str, List[int]]] = []   # the rebalance listener's calls
        self.failure: Optional[BaseException] = None
        self.c.subscribe([topic], listener=self)
        self.thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)
        self.thread.start()

    def on_partitions_revoked(self, tps):
        self.events.append((time.monotonic(), "revoked", sorted(tp.partition for tp in tps)))

    def on_partitions_assigned(self, tps):
        self.events.append((time.monotonic(), "assigned", sorted(tp.partition for tp in tps)))

    def on_partitions_lost(self, tps):
        self.events.append((time.monotonic(), "lost", sorted(tp.partition for tp in tps)))

    def _run(self) -> None:
        try:
            while not self.book.done():
                if self.hold.is_set():
                    self.idle.set()
                    time.sleep(0.05)
                    continue
                self.idle.clear()
                out = self.book.timed_poll(self.c)
                if not out:
                    continue
                self.book.take(self.name, out)
                self.book.check_positions(self.name, self.c, list(out))
                offsets = {tp: records[-1].offset + 1 for tp, records in out.items()}
                try:
                    self.c.commit(offsets)
                    now = time.monotonic()
                    for tp, o in offsets.items():
                        self.commits[tp.partition] = (o, now)
                except Exception as e:  # noqa: BLE001 - kept: a failed commit is what may explain a replay
                    self.commit_failures.append(f"{time.monotonic():.1f}: {sorted(offsets.values())}: "
                                                f"{type(e).__name__}: {e}")
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            self.failure = e
        finally:
            self.idle.set()

    def close(self) -> None:
        self.book.stop()
        self.thread.join(10)
        self.c.close(10)


def _members(cluster, topic: str, protocol: str, book: Book, hold: threading.Event, n: int = 2) -> List[Member]:
    """``n`` members of a new group, once the group has settled: each owns a share of the partitions (a
    KIP-848 group gives them all to the first member, then moves some at the next heartbeats)."""
    group = f"cf-{protocol}-{uuid.uuid4().hex[:8]}"
    members = [Member(f"m{i}", cluster, topic, group, protocol, book, hold) for i in range(n)]

    def settled():
        owned = [sorted(tp.partition for tp in m.c.assignment()) for m in members]
        return all(owned) and sorted(p for ps in owned for p in ps) == list(range(PARTITIONS)) and owned
    try:
        cluster.wait_until(f"the {protocol} group's assignment", settled, FAULT_DEADLINE)
    except BaseException:
        for m in members:
            m.close()
        raise
    return members


def _group_figures(book: Book, log, faults: Faults, producer: LiveProducer, members: List[Member]) -> dict:
    for m in members:
        if m.failure is not None:
            raise m.failure
    f = _figures(book, log, faults, producer)
    f["commit_failures"] = sum(len(m.commit_failures) for m in members)
    f["examples"]["commit_failures"] = [x for m in members for x in m.commit_failures][:5]
    f["examples"]["listener"] = {m.name: [(round(t, 1), e, ps) for t, e, ps in m.events] for m in members}
    return f


def _group_run(cluster, protocol: str) -> dict:
    with _setting(cluster) as (topic, producer, book):
        members = _members(cluster, topic, protocol, book, threading.Event())
        try:
            faults = _faults_while_reading(cluster, topic, producer, book, _schedule("all"))
            log = _finish(cluster, topic, producer, book, [m.thread for m in members])
        finally:
            for m in members:
                m.close()
    return _group_figures(book, log, faults, producer, members)


@pytest.mark.parametrize("loop", range(LOOPS))
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_group_through_leader_faults(kafka_cluster, protocol, loop):
    figures = _group_run(kafka_cluster, protocol)
    _record(f"group {protocol}", figures)
    _assert_sound(figures)


# ---- the group's coordinator killed ----

def _java_hash(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units): a signed 32-bit number."""
    b = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(b), 2):
        h = (31 * h + int.from_bytes(b[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _coordinator_of(cluster, group: str) -> int:
    """The leader of the group's ``__consumer_offsets`` partition, ``Utils.abs(groupId.hashCode()) %
    partitions`` (``Math.abs``, not the partitioner's ``& 0x7fffffff``): the broker that coordinates it."""
    with cluster.admin() as a:
        parts = cluster.partitions("__consumer_offsets", a)
    h = _java_hash(group)
    return parts[(0 if h == -(1 << 31) else abs(h)) % len(parts)].leader


def _agreed_coordinator(cluster, group: str, members: List[Member], when: str) -> int:
    """The group's coordinator, once every member talks to it (waited for: a member learns that its
    coordinator moved at its next request to it, or its connection's failure)."""
    def agreed():
        leader = _coordinator_of(cluster, group)
        seen = {m.name: (m.c._group.coordinator, m.c._group.state, m.c._group.generation) for m in members}
        if {c for c, _, _ in seen.values()} == {leader}:
            return leader
        raise AssertionError(f"the group's coordinator is node {leader}; the members' (node, state, generation): "
                             f"{seen}")
    return cluster.wait_until(f"{when}: the members' coordinator is the group's", agreed, FAULT_DEADLINE)


def _coordinator_run(cluster, protocol: str) -> dict:
    with _setting(cluster) as (topic, producer, book):
        hold = threading.Event()
        members = _members(cluster, topic, protocol, book, hold)
        try:
            out, log = _coordinator_killed(cluster, topic, protocol, producer, book, members, hold)
        finally:
            hold.clear()
            for m in members:
                m.close()
    figures = _group_figures(book, log, Faults(), producer, members)   # no partition-leader rounds: figures of its own
    figures.update(out)
    return figures


def _coordinator_killed(cluster, topic: str, protocol: str, producer: LiveProducer, book: Book,
                        members: List[Member], hold: threading.Event) -> Tuple[Dict[str, Any], Dict[int, list]]:
    """The scenario of the module doc; its figures, and the log read back."""
    group = members[0].c._group.group_id
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    out: Dict[str, Any] = {}
    deadline = time.monotonic() + RUN_DEADLINE
    _wait_read(book, producer, "before the fault", deadline)
    hold.set()
    for m in members:
        assert m.idle.wait(30), f"{m.name} still busy 30 s after the hold"
    # every member's last commit was answered: these are the group's commits before the fault
    before = {}
    for m in members:
        for p, (o, _) in m.commits.items():
            before[p] = max(before.get(p, 0), o)
    assert sorted(before) == list(range(PARTITIONS)), f"commits before the fault: {before}"
    victim = _agreed_coordinator(cluster, group, members, "before the fault")
    generations = {m.name: m.c._group.generation for m in members}
    node = cluster.broker(victim)
    node.kill()
    t0 = time.monotonic()
    # the commits made before the fault, from the new coordinator: a member's and a newcomer's view
    got = members[0].c.committed(tps, timeout=FAULT_DEADLINE)
    out["committed_s"] = time.monotonic() - t0
    assert {tp.partition: om.offset for tp, om in got.items() if om is not None} == before, (got, before)
    with Consumer(bootstrap_servers=cluster.bootstrap, group_id=group, group_protocol=protocol,
                  request_timeout_ms=REQUEST_TIMEOUT_MS) as fresh:
        got = fresh.committed(tps, timeout=FAULT_DEADLINE)
    assert {tp.partition: om.offset for tp, om in got.items() if om is not None} == before, (got, before)
    hold.clear()
    t1 = time.monotonic()
    # the group goes on: new commits on every partition, through the new coordinator
    _wait_read(book, producer, "after the coordinator's death", deadline)

    def recommitted():
        last: Dict[int, int] = {}
        for m in members:
            for p, (o, when) in list(m.commits.items()):
                if when > t1:
                    last[p] = max(last.get(p, 0), o)
        return sorted(last) == list(range(PARTITIONS)) and last
    after = cluster.wait_until("a commit of every partition after the fault", recommitted, FAULT_DEADLINE)
    out["recommitted_s"] = time.monotonic() - t1
    assert all(after[p] > before[p] for p in before), (before, after)
    new = _agreed_coordinator(cluster, group, members, "after the fault")
    assert new != victim, f"the coordinator is still node {victim}"
    owned = sorted(tp.partition for m in members for tp in m.c.assignment())
    assert owned == list(range(PARTITIONS)), f"the members own {owned} after the recovery"
    # kept (the same generation or member epoch) or regained (a rebalance)
    out["kept"] = {m.name: m.c._group.generation == generations[m.name] for m in members}
    node.restart(cluster)
    for p in range(PARTITIONS):
        cluster.wait_until_isr(topic, p, 3, timeout=FAULT_DEADLINE)
    log = _finish(cluster, topic, producer, book, [m.thread for m in members])
    return out, log


@pytest.mark.parametrize("loop", range(LOOPS))
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_coordinator_killed(kafka_cluster, protocol, loop):
    figures = _coordinator_run(kafka_cluster, protocol)
    _record(f"coordinator {protocol}", figures)
    _assert_sound(figures)
