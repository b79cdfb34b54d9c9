"""``deliveryGuarantee=exactly-once`` (kwire.spark.exactly_once) through
the death of a process that holds a piece of the two-phase commit:

* **an executor mid-write** (a Spark standalone cluster of two one-core
  workers, the ``standalone`` and ``cluster_driver`` fixtures of
  tests/spark/conftest.py, on the session's Apache Kafka): an availableNow
  query reads a source topic of 3 partitions (``maxOffsetsPerTrigger``: 3
  micro-batches) through a ``mapInArrow`` pass into the kwire sink, exactly
  once. One task of micro-batch 1 stalls in its first attempt after
  passing on part of its rows; once the target's log holds some of them
  (read_uncommitted) that a read_committed reader does not show (its open
  transaction), its executor's JVM is SIGKILLed (its Python workers die
  with it, the transaction left open; in every other round of a long run,
  the task's mapInArrow Python worker instead). Spark runs the task again (its
  ``InitProducerId`` aborts the dead attempt's transaction), the query
  ends, and a read_committed reader sees each source value once, while the
  log holds the aborted rows too (the proof that the kill came mid-write).
* **a broker during the commit** (``cluster``: the three-node cluster,
  tests/support/kafka_cluster.py): the task's half (:func:`prepare`) for
  ``TASKS`` task identities of one micro-batch, no Spark needed; then the
  transaction coordinator of one of their transactional ids (or, second
  case, the leader of a target partition) SIGKILLed; then the driver's half
  (:func:`commit`), which must end every transaction, its EndTxn retried
  through the coordinator's move, within ``END_TIMEOUT``. A read_committed
  reader (before the broker is back) sees each row once, each task's marker
  says the batch, and the batch prepared again writes nothing. In
  transaction protocol v2 (Apache Kafka 4.4's own) and, the coordinator
  case, v1 (the cluster's ``transaction.version`` downgraded for the test:
  tests/support/features.py).

* **a partition leader mid-write** (``cluster``, long runs only): a
  streaming query of tests/spark/eos_query.py (its rows paced) on
  replicated topics of the three-node cluster; the leader of a target
  partition SIGKILLed once its first rows are in the log; the query runs
  on to its end through the move: each value once.

With --long or ``KWIRE_EOS_ROUNDS`` above 1, Spark's own sink
(``format("kafka")``, at least once) runs A and C as the contrast, its
duplicates counted.

Each runs ``KWIRE_EOS_ROUNDS`` rounds (1 by default, CI's; each round its
own topics and transactional ids). The tests marked ``cluster`` run in the
cluster's xdist unit (tests/conftest.py, MARKED_UNITS), not beside it.

Long run (outside CI): ``KWIRE_EOS_ROUNDS=4 pytest -s <this file>``. Its
figures on the 2-core development machine (loaded by other work; Kafka
4.4.0, PySpark 4.2.0), "kill to end" from the SIGKILL to the query's end
(A) or to commit()'s return (B); every round: nothing missing, nothing twice:

=============================  ======  ===============  ===============
fault                          rounds  kill to end p50  kill to end max
=============================  ======  ===============  ===============
A executor JVM                 2       2.5 s            2.7 s
A the task's Python worker     2       4.9 s            6.1 s
B coordinator, protocol v2     4       8.4 s            10.6 s
B coordinator, protocol v1     4       7.8 s            9.6 s
B partition leader, v2         4       6.7 s            8.3 s
C partition leader, kwire      2       19.7 s           19.7 s
C partition leader, Spark's    2       15.7 s           17.8 s
=============================  ======  ===============  ===============

(C: to the query's end, the rest of its paced writes included.) Spark's
sink repeated 30 of A's 900 values each round (the rows the killed attempt
had sent), and none of C's 3,000 (its producer is idempotent).

In A, 20 of the victim's rows were in the log, uncommitted, at each kill
(aborted later); after a JVM kill the query ended on the surviving
executor before the worker's relaunched one had registered. In B, most of
the time is the brokers' session timeout (6 s) before another broker takes
the dead one's partitions. CI's single round: A about 65 s (its standalone
cluster and driver about 25 s of it), B about 70 s (the cluster's start 13 s
of it, the three cases about 18 s each).
"""

