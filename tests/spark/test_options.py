"""Option parsing, range splitting and rate limiting: Spark's rules and
messages, checked without a broker or a Spark session."""

from __future__ import annotations

import pytest

from kwire.consumer import TopicPartition
from kwire.spark.errors import SparkOptionError
from kwire.spark.offsets import OffsetRange, split_ranges
from kwire.spark.options import parse_sink_options, parse_source_options
from kwire.spark.source import offsets_from_json, offsets_to_json, rate_limit

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def src(streaming: bool = False, **opts: str):
    return parse_source_options({**BOOT, **opts}, streaming=streaming)


def refused(match: str, streaming: bool = False, **opts: str) -> None:
    with pytest.raises(SparkOptionError, match=match):
        parse_source_options({**BOOT, **opts}, streaming=streaming)


def test_exactly_one_subscription():
    refused("One of the following options must be specified for Kafka source: subscribe, subscribePattern, assign")
    refused("Only one of the following options can be specified", subscribe="a", assign='{"a":[0]}')
    refused("No topics to subscribe to", subscribe=" , ")
    refused("Pattern to subscribe is empty", subscribePattern="  ")
    refused("No topicpartitions to assign", assign="a:0")
    assert src(subscribe="a, b").subscription.topics == ("a", "b")
    assert src(assign='{"a":[0,2],"b":[1]}').subscription.partitions == (("a", 0), ("a", 2), ("b", 1))
    sub = src(subscribePattern="ev-.*").subscription
    assert sub.matches("ev-1") and not sub.matches("xev-1")       # the whole name, as Java's matches()


def test_option_names_are_case_insensitive():
    o = src(SUBSCRIBE="a", STARTINGOFFSETS="earliest", includeheaders="TRUE", MinPartitions="4")
    assert o.include_headers and o.min_partitions == 4 and o.starting.kind == "earliest"


def test_kafka_options_spark_refuses():
    refused("'auto.offset.reset' is not supported", subscribe="a", **{"kafka.auto.offset.reset": "earliest"})
    refused("'key.deserializer' is not supported", subscribe="a", **{"kafka.key.deserializer": "x"})
    refused("'value.deserializer' is not supported", subscribe="a", **{"kafka.value.deserializer": "x"})
    refused("'enable.auto.commit' is not supported", subscribe="a", **{"kafka.enable.auto.commit": "false"})
    refused("'interceptor.classes' is not supported", subscribe="a", **{"kafka.interceptor.classes": "x"})
    with pytest.raises(SparkOptionError, match="'kafka.bootstrap.servers' must be specified"):
        parse_source_options({"subscribe": "a"}, streaming=False)
    refused("unknown kafka.* consumer option 'fetch.max.wait'.*did you mean", subscribe="a",
            **{"kafka.fetch.max.wait": "10"})
    with pytest.raises(SparkOptionError, match="'key.serializer' is not supported"):
        parse_sink_options({**BOOT, "kafka.key.serializer": "x"})
    with pytest.raises(SparkOptionError, match="'interceptor.classes' is not supported by kwire's sink"):
        parse_sink_options({**BOOT, "kafka.interceptor.classes": "tracing:Interceptor"})
    o = src(subscribe="a", **{"kafka.fetch.max.wait.ms": "10", "kafka.group.id": "g"})
    cfg = o.consumer_config("executor")
    assert cfg["fetch.max.wait.ms"] == "10" and cfg["auto.offset.reset"] == "none" and cfg["group.id"] == "g"


