"""Fixtures of the Spark tests: one local[2] session for the whole run,
with ``format("kwire")`` registered. The live tests take the ``broker``
fixture (tests/conftest.py), so each runs on Tansu and on Apache Kafka,
against the same session. A test class that needs executors in JVMs of
their own takes ``standalone`` and ``cluster_driver`` (a standalone cluster
of two workers and a driver subprocess on it, for the class:
tests/support/spark_cluster.py)."""

from __future__ import annotations

import itertools
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import kwire  # noqa: E402
import support  # noqa: E402
from kwire.admin import Admin, NewTopic  # noqa: E402
from kwire.producer import Producer  # noqa: E402
from support.spark_cluster import (QUICK_JVM, Driver, SparkProcessError, StandaloneCluster, start_driver,  # noqa: E402
                                   start_standalone)

_names = itertools.count()
#: Where the subprocess drivers and the Spark Python workers import kwire
#: (and, for the drivers only, the test modules and ``support``) from.
SRC = str(Path(kwire.__file__).resolve().parent.parent)
TESTS = str(Path(support.__file__).resolve().parent.parent)


#: Where the session's metrics system writes every driver metric each second (Spark's CsvSink):
#: test_query_metrics reads kwire's gauges there, as any sink would report them.
METRICS_CONF = "spark.metrics.conf.driver.sink.csv."


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """A local[2] SparkSession whose Python workers run this interpreter,
    with Spark's own Kafka connector (``format("kafka")``) and Avro functions
    (``from_avro``, the typed columns' peer) loaded beside ``format("kwire")``;
    its metrics system reports to CSV files (``METRICS_CONF + "directory"``)."""
    from kwire.demo import spark_session
    from support.spark_connector import avro_jars, connector_jars

    os.environ["PYSPARK_PYTHON"] = sys.executable
    csv = {METRICS_CONF + "class": "org.apache.spark.metrics.sink.CsvSink", METRICS_CONF + "period": "1",
           METRICS_CONF + "unit": "seconds", METRICS_CONF + "directory": str(tmp_path_factory.mktemp("spark-metrics"))}
    session = spark_session("kwire-tests", connector_jars() + avro_jars(), conf=csv)
    try:
        yield session
    finally:
        session.stop()


def progress(what: str) -> Callable[[str], Any]:
    return lambda msg: sys.stderr.write(f"[{what}] {msg}\n")


@pytest.fixture(scope="class")
def standalone() -> Iterator[StandaloneCluster]:
    cluster = start_standalone(workers=2, cores=1, memory="1g", progress=progress("spark-standalone"))
    try:
        yield cluster
    finally:
        cluster.stop()


def start_cluster_driver(standalone: StandaloneCluster, extra: Optional[Dict[str, str]] = None) -> Driver:
    """A driver on the standalone master: two executors of one core, its
    Python workers (this interpreter, PYTHONPATH the worktree's src) set
    through ``spark.executorEnv.*`` and ``spark.pyspark.python``; ``extra``
    Spark settings beside (``spark.jars``, say)."""
    conf = {"spark.executor.cores": "1", "spark.cores.max": "2", "spark.executor.memory": "512m",
            "spark.driver.memory": "512m", "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1", "spark.ui.enabled": "false",
            "spark.pyspark.python": sys.executable,
            "spark.executorEnv.PYSPARK_PYTHON": sys.executable, "spark.executorEnv.PYTHONPATH": SRC,
            "spark.driver.extraJavaOptions": QUICK_JVM, "spark.executor.extraJavaOptions": QUICK_JVM,
            "spark.sql.shuffle.partitions": "2", "spark.sql.session.timeZone": "UTC", **(extra or {})}
    try:
        return start_driver({"master": standalone.url, "conf": conf, "executors": 2}, sys.executable,
                            [SRC, TESTS], progress=progress("spark-standalone"))
    except SparkProcessError as e:      # an executor that failed to launch says why in its worker's log
        raise SparkProcessError(f"{e}\nthe cluster's logs:\n{standalone.log_tail()}") from None