from __future__ import annotations

import collections
import json
import os
import signal as signal_module
import statistics
import time
import uuid
from pathlib import Path
from typing import Callable, Dict, Iterator, List

import pyarrow as pa
import pytest

from kwire.consumer import Consumer
from kwire.producer import Producer
from kwire.spark import exactly_once
from kwire.spark.exactly_once import Prepared, TaskIdentity, marker_batch
from kwire.spark.options import parse_sink_options
from support.features import transaction_version

from support.spark_cluster import Driver
from support.spark_connector import connector_jars

from .conftest import new_topic, start_cluster_driver
from .test_exactly_once import read_values
from .test_exactly_once_faults import RUN_TIMEOUT, Query

ROUNDS = int(os.environ.get("KWIRE_EOS_ROUNDS", "1"))
#: The contrasts with Spark's sink (and the leader killed mid-write) run with --long or more rounds.
LONG = bool(os.environ.get("KWIRE_LONG")) or ROUNDS > 1
FAULT_DEADLINE = 90.0          # seconds for a killed broker to be back and the cluster whole


def _exactly_once(values: List[bytes], expected: List[bytes]) -> Dict[str, list]:
    """What a reader's ``values`` lack of ``expected`` and what they hold more than once (or not expected)."""
    counts = collections.Counter(values)
    return {"missing": sorted(set(expected) - set(counts)),
            "duplicated": sorted(v for v, n in counts.items() if n > 1),
            "unexpected": sorted(set(counts) - set(expected))}


def _rounds(what: str, one: Callable[[int], Dict[str, float]]) -> None:
    """``one(round)`` for each of the ``KWIRE_EOS_ROUNDS`` rounds; their figures printed (``-s`` shows them)."""
    figures = [one(rnd) for rnd in range(ROUNDS)]
    took = [f["kill_to_end_s"] for f in figures]
    print(f"\n[eos-cluster] {what}: {ROUNDS} rounds, from the kill to the end: median {statistics.median(took):.1f} s, "
          f"max {max(took):.1f} s; each round: {figures}")


# ------------------------------------------------ A: an executor killed mid-write
SOURCE_PARTITIONS = 3
PER_PARTITION = 300            # source values per partition
PER_TRIGGER = 300              # maxOffsetsPerTrigger (of all partitions): 3 micro-batches of 100 values a partition
VALUE_PAD = 8000               # bytes per value: an Arrow batch outgrows the 64 KiB buffers between
                               # Spark and its Python workers, so each is passed on at once
ARROW_ROWS = 10                # rows per Arrow batch, through mapInArrow and into the sink
VICTIM_BATCH, VICTIM_PARTITION, VICTIM_AFTER = 1, 0, 4    # the task that stops after that many Arrow batches
#: What each round kills, in turn: the task's executor JVM (its Python workers die with it), or
#: the task's mapInArrow Python worker (the executor lives; it kills the task's other workers,
#: the sink's among them, as the task fails)
KILLED = ("jvm", "python")
QUERIES: Dict[str, object] = {}                            # the driver's running queries, by id


def _source_value(i: int) -> bytes:
    return b"%06d|" % i + b"x" * VALUE_PAD


