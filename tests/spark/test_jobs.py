"""``kwire.spark.read`` and ``kwire.spark.write`` (kwire.spark.jobs, the
Spark 3.5 way: plain jobs through ``mapInArrow``) on the main suite's
PySpark, against Spark's own connector and ``format("kwire")``:

* every batch read case of test_connector_equivalence.py (its data set,
  made again for this module): the same schema and rows as
  ``format("kafka")``, and for the split cases the same Spark partitions;
* the sink: one DataFrame written by ``write`` and by ``format("kafka")``,
  the same records read back;
* option errors: ``format("kwire")``'s messages;
* Spark Connect: read, write and ``foreachBatch`` + ``write`` from a
  remote client (the Connect server of test_cluster_connect.py's fixtures,
  started again for this module's class).

tests/spark_compat/test_jobs*.py run the same functions on each PySpark
release kwire supports (3.5 on), Connect 3.5 included.
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, Mapping

import pytest

import kwire.spark
from kwire.spark import SparkOptionError

from .conftest import new_topic, produce
from .test_cluster_connect import bootstrap, connect_driver, connect_server  # noqa: F401  (fixtures)
from .test_connector_equivalence import (BATCH_CASES, SPLIT_CASES, Dataset, _sink_frame, _written,  # noqa: F401
                                         assert_same_rows, collect, compare, connector_write, data, read)


def _compare(spark, broker, data: Dataset, options: Mapping[str, str], splits: bool = False) -> None:
    """``read(spark, **options)`` against ``format("kafka")`` (test_connector_equivalence's ``compare``)."""
    compare(spark, broker, data, options, splits,
            ours=lambda o: kwire.spark.read(spark, **{"kafka.bootstrap.servers": broker.bootstrap, **o}))


@pytest.mark.parametrize("case", sorted(BATCH_CASES))
def test_read_same_rows_as_the_connector(spark, broker, data, case):
    make, kafka_only = BATCH_CASES[case]
    if broker.is_tansu and kafka_only:
        pytest.skip(kafka_only)
    _compare(spark, broker, data, make(data))


@pytest.mark.parametrize("case", sorted(SPLIT_CASES))
def test_read_same_rows_and_spark_partitions(spark, broker, data, case):
    _compare(spark, broker, data, SPLIT_CASES[case](data), splits=True)


def test_write_same_records_as_the_connector(spark, broker):
    """One DataFrame (string keys, some null; headers on some rows; a
    partition column, null on some) written by ``write`` and by
    ``format("kafka")``: the same records, offsets included."""
    theirs, ours = (new_topic(broker.bootstrap, 3, prefix=f"jobs-sink-{s}") for s in ("kafka", "kwire"))
    df = _sink_frame(spark)
    connector_write(df, broker.bootstrap, topic=theirs)
    assert kwire.spark.write(df, **{"kafka.bootstrap.servers": broker.bootstrap, "topic": ours}) == 120
    got = _written(spark, broker.bootstrap, [theirs, ours])
    assert len(got[theirs]) == 120
    assert_same_rows(got[theirs], got[ours], "write, topic option")


def _message(load) -> str:
    with pytest.raises(Exception) as info:
        load()
    return str(info.value)


def test_option_errors_are_format_kwires(spark, broker):
    """read() and write() raise SparkOptionError with the message
    format("kwire") fails with (it wraps the same error in Spark's)."""
    options = {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": "t", "startingOffsets": "latest"}
    with pytest.raises(SparkOptionError) as info:
        kwire.spark.read(spark, **options)
    assert str(info.value) in _message(lambda: spark.read.format("kwire").options(**options).load().collect())
    df = spark.createDataFrame([(1, "v")], "key int, value string")
    options = {"kafka.bootstrap.servers": broker.bootstrap, "topic": "t"}
    with pytest.raises(SparkOptionError, match=re.escape("key attribute unsupported type int")) as info:
        kwire.spark.write(df, **options)
    assert str(info.value) in _message(lambda: df.write.mode("append").format("kwire").options(**options).save())


# ------------------------------------------------------------ Spark Connect
def job_connect(spark: Any, bootstrap: str, topic: str, copy: str, stream: str, files: str) -> Dict[str, Any]:
    """Run in the Connect driver: ``read`` against ``format("kwire")``,
    ``write`` read back, a file stream written by ``foreachBatch`` + ``write``."""
    import json
    from pathlib import Path

    import kwire.spark
    from spark.test_connector_equivalence import collect

    kafka = {"kafka.bootstrap.servers": bootstrap}
    df = kwire.spark.read(spark, **kafka, subscribe=topic, includeHeaders="true")
    ref = spark.read.format("kwire").options(**kafka, subscribe=topic, includeHeaders="true").load()
    mine = collect(df)[0]
    out: Dict[str, Any] = {"rows": len(mine), "same": df.schema == ref.schema and mine == collect(ref)[0]}
    out["written"] = kwire.spark.write(df.select("key", "value", "headers", "partition"), **kafka, topic=copy)
    back = collect(kwire.spark.read(spark, **kafka, subscribe=copy, includeHeaders="true"))[0]
    out["back"] = [r[:2] + r[3:5] + r[7:] for r in back] == [r[:2] + r[3:5] + r[7:] for r in mine]
    source = Path(files)
    source.mkdir()
    for f in range(3):
        (source / f"{f}.json").write_text("".join(json.dumps({"value": f"v{f * 10 + i}"}) + "\n" for i in range(10)))
    sink = {**kafka, "topic": stream}
    writer = (spark.readStream.schema("value string").option("maxFilesPerTrigger", 1).json(files)
              .writeStream.foreachBatch(lambda batch, _: kwire.spark.write(batch, **sink))
              .option("checkpointLocation", str(source.parent / "ckpt")).trigger(availableNow=True))
    from spark_compat.compat_util import start_foreach_batch

    q = start_foreach_batch(writer)
    q.awaitTermination(120)
    out["stream_error"] = None if q.exception() is None else str(q.exception())
    got = kwire.spark.read(spark, **kafka, subscribe=stream).collect()
    out["streamed"] = sorted(bytes(r.value) for r in got) == sorted(b"v%d" % i for i in range(30))
    return out


class TestConnect:
    def test_read_write_and_foreach_batch(self, connect_driver, bootstrap, tmp_path):  # noqa: F811
        topic, copy, stream = (new_topic(bootstrap, n, prefix="jobs-connect") for n in (3, 3, 2))
        produce(bootstrap, topic, 150, 3)
        got = connect_driver.call(f"{__name__}:job_connect", bootstrap=bootstrap, topic=topic, copy=copy,
                                  stream=stream, files=str(tmp_path / "in"))
        assert got == {"rows": 150, "same": True, "written": 150, "back": True, "stream_error": None,
                       "streamed": True}, json.dumps(got)