def test_batch_bounds_as_spark_checks_them():
    refused("starting offset can't be latest for batch queries", subscribe="a", startingOffsets="latest")
    refused("ending offset can't be earliest for batch queries", subscribe="a", endingOffsets="earliest")
    refused("startingOffsets for a-0 can't be latest", subscribe="a", startingOffsets='{"a":{"0":-1}}')
    refused("ending offset for a-0 can't be earliest", subscribe="a", endingOffsets='{"a":{"0":-2}}')
    refused("name different partitions", subscribe="a", startingOffsets='{"a":{"0":1}}',
            endingOffsets='{"a":{"1":5}}')
    refused("start offset 9 for a-0 is greater than the end offset 5", subscribe="a",
            startingOffsets='{"a":{"0":9}}', endingOffsets='{"a":{"0":5}}')
    refused("Expected e.g.", subscribe="a", startingOffsets='{"a":[1]}')
    refused("Expected a single long value, got soon", subscribe="a", startingTimestamp="soon")
    refused("must be positive", subscribe="a", minPartitions="0")
    refused("must be positive", subscribe="a", maxRecordsPerPartition="-3")
    refused("failOnDataLoss' must be true or false", subscribe="a", failOnDataLoss="maybe")
    o = src(subscribe="a")
    assert (o.starting.kind, o.ending.kind) == ("earliest", "latest")


def test_streaming_defaults_and_refusals():
    refused("ending offset not valid in streaming queries", streaming=True, subscribe="a", endingOffsets="latest")
    refused("ending timestamp not valid in streaming queries", streaming=True, subscribe="a",
            endingOffsetsByTimestamp='{"a":{"0":1}}')
    o = src(streaming=True, subscribe="a", maxOffsetsPerTrigger="100")
    assert o.starting.kind == "latest" and o.ending is None and o.max_offsets_per_trigger == 100


def test_timestamp_options_take_precedence_as_in_spark():
    o = src(subscribe="a", startingTimestamp="1000", startingOffsetsByTimestamp='{"a":{"0":5}}',
            startingOffsets="earliest", startingOffsetsByTimestampStrategy="LATEST")
    assert (o.starting.kind, o.starting.timestamp, o.starting.no_match) == ("timestamp", 1000, "latest")
    o = src(subscribe="a", endingOffsetsByTimestamp='{"a":{"0":5}}', endingOffsets="latest")
    assert o.ending.kind == "timestamps" and o.ending.offsets == {("a", 0): 5}


def test_split_ranges_like_spark():
    a, b = OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 0, 10)
    assert split_ranges([a, b, OffsetRange("t", 2, 7, 7)], None, None) == [a, b]      # empty dropped
    # minPartitions: the large range is cut, the small one (its share rounds to 1) kept whole
    assert split_ranges([a, b], 5, None) == [OffsetRange("t", 0, 0, 25), OffsetRange("t", 0, 25, 50),
                                             OffsetRange("t", 0, 50, 75), OffsetRange("t", 0, 75, 100), b]
    assert split_ranges([a, b], 2, None) == [a, b]
    # maxRecordsPerPartition: pieces of at most that many offsets, covering every offset once
    pieces = split_ranges([a, b], None, 30)
    assert all(p.size <= 30 for p in pieces) and len(pieces) == 5
    for r in (a, b):
        mine = [p for p in pieces if p.partition == r.partition]
        assert mine[0].start == r.start and mine[-1].end == r.end
        assert all(x.end == y.start for x, y in zip(mine, mine[1:]))
    # both: maxRecordsPerPartition first, then minPartitions if still too few
    assert len(split_ranges([a], 8, 50)) == 8


def test_offsets_json_and_rate_limit():
    offsets = {TopicPartition("t", 1): 5, TopicPartition("t", 0): 3, TopicPartition("u", 0): 0}
    assert offsets_to_json(offsets) == {"t": {"0": 3, "1": 5}, "u": {"0": 0}}
    assert offsets_from_json(offsets_to_json(offsets)) == offsets
    t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
    start, end = {t0: 0, t1: 100}, {t0: 900, t1: 200}
    assert rate_limit(100, start, end) == {t0: 90, t1: 110}              # in proportion to what is available
    assert rate_limit(5, {t0: 0, t1: 0}, {t0: 1000, t1: 1}) == {t0: 4, t1: 1}   # small ones not starved
    assert rate_limit(10**9, start, end) == end                           # never past the end