@pytest.fixture(scope="class")
def cluster_driver(standalone: StandaloneCluster) -> Iterator[Driver]:
    """A driver on the standalone master (:func:`start_cluster_driver`), for the class."""
    driver = start_cluster_driver(standalone)
    try:
        yield driver
    finally:
        driver.stop()


def new_topic(bootstrap: str, partitions: int, prefix: str = "spark", replication: int = 1) -> str:
    name = f"{prefix}-{os.getpid()}-{next(_names)}"
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=replication)])
    return name


def add_partitions(bootstrap: str, topic: str, count: int, timeout: float = 30.0) -> None:
    """Grow ``topic`` to ``count`` partitions (CreatePartitions) and wait
    until the broker's metadata has them all, each with a leader: Kafka
    answers CreatePartitions once its controller has the change, and its
    metadata may follow a moment later; a producer made at once could still
    be told the old count."""
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_partitions({topic: count})
        deadline = time.monotonic() + timeout
        while True:
            parts = admin.describe_topics([topic])[topic].partitions
            if len(parts) == count and all(p.leader >= 0 for p in parts):
                return
            assert time.monotonic() < deadline, f"{topic}: {len(parts)} partitions of {count} after {timeout} s"
            time.sleep(0.05)


Row = Tuple[str, int, int, Optional[bytes], Optional[bytes], int, Optional[List[Tuple[str, bytes]]]]


def produce(bootstrap: str, topic: str, count: int, partitions: int, codec: str = "none", start: int = 0,
            headers_every: int = 3) -> None:
    """``count`` records spread over the partitions (numbered from ``start``):
    every 5th without key, every ``headers_every``-th with two headers."""
    with Producer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=2) as p:
        for i in range(start, start + count):
            key = None if i % 5 == 0 else b"key-%06d" % i
            headers = [("n", b"%d" % i), ("empty", b"")] if i % headers_every == 0 else None
            p.send(topic, b"value-%d-" % i + bytes(i % 50), key=key, headers=headers, partition=i % partitions)
        p.flush()


def confluent_read(bootstrap: str, topics: Dict[str, int], expected: int, timeout: float = 60.0) -> List[Row]:
    """Every record of ``topics`` ({topic: partitions}) as confluent-kafka
    (librdkafka) reads them, until ``expected`` records have come."""
    import confluent_kafka

    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"cmp-{next(_names)}",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([confluent_kafka.TopicPartition(t, p, confluent_kafka.OFFSET_BEGINNING)
              for t, n in topics.items() for p in range(n)])
    out: List[Row] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            out.append((m.topic(), m.partition(), m.offset(), m.key(), m.value(), m.timestamp()[1],
                        m.headers()))
    finally:
        c.close()
    return sorted(out, key=lambda r: r[:3])


def spark_rows(df) -> List[Row]:
    """A kwire DataFrame's rows in the form of :func:`confluent_read`."""
    from pyspark.sql import functions as F

    out = []
    for r in df.withColumn("ms", F.unix_millis("timestamp")).collect():
        headers = r["headers"] if "headers" in df.columns else None
        out.append((r["topic"], r["partition"], r["offset"], None if r["key"] is None else bytes(r["key"]),
                    None if r["value"] is None else bytes(r["value"]), r["ms"],
                    None if headers is None else [(h["key"], bytes(h["value"])) for h in headers]))
    return sorted(out, key=lambda r: r[:3])


def kwire_read(spark, bootstrap: str, **options: str):
    reader = spark.read.format("kwire").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def kwire_write(df, bootstrap: str, **options: str):
    """``df.write`` to ``format("kwire")`` (append, the mode Python data sources write in), ready to ``save()``."""
    writer = df.write.mode("append").format("kwire").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        writer = writer.option(k, v)
    return writer


def offsets_of(rows: Sequence[Row]) -> Dict[Tuple[str, int], List[int]]:
    out: Dict[Tuple[str, int], List[int]] = {}
    for r in rows:
        out.setdefault((r[0], r[1]), []).append(r[2])
    return out
