"""An idempotent producer (acks=all) through real broker failures, on the
three-node cluster (tests/support/kafka_cluster.py): kwire, and
confluent-kafka (librdkafka) in the same scenario, measured the same way.

A topic of 3 partitions, replication factor 3, ``min.insync.replicas=2``.
One sender thread sends ``KWIRE_CLUSTER_RECORDS`` records (200,000 by
default; 1,000,000 for the long run), each keyed ``k<seq % 64>`` with its
sequence number as the value, released in chunks so that half of each
round's records are sent while the fault is on. Each of
``KWIRE_CLUSTER_ROUNDS`` rounds (2 by default; half as many, at least one,
for the shut down, hung and partitioned leader) faults the broker that leads
partition ``round % 3`` at the time:

- ``kill``: SIGKILL, held down 2 s after another replica leads, restarted
  on its directory;
- ``shutdown``: SIGTERM, a controlled shutdown (the node hands its
  leadership over before it stops), held down 2 s, restarted;
- ``pause``: SIGSTOP (a hung leader: its sockets stay open) until another
  replica leads (the controller fences it once its heartbeats stop), then
  SIGCONT;
- ``partition``: its proxy black-holes the client's connections (replication
  goes on), until the client's requests to it time out and it has been cut
  off for 12 s; then healed.

Then the cluster is made whole (ISR full) and every partition is read back
from offset 0 with confluent-kafka's consumer (an independent reader), and:
every record whose send was acknowledged is in the log exactly once, at the
offset its acknowledgment named; per partition, the log's order is the send
order; every record that failed has an exception saying why (a failed
record may still be in the log: the producer could not know, and says so).
Printed for each client: records lost, duplicated, out of order, failed,
and per partition the faulted broker led (p50 and max over the rounds and
partitions): the outage, the longest time without an acknowledgment from
the fault until the last record released at the fault is acknowledged (the
client has records waiting throughout, so a gap is the fault's); the time
from the fault to the first acknowledgment of a record sent after it; and
the backlog, the records sent before the fault and acknowledged after it
(a record sent after the fault waits behind them, so the first-ack time
measures the backlog as much as the failover: kwire's ``send()`` is fast
enough that much of a round's first half is still buffered at the fault).

Long run (outside CI): ``scripts/test --long tests/cluster/test_producer_faults.py -s``
(or ``KWIRE_CLUSTER_RECORDS=1000000 KWIRE_CLUSTER_ROUNDS=4``). Its figures on the 2-core
development machine (Kafka 4.4.0, confluent-kafka 2.16.0 / librdkafka 2.16.0,
``request.timeout.ms`` 10 s for both, broker.session.timeout.ms 6 s):

=========  ==========  =========  ======  ====  ===  =====  ==========  ==========  =======
fault      client      records    rounds  lost  dup  order  outage p50  outage max  backlog
=========  ==========  =========  ======  ====  ===  =====  ==========  ==========  =======
kill       kwire       1,000,000  4       0     0    0      8.11 s      9.09 s      7,976
kill       librdkafka  1,000,000  4       0     0    0      7.84 s      8.56 s      747
shutdown   kwire       1,000,000  2       0     0    0      1.62 s      2.47 s      21,369
shutdown   librdkafka  1,000,000  2       0     0    0      1.28 s      1.30 s      607
pause      kwire       1,000,000  2       0     0    0      5.73 s      6.47 s      84,681
pause      librdkafka  1,000,000  2       0     0    0      6.31 s      8.69 s      163
partition  kwire       1,000,000  2       0     0    0      11.96 s     12.00 s     28,872
partition  librdkafka  1,000,000  2       0     0    0      12.02 s     12.02 s     297
=========  ==========  =========  ======  ====  ===  =====  ==========  ==========  =======

(no record failed in any run; a partitioned leader stays the leader, so both
wait for the heal at 12 s. kwire's hung-leader row: a Produce that waited a
second on a leader the metadata says was replaced is given up, not held
for the 10 s request timeout; librdkafka's ``request.timeout.ms`` is the
broker's ack timeout, its own is ``socket.timeout.ms``, 60 s.)
"""

