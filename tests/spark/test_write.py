"""Writes through ``format("kwire")``, batch and streaming, on Tansu and on
Apache Kafka, read back by confluent-kafka and by ``format("kwire")``."""

from __future__ import annotations

import time

import pytest
from pyspark.errors import PySparkException

from kwire.producer import InvalidPartitionError

from .conftest import add_partitions, confluent_read, kwire_read, kwire_write, new_topic, produce, spark_rows


def test_batch_write_then_read_back(spark, broker):
    topic = new_topic(broker.bootstrap, 3)
    rows = [(None if i % 4 == 0 else f"k{i}", f"v{i}".encode(), i % 3,
             [("h", f"{i}".encode()), ("z", b"")] if i % 2 else None) for i in range(300)]
    df = spark.createDataFrame(rows, "key string, value binary, partition int, "
                                     "headers array<struct<key string, value binary>>")
    kwire_write(df, broker.bootstrap, topic=topic).save()
    got = confluent_read(broker.bootstrap, {topic: 3}, 300)
    assert sorted((r[1], r[4], r[3], r[6]) for r in got) == sorted(
        (p, v, None if k is None else k.encode(), h) for k, v, p, h in rows)      # values are unique
    back = spark_rows(kwire_read(spark, broker.bootstrap, subscribe=topic, includeHeaders="true"))
    assert back == got


def test_topic_column_and_the_topic_option_overriding_it(spark, broker):
    a, b, c = (new_topic(broker.bootstrap, 1) for _ in range(3))
    df = spark.createDataFrame([(a, "x1"), (b, "x2"), (b, "x3")], "topic string, value string")
    kwire_write(df, broker.bootstrap).save()
    assert [r[4] for r in confluent_read(broker.bootstrap, {a: 1}, 1)] == [b"x1"]
    assert sorted(r[4] for r in confluent_read(broker.bootstrap, {b: 1}, 2)) == [b"x2", b"x3"]
    kwire_write(df, broker.bootstrap, topic=c).save()
    assert sorted(r[4] for r in confluent_read(broker.bootstrap, {c: 1}, 3)) == [b"x1", b"x2", b"x3"]


def test_schema_checks_as_in_spark(spark, broker):
    w = lambda df: kwire_write(df, broker.bootstrap)  # noqa: E731
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


def test_a_send_error_fails_the_task(spark, broker):
    """A record for a partition the topic does not have is refused by
    send(): the task fails at once, naming the partition."""
    topic = new_topic(broker.bootstrap, 1)
    df = spark.createDataFrame([("v", 7)], "value string, partition int")
    t = time.monotonic()
    with pytest.raises(PySparkException, match="partition 7 does not exist"):
        kwire_write(df, broker.bootstrap, topic=topic, **{"kafka.delivery.timeout.ms": "1500"}).save()
    assert time.monotonic() - t < 120


def test_streaming_copy_from_topic_to_topic(spark, broker, tmp_path):
    src, dst = new_topic(broker.bootstrap, 2), new_topic(broker.bootstrap, 2)
    produce(broker.bootstrap, src, 200, 2)
    q = (spark.readStream.format("kwire").option("kafka.bootstrap.servers", broker.bootstrap).option("subscribe", src)
         .option("startingOffsets", "earliest").option("includeHeaders", "true").load()
         .select("key", "value", "partition", "headers")
         .writeStream.format("kwire").option("kafka.bootstrap.servers", broker.bootstrap).option("topic", dst)
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    q.awaitTermination(180)
    assert q.exception() is None
    strip = lambda rows: sorted((r[1], r[2], r[4], r[3], r[6]) for r in rows)  # noqa: E731  partition, offset, value, key, headers
    assert strip(confluent_read(broker.bootstrap, {dst: 2}, 200)) == strip(
        confluent_read(broker.bootstrap, {src: 2}, 200))


def test_partitions_added_between_two_writes(broker):
    """A worker's cached producer and partitions added since its last write
    (CreatePartitions): a record for a new partition is sent, not refused on
    the producer's old metadata (the producer looks at fresh metadata before
    refusing a partition past the count it knows). Run in this process, a
    worker to write_batches, so both writes share one cached producer."""
    import pyarrow as pa

    from kwire.spark.options import parse_sink_options
    from kwire.spark.sink import write_batches

    if broker.is_tansu:
        pytest.skip("Tansu 0.6.0 cannot add partitions to a topic (it offers no CreatePartitions)")
    topic = new_topic(broker.bootstrap, 1)
    sink = parse_sink_options({"kafka.bootstrap.servers": broker.bootstrap, "topic": topic})

    def rows(*pairs):
        return iter([pa.RecordBatch.from_pydict({"value": [v for v, _ in pairs], "partition": [p for _, p in pairs]},
                                                schema=pa.schema([("value", pa.binary()), ("partition", pa.int32())]))])

    assert write_batches(rows((b"a", 0)), sink).records == 1
    add_partitions(broker.bootstrap, topic, 3)
    assert write_batches(rows((b"b", 2), (b"c", 1), (b"d", 0)), sink).records == 3
    got = confluent_read(broker.bootstrap, {topic: 3}, 4)
    assert sorted((r[1], r[4]) for r in got) == [(0, b"a"), (0, b"d"), (1, b"c"), (2, b"b")]
    with pytest.raises(InvalidPartitionError, match="partition 3 does not exist"):
        write_batches(rows((b"e", 3)), sink)
