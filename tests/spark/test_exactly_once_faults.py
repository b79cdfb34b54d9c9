"""``deliveryGuarantee=exactly-once`` (kwire.spark.exactly_once) under
faults, on Apache Kafka: a streaming query (tests/spark/eos_query.py, a
kwire source -> a projection (eos_query.projected) -> the sink,
Trigger.AvailableNow, two micro-batches of 1,500 of the 3,000 values each
round adds) run in a child process, whose task fails once, or whose driver is killed in the middle of
a batch's commit (``KWIRE_TEST_EXACTLY_ONCE_HOOK``) and which is then run
again from its checkpoint. A read_committed reader of the target topic
must then hold every source value exactly once, and each task's marker
group (``kwire-<query id>-<Spark partition>``) the last batch id + 1.

Spark's own sink (``format("kafka")``, at least once, as Spark documents)
under the same faults is the contrast: the tests count the duplicates it
leaves (and print them) and pass when there are some. They make the
docs/guide/spark.md's figures, and run with --long or ``KWIRE_EOS_ROUNDS`` (not in CI),
as does the driver killed after all of a batch's commits.

Each scenario runs ``KWIRE_EOS_ROUNDS`` rounds (default 1) on one query:
each round adds 3,000 values to the source and runs the query on. The
source has 3 partitions and value ``i`` goes to partition ``i % 3`` at
offset ``i // 3``, so each Spark partition of a batch (one per Kafka
partition) is known from Spark's offset log.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple

import pytest

from kwire.admin import Admin
from kwire.errors import KwireError
from kwire.producer import Producer
from kwire.spark.exactly_once import TEST_HOOK_ENV

from .conftest import new_topic
from .eos_query import ANSWER, projected
from .test_exactly_once import read_values

ROUNDS = int(os.environ.get("KWIRE_EOS_ROUNDS", "1"))
#: The driver killed after all commits and Spark's sink's contrasts run with --long or more rounds.
LONG = bool(os.environ.get("KWIRE_LONG")) or ROUNDS > 1
PARTITIONS = 3
PER_ROUND = 3000                     # values each round adds to the source
MAX_OFFSETS = 1500                   # per micro-batch: 500 of each partition, two batches a round
FAIL_AFTER = 300                     # rows a failing first attempt projects (of its 500)
SCRIPT = Path(__file__).with_name("eos_query.py")
ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT = 300.0


def value(i: int) -> str:
    return f"v{i:07d}"


def session_processes(sid: int) -> List[int]:
    """The live processes of session ``sid``: a child started with
    ``start_new_session`` and everything it started, the Python workers
    too (PySpark's worker daemon moves to a process group of its own,
    but stays in the session)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            out.append(int(d))
    return out


def kill_session(proc: subprocess.Popen, timeout: float = 30.0) -> None:
    """SIGKILL every process of ``proc``'s session until none is left."""
    deadline = time.monotonic() + timeout
    while True:
        left = session_processes(proc.pid)
        if not left:
            break
        assert time.monotonic() < deadline, f"session {proc.pid}: {left} survive SIGKILL"
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    proc.wait(timeout)