from __future__ import annotations

import collections
import os
import statistics
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import pytest

from kwire.admin import NewTopic
from kwire.producer import Producer

pytestmark = [pytest.mark.kafka, pytest.mark.cluster]

LONG = bool(os.environ.get("KWIRE_LONG"))       # scripts/test --long: the long run below
RECORDS = int(os.environ.get("KWIRE_CLUSTER_RECORDS", "1000000" if LONG else "200000"))
ROUNDS = int(os.environ.get("KWIRE_CLUSTER_ROUNDS", "4" if LONG else "2"))
PARTITIONS = 3
KEYS = 64
REQUEST_TIMEOUT_MS = 10000       # kwire: the client-side request timeout; librdkafka: the broker-side
                                 # ack timeout only (its client-side one is socket.timeout.ms, 60 s)
HOLD_DOWN = 2.0                  # seconds a killed leader stays down once another replica leads
PARTITION_HOLD = 12.0            # seconds a black-holed broker stays cut off from the client
FAULT_DEADLINE = 90.0            # seconds for any one round's fault and recovery
RUN_DEADLINE = 600.0             # seconds for one client's whole run

RESULTS: Dict[Tuple[str, str], dict] = {}      # (fault, client) -> figures, printed at the module's end


@dataclass
class Outcome:
    """What one send came to: acknowledged at (partition, offset) at ``at``, or failed with ``error``."""

    partition: int = -1
    offset: int = -1
    error: Optional[BaseException] = None
    at: float = 0.0


@dataclass
class Run:
    """One client's run: the outcome of each sequence number; the faults: (when, the partitions
    the faulted broker led, the first sequence number sent after it)."""

    client: str
    fault: str
    outcomes: List[Optional[Outcome]]
    faults: List[Tuple[float, Tuple[int, ...], int]] = field(default_factory=list)
    send_errors: int = 0
    chunk: int = 0                     # records released at each fault


# ---- the two clients, behind the same three calls: send(seq, on_done), poll(), close() ----

def _key(seq: int) -> bytes:
    return b"k%d" % (seq % KEYS)


class KwireClient:
    name = "kwire"

    def __init__(self, bootstrap: str, topic: str, delivery_timeout_ms: Optional[int] = None) -> None:
        self.topic = topic
        extra = {} if delivery_timeout_ms is None else {"delivery_timeout_ms": delivery_timeout_ms,
                                                         "request_timeout_ms": delivery_timeout_ms // 2}
        self.p = Producer(**{"bootstrap_servers": bootstrap, "acks": "all", "enable_idempotence": True,
                             "request_timeout_ms": REQUEST_TIMEOUT_MS, "linger_ms": 5, **extra})

    def send(self, seq: int, done: Callable[[int, int, Optional[BaseException]], None]) -> None:
        fut = self.p.send(self.topic, b"%d" % seq, key=_key(seq))
        fut.add_callback(lambda md, err: done(md.partition if md else -1, md.offset if md else -1, err))

    def poll(self) -> None:
        pass

    def finish(self, timeout: float) -> None:
        self.p.flush(timeout)

    def close(self) -> None:
        self.p.close(10)


class LibrdkafkaClient:
    name = "librdkafka"

    def __init__(self, bootstrap: str, topic: str, delivery_timeout_ms: Optional[int] = None) -> None:
        import confluent_kafka

        self.topic = topic
        extra = {} if delivery_timeout_ms is None else {"message.timeout.ms": delivery_timeout_ms,
                                                         "request.timeout.ms": delivery_timeout_ms // 2}
        self.p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                           "request.timeout.ms": REQUEST_TIMEOUT_MS, "linger.ms": 5,
                                           "partitioner": "murmur2_random", **extra})   # kwire's (Java's) partitioner

    def send(self, seq: int, done: Callable[[int, int, Optional[BaseException]], None]) -> None:
        import confluent_kafka

        def cb(err, msg):
            done(msg.partition(), msg.offset(), confluent_kafka.KafkaException(err) if err is not None else None)
        while True:
            try:
                self.p.produce(self.topic, b"%d" % seq, key=_key(seq), on_delivery=cb)
                break
            except BufferError:              # the local queue is full (a leader is down): wait for room
                self.p.poll(0.05)
        self.p.poll(0)

    def poll(self) -> None:
        self.p.poll(0)

    def finish(self, timeout: float) -> None:
        left = self.p.flush(timeout)
        assert left == 0, f"librdkafka: {left} records neither delivered nor failed after {timeout} s"

    def close(self) -> None:
        self.p.flush(10)