def job_start_query(spark, bootstrap: str, source: str, target: str, checkpoint: str, signal: str,
                    sink: str = "kwire") -> str:
    """(In the driver.) An availableNow query from ``source`` through a
    mapInArrow pass to the kwire sink (exactly once) on ``target``, or to
    Spark's (``sink="kafka"``, at least once: the contrast). The
    first attempt of the victim task (``VICTIM_*``) writes ``signal`` (its
    Python worker's and executor JVM's pids) after passing on
    ``VICTIM_AFTER`` Arrow batches, then stops there until it is killed."""
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(ARROW_ROWS))
    batch, part, after = str(VICTIM_BATCH), VICTIM_PARTITION, VICTIM_AFTER

    def claimed(tc) -> bool:
        """Whether this is the victim's first attempt (the first to make ``signal``'s claim file);
        if so, ``signal`` written: this Python worker's pid and the executor JVM's above it."""
        import json
        import os

        try:
            os.close(os.open(signal + ".claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        pid = os.getpid()
        while True:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            if stat[stat.index("(") + 1:stat.rindex(")")] == "java":
                break
            pid = int(stat[stat.rindex(")") + 2:].split()[1])
        with open(signal + ".tmp", "w") as f:
            json.dump({"python": os.getpid(), "jvm": pid, "attempt": tc.attemptNumber()}, f)
        os.rename(signal + ".tmp", signal)
        return True

    def stall(batches):
        """The mapInArrow pass. Nested, as ``claimed``: cloudpickle sends them by value (the
        executors cannot import this module)."""
        import time

        from pyspark import TaskContext

        tc = TaskContext.get()
        victim = tc.getLocalProperty("streaming.sql.batchId") == batch and tc.partitionId() == part
        for i, b in enumerate(batches, 1):
            yield b
            if victim and i == after and claimed(tc):
                time.sleep(600)                            # until killed

    df = (spark.readStream.format("kwire").option("kafka.bootstrap.servers", bootstrap).option("subscribe", source)
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", str(PER_TRIGGER)).load()
          .select("value").mapInArrow(stall, "value binary"))
    writer = (df.writeStream.format(sink).option("kafka.bootstrap.servers", bootstrap).option("topic", target)
              .option("checkpointLocation", checkpoint))
    if sink == "kwire":
        writer = writer.option("deliveryGuarantee", "exactly-once")
    q = writer.trigger(availableNow=True).start()
    QUERIES[str(q.id)] = q
    return str(q.id)


def job_finish_query(spark, query_id: str, seconds: float) -> Dict[str, object]:
    """(In the driver.) Waits for the query to end; its micro-batches and the executors now alive."""
    q = QUERIES.pop(query_id)
    try:
        if not q.awaitTermination(seconds):
            raise TimeoutError(f"query {query_id} still running after {seconds:g} s: {q.status}")
    finally:
        q.stop()
    sc = spark.sparkContext
    return {"batches": sorted({p["batchId"] for p in q.recentProgress}),
            "rows": sum(p["numInputRows"] for p in q.recentProgress),
            "executors": sc._jsc.sc().getExecutorMemoryStatus().size() - 1}


def job_executors(spark, want: int, seconds: float) -> int:
    """(In the driver.) Waits until ``want`` executors are registered (a killed one relaunched by its worker)."""
    deadline = time.monotonic() + seconds
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus
    while status().size() - 1 < want and time.monotonic() < deadline:
        time.sleep(0.2)
    return status().size() - 1


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    return int(stat[stat.rindex(")") + 2:].split()[1])


def _wait_for(what: str, check: Callable[[], object], timeout: float, driver) -> object:
    """``check()``'s first true answer; failing after ``timeout`` with the driver's log."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s; the driver's log ends:\n" \
                                            f"{driver.log_tail()}"
        time.sleep(0.25)


def _ids(values: List[bytes]) -> List[bytes]:
    """Each value's id (its first 6 bytes), once the value is checked to be whole."""
    assert all(v == _source_value(int(v[:6])) for v in values), "a value changed on its way"
    return [v[:6] for v in values]


def _victim_rows(bootstrap: str, target: str, sink: str) -> Callable[[], List[bytes]]:
    """A check: the victim task's rows (its source partition, its micro-batch) that the target's log
    holds (read_uncommitted) but a read_committed reader does not show: written, in an open
    transaction (Spark's sink, ``"kafka"``: that the log holds)."""
    lo, hi = VICTIM_BATCH * PER_TRIGGER // SOURCE_PARTITIONS, (VICTIM_BATCH + 1) * PER_TRIGGER // SOURCE_PARTITIONS
    mine = {b"%06d" % (SOURCE_PARTITIONS * n + VICTIM_PARTITION) for n in range(lo, hi)}

    def check() -> List[bytes]:
        written = set(_ids(read_values(bootstrap, target, 3, committed=False, settle=0))) & mine
        if sink == "kafka":
            return sorted(written)
        return sorted(written - set(_ids(read_values(bootstrap, target, 3, settle=0)))) if written else []
    return check


def _executor_round(standalone, driver, bootstrap: str, where: Path, rnd: int, sink: str) -> Dict[str, float]:
    assert driver.call(f"{__name__}:job_executors", want=2, seconds=90) == 2
    source, target = new_topic(bootstrap, SOURCE_PARTITIONS, "eos-src"), new_topic(bootstrap, 3, "eos-dst")
    total = SOURCE_PARTITIONS * PER_PARTITION
    with Producer(bootstrap_servers=bootstrap, linger_ms=5) as p:
        for i in range(total):
            p.send(source, _source_value(i), partition=i % SOURCE_PARTITIONS)
        p.flush()
    signal = where / f"victim-{rnd}-{sink}.json"
    qid = driver.call(f"{__name__}:job_start_query", bootstrap=bootstrap, source=source, target=target,
                      checkpoint=str(where / f"checkpoint-{rnd}-{sink}"), signal=str(signal), sink=sink)
    _wait_for("the victim task stalled mid-write", signal.exists, 180, driver)
    pids = json.loads(signal.read_text())
    assert pids["attempt"] == 0 and _parent(pids["jvm"]) in standalone.worker_pids, pids
    open_rows = _wait_for("the victim's rows in the target's log, not committed",
                          _victim_rows(bootstrap, target, sink), 60, driver)
    victim = KILLED[rnd % len(KILLED)]
    os.kill(pids[victim], signal_module.SIGKILL)
    t0 = time.monotonic()
    done = driver.call(f"{__name__}:job_finish_query", timeout=330, query_id=qid, seconds=300)
    took = time.monotonic() - t0
    assert done["batches"] == [0, 1, 2] and done["rows"] == total, done
    expected = [b"%06d" % i for i in range(total)]
    seen = _ids(read_values(bootstrap, target, 3))
    if sink == "kafka":
        return _contrast(seen, expected, victim=victim, kill_to_end_s=round(took, 1), sent_before_kill=len(open_rows))
    assert _exactly_once(seen, expected) == {"missing": [], "duplicated": [], "unexpected": []}
    raw = read_values(bootstrap, target, 3, committed=False)
    assert len(raw) > total, "the killed attempt's rows are not in the log: the kill came after the write"
    return {"killed": victim, "kill_to_end_s": round(took, 1), "open_rows": len(open_rows),
            "aborted_rows": len(raw) - total, "executors_after": done["executors"]}


def _contrast(seen: List[bytes], expected: List[bytes], **figures: object) -> Dict[str, object]:
    """Spark's sink's count (nothing may be missing or unexpected; what it repeats is counted)."""
    got = _exactly_once(seen, expected)
    assert got["missing"] == got["unexpected"] == [], got
    dup = sum(n - 1 for n in collections.Counter(seen).values() if n > 1)
    print(f"\n[eos-cluster] Spark's sink: {dup} duplicated of {len(expected)}; {figures}")
    return {"duplicated": dup, "of": len(expected), **figures}


@pytest.fixture(scope="class")
def eos_driver(standalone) -> Iterator[Driver]:
    """The standalone cluster's driver, with Spark's Kafka connector's jars for the contrast's runs."""
    jars = {"spark.jars": ",".join(connector_jars())} if LONG else {}
    driver = start_cluster_driver(standalone, jars)
    try:
        yield driver
    finally:
        driver.stop()


@pytest.mark.kafka
class TestExecutorKilled:
    def test_an_executor_killed_mid_write(self, standalone, eos_driver, kafka, tmp_path):
        """The executor JVM running a task whose rows are in the target's log, in its open
        transaction, is SIGKILLed (in every other round of a long run, the task's Python
        worker); Spark runs the task again, whose InitProducerId aborts the dead attempt's
        transaction; the query ends, and a read_committed reader sees each source value once."""
        bootstrap = kafka.bootstrap("plaintext")
        _rounds("a task's executor JVM or Python worker killed mid-write",
                lambda rnd: _executor_round(standalone, eos_driver, bootstrap, tmp_path, rnd, "kwire"))

    @pytest.mark.skipif(not LONG, reason="docs/guide/spark.md's contrast: with --long or KWIRE_EOS_ROUNDS")
    def test_spark_sink_repeats_a_killed_executors_rows(self, standalone, eos_driver, kafka, tmp_path):
        """The contrast: Spark's sink under the same kill keeps what the dead attempt sent, and
        the task's second attempt sends it again."""
        bootstrap = kafka.bootstrap("plaintext")
        dups = [_executor_round(standalone, eos_driver, bootstrap, tmp_path, rnd, "kafka") for rnd in range(ROUNDS)]
        assert all(d["duplicated"] > 0 for d in dups), dups


# ------------------------------------------------ B: a broker killed during the commit
TASKS = 4                      # task identities (Spark partitions) of the batch
ROWS = 60                      # rows per task, over the topic's 3 partitions
BATCH = 3                      # the micro-batch the tasks write


@pytest.fixture
def txn_protocol(request, kafka_cluster):
    """The cluster's transaction protocol for the test (``transaction.version``; 2 unless parametrized)."""
    with transaction_version(kafka_cluster.bootstrap, request.param) as level:
        yield level


def _task_rows(rnd: int, task: int) -> pa.RecordBatch:
    values = [b"r%d-t%d-%d" % (rnd, task, i) for i in range(ROWS)]
    return pa.record_batch([pa.array(values), pa.array([i % 3 for i in range(ROWS)], pa.int32())],
                           names=["value", "partition"])


def _read_committed(cluster, topic: str, want: int) -> List[bytes]:
    """Every value a read_committed consumer returns of ``topic``, read to its end (its last
    stable offset) once the end has ``want`` records or more before it (markers a moved
    partition leader has yet to write hold it back), or after ``FAULT_DEADLINE``."""
    tps = [(topic, p) for p in range(3)]
    with Consumer(bootstrap_servers=cluster.bootstrap, isolation_level="read_committed", enable_auto_commit=False,
                  group_id=None, request_timeout_ms=10000) as c:
        c.assign(tps)
        deadline = time.monotonic() + FAULT_DEADLINE
        ends = c.end_offsets(tps, timeout=30)
        while sum(ends.values()) < want and time.monotonic() < deadline:
            time.sleep(0.5)
            ends = c.end_offsets(tps, timeout=30)
        c.seek_to_beginning(*tps)
        out: List[bytes] = []
        while any(c.position(tp, timeout=30) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline + 60, f"read_committed of {topic} stuck before {ends}"
            out.extend(r.value for rs in c.poll(500).values() for r in rs)
    return out


def _victim(cluster, target: str, topic: str, prepared: List[Prepared], rnd: int) -> int:
    """The node to kill: the coordinator of one task's transactional id, or a target partition's leader."""
    if target == "coordinator":
        return cluster.transaction_coordinator(prepared[rnd % len(prepared)].transactional_id)
    return cluster.leader_of(topic, rnd % 3)


def _commit_round(cluster, target: str, rnd: int, expect_version: int) -> Dict[str, float]:
    topic, = cluster.replicated_topics("eos-commit")
    sink = parse_sink_options({"kafka.bootstrap.servers": cluster.bootstrap, "topic": topic,
                               "deliveryGuarantee": "exactly-once", "kafka.request.timeout.ms": "5000"})
    idents = [TaskIdentity(f"eos-{uuid.uuid4().hex[:8]}", task, BATCH) for task in range(TASKS)]
    prepared = [exactly_once.prepare(iter([_task_rows(rnd, t)]), sink, ident) for t, ident in enumerate(idents)]
    assert all(p.producer_id >= 0 and p.records == ROWS and p.transaction_version == expect_version
               for p in prepared), prepared
    node = cluster.broker(_victim(cluster, target, topic, prepared, rnd))
    node.kill()
    t0 = time.monotonic()
    assert exactly_once.commit(prepared, sink, BATCH) == TASKS * ROWS
    took = time.monotonic() - t0
    assert took < exactly_once.END_TIMEOUT
    expected = [b"r%d-t%d-%d" % (rnd, t, i) for t in range(TASKS) for i in range(ROWS)]
    seen = _read_committed(cluster, topic, len(expected))
    assert _exactly_once(seen, expected) == {"missing": [], "duplicated": [], "unexpected": []}
    with cluster.admin() as admin:
        assert [marker_batch(admin, i.transactional_id, 60) for i in idents] == [BATCH] * TASKS
    again = [exactly_once.prepare(iter([_task_rows(rnd, t)]), sink, i) for t, i in enumerate(idents)]
    assert all(p.already_committed and p.producer_id == -1 for p in again), again
    node.restart(cluster)
    cluster.check_healthy(FAULT_DEADLINE)
    return {"kill_to_end_s": round(took, 1)}


@pytest.mark.kafka
@pytest.mark.cluster
@pytest.mark.parametrize("txn_protocol, target", [(2, "coordinator"), (1, "coordinator"), (2, "leader")],
                         ids=["txv2-coordinator", "txv1-coordinator", "txv2-leader"], indirect=["txn_protocol"])
def test_commit_through_a_broker_kill(kafka_cluster, txn_protocol, target):
    """Every transaction of the batch committed by commit() although a broker it needs was
    SIGKILLed after the tasks wrote: each row visible once, each marker the batch."""
    _rounds(f"{target} killed, protocol v{txn_protocol}",
            lambda rnd: _commit_round(kafka_cluster, target, rnd, txn_protocol))


# ------------------------------------------------ C: a partition leader killed mid-write (long runs only)
PACE = 0.004                   # seconds a row waits in the query's projection: each task writes for about 2 s


def _leader_round(cluster, connector, where: Path, rnd: int, sink: str) -> Dict[str, object]:
    """A streaming query of tests/spark/eos_query.py (two micro-batches of
    1,500 rows, each task paced) into ``sink`` on the three-node cluster;
    the leader of one target partition SIGKILLed once the first rows are in
    the log; the query runs on to its end; the reader's count."""
    where.mkdir()
    q = Query(cluster.bootstrap, where, sink=sink, replication=3)
    q.produce()
    child = q.start(jars=connector, pace=str(PACE))
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        while not q.read(committed=False):
            assert child.proc.poll() is None and time.monotonic() < deadline, child.failure("no row written")
            time.sleep(0.2)
        node = cluster.broker(cluster.leader_of(q.target, rnd % 3))
        node.kill()
        t0 = time.monotonic()
        result = child.answer()
        took = round(time.monotonic() - t0, 1)
        assert result["failed"] is None, child.failure(f"the query failed: {result['failed']}")
    finally:
        child.close()
    node.restart(cluster)
    cluster.check_healthy(FAULT_DEADLINE)
    seen = collections.Counter(read_values(cluster.bootstrap, q.target, 3))
    missing, duplicated, unexpected = q.tally(got=seen)
    print(f"\n[eos-cluster] {sink} sink, a leader killed mid-write, round {rnd}: {missing} missing, {duplicated} "
          f"duplicated, {unexpected} unexpected of {q.produced}; kill to end {took} s", flush=True)
    return {"missing": missing, "duplicated": duplicated, "unexpected": unexpected, "kill_to_end_s": took}


@pytest.mark.kafka
@pytest.mark.cluster
@pytest.mark.skipif(not LONG, reason="a fresh Spark session a round (40 s): with --long or KWIRE_EOS_ROUNDS")
@pytest.mark.parametrize("sink", ["kwire", "kafka"])
def test_a_leader_killed_mid_write(kafka_cluster, tmp_path, sink):
    """A streaming query's target partition loses its leader while the
    tasks write. kwire's exactly-once sink: every value once. Spark's sink
    (the contrast): nothing lost; what its idempotent producer repeats (if
    anything) is counted."""
    figures = [_leader_round(kafka_cluster, tuple(connector_jars()), tmp_path / f"r{rnd}", rnd, sink)
               for rnd in range(ROUNDS)]
    assert all(f["missing"] == f["unexpected"] == 0 for f in figures), figures
    if sink == "kwire":
        assert all(f["duplicated"] == 0 for f in figures), figures