class Child:
    """One eos_query.py process (its own session: :func:`kill_session`
    ends it), its stdout read by a thread: the queries' results."""

    def __init__(self, log: Path, jars: Sequence[str] = (), env: Optional[Dict[str, str]] = None) -> None:
        child_env = {k: v for k, v in os.environ.items() if k != TEST_HOOK_ENV}
        child_env.update(PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{ROOT / 'tests'}", PYSPARK_PYTHON=sys.executable,
                         **(env or {}))
        self.log = log
        with open(log, "w") as err:
            self.proc = subprocess.Popen([sys.executable, str(SCRIPT), "--jars", ",".join(jars)], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err, env=child_env, cwd=log.parent, text=True,
                                         start_new_session=True)
        self.lines: "queue.Queue[str]" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def failure(self, why: str) -> str:
        return f"{why} (log {self.log}):\n{self.log.read_text()[-6000:]}"

    def submit(self, query: dict) -> None:
        self.proc.stdin.write(json.dumps(query) + "\n")
        self.proc.stdin.flush()

    def answer(self, timeout: float = RUN_TIMEOUT) -> dict:
        """The next query's result (the session's start waited for too)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(self.failure(f"no answer in {timeout:.0f} s")) from None
            if line.startswith(ANSWER):
                return json.loads(line[len(ANSWER):])

    def close(self) -> None:
        kill_session(self.proc)


class Query:
    """One query's topics and checkpoint, and its runs in child processes."""

    def __init__(self, bootstrap: str, tmp: Path, sink: str = "kwire", replication: int = 1) -> None:
        self.bootstrap, self.tmp, self.sink = bootstrap, tmp, sink
        self.source = new_topic(bootstrap, PARTITIONS, prefix="eos-src", replication=replication)
        self.target = new_topic(bootstrap, PARTITIONS, prefix="eos-out", replication=replication)
        self.checkpoint = tmp / "checkpoint"
        self.produced = 0
        self.runs = 0

    def produce(self, count: int = PER_ROUND) -> None:
        """``count`` more values, value ``i`` to partition ``i % 3``."""
        with Producer(bootstrap_servers=self.bootstrap, linger_ms=5) as p:
            for i in range(self.produced, self.produced + count):
                p.send(self.source, value(i).encode(), key=b"k%d" % i, partition=i % PARTITIONS)
            p.flush()
        self.produced += count

    # ---------------------------------------------------------------- runs
    def spec(self, **faults: str) -> dict:
        """The query as eos_query.py takes it (its QUERY_KEYS)."""
        return dict(bootstrap=self.bootstrap, source=self.source, target=self.target, partitions=PARTITIONS,
                    sink=self.sink, checkpoint=str(self.checkpoint), max_offsets=MAX_OFFSETS, **faults)

    def run(self, runner: Child, **faults: str) -> dict:
        """A run to its end in ``runner``: its result (it must succeed)."""
        self.runs += 1
        runner.submit(self.spec(**faults))
        result = runner.answer()
        assert result["failed"] is None, runner.failure(f"the query failed: {result['failed']}")
        return result

    def start(self, env: Optional[Dict[str, str]] = None, jars: Sequence[str] = (), **faults: str) -> Child:
        """A run in a child of its own (to be killed)."""
        self.runs += 1
        child = Child(self.tmp / f"run-{self.runs}.log", jars, env)
        child.submit(self.spec(**faults))
        return child

    def run_until(self, signal_file: Path, env: Optional[Dict[str, str]] = None, **faults: str) -> dict:
        """A run in a child of its own, killed (its whole session) once
        ``signal_file`` appears: the file's JSON."""
        child = self.start(env, **faults)
        try:
            deadline = time.monotonic() + RUN_TIMEOUT
            while not signal_file.exists() or not signal_file.read_text().endswith("}"):
                assert child.proc.poll() is None, child.failure(f"the query ended before {signal_file.name}")
                assert time.monotonic() < deadline, child.failure(f"no {signal_file.name}")
                time.sleep(0.1)
            return json.loads(signal_file.read_text())
        finally:
            child.close()

    # ------------------------------------------------------------ checkpoint
    def last_batch(self) -> int:
        """The last batch Spark's commit log has (-1: none)."""
        commits = self.checkpoint / "commits"
        return max((int(f) for f in os.listdir(commits) if f.isdigit()), default=-1) if commits.exists() else -1

    def batch_end(self, batch: int) -> Dict[int, int]:
        """Kafka partition -> the end offset of ``batch`` (Spark's offset log); zeros before batch 0."""
        if batch < 0:
            return {p: 0 for p in range(PARTITIONS)}
        lines = (self.checkpoint / "offsets" / str(batch)).read_text().splitlines()
        return {int(p): o for p, o in json.loads(lines[-1])[self.source].items()}

    def query_id(self) -> str:
        return json.loads((self.checkpoint / "metadata").read_text())["id"]

    def markers(self, stable: bool = True) -> List[Optional[int]]:
        """Each Spark partition's marker: the last batch its transactions
        committed (``stable``: a marker a transaction still holds waited
        for, as the tasks read them; else passed over: the driver killed
        mid-commit leaves transactions open for up to 15 minutes)."""
        out = []
        with Admin(bootstrap_servers=self.bootstrap) as admin:
            for p in range(PARTITIONS):
                got = admin.list_group_offsets(f"kwire-{self.query_id()}-{p}", timeout=30.0, require_stable=stable)
                out.append(max(om.offset for om in got.values()) - 1 if got else None)
        return out

    # ---------------------------------------------------------------- checks
    def read(self, committed: bool = True) -> Counter:
        """The target's values (read_committed, or read_uncommitted), each with its count."""
        return Counter(read_values(self.bootstrap, self.target, PARTITIONS, committed, settle=0))

    def tally(self, expected: Optional[Set[int]] = None, committed: bool = True,
              got: Optional[Counter] = None) -> Tuple[int, int, int]:
        """(missing, duplicated, unexpected) of the target (or ``got``)
        against the values ``expected`` (by default every value produced)."""
        want = Counter(projected(value(i)).encode() for i in (range(self.produced) if expected is None else expected))
        got = self.read(committed) if got is None else got
        missing = sum(1 for v in want if v not in got)
        duplicated = sum(n - 1 for v, n in got.items() if v in want and n > 1)
        unexpected = sum(n for v, n in got.items() if v not in want)
        return missing, duplicated, unexpected


