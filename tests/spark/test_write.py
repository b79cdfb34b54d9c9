"""Writes through ``format("kwire")``, batch and streaming, read back by
confluent-kafka and by ``format("kwire")``."""

from __future__ import annotations

import time

import pytest
from pyspark.errors import PySparkException

from .conftest import confluent_read, kwire_read, new_topic, produce, spark_rows

pytestmark = pytest.mark.broker


def test_batch_write_then_read_back(spark, tansu):
    topic = new_topic(tansu.bootstrap, 3)
    rows = [(None if i % 4 == 0 else f"k{i}", f"v{i}".encode(), i % 3,
             [("h", f"{i}".encode()), ("z", b"")] if i % 2 else None) for i in range(300)]
    df = spark.createDataFrame(rows, "key string, value binary, partition int, "
                                     "headers array<struct<key string, value binary>>")
    df.write.mode("append").format("kwire").option("kafka.bootstrap.servers", tansu.bootstrap).option("topic", topic).save()
    got = confluent_read(tansu.bootstrap, {topic: 3}, 300)
    assert sorted((r[1], r[4], r[3], r[6]) for r in got) == sorted(
        (p, v, None if k is None else k.encode(), h) for k, v, p, h in rows)      # values are unique
    back = spark_rows(kwire_read(spark, tansu.bootstrap, subscribe=topic, includeHeaders="true"))
    assert back == got


def test_topic_column_and_the_topic_option_overriding_it(spark, tansu):
    a, b, c = (new_topic(tansu.bootstrap, 1) for _ in range(3))
    df = spark.createDataFrame([(a, "x1"), (b, "x2"), (b, "x3")], "topic string, value string")
    df.write.mode("append").format("kwire").option("kafka.bootstrap.servers", tansu.bootstrap).save()
    assert [r[4] for r in confluent_read(tansu.bootstrap, {a: 1}, 1)] == [b"x1"]
    assert sorted(r[4] for r in confluent_read(tansu.bootstrap, {b: 1}, 2)) == [b"x2", b"x3"]
    df.write.mode("append").format("kwire").option("kafka.bootstrap.servers", tansu.bootstrap).option("topic", c).save()
    assert sorted(r[4] for r in confluent_read(tansu.bootstrap, {c: 1}, 3)) == [b"x1", b"x2", b"x3"]


def test_schema_checks_as_in_spark(spark, tansu):
    w = lambda df: df.write.mode("append").format("kwire").option("kafka.bootstrap.servers", tansu.bootstrap)  # noqa: E731
    with pytest.raises(PySparkException, match="topic option required when no 'topic' attribute is present"):
        w(spark.createDataFrame([("v",)], "value string")).save()
    with pytest.raises(PySparkException, match="Required attribute 'value' not found"):
        w(spark.createDataFrame([("k",)], "key string")).option("topic", "t").save()
    with pytest.raises(PySparkException, match="key attribute unsupported type int"):
        w(spark.createDataFrame([(1, "v")], "key int, value string")).option("topic", "t").save()
    with pytest.raises(PySparkException, match="partition attribute unsupported type bigint"):
        w(spark.createDataFrame([(1, "v")], "partition long, value string")).option("topic", "t").save()
    with pytest.raises(PySparkException, match="'value.serializer' is not supported"):
        w(spark.createDataFrame([("v",)], "value string")).option("topic", "t").option(
            "kafka.value.serializer", "x").save()


def test_a_send_error_fails_the_task(spark, tansu):
    """A record for a partition the topic does not have is refused by
    send(): the task fails at once, naming the partition."""
    topic = new_topic(tansu.bootstrap, 1)
    df = spark.createDataFrame([("v", 7)], "value string, partition int")
    t = time.monotonic()
    with pytest.raises(PySparkException, match="partition 7 does not exist"):
        (df.write.mode("append").format("kwire").option("kafka.bootstrap.servers", tansu.bootstrap).option("topic", topic)
         .option("kafka.delivery.timeout.ms", "1500").save())
    assert time.monotonic() - t < 120


def test_streaming_copy_from_topic_to_topic(spark, tansu, tmp_path):
    src, dst = new_topic(tansu.bootstrap, 2), new_topic(tansu.bootstrap, 2)
    produce(tansu.bootstrap, src, 200, 2)
    q = (spark.readStream.format("kwire").option("kafka.bootstrap.servers", tansu.bootstrap).option("subscribe", src)
         .option("startingOffsets", "earliest").option("includeHeaders", "true").load()
         .select("key", "value", "partition", "headers")
         .writeStream.format("kwire").option("kafka.bootstrap.servers", tansu.bootstrap).option("topic", dst)
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    q.awaitTermination(180)
    assert q.exception() is None
    strip = lambda rows: sorted((r[1], r[2], r[4], r[3], r[6]) for r in rows)  # noqa: E731  partition, offset, value, key, headers
    assert strip(confluent_read(tansu.bootstrap, {dst: 2}, 200)) == strip(confluent_read(tansu.bootstrap, {src: 2}, 200))
