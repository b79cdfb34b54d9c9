"""``format("kwire")`` on the release (4.0 on): batch read and write on
both brokers, streaming read (``Trigger.AvailableNow``: on 4.0 and 4.1
through Spark's wrapper, on 4.2+ kwire's own) and streaming write (on 4.0
through the row writer), and, where Maven Central has the release's
connector, the same rows as Spark's own ``format("kafka")`` (on 4.3 it has
none: the comparison is made on 4.2, the main suite's ``tests/spark``)."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from compat_util import available_now, committed_values, new_topic, produce, read, read_stream, rows, wait_until
from kwire.errors import KwireError
from kwire.spark import FEATURES

pytestmark = pytest.mark.skipif(not FEATURES.data_source,
                                reason='no Python Data Source API before Spark 4.0: no format("kwire") '
                                       "(test_refusals; kwire.spark.read/write: test_jobs*)")

RECORDS, PARTITIONS = 60, 3


@pytest.fixture
def connector(release):
    """Skips (saying why) where the release has no connector of its own on Maven Central."""
    if not release["jars"]:
        pytest.skip(f"Spark {release['pyspark']}: {release['no_connector']}")


def _kafka_rows(got):
    """topic, partition, offset, key, value, headers: what a sink decides."""
    return [(r[1], r[2], r[3], r[4], r[7]) for r in got]


def _source(bootstrap: str, prefix: str) -> str:
    topic = new_topic(bootstrap, PARTITIONS, prefix=prefix)
    produce(bootstrap, topic, RECORDS, PARTITIONS)
    return topic


def test_batch_read_and_write(spark, broker):
    source = _source(broker, "batch")
    got = rows(read(spark, "kwire", broker, subscribe=source, includeHeaders="true"))
    assert len(got) == RECORDS
    assert sorted(r[4] for r in got) == sorted(b"value-%d-" % i + bytes(i % 50) for i in range(RECORDS))
    assert sum(r[7] is not None for r in got) == RECORDS // 3 and sum(r[3] is None for r in got) == RECORDS // 5

    copy = new_topic(broker, PARTITIONS, prefix="batch-copy")
    df = read(spark, "kwire", broker, subscribe=source, includeHeaders="true")
    (df.select("key", "value", "headers", "partition").coalesce(1).write.mode("append").format("kwire")
     .option("kafka.bootstrap.servers", broker).option("topic", copy).save())
    back = rows(read(spark, "kwire", broker, subscribe=copy, includeHeaders="true"))
    assert _kafka_rows(back) == _kafka_rows(got)


def test_batch_filters(spark, kafka_bootstrap):
    """Filters on partition and offset: pushed down from 4.1, evaluated by
    Spark alone on 4.0; the same rows either way."""
    source = _source(kafka_bootstrap, "filters")
    df = read(spark, "kwire", kafka_bootstrap, subscribe=source)
    every = rows(df)
    got = rows(df.where((F.col("partition") == 1) & (F.col("offset") >= 5)))
    assert got == [r for r in every if r[1] == 1 and r[2] >= 5] and len(got) == RECORDS // PARTITIONS - 5


def test_stream_read_available_now(spark, kafka_bootstrap, tmp_path, caplog):
    """Everything there at the start, read once, then only what came after
    (a restart from the checkpoint). The stream is observed
    (kwire.spark.observe: its records and bytes in the progress) and
    kwire.spark.MetricsListener registers the query's gauges with the
    release's metrics system and removes them, without a warning."""
    from kwire.spark import MetricsListener, observe, source_metrics

    source = _source(kafka_bootstrap, "stream")
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    df = read_stream(spark, "kwire", kafka_bootstrap, subscribe=source, startingOffsets="earliest",
                     includeHeaders="true")
    cols = observe(df).select("topic", "partition", "offset", "key", "value", "timestamp", "timestampType",
                              "headers")
    if FEATURES.version.startswith("4.3"):
        # PySpark 4.3.0's SparkEnv cannot be reflected on by py4j without protobuf-java on the driver's
        # class path: refused here, from this thread, not in the listener bus's (which would stop the context)
        with pytest.raises(KwireError, match="spark.driver.extraClassPath"):
            MetricsListener(spark)
        q = available_now(cols, ckpt, fmt="parquet", path=out)
    else:
        listener = MetricsListener(spark)
        spark.streams.addListener(listener)
        caplog.set_level("INFO", logger="kwire.spark.listener")
        try:
            q = available_now(cols, ckpt, fmt="parquet", path=out)
            wait_until(lambda: "are gauges of Spark's metrics system" in caplog.text and not listener._sources)
        finally:
            spark.streams.removeListener(listener)
        assert not [r for r in caplog.records if r.levelname == "WARNING"], caplog.text
    assert [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]] == [RECORDS]
    batch = rows(read(spark, "kwire", kafka_bootstrap, subscribe=source, includeHeaders="true"))
    assert rows(spark.read.parquet(out)) == batch
    size = sum(len(r[3] or b"") + len(r[4] or b"") for r in batch)
    observed = [p["observedMetrics"]["kwire"] for p in q.recentProgress if p["numInputRows"]]
    assert [(o["kwire_records"], o["kwire_bytes"]) for o in observed] == [(RECORDS, size)]
    figures = [source_metrics(p) for p in q.recentProgress if p["numInputRows"]]      # the release's progress objects
    assert [(f["numInputRows"], f["numInputBytes"], f["offsetsBehindLatest"]) for f in figures] == [(RECORDS, size, 0)]

    produce(kafka_bootstrap, source, 30, PARTITIONS, start=RECORDS)
    q = available_now(cols, ckpt, fmt="parquet", path=out)
    assert [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]] == [30]
    assert rows(spark.read.parquet(out)) == rows(read(spark, "kwire", kafka_bootstrap, subscribe=source,
                                                      includeHeaders="true"))