def test_spark_batches_from_either_timestamp_unit_and_shared_columns():
    """to_spark_batch takes the decoder's columns in ms (cast) or us (as
    they are), and fills topic and partition from arrays it keeps per value
    (slices): batches of other topics, partitions and lengths must not mix."""
    import kwire
    from kwire.spark.schema import arrow_schema, to_spark_batch

    b = kwire.RecordBatchBuilder(None)
    for i in range(70_000):
        b.append(b"v%d" % i, key=b"k", timestamp=1_700_000_000_000 + i)
    data = b.build()
    for unit in ("ms", "us"):
        rb = kwire.ColumnarDecoder(timestamp_unit=unit).decode(data).record_batch
        for topic, partition, n in (("a", 0, 10), ("b", 3, 70_000), ("a", 0, 70_000), ("a", 1, 5)):
            sb = to_spark_batch(rb.slice(0, n), topic, partition, False)
            sb.validate(full=True)
            assert sb.schema == arrow_schema(False)
            assert sb.column("topic").to_pylist() == [topic] * n
            assert sb.column("partition").to_pylist() == [partition] * n
            assert sb.column("timestamp").cast("int64").to_pylist()[-1] == (1_700_000_000_000 + n - 1) * 1000


def test_data_loss_messages_of_the_executor(caplog):
    """What a task says when its offsets are out of the log (constructed: the
    live case, records deleted on Apache Kafka, is in test_batch.py)."""
    from kwire.spark.errors import DataLossError
    from kwire.spark.ranges import _lost

    class LogStartsAt:
        def __init__(self, begin: int) -> None:
            self.begin = begin

        def beginning_offsets(self, tps):
            return {tp: self.begin for tp in tps}

    tp, r = TopicPartition("t", 3), OffsetRange("t", 3, 10, 100)
    with pytest.raises(DataLossError, match=r"^Cannot fetch offset 10 of t-3: the partition now starts at 40, offsets "
                                            r"10 to 40 are gone\. Some data may have been lost .*failOnDataLoss"):
        _lost(tp, 10, r, True, LogStartsAt(40))
    with caplog.at_level("WARNING", logger="kwire.spark.ranges"):
        assert _lost(tp, 10, r, False, LogStartsAt(40)) == 40
        assert _lost(tp, 10, r, False, LogStartsAt(500)) == 500              # the whole range is gone
        assert _lost(tp, 120, OffsetRange("t", 3, 120, 150), False, LogStartsAt(40)) == 150   # past the log end
    assert [m.getMessage() for m in caplog.records] == [
        "Cannot fetch offset 10 of t-3: the partition now starts at 40, offsets 10 to 40 are gone. "
        "failOnDataLoss is false: skipping them, reading on from offset 40.",
        "Cannot fetch offset 10 of t-3: the partition now starts at 500, offsets 10 to 100 are gone. "
        "failOnDataLoss is false: skipping them.",
        "Cannot fetch offsets 120 to 150 of t-3: the partition ends before 120. failOnDataLoss is false: skipping them."]


def test_trigger_and_retry_options():
    o = src(streaming=True, subscribe="a", minOffsetsPerTrigger="50", maxTriggerDelay="30s",
            **{"fetchOffset.numRetries": "5", "fetchOffset.retryIntervalMs": "0"})
    assert (o.min_offsets_per_trigger, o.max_trigger_delay_ms) == (50, 30_000)
    assert (o.fetch_offset_num_retries, o.fetch_offset_retry_interval_ms) == (5, 0)
    o = src(streaming=True, subscribe="a")
    assert (o.min_offsets_per_trigger, o.max_trigger_delay_ms) == (None, 15 * 60_000)      # Spark's 15m default
    assert (o.fetch_offset_num_retries, o.fetch_offset_retry_interval_ms) == (3, 1000)
    from kwire.spark.options import parse_duration_ms
    assert [parse_duration_ms(s, "x") for s in ("250", "250ms", "2s", "3m", "3min", "1h", "1d", "4000us")] == [
        250, 250, 2000, 180_000, 180_000, 3_600_000, 86_400_000, 4]
    refused("maxTriggerDelay': invalid time string '5 minutes'", streaming=True, subscribe="a",
            maxTriggerDelay="5 minutes")
    refused("minOffsetsPerTrigger must be positive", streaming=True, subscribe="a", minOffsetsPerTrigger="0")
    refused(r"The value of minOffsetPerTrigger\(50\) is higher than the maxOffsetsPerTrigger\(40\)\.", streaming=True,
            subscribe="a", minOffsetsPerTrigger="50", maxOffsetsPerTrigger="40")
    refused("fetchOffset.numRetries must be positive", subscribe="a", **{"fetchOffset.numRetries": "0"})
    refused("fetchOffset.retryIntervalMs' must not be negative", subscribe="a",
            **{"fetchOffset.retryIntervalMs": "-1"})


