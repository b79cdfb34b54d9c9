"""Batch reads through ``format("kwire")`` on local[2], on Tansu and on
Apache Kafka, compared record for record with what confluent-kafka
(librdkafka) reads."""

from __future__ import annotations

import time

import pytest
from pyspark.errors import PySparkException

from kwire.consumer import Consumer, TopicPartition
from kwire.producer import Producer
from kwire.spark.offsets import OffsetRange, OffsetReader
from kwire.spark.options import parse_source_options
from kwire.spark.ranges import read_range
from kwire.spark.schema import arrow_schema, spark_schema

from .conftest import confluent_read, kwire_read, new_topic, offsets_of, produce, spark_rows

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@pytest.fixture(scope="module")
def codec_topics(broker):
    """One 3-partition topic per codec, 600 records each, and what
    confluent-kafka reads from them."""
    prefix = f"codec{time.monotonic_ns()}"
    topics = {}
    for codec in CODECS:
        name = new_topic(broker.bootstrap, 3, prefix=f"{prefix}-{codec}")
        produce(broker.bootstrap, name, 600, 3, codec=codec)
        topics[name] = 3
    return prefix, topics, confluent_read(broker.bootstrap, topics, 600 * len(CODECS))


def test_every_codec_record_for_record_as_confluent_reads_it(spark, broker, codec_topics):
    prefix, topics, expected = codec_topics
    assert len(expected) == 600 * len(CODECS)
    df = kwire_read(spark, broker.bootstrap, subscribePattern=f"{prefix}-.*", includeHeaders="true")
    assert df.schema == spark_schema(True)
    got = spark_rows(df)
    assert got == expected
    assert any(r[3] is None for r in got) and any(r[6] is None for r in got)          # null keys, no headers
    assert any(r[6] == [("n", b"0"), ("empty", b"")] for r in got)


def test_without_headers_and_with_subscribe_list(spark, broker, codec_topics):
    _, topics, expected = codec_topics
    names = sorted(topics)[:2]
    df = kwire_read(spark, broker.bootstrap, subscribe=",".join(names))
    assert df.schema == spark_schema(False) and "headers" not in df.columns
    assert spark_rows(df) == [r[:6] + (None,) for r in expected if r[0] in names]