def unstable_marker_named(q: Query, partition: int) -> None:
    """A stable read of a marker that a transaction the killed driver left
    open holds (the marker's partition asked for: a group's listing leaves
    out a partition whose only offset is pending): waited for, then the
    broker's answer raised (UNSTABLE_OFFSET_COMMIT), not a timeout of the
    last try. (A task never meets this: its InitProducerId, before it reads
    its marker, ends the transaction.)"""
    with Admin(bootstrap_servers=q.bootstrap) as admin:
        with pytest.raises(KwireError, match="UNSTABLE_OFFSET_COMMIT"):
            admin.list_group_offsets(f"kwire-{q.query_id()}-{partition}", [(q.target, 0)], timeout=2.0,
                                     require_stable=True)


def visible_after(q: Query, batch: int, committed_partitions: int) -> Set[int]:
    """The values a read_committed reader sees when ``batch`` committed
    only its first ``committed_partitions`` Spark partitions: every value of
    the batches before, and those partitions' values of ``batch``."""
    before, end = q.batch_end(batch - 1), q.batch_end(batch)
    return {i for i in range(q.produced)
            if i // PARTITIONS < before[i % PARTITIONS]
            or (i % PARTITIONS < committed_partitions and i // PARTITIONS < end[i % PARTITIONS])}


def timed(label: str, started: float) -> None:
    print(f"{label}: {time.monotonic() - started:.1f} s", flush=True)


@pytest.fixture(scope="module")
def connector() -> Tuple[str, ...]:
    """The jars of Spark's own Kafka connector (``format("kafka")``)."""
    from support.spark_connector import connector_jars

    return tuple(connector_jars())


@pytest.fixture(scope="module")
def runner(tmp_path_factory, connector) -> Iterator[Child]:
    """One child for this module's runs that are not killed."""
    child = Child(tmp_path_factory.mktemp("eos-runner") / "runner.log", connector)
    try:
        yield child
    finally:
        child.close()


# ------------------------------------------------------------------- kwire
def test_a_task_failing_once_writes_each_value_once(kafka, runner, tmp_path):
    """The first attempt of the second batch's Spark partition 1 fails
    after 300 of its 500 rows; Spark runs it again (its transactional id's
    InitProducerId fences the failed attempt, aborting what it sent); the
    query ends and every value is visible once."""
    q = Query(kafka.bootstrap("plaintext"), tmp_path)
    for r in range(ROUNDS):
        t = time.monotonic()
        q.produce()
        batch = q.last_batch() + 2
        result = q.run(runner, fail=f"{batch}:1:{FAIL_AFTER}")
        assert [n for _, n in result["batches"] if n] == [MAX_OFFSETS] * (PER_ROUND // MAX_OFFSETS)
        assert q.tally() == (0, 0, 0)
        assert q.markers() == [q.last_batch()] * PARTITIONS
        aborted = q.tally(committed=False)[1]
        assert aborted > 0                      # the failed attempt's rows were in the log: aborted, not read
        timed(f"round {r}: a task failing once (its first attempt sent {aborted} rows, aborted)", t)


def _killed_mid_commit(q: Query, runner: Child, when: str) -> int:
    """One round of the driver-kill scenarios: the driver killed after
    committing ``when`` (a number, or ``all``) of a batch's transactions,
    before Spark's commit log; then the query run again to its end. The
    committed rows a reader did not see before the run again."""
    q.produce()
    last = q.last_batch()
    hook = q.tmp / f"hook-{q.runs}.json"
    stopped = q.run_until(hook, env={TEST_HOOK_ENV: f"{hook}:{when}"})
    batch, done = stopped["batch"], stopped["committed"]
    assert batch == last + 1 and done == (PARTITIONS if when == "all" else int(when)) and stopped["of"] == PARTITIONS
    assert q.last_batch() == last                                  # Spark's commit log does not have it
    seen = q.read()
    hidden, duplicated, unexpected = q.tally(visible_after(q, batch, done), got=seen)
    assert duplicated == unexpected == 0                          # nothing twice, nothing uncommitted
    assert q.tally(visible_after(q, batch, 0), got=seen)[0] == 0  # every earlier batch
    assert hidden == 0 or when != "all"     # a partly committed batch's rows may wait behind the open transactions
    before = None if batch == 0 else batch - 1
    assert q.markers(stable=False) == [batch if p < done else before for p in range(PARTITIONS)]
    if done < PARTITIONS:
        unstable_marker_named(q, PARTITIONS - 1)
    q.run(runner)
    assert q.last_batch() >= batch + 1
    assert q.tally() == (0, 0, 0)
    assert q.markers() == [q.last_batch()] * PARTITIONS
    return hidden


@pytest.mark.parametrize("when", ["1", pytest.param("all", marks=pytest.mark.skipif(
    not LONG,
    reason="after all of a batch's EndTxns (a fresh Spark session, 90 s): with --long or KWIRE_EOS_ROUNDS; CI "
           "kills the driver after the first"))])
def test_driver_killed_mid_commit_then_rerun(kafka, runner, tmp_path, when):
    """The driver's commit ends ``when`` of the batch's three transactions
    and the whole driver (Python, JVM, workers) is SIGKILLed before Spark
    writes its commit log. A read_committed reader then sees every earlier
    batch once, and of this one the committed partitions' rows at most
    (all of them with ``all``; with fewer, the transactions left open hold
    the target partitions' last stable offset, so committed rows written
    after their first ones stay hidden until they end). The query run again from its checkpoint
    repeats the batch: the partitions whose marker has it write nothing,
    the others write again (their open transactions fenced and aborted),
    and every value is visible once."""
    q = Query(kafka.bootstrap("plaintext"), tmp_path)
    for r in range(ROUNDS):
        t = time.monotonic()
        hidden = _killed_mid_commit(q, runner, when)
        timed(f"round {r}: the driver killed after {when} of {PARTITIONS} commits ({hidden} committed rows hidden "
              f"until the run again), then run again", t)


# ---------------------------------------------------- Spark's own sink, the contrast
@pytest.mark.skipif(not LONG, reason="docs/guide/spark.md's contrast: with --long or KWIRE_EOS_ROUNDS")
def test_spark_sink_repeats_a_failed_task(kafka, runner, tmp_path):
    """The contrast of the failing task: Spark's sink (at least once) keeps
    what the failed attempt sent, and the retry sends it again."""
    t = time.monotonic()
    q = Query(kafka.bootstrap("plaintext"), tmp_path, sink="kafka")
    q.produce()
    q.run(runner, fail=f"1:1:{FAIL_AFTER}")
    missing, duplicated, unexpected = q.tally()
    print(f"Spark's Kafka sink, a task failing once: {missing} missing, {duplicated} duplicated of {q.produced}")
    assert missing == 0 and unexpected == 0 and duplicated > 0
    timed("Spark's sink, a task failing once", t)


@pytest.mark.skipif(not LONG, reason="docs/guide/spark.md's contrast, a fresh Spark session (40 s): with --long or "
                                     "KWIRE_EOS_ROUNDS")
def test_spark_sink_repeats_a_batch_after_a_driver_kill(kafka, runner, connector, tmp_path):
    """The contrast of the driver killed mid-batch: the first batch's
    Spark partitions 0 and 1 are written, partition 2 waits, and the
    driver is killed before the batch's end; the query run again repeats
    the whole batch, and Spark's sink writes partitions 0 and 1 twice."""
    t = time.monotonic()
    q = Query(kafka.bootstrap("plaintext"), tmp_path, sink="kafka")
    q.produce()
    blocked = tmp_path / "blocked.json"
    child = q.start(jars=connector, block=f"0:2:{blocked}")
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        while not blocked.exists() or q.tally(visible_after(q, 0, 2), committed=False) != (0, 0, 0):
            assert child.proc.poll() is None, child.failure("the query ended")
            assert time.monotonic() < deadline, child.failure("batch 0's partitions 0 and 1 were not written")
            time.sleep(0.5)
    finally:
        child.close()
    q.run(runner)
    missing, duplicated, unexpected = q.tally()
    print(f"Spark's Kafka sink, the driver killed mid-batch: {missing} missing, {duplicated} duplicated of "
          f"{q.produced}")
    assert missing == 0 and unexpected == 0 and duplicated > 0
    timed("Spark's sink, the driver killed mid-batch", t)
