"""``format("kwire")`` beyond ``local[2]``: on a Spark standalone cluster
(a master and two one-core workers, each executor a JVM of its own whose
Python workers import kwire from this worktree) and through Spark Connect
(the source registered by a remote client, planned and run by the server).

Each mode's driver is a subprocess (tests/support/spark_cluster.py says
why); the ``job_*`` functions below run in it, called by name, and return
JSON. The cluster, the Connect server and both drivers are started once for
the test class of their mode and stopped by PID after it.

Every live test runs on Tansu and on Apache Kafka (the ``bootstrap``
fixture below), without workarounds: the reads end at kwire's ``latest``,
which is the log end on both (on Tansu, whose ListOffsets latest trails the
log, it is the Fetch high watermark: see test_batch.py).
"""

from __future__ import annotations

import os
import sys
import time
import zlib
from typing import Any, Dict, Iterator, List, Tuple

import pytest

from kwire.consumer import Consumer
from support.spark_cluster import ConnectServer, Driver, StandaloneCluster, start_connect, start_driver

from .conftest import SRC, TESTS, new_topic, produce, progress

#: Records per read test, over this many partitions.
RECORDS = 2_000
PARTITIONS = 4


# ----------------------------------------------------------------- fixtures
@pytest.fixture(params=[pytest.param("tansu", marks=pytest.mark.broker),
                        pytest.param("kafka", marks=pytest.mark.kafka)])
def bootstrap(request) -> str:
    """The live broker's "host:port": Tansu, then Apache Kafka, the
    session's ``tansu`` and ``kafka`` servers as the ``broker`` fixture gives
    them. Not ``broker`` itself: its parameter is session-scoped, so pytest
    runs every Tansu test of the session before any Kafka one, which would
    split this module in two and start its cluster and Connect server twice."""
    if request.param == "tansu":
        return request.getfixturevalue("tansu").bootstrap
    return request.getfixturevalue("kafka").bootstrap("plaintext")


#: pyspark[connect]'s client dependencies: module -> distribution.
CONNECT_CLIENT = {"pandas": "pandas", "grpc": "grpcio", "grpc_status": "grpcio-status",
                  "google.rpc.status_pb2": "googleapis-common-protos", "zstandard": "zstandard"}


def _connect_client_missing() -> List[str]:
    """The distributions of :data:`CONNECT_CLIENT` this interpreter lacks.
    (Not ``pyspark.sql.connect.utils.check_dependencies``: importing that
    package runs the check, and in a process without a ``__main__`` file it
    calls ``sys.exit(0)``.)"""
    import importlib.util

    missing = []
    for module, dist in CONNECT_CLIENT.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:         # a parent package (google) missing
            found = False
        if not found:
            missing.append(dist)
    return missing