# ---- the run ----

def _topic(cluster) -> str:
    name = f"faults-{uuid.uuid4().hex[:8]}"
    with cluster.admin() as a:
        a.create_topics([NewTopic(name, PARTITIONS, 3, {"min.insync.replicas": "2"})])
    for p in range(PARTITIONS):
        cluster.wait_until_isr(name, p, 3, timeout=30)
    return name


def _inject(cluster, topic: str, fault: str, rnd: int, run: Run, release: Callable[[], int]) -> None:
    """One round: fault the leader of partition ``rnd % 3``, release the records sent meanwhile, recover."""
    with cluster.admin() as a:
        parts = cluster.partitions(topic, a)
    victim_id = parts[rnd % PARTITIONS].leader
    led = tuple(p for p, info in parts.items() if info.leader == victim_id)
    node = cluster.broker(victim_id)
    if fault == "kill":
        node.kill()                  # returns once the process is gone
    elif fault == "pause":
        node.pause()                 # returns once it is stopped
    elif fault == "partition":
        node.black_hole()
    t0 = time.monotonic()            # the fault is in effect from here (a shutdown: begins here)
    first = release()
    run.faults.append((t0, led, first))
    if fault == "shutdown":
        node.stop()                  # SIGTERM, waited for: leadership moves away before the node goes

    def moved():
        return all(cluster.leader_of(topic, p) not in (-1, victim_id) for p in led)
    if fault in ("kill", "shutdown"):
        cluster.wait_until(f"round {rnd}: a new leader for {led}", moved, FAULT_DEADLINE)
        time.sleep(HOLD_DOWN)
        node.restart(cluster)
    elif fault == "pause":
        try:
            cluster.wait_until(f"round {rnd}: a new leader for {led}", moved, FAULT_DEADLINE)
        finally:
            node.resume()
        cluster.wait_for_node(node)
    else:
        time.sleep(max(0.0, t0 + PARTITION_HOLD - time.monotonic()))
        node.heal()
    for p in range(PARTITIONS):
        cluster.wait_until_isr(topic, p, 3, timeout=FAULT_DEADLINE)