def _stream_copy(spark, fmt: str, bootstrap: str, source: str, target: str, checkpoint: str) -> None:
    df = read_stream(spark, "kwire", bootstrap, subscribe=source, startingOffsets="earliest", includeHeaders="true")
    available_now(df.select("key", "value", "headers", "partition"), checkpoint, fmt=fmt,
                  **{"kafka.bootstrap.servers": bootstrap, "topic": target})


def test_stream_write(spark, kafka_bootstrap, tmp_path):
    """A stream copied by kwire's sink (rows in, on 4.0; Arrow from 4.1)."""
    source = _source(kafka_bootstrap, "ssink")
    target = new_topic(kafka_bootstrap, PARTITIONS, prefix="ssink-kwire")
    _stream_copy(spark, "kwire", kafka_bootstrap, source, target, str(tmp_path / "ckpt"))
    got = rows(read(spark, "kwire", kafka_bootstrap, subscribe=target, includeHeaders="true"))
    assert _kafka_rows(got) == _kafka_rows(rows(read(spark, "kwire", kafka_bootstrap, subscribe=source,
                                                     includeHeaders="true")))


def test_exactly_once_batch_and_stream_writes(spark, kafka_bootstrap, tmp_path):
    """deliveryGuarantee=exactly-once on the release: a batch write, and a
    stream (rows in on 4.0, Arrow from 4.1; the batch and query ids from
    the tasks' local properties): each row once to a read_committed
    reader, and the last batch's marker there (the restart from a
    checkpoint is tested on 4.2, tests/spark/test_exactly_once.py)."""
    from kwire.admin import Admin
    from kwire.spark.exactly_once import marker_batch

    eos = {"kafka.bootstrap.servers": kafka_bootstrap, "deliveryGuarantee": "exactly-once"}
    batch_topic = new_topic(kafka_bootstrap, 2, prefix="eos-batch")
    df = spark.createDataFrame([(f"v{i}",) for i in range(50)], "value string")
    writer = df.write.mode("append").format("kwire").option("topic", batch_topic)
    for k, v in eos.items():
        writer = writer.option(k, v)
    writer.save()
    assert committed_values(kafka_bootstrap, batch_topic, 2) == sorted(f"v{i}".encode() for i in range(50))
    source = _source(kafka_bootstrap, "eos-src")
    target = new_topic(kafka_bootstrap, 2, prefix="eos-dst")
    stream = read_stream(spark, "kwire", kafka_bootstrap, subscribe=source, startingOffsets="earliest")
    q = available_now(stream.select("value"), str(tmp_path / "ckpt"), fmt="kwire", topic=target, **eos)
    got = committed_values(kafka_bootstrap, target, 2)
    assert len(got) == RECORDS and len(set(got)) == len(got)
    with Admin(bootstrap_servers=kafka_bootstrap) as admin:
        marks = [marker_batch(admin, f"kwire-{q.id}-{p}", 30.0) for p in range(PARTITIONS)]
    assert max(m for m in marks if m is not None) == q.lastProgress["batchId"]


# ------------------------------------------------ Spark's connector, same release
def test_connector_same_batch_rows(spark, kafka_bootstrap, connector):
    source = _source(kafka_bootstrap, "eqv")
    ours = rows(read(spark, "kwire", kafka_bootstrap, subscribe=source, includeHeaders="true"))
    theirs = rows(read(spark, "kafka", kafka_bootstrap, subscribe=source, includeHeaders="true"))
    assert len(ours) == RECORDS and ours == theirs


def test_connector_same_stream_rows(spark, kafka_bootstrap, connector, tmp_path):
    source = _source(kafka_bootstrap, "eqv-stream")
    got = {}
    for fmt in ("kwire", "kafka"):
        df = read_stream(spark, fmt, kafka_bootstrap, subscribe=source, startingOffsets="earliest",
                         includeHeaders="true")
        out = str(tmp_path / fmt)
        available_now(df, str(tmp_path / f"c-{fmt}"), fmt="parquet", path=out)
        got[fmt] = rows(spark.read.parquet(out))
    assert len(got["kwire"]) == RECORDS and got["kwire"] == got["kafka"]


def test_connector_same_records_written(spark, kafka_bootstrap, connector, tmp_path):
    """The same rows written by each sink, batch and streaming: the same records."""
    source = _source(kafka_bootstrap, "eqv-sink")
    df = read(spark, "kwire", kafka_bootstrap, subscribe=source, includeHeaders="true")
    written = {}
    for fmt in ("kwire", "kafka"):
        batch, stream = (new_topic(kafka_bootstrap, PARTITIONS, prefix=f"eqv-{fmt}") for _ in range(2))
        (df.select("key", "value", "headers", "partition").write.mode("append").format(fmt)
         .option("kafka.bootstrap.servers", kafka_bootstrap).option("topic", batch).save())
        _stream_copy(spark, fmt, kafka_bootstrap, source, stream, str(tmp_path / f"c-{fmt}"))
        written[fmt] = [_kafka_rows(rows(read(spark, "kwire", kafka_bootstrap, subscribe=t, includeHeaders="true")))
                        for t in (batch, stream)]
    assert written["kwire"] == written["kafka"] and len(written["kwire"][0]) == RECORDS
    assert written["kwire"][1] == written["kwire"][0]