def test_unknown_and_misplaced_options_are_warned_about(caplog):
    with caplog.at_level("WARNING", logger="kwire.spark.options"):
        src(subscribe="a", startingOffset="earliest", maxOffsetsPerTrigger="5", minOffsetsPerTrigger="1",
            maxTriggerDelay="1s")
        parse_sink_options({**BOOT, "topic": "t", "failOnDataLoss": "false", "tpoic": "x"})
        src(subscribe="a", **{"kafka.session.timeout.ms": "6000"})
    said = [r.getMessage() for r in caplog.records]
    assert "option 'startingoffset' is not an option of the Kafka source; it is ignored (did you mean " \
           "'startingoffsets'?)" in said
    for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
        assert f"{name} option ignored in batch queries" in said                   # Spark's warnings
    assert "option 'failondataloss' is a Kafka source option: the sink ignores it" in said
    assert "option 'tpoic' is not an option of the Kafka sink; it is ignored (did you mean 'topic'?)" in said
    assert "Kafka option 'kafka.session.timeout.ms' has no effect: the source's consumers assign their " \
           "partitions and join no consumer group" in said
    assert len(said) == 7


def test_group_ids_are_the_connectors(caplog):
    """``groupIdPrefix`` + a unique id (``-executor`` on the executors), or
    ``kafka.group.id`` exactly, with Spark's warnings; the driver's lookups
    use no group (the connector's driver uses an admin client)."""
    import re

    o = src(streaming=True, subscribe="a")
    assert re.fullmatch(r"spark-kafka-source-[0-9a-f-]{36}", o.group_id)
    assert o.consumer_config("executor")["group.id"] == f"{o.group_id}-executor"
    assert "group.id" not in o.consumer_config("driver")
    assert src(subscribe="a").group_id.startswith("spark-kafka-relation-")
    assert src(subscribe="a", groupIdPrefix="etl").consumer_config("executor")["group.id"].startswith("etl-")
    assert src(subscribe="a").group_id != src(subscribe="a").group_id
    with caplog.at_level("WARNING", logger="kwire.spark.options"):
        o = src(subscribe="a", groupIdPrefix="etl", **{"kafka.group.id": "mine"})
    assert o.consumer_config("executor")["group.id"] == "mine" and "group.id" not in o.consumer_config("driver")
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "Kafka option 'kafka.group.id' has been set on this query" in said
    assert "Option groupIdPrefix will be ignored as option kafka.group.id has been set." in said