def _run(cluster, client_cls, fault: str, records: int, rounds: int,
         delivery_timeout_ms: Optional[int] = None) -> Tuple[Run, str]:
    topic = _topic(cluster)
    client = client_cls(cluster.bootstrap, topic, delivery_timeout_ms)
    run = Run(client.name, fault, [None] * records)
    allowed = [0]
    sent = [0]
    cond = threading.Condition()
    failure: List[BaseException] = []

    def done_for(seq):
        def done(partition, offset, err):
            run.outcomes[seq] = Outcome(partition, offset, err, time.monotonic())
        return done

    def sender():
        try:
            for seq in range(records):
                with cond:
                    while seq >= allowed[0]:
                        client.poll()
                        cond.wait(0.05)
                try:
                    client.send(seq, done_for(seq))
                except Exception as e:  # noqa: BLE001 - a send that raises is a failed record: kept with its reason
                    run.outcomes[seq] = Outcome(error=e, at=time.monotonic())
                    run.send_errors += 1
                with cond:
                    sent[0] = seq + 1
                    cond.notify_all()
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            failure.append(e)

    def release(n: int) -> int:
        """Let ``n`` more records go; returns the first sequence number that may send now."""
        with cond:
            first = sent[0]
            allowed[0] = min(records, allowed[0] + n)
            cond.notify_all()
            return first

    def wait_sent(deadline: float) -> None:
        with cond:
            while sent[0] < allowed[0] and not failure:
                assert time.monotonic() < deadline, f"{client.name}: {sent[0]} of {allowed[0]} sent by the deadline"
                cond.wait(0.1)

    chunk = run.chunk = max(1, records // (2 * rounds + 1))
    t_start = time.monotonic()
    deadline = t_start + RUN_DEADLINE
    thread = threading.Thread(target=sender, name=f"sender-{client.name}", daemon=True)
    thread.start()
    try:
        for rnd in range(rounds):
            release(chunk)
            wait_sent(deadline)                       # this round's first half went out before the fault
            _inject(cluster, topic, fault, rnd, run, lambda: release(chunk))
        release(records)
        thread.join(max(0.0, deadline - time.monotonic()))
        assert not thread.is_alive(), f"{client.name}: the sender did not finish in {RUN_DEADLINE:g} s"
        if failure:
            raise failure[0]
        client.finish(max(1.0, deadline - time.monotonic()))
    finally:
        with cond:
            allowed[0] = records            # a failed round must not leave the sender waiting
            cond.notify_all()
        thread.join(30)
        client.close()
    run.elapsed = time.monotonic() - t_start
    return run, topic


def _read_back(cluster, topic: str) -> Dict[int, List[Tuple[int, bytes, bytes]]]:
    """Every record of every partition, (offset, key, value) in log order, by confluent-kafka's consumer."""
    import confluent_kafka

    c = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                  "enable.partition.eof": True})
    try:
        # retried: just after a fault the consumer's metadata may name a former leader (NOT_LEADER)
        ends = cluster.wait_until(f"{topic}'s end offsets", lambda: {
            p: c.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), timeout=10)[1]
            for p in range(PARTITIONS)}, 60)
        c.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        # by offset: a record the reader is handed twice (a fetch repeated after a leader change)
        # is one record of the log, not a duplicate; the same value at two offsets is
        by_offset: Dict[int, dict] = {p: {} for p in range(PARTITIONS)}
        nxt = {p: 0 for p in range(PARTITIONS)}
        deadline = time.monotonic() + 120
        while any(nxt[p] < ends[p] for p in nxt):
            assert time.monotonic() < deadline, f"read back: {[(p, nxt[p], ends[p]) for p in nxt]}"
            for m in c.consume(10000, 1.0):
                if m.error() is None:
                    by_offset[m.partition()][m.offset()] = (m.key(), m.value())
                    nxt[m.partition()] = max(nxt[m.partition()], m.offset() + 1)
                elif m.error().code() != confluent_kafka.KafkaError._PARTITION_EOF:
                    raise confluent_kafka.KafkaException(m.error())
        return {p: [(o, *recs[o]) for o in sorted(recs)] for p, recs in by_offset.items()}
    finally:
        c.close()