def test_arrow_batches_match_sparks_arrow_schema_exactly(broker, codec_topics):
    """What an executor hands Spark, checked against PySpark's own Arrow
    schema of the Kafka schema (Spark refuses any difference)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    _, topics, expected = codec_topics
    topic = sorted(topics)[0]
    opts = parse_source_options({"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic,
                                 "includeHeaders": "true"}, streaming=False)
    for headers in (True, False):
        assert arrow_schema(headers).equals(to_arrow_schema(spark_schema(headers), timezone="UTC"))
    batches = list(read_range(OffsetRange(topic, 1, 10, 150), opts.consumer_config("executor"), True, True, 30_000))
    assert all(b.schema.equals(arrow_schema(True)) for b in batches)
    offsets = [o for b in batches for o in b.column("offset").to_pylist()]
    assert offsets == list(range(10, 150))                   # end exclusive, whatever the fetch brought
    for b in batches:
        b.validate(full=True)


def test_offset_bounds_json_earliest_latest(spark, broker):
    topic = new_topic(broker.bootstrap, 2)
    produce(broker.bootstrap, topic, 200, 2)
    df = kwire_read(spark, broker.bootstrap, subscribe=topic,
                    startingOffsets=f'{{"{topic}":{{"0":10,"1":-2}}}}',
                    endingOffsets=f'{{"{topic}":{{"0":50,"1":-1}}}}')
    got = offsets_of(spark_rows(df))
    assert got == {(topic, 0): list(range(10, 50)), (topic, 1): list(range(0, 100))}
    # assign: only the named partitions
    df = kwire_read(spark, broker.bootstrap, assign=f'{{"{topic}":[1]}}', endingOffsets=f'{{"{topic}":{{"1":7}}}}')
    assert offsets_of(spark_rows(df)) == {(topic, 1): list(range(0, 7))}
    # specific offsets must name every partition, as in Spark
    with pytest.raises(PySparkException, match="you must specify all TopicPartitions"):
        kwire_read(spark, broker.bootstrap, subscribe=topic, startingOffsets=f'{{"{topic}":{{"0":1}}}}').count()


def test_latest_is_the_log_end_even_where_list_offsets_trails(broker):
    """kwire's latest is the log end, batches of many records: on Kafka
    ListOffsets latest says so already; Tansu 0.6.0 answers it with the last
    batch's base offset + 1, and kwire takes the Fetch high watermark."""
    topic = new_topic(broker.bootstrap, 1)
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=50) as p:
        for i in range(300):
            p.send(topic, b"%d" % i, partition=0)
    tp = TopicPartition(topic, 0)
    with Consumer(bootstrap_servers=broker.bootstrap) as c:
        listed = c.end_offsets([tp])[tp]
    opts = parse_source_options({"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic}, streaming=False)
    with OffsetReader(opts) as reader:
        assert reader.latest([tp]) == {tp: 300}
    if broker.is_tansu:
        assert listed <= 300      # Tansu 0.6.0: ListOffsets latest trails the log (the last batch's base offset + 1)
    else:
        assert listed == 300


def test_timestamp_bounds(spark, broker):
    """Records written in two rounds around a moment T (Tansu looks
    timestamps up by arrival time; kwire's producer stamps records with the
    send time, so both clocks put round one before T and round two after)."""
    topic = new_topic(broker.bootstrap, 2)
    produce(broker.bootstrap, topic, 40, 2)
    time.sleep(0.05)
    t = int(time.time() * 1000)
    time.sleep(0.05)
    produce(broker.bootstrap, topic, 60, 2, start=40)
    second = {(topic, p): [o for o in range(20, 50)] for p in range(2)}
    first = {(topic, p): list(range(0, 20)) for p in range(2)}
    got = offsets_of(spark_rows(kwire_read(spark, broker.bootstrap, subscribe=topic, startingTimestamp=str(t))))
    assert got == second
    assert offsets_of(spark_rows(kwire_read(spark, broker.bootstrap, subscribe=topic, endingTimestamp=str(t)))) == first
    by_ts = f'{{"{topic}":{{"0":{t},"1":0}}}}'
    got = offsets_of(spark_rows(kwire_read(spark, broker.bootstrap, subscribe=topic, startingOffsetsByTimestamp=by_ts)))
    assert got == {(topic, 0): list(range(20, 50)), (topic, 1): list(range(0, 50))}
    future = str(t + 3_600_000)
    with pytest.raises(PySparkException, match="No offset matched from request of topic-partition"):
        kwire_read(spark, broker.bootstrap, subscribe=topic, startingTimestamp=future).count()
    assert kwire_read(spark, broker.bootstrap, subscribe=topic, startingTimestamp=future,
                      startingOffsetsByTimestampStrategy="latest").count() == 0
    # an ending timestamp with no record after it means latest
    assert kwire_read(spark, broker.bootstrap, subscribe=topic, endingTimestamp=future).count() == 100


def test_min_partitions_and_max_records_per_partition(spark, broker):
    topic = new_topic(broker.bootstrap, 2)
    produce(broker.bootstrap, topic, 1000, 2)
    plain = spark_rows(kwire_read(spark, broker.bootstrap, subscribe=topic))
    df = kwire_read(spark, broker.bootstrap, subscribe=topic, minPartitions="7")
    assert df.rdd.getNumPartitions() >= 6
    assert spark_rows(df) == plain
    df = kwire_read(spark, broker.bootstrap, subscribe=topic, maxRecordsPerPartition="100")
    assert df.rdd.getNumPartitions() == 10
    assert spark_rows(df) == plain and len(plain) == 1000


def test_data_loss_past_the_log_end(spark, broker):
    """Ending offsets past the log end: failOnDataLoss=true fails the query,
    false reads what exists. (Offsets deleted from the log's start: below.)"""
    topic = new_topic(broker.bootstrap, 1)
    produce(broker.bootstrap, topic, 30, 1)
    end = f'{{"{topic}":{{"0":80}}}}'
    with pytest.raises(PySparkException, match="DataLossError"):
        kwire_read(spark, broker.bootstrap, subscribe=topic, endingOffsets=end).count()
    assert kwire_read(spark, broker.bootstrap, subscribe=topic, endingOffsets=end, failOnDataLoss="false").count() == 30


def test_data_loss_records_deleted_at_the_start(spark, broker, caplog):
    """startingOffsets before the log start (records deleted by DeleteRecords),
    as in Spark's Kafka source: failOnDataLoss=true fails the query naming
    the partition and the offsets; false reads from the log start on, with
    one warning. ``earliest`` is the new log start (no loss)."""
    from kwire.admin import Admin
    from kwire.spark.errors import DataLossError

    if broker.is_tansu:
        pytest.skip("Tansu 0.6.0 drops the connection on DeleteRecords")
    topic = new_topic(broker.bootstrap, 2)
    produce(broker.bootstrap, topic, 200, 2)
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        assert admin.delete_records({(topic, 0): 40}) == {TopicPartition(topic, 0): 40}
    start = f'{{"{topic}":{{"0":10,"1":10}}}}'
    with pytest.raises(PySparkException, match=rf"DataLossError: Cannot fetch offset 10 of {topic}-0: the partition now "
                                               r"starts at 40, offsets 10 to 40 are gone"):
        kwire_read(spark, broker.bootstrap, subscribe=topic, startingOffsets=start).count()
    got = kwire_read(spark, broker.bootstrap, subscribe=topic, startingOffsets=start, failOnDataLoss="false")
    after = {(topic, 0): list(range(40, 100)), (topic, 1): list(range(10, 100))}
    assert offsets_of(spark_rows(got)) == after
    got = offsets_of(spark_rows(kwire_read(spark, broker.bootstrap, subscribe=topic)))
    assert got == {(topic, 0): list(range(40, 100)), (topic, 1): list(range(0, 100))}
    # the executor's side in this process: one warning for the skipped offsets
    opts = parse_source_options({"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic}, streaming=False)
    cfg = opts.consumer_config("executor")
    with pytest.raises(DataLossError, match=rf"offset 10 of {topic}-0: the partition now starts at 40, offsets 10 to 40 "
                                            r"are gone\. Some data may have been lost"):
        list(read_range(OffsetRange(topic, 0, 10, 100), cfg, False, True, 30_000))
    with caplog.at_level("WARNING", logger="kwire.spark.ranges"):
        batches = list(read_range(OffsetRange(topic, 0, 10, 100), cfg, False, False, 30_000))
    assert [o for b in batches for o in b.column("offset").to_pylist()] == list(range(40, 100))
    warned = [r.getMessage() for r in caplog.records if r.name == "kwire.spark.ranges"]
    assert len(warned) == 1 and warned[0].endswith("offsets 10 to 40 are gone. failOnDataLoss is false: skipping them, "
                                                   "reading on from offset 40.")


def test_data_loss_topic_deleted_before_the_read(broker):
    """A range planned for a topic that is deleted before the executor reads it."""
    from kwire.admin import Admin
    from kwire.spark.errors import DataLossError

    topic = new_topic(broker.bootstrap, 1)
    produce(broker.bootstrap, topic, 20, 1)
    opts = parse_source_options({"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic}, streaming=False)
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.delete_topics([topic])
    cfg = opts.consumer_config("executor")
    with pytest.raises(DataLossError, match="does not exist any more"):
        list(read_range(OffsetRange(topic, 0, 0, 20), cfg, False, True, 30_000))
    assert list(read_range(OffsetRange(topic, 0, 0, 20), cfg, False, False, 30_000)) == []


def test_refused_options_reach_the_user(spark, broker):
    with pytest.raises(PySparkException, match="'auto.offset.reset' is not supported"):
        kwire_read(spark, broker.bootstrap, subscribe="x", **{"kafka.auto.offset.reset": "earliest"}).count()
    with pytest.raises(PySparkException, match="fixed schema"):
        (spark.read.format("kwire").schema("value binary").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("subscribe", "x").load().count())
