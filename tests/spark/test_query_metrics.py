"""A streaming query's Kafka figures (issue 35): in its progress through
:func:`kwire.spark.observe` (records and bytes as Spark's observed
metrics), computed by :func:`kwire.spark.source_metrics`, and set by
:class:`kwire.spark.MetricsListener` as gauges of Spark's metrics system,
read back where a sink reports them (the session's CsvSink, see
``conftest.METRICS_CONF``)."""

from __future__ import annotations

import glob
import math
import os
import time

import pytest

from kwire.errors import KwireError
from kwire.producer import Producer
from kwire.spark.metrics import GAUGES, source_metrics

from .conftest import METRICS_CONF, new_topic
from .test_stream import stream

PYTHON_STREAM = "org.apache.spark.sql.execution.datasources.v2.python.PythonMicroBatchStream@1a2b"
KEY, VALUE = 6, 30          # the bytes of each record's key and value (_send)


def _progress(**kw):
    sources = [
        {"description": PYTHON_STREAM, "endOffset": {"a": {"0": 10, "1": 20}}, "latestOffset": {"a": {"0": 15, "1": 20}},
         "numInputRows": 30, "inputRowsPerSecond": 10.0, "processedRowsPerSecond": 60.0},
        {"description": "KafkaV2[Subscribe[b]]", "endOffset": {"b": {"0": 5}}, "latestOffset": {"b": {"0": 12}},
         "numInputRows": 10, "inputRowsPerSecond": 5.0, "processedRowsPerSecond": 20.0},
        {"description": PYTHON_STREAM, "endOffset": {"lines": 7}, "latestOffset": {"lines": 9}, "numInputRows": 4},
        {"description": "RateStreamV2[rowsPerSecond=1]", "endOffset": 3, "numInputRows": 2},
    ]
    return {"id": "q", "runId": "r", "name": None, "sources": sources, **kw}


def test_source_metrics_add_up_the_kafka_sources_and_the_observations():
    observed = {"kwire": {"kwire_records": 30, "kwire_bytes": 1200}, "kafka": {"kwire_records": 10, "kwire_bytes": 400},
                "other": {"count": 5}}
    got = source_metrics(_progress(observedMetrics=observed))
    assert [g for g, _ in GAUGES] == list(got)
    assert got == {"numInputRows": 40, "inputRowsPerSecond": 15.0, "processedRowsPerSecond": 80.0,
                   "numInputBytes": 1600, "inputBytesPerSecond": 600.0, "processedBytesPerSecond": 3200.0,
                   "offsetsBehindLatest": 12, "minOffsetsBehindLatest": 0, "maxOffsetsBehindLatest": 7,
                   "avgOffsetsBehindLatest": 4.0}
    unobserved = source_metrics(_progress(observedMetrics={}))
    assert all(math.isnan(unobserved[g]) for g in ("numInputBytes", "inputBytesPerSecond", "processedBytesPerSecond"))
    idle = _progress(observedMetrics={})
    for s in idle["sources"]:
        s.update(numInputRows=0, inputRowsPerSecond=0.0, processedRowsPerSecond=0.0)
    assert source_metrics(idle)["numInputBytes"] == 0 and source_metrics(idle)["inputBytesPerSecond"] == 0.0
    assert source_metrics({"sources": _progress()["sources"][2:]}) == {}


def test_the_listener_needs_a_classic_session():
    from kwire.spark import MetricsListener

    with pytest.raises(KwireError, match="Spark Connect"):
        MetricsListener(object())


def _send(bootstrap: str, topic: str, start: int, count: int) -> None:
    with Producer(bootstrap_servers=bootstrap, linger_ms=2) as p:
        for i in range(start, start + count):
            p.send(topic, b"v" * VALUE, key=b"k%05d" % i, partition=i % 2)


def _reported(directory: str, source: str) -> dict:
    """Each gauge's last value in the CsvSink's files (``t,value`` lines)."""
    out = {}
    for gauge, _ in GAUGES:
        files = glob.glob(os.path.join(directory, f"*.driver.{source}.{gauge}.csv"))
        if files:
            with open(files[0]) as f:
                lines = f.read().split()
            if len(lines) > 1:
                out[gauge] = float(lines[-1].split(",")[1])
    return out


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        (math.isnan(x) and math.isnan(b[k])) or math.isclose(x, b[k], rel_tol=1e-9) for k, x in a.items())


def test_the_listener_reports_the_query_figures_to_sparks_metrics_system(spark, kafka, tmp_path):
    from kwire.spark import MetricsListener, observe

    bootstrap = kafka.bootstrap("plaintext")
    topic = new_topic(bootstrap, 2, prefix="qmetrics")
    name = topic.replace("-", "_")
    source = f"kwire.streaming.{name}"
    _send(bootstrap, topic, 0, 120)
    listener = MetricsListener(spark)
    spark.streams.addListener(listener)
    metrics_system = spark._jvm.org.apache.spark.SparkEnv.get().metricsSystem()
    q = None
    try:
        df = observe(stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest"))
        q = (df.writeStream.format("noop").queryName(name).option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(processingTime="200 milliseconds").start())
        q.processAllAvailable()
        _send(bootstrap, topic, 120, 60)
        q.processAllAvailable()
        batches = [p for p in q.recentProgress if p["numInputRows"] > 0]
        # the progress carries the records and bytes of each batch
        assert all(p["observedMetrics"]["kwire"]["kwire_records"] == p["numInputRows"] for p in batches)
        assert sum(p["observedMetrics"]["kwire"]["kwire_bytes"] for p in batches) == 180 * (KEY + VALUE)
        last = source_metrics(batches[-1])
        assert last["offsetsBehindLatest"] == 0 and last["numInputBytes"] == last["numInputRows"] * (KEY + VALUE)
        # and Spark's metrics system reports the gauges of the last progress
        directory = spark.conf.get(METRICS_CONF + "directory")
        deadline = time.monotonic() + 20
        while not _same(_reported(directory, source), source_metrics(q.lastProgress)):
            assert time.monotonic() < deadline, (_reported(directory, source), source_metrics(q.lastProgress))
            time.sleep(0.3)
    finally:
        if q is not None:
            q.stop()
        deadline = time.monotonic() + 20
        while not metrics_system.getSourcesByName(source).isEmpty():      # removed when the query ended
            assert time.monotonic() < deadline, f"{source} stays in Spark's metrics system"
            time.sleep(0.2)
        spark.streams.removeListener(listener)