@pytest.fixture(scope="class")
def connect_server() -> Iterator[ConnectServer]:
    missing = _connect_client_missing()
    if missing:
        pytest.skip(f"no Spark Connect client in this interpreter: pyspark[connect]'s {', '.join(missing)} missing")
    server = start_connect(sys.executable, [SRC], master="local[2]", progress=progress("spark-connect"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="class")
def connect_driver(connect_server: ConnectServer) -> Iterator[Driver]:
    driver = start_driver({"remote": connect_server.url}, sys.executable, [SRC, TESTS],
                          progress=progress("spark-connect"))
    try:
        yield driver
    finally:
        driver.stop()


# ------------------------------------------- jobs (run in the driver process)
def job_executor_jvms(spark: Any, tasks: int) -> Dict[str, Any]:
    """Where ``tasks`` tasks ran: each one's Python worker pid, the executor
    JVM above it and that JVM's parent; with the driver's own pids and
    executor ids."""
    sc = spark.sparkContext

    def where(_: int) -> Tuple[int, int, int]:
        """This Python worker's pid, the nearest ``java`` process above it
        and that one's parent (Linux /proc). Defined in here, so that
        cloudpickle sends it by value: the executors cannot import this
        test module."""
        import os
        import time

        time.sleep(0.2)             # long enough for both executors to be offered tasks
        pid = os.getpid()
        while pid > 1:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            if stat[stat.index("(") + 1:stat.rindex(")")] == "java":
                return os.getpid(), pid, ppid
            pid = ppid
        raise RuntimeError(f"no java process above the Python worker {os.getpid()}")

    placed = sc.parallelize(range(tasks), tasks).map(where).collect()
    return {"driver_python": os.getpid(), "driver_jvm": int(sc._jvm.java.lang.ProcessHandle.current().pid()),
            "executor_ids": sorted(sc._jsc.sc().getExecutorIds().mkString(",").split(",")),
            "tasks": [list(t) for t in placed]}


def job_session_kind(spark: Any) -> str:
    """The session's class: ``pyspark.sql.connect.session.SparkSession`` for a remote one."""
    return f"{type(spark).__module__}.{type(spark).__name__}"


def job_read(spark: Any, bootstrap: str, topic: str) -> Dict[str, Any]:
    """``format("kwire")`` reads ``topic``; the executors reduce the records
    to :func:`_summary`'s figures."""
    from pyspark.sql import functions as F

    df = (spark.read.format("kwire").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
          .option("includeHeaders", "true").load())
    record = F.concat(F.concat_ws(":", "partition", "offset", F.lit("")).cast("binary"),
                      F.coalesce("key", F.lit(b"-")), F.lit(b":"), "value")
    parts = (df.groupBy("partition")
             .agg(F.min("offset"), F.max("offset"), F.count(F.lit(1)), F.count_distinct("offset"),
                  F.sum(F.crc32(record)), F.sum(F.size(F.coalesce("headers", F.array()))))
             .collect())
    parts = sorted(parts, key=lambda p: p[0])
    return {"records": sum(p[3] for p in parts), "distinct": sum(p[4] for p in parts),
            "crc": sum(p[5] for p in parts), "headers": sum(p[6] for p in parts),
            "partitions": [list(p[:4]) for p in parts]}


def job_write(spark: Any, bootstrap: str, topic: str, records: int) -> None:
    """``format("kwire")`` writes ``records`` rows (key ``k-<i>``, value
    ``v-<i>``) from 4 Spark partitions to ``topic``."""
    from pyspark.sql import functions as F

    df = spark.range(0, records, 1, 4).select(F.concat(F.lit("k-"), "id").alias("key"),
                                              F.concat(F.lit("v-"), "id").alias("value"))
    (df.write.mode("append").format("kwire").option("kafka.bootstrap.servers", bootstrap)
     .option("topic", topic).save())


# ------------------------------------------------------- the test process side
def _consume(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 30.0) -> List[Any]:
    """Every record of ``topic`` as kwire's Consumer reads them, once
    ``expected`` have come (more would be a duplicate, checked by the caller)."""
    out: List[Tuple[int, Any]] = []
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign([(topic, p) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        while len(out) < expected:
            assert time.monotonic() < deadline, f"{topic}: {len(out)} of {expected} records in {timeout:.0f} s"
            for tp, records in c.poll(200).items():
                out.extend((tp.partition, r) for r in records)
        out.extend((tp.partition, r) for tp, records in c.poll(500).items() for r in records)   # none more
    return out


def _summary(records: List[Any]) -> Dict[str, Any]:
    """:func:`job_read`'s figures for records read in this process."""
    crc = 0
    parts: Dict[int, List[int]] = {}
    for p, r in records:
        crc += zlib.crc32(b"%d:%d:" % (p, r.offset) + (b"-" if r.key is None else r.key) + b":" + r.value)
        parts.setdefault(p, []).append(r.offset)
    return {"records": len(records), "distinct": len({(p, r.offset) for p, r in records}), "crc": crc,
            "headers": sum(len(r.headers) for _, r in records),
            "partitions": [[p, min(o), max(o), len(o)] for p, o in sorted(parts.items())]}


def _check_read(driver: Driver, bootstrap: str) -> None:
    topic = new_topic(bootstrap, PARTITIONS, prefix="cluster")
    produce(bootstrap, topic, RECORDS, PARTITIONS)
    expected = _summary(_consume(bootstrap, topic, PARTITIONS, RECORDS))
    # produce()'s pattern on a new topic: record i at partition i % 4, offsets from 0; two headers on every 3rd
    per = RECORDS // PARTITIONS
    assert expected["partitions"] == [[p, 0, per - 1, per] for p in range(PARTITIONS)]
    assert expected["records"] == expected["distinct"] == RECORDS
    assert expected["headers"] == 2 * len(range(0, RECORDS, 3))
    assert driver.call(f"{__name__}:job_read", bootstrap=bootstrap, topic=topic) == expected


def _check_write(driver: Driver, bootstrap: str, records: int = 1_000) -> None:
    topic = new_topic(bootstrap, 3, prefix="cluster-sink")
    driver.call(f"{__name__}:job_write", bootstrap=bootstrap, topic=topic, records=records)
    got = sorted((r.key, r.value) for _, r in _consume(bootstrap, topic, 3, records))
    assert got == sorted((b"k-%d" % i, b"v-%d" % i) for i in range(records))    # each once, none else


# -------------------------------------------------------------------- tests
# One class a mode: their fixtures are class-scoped, so the standalone
# cluster is stopped before the Connect server starts.
class TestStandalone:
    def test_executors_are_separate_jvms(self, standalone: StandaloneCluster, cluster_driver: Driver) -> None:
        """Tasks ran in two executor JVMs, neither the driver's, each launched
        by a different worker: the standalone deployment, not a local one."""
        got = cluster_driver.call(f"{__name__}:job_executor_jvms", tasks=8)
        assert len(got["executor_ids"]) == 2, got
        jvms = {(jvm, parent) for _, jvm, parent in got["tasks"]}
        assert len(jvms) == 2, f"the tasks ran in {jvms}"
        assert got["driver_jvm"] not in {jvm for jvm, _ in jvms}
        assert sorted(parent for _, parent in jvms) == sorted(standalone.worker_pids)
        assert got["driver_python"] not in {python for python, _, _ in got["tasks"]}

    def test_read(self, cluster_driver: Driver, bootstrap: str) -> None:
        _check_read(cluster_driver, bootstrap)

    def test_write(self, cluster_driver: Driver, bootstrap: str) -> None:
        _check_write(cluster_driver, bootstrap)


class TestConnect:
    def test_session_is_remote(self, connect_driver: Driver) -> None:
        """The Connect driver's session is a Spark Connect client one (no JVM
        in it), and ``format("kwire")`` was registered through it."""
        assert connect_driver.call(f"{__name__}:job_session_kind") == "pyspark.sql.connect.session.SparkSession"

    def test_read(self, connect_driver: Driver, bootstrap: str) -> None:
        _check_read(connect_driver, bootstrap)

    def test_write(self, connect_driver: Driver, bootstrap: str) -> None:
        _check_write(connect_driver, bootstrap)