def _check(run: Run, log: Dict[int, list]) -> dict:
    """The figures of a run against its log; see the module doc."""
    seen = collections.Counter()
    where: Dict[int, Tuple[int, int]] = {}
    out_of_order = 0
    foreign = 0
    for p, records in log.items():
        last = -1
        for offset, key, value in records:
            seq = int(value)
            if key != _key(seq):
                foreign += 1
            seen[seq] += 1
            where.setdefault(seq, (p, offset))
            if seq < last:
                out_of_order += 1
            last = max(last, seq)
    acked = [s for s, o in enumerate(run.outcomes) if o is not None and o.error is None]
    failed = [s for s, o in enumerate(run.outcomes) if o is not None and o.error is not None]
    unfinished = [s for s, o in enumerate(run.outcomes) if o is None]
    lost = [s for s in acked if seen[s] == 0]
    misplaced = [s for s in acked if seen[s] and where[s] != (run.outcomes[s].partition, run.outcomes[s].offset)]
    duplicated = sum(n - 1 for n in seen.values() if n > 1)
    dup_acked = sum(seen[s] - 1 for s in acked if seen[s] > 1)
    dup_examples = {s: [(p, o) for p, recs in log.items() for o, _, v in recs if int(v) == s]
                    for s in sorted(s for s, n in seen.items() if n > 1)[:3]}
    unexplained = [s for s in failed if not str(run.outcomes[s].error)]
    reasons = collections.Counter(f"{type(run.outcomes[s].error).__name__}: {str(run.outcomes[s].error)[:120]}"
                                  for s in failed)
    # the first acknowledgment of a record sent after each fault, on each partition the faulted broker led
    # (not of one sent before: its answer may have been on its way, or, librdkafka, its callback not yet served)
    delays = []
    backlog = []          # records sent before the fault, acknowledged after it (the first ack waits behind them)
    gaps = []
    for t_fault, led, first in run.faults:
        for p in led:
            after = [o.at for o in run.outcomes[first:] if o is not None and o.error is None and o.partition == p]
            delays.append(min(after) - t_fault if after else float("inf"))
            backlog.append(sum(1 for o in run.outcomes[:first] if o is not None and o.partition == p and o.at > t_fault))
            # the partition's outage as the application sees it: the longest time without an
            # acknowledgment, from the fault until the last record released at the fault (the round's
            # second half) is acknowledged; the client has records waiting throughout that window, so
            # a gap is the fault's, whether the client had a large backlog or a small one
            chunk = [o.at for o in run.outcomes[first:first + run.chunk] if o is not None and o.error is None
                     and o.partition == p]
            if chunk:
                until = max(chunk)
                times = sorted([t_fault] + [o.at for o in run.outcomes if o is not None and o.error is None
                                            and o.partition == p and t_fault < o.at <= until])
                gaps.append(max(b - a for a, b in zip(times, times[1:])))
            else:
                gaps.append(float("inf"))
    return {"records": len(run.outcomes), "rounds": len(run.faults), "acked": len(acked), "failed": len(failed),
            "failed_in_log": sum(1 for s in failed if seen[s]), "unfinished": len(unfinished), "lost": len(lost),
            "duplicated": duplicated, "duplicated_acked": dup_acked, "out_of_order": out_of_order, "misplaced": len(misplaced), "foreign": foreign,
            "unexplained_failures": len(unexplained), "reasons": dict(reasons.most_common(5)),
            "first_ack_p50_s": statistics.median(delays) if delays else None,
            "first_ack_max_s": max(delays) if delays else None, "seconds": getattr(run, "elapsed", 0.0),
            "backlog_p50": int(statistics.median(backlog)) if backlog else 0,
            "ack_gap_p50_s": statistics.median(gaps) if gaps else None, "ack_gap_max_s": max(gaps) if gaps else None,
            "examples": {"lost": lost[:5], "misplaced": misplaced[:5], "unfinished": unfinished[:5],
                         "duplicated": dup_examples}}


def _scenario(cluster, client_cls, fault: str, rounds: int = ROUNDS, records: int = RECORDS,
              delivery_timeout_ms: Optional[int] = None) -> dict:
    run, topic = _run(cluster, client_cls, fault, records, rounds, delivery_timeout_ms)
    figures = _check(run, _read_back(cluster, topic))
    RESULTS[(fault, run.client)] = figures
    sys.stderr.write(f"\n[faults] {fault} / {run.client}: {figures}\n")
    return figures


def _assert_sound(f: dict) -> None:
    assert f["lost"] == 0, f
    assert f["duplicated"] == 0, f
    assert f["out_of_order"] == 0, f
    assert f["misplaced"] == 0, f
    assert f["foreign"] == 0, f
    assert f["unfinished"] == 0, f
    assert f["unexplained_failures"] == 0, f
    assert f["first_ack_max_s"] != float("inf"), f          # each faulted partition was written again after its fault


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    if RESULTS:
        rows = [f"{'fault':<10} {'client':<11} {'records':>8} {'rounds':>6} {'acked':>8} {'failed':>6} {'lost':>5} "
                f"{'dup':>4} {'order':>5} {'gap p50 s':>9} {'gap max s':>9} {'ack p50 s':>9} {'ack max s':>9} "
                f"{'backlog':>8} {'run s':>6}"]
        for (fault, client), f in sorted(RESULTS.items()):
            rows.append(f"{fault:<10} {client:<11} {f['records']:>8} {f['rounds']:>6} {f['acked']:>8} {f['failed']:>6} "
                        f"{f['lost']:>5} {f['duplicated']:>4} {f['out_of_order']:>5} {f['ack_gap_p50_s']:>9.2f} "
                        f"{f['ack_gap_max_s']:>9.2f} {f['first_ack_p50_s']:>9.2f} "
                        f"{f['first_ack_max_s']:>9.2f} {f['backlog_p50']:>8} {f['seconds']:>6.1f}")
        sys.stderr.write("\n[faults] fault -> first acknowledged send after it, per faulted partition\n"
                         + "\n".join(rows) + "\n")