def test_jaas_config_as_kwire_sasl_options():
    plain = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";'
    scram = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="p";'
    for module, mechanism in ((plain, "PLAIN"), (scram, "SCRAM-SHA-256"), (scram, "scram-sha-512")):
        o = src(subscribe="a", **{"kafka.sasl.jaas.config": module, "kafka.sasl.mechanism": mechanism,
                                  "kafka.security.protocol": "SASL_PLAINTEXT"})
        cfg = o.consumer_config("executor")
        assert (cfg["sasl.plain.username"], cfg["sasl.plain.password"]) == ("u", "p")
        assert "sasl.jaas.config" not in cfg
        w = parse_sink_options({**BOOT, "kafka.sasl.jaas.config": module, "kafka.sasl.mechanism": mechanism})
        assert w.producer_config()["sasl.plain.username"] == "u"
    refused("needs kafka.sasl.mechanism PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; it is not set \\(Kafka's default is "
            "GSSAPI", subscribe="a", **{"kafka.sasl.jaas.config": plain})
    refused("login module com.example.CustomLoginModule is not supported by kwire", subscribe="a",
            **{"kafka.sasl.jaas.config": "com.example.CustomLoginModule required;", "kafka.sasl.mechanism": "PLAIN"})
    refused("kafka.sasl.password contradicts kafka.sasl.jaas.config", subscribe="a",
            **{"kafka.sasl.jaas.config": plain, "kafka.sasl.mechanism": "PLAIN", "kafka.sasl.password": "q"})


def test_offsets_behind_latest_is_the_connectors_arithmetic():
    from kwire.spark.metrics import java_double, offsets_behind_latest

    progress = {"sources": [{"endOffset": '{"t":{"0":100,"1":50},"u":{"0":7}}',
                             "latestOffset": '{"t":{"0":150,"1":50},"u":{"0":10}}', "metrics": {}}]}
    assert offsets_behind_latest(progress) == {"minOffsetsBehindLatest": "0", "maxOffsetsBehindLatest": "50",
                                               "avgOffsetsBehindLatest": "17.666666666666668"}
    assert offsets_behind_latest({"sources": [{"endOffset": None, "latestOffset": None}]}) == {}
    assert [java_double(x) for x in (0.0, 1.0, 12.5, 0.001, 0.0001, 1e7, 12345678.9, 9999999.0)] == [
        "0.0", "1.0", "12.5", "0.001", "1.0E-4", "1.0E7", "1.23456789E7", "9999999.0"]


def test_the_sinks_producer_batches_256_kib_unless_told():
    """A task hands its producer whole Arrow batches: the sink's producers
    default batch.size to 256 KiB, not Java's 16 KiB; kafka.batch.size wins."""
    from kwire.config import PRODUCER, resolve
    from kwire.spark.options import SINK_BATCH_SIZE

    assert SINK_BATCH_SIZE == 262_144
    assert resolve(PRODUCER, parse_sink_options({**BOOT, "topic": "t"}).producer_config())["batch_size"] == 262_144
    told = parse_sink_options({**BOOT, "topic": "t", "kafka.batch.size": "16384"}).producer_config()
    assert resolve(PRODUCER, told)["batch_size"] == 16384


@pytest.mark.parametrize("java_class, kind, ignore_keys", [
    ("org.apache.kafka.clients.producer.RoundRobinPartitioner", "RoundRobinPartitioner", False),
    ("org.apache.kafka.clients.producer.internals.DefaultPartitioner", None, False),
    ("org.apache.kafka.clients.producer.UniformStickyPartitioner", None, True),
])
def test_the_sinks_partitioner_class_is_one_of_kwires_built_ins(java_class, kind, ignore_keys):
    """``kafka.partitioner.class`` names Java's partitioners: the sink's
    producers get kwire's partitioner that does what that class does."""
    from kwire.config import PRODUCER, resolve
    from kwire.partitioners import resolve_partitioner

    cfg = resolve(PRODUCER, parse_sink_options({**BOOT, "topic": "t", "kafka.partitioner.class": java_class})
                  .producer_config())
    partitioner, ignore = resolve_partitioner(cfg["partitioner"])
    assert (type(partitioner).__name__ if partitioner is not None else None, ignore) == (kind, ignore_keys)


def test_the_sink_refuses_a_partitioner_class_kwire_does_not_have():
    with pytest.raises(SparkOptionError, match=r"partitioner\.class.*unknown partitioner 'com\.acme\.MyPartitioner'"):
        parse_sink_options({**BOOT, "topic": "t", "kafka.partitioner.class": "com.acme.MyPartitioner"})