@pytest.mark.parametrize("client_cls", [KwireClient, LibrdkafkaClient], ids=["kwire", "librdkafka"])
def test_leader_killed(kafka_cluster, client_cls):
    _assert_sound(_scenario(kafka_cluster, client_cls, "kill"))


@pytest.mark.parametrize("client_cls", [KwireClient, LibrdkafkaClient], ids=["kwire", "librdkafka"])
def test_leader_shut_down(kafka_cluster, client_cls):
    _assert_sound(_scenario(kafka_cluster, client_cls, "shutdown", rounds=max(1, ROUNDS // 2)))


@pytest.mark.parametrize("client_cls", [KwireClient, LibrdkafkaClient], ids=["kwire", "librdkafka"])
def test_leader_hung(kafka_cluster, client_cls):
    _assert_sound(_scenario(kafka_cluster, client_cls, "pause", rounds=max(1, ROUNDS // 2)))


@pytest.mark.parametrize("client_cls", [KwireClient, LibrdkafkaClient], ids=["kwire", "librdkafka"])
def test_leader_partitioned(kafka_cluster, client_cls):
    _assert_sound(_scenario(kafka_cluster, client_cls, "partition", rounds=max(1, ROUNDS // 2)))


# ---- KIP-794: partitioner_availability_timeout_ms under a real stall ----

def test_keyless_records_avoid_a_stalled_leader_and_return_after_it_heals(kafka_cluster):
    """A topic of 3 partitions, each led by another node; a producer with
    ``partitioner_availability_timeout_ms=1000`` sends keyless records every
    few milliseconds. The proxy of partition 1's leader black-holes the
    client's connections (the leader stays the leader: replication goes on):
    its requests are not answered, its batches wait, and from a second or so
    on new records go to partitions 0 and 2 only. Once healed, partition 1
    takes records again, and every record is acknowledged."""
    cluster = kafka_cluster
    topic = f"avail-{uuid.uuid4().hex[:8]}"
    with cluster.admin() as a:
        a.create_topics([NewTopic(topic, replica_assignment={0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]})])
    for p in range(PARTITIONS):
        cluster.wait_until_isr(topic, p, 3, timeout=30)
    sent: List[Tuple[float, object]] = []       # (when, future)

    def send_for(p: Producer, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            sent.append((time.monotonic(), p.send(topic, b"x" * 100)))
            time.sleep(0.003)

    def partitions(t0: float, t1: float) -> collections.Counter:
        return collections.Counter(f._batch.partition for t, f in sent if t0 <= t < t1)

    with Producer(bootstrap_servers=cluster.bootstrap, linger_ms=5, batch_size=1000, request_timeout_ms=30000,
                  partitioner_availability_timeout_ms=1000) as p:
        for part in range(PARTITIONS):          # each partition has had a batch: the queues are measured
            p.send(topic, b"x", partition=part)
        p.flush(30)
        send_for(p, 1.0)
        leader = p._client.cluster.leader_for(topic, 1)
        node = cluster.broker(leader)
        node.black_hole()
        stalled = time.monotonic()
        try:
            send_for(p, 4.0)
        finally:
            node.heal()
        healed = time.monotonic()
        send_for(p, 3.0)
        p.flush(60)
        during, after = partitions(stalled + 2.0, healed), partitions(healed + 1.0, time.monotonic())
        print(f"stalled leader {leader}: records per partition from 2 s into the stall {dict(during)}, "
              f"from 1 s after the heal {dict(after)}")
        assert during[1] == 0 and during[0] > 0 and during[2] > 0
        assert after[1] > 0
        assert all(f.get(0).offset >= 0 for _, f in sent)
