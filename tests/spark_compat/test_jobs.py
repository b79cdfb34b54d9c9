"""``kwire.spark.read`` and ``kwire.spark.write`` (kwire.spark.jobs: plain
Spark jobs through ``mapInArrow``) in a release's virtualenv, 3.5 on:
the same rows and schema as Spark's own connector (``format("kafka")``,
where Maven Central has it for the release) and as ``format("kwire")``
(where the release has the Python Data Source API, 4.0 on), on the same
topics; writes read back; option errors as ``format("kwire")`` raises
them; the plan made by ``read()`` (no Spark job, fixed ranges); and
Structured Streaming's ``foreachBatch`` writing each micro-batch with
``write`` (3.5's way to a streaming sink).

Each broker gets one data set (:func:`data`): two topics (3 and 2
partitions) read by every read case. On Tansu 0.6.0 ListOffsets ``latest``
trails the log (see tests/spark/test_connector_equivalence.py), so the
connector is always given the partitions' real ends as JSON where kwire
says ``latest``: the rows agreeing shows kwire's ``latest`` is the end.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

import pytest
from compat_util import new_topic, produce, rows

import kwire.spark
from kwire.spark import SparkOptionError

#: Records per partition of the data set's topics.
PER_PARTITION = {3: 60, 2: 40}


@dataclass
class Data:
    bootstrap: str
    prefix: str                       # both topics' names start with it (subscribePattern)
    a: str                            # 3 partitions
    b: str                            # 2 partitions

    @property
    def topics(self) -> Dict[str, int]:
        return {self.a: 3, self.b: 2}

    def end(self, topic: str, partition: int) -> int:
        return PER_PARTITION[self.topics[topic]]


@pytest.fixture(scope="module")
def data(broker) -> Data:
    prefix = f"jobs{uuid.uuid4().hex[:8]}"
    a, b = new_topic(broker, 3, prefix=prefix), new_topic(broker, 2, prefix=prefix)
    produce(broker, a, PER_PARTITION[3] * 3, 3)
    produce(broker, b, PER_PARTITION[2] * 2, 2)
    return Data(broker, prefix, a, b)


def _options(data: Data, **options: str) -> Dict[str, str]:
    return {"kafka.bootstrap.servers": data.bootstrap, **options}


def _partitions(data: Data, options: Dict[str, str]) -> List[Tuple[str, int]]:
    if "assign" in options:
        return sorted((t, p) for t, ps in json.loads(options["assign"]).items() for p in ps)
    if "subscribePattern" in options:
        names = [t for t in data.topics if re.fullmatch(options["subscribePattern"], t)]
    else:
        names = options["subscribe"].split(",")
    return sorted((t, p) for t in names for p in range(data.topics[t]))


def _connector_options(data: Data, options: Dict[str, str]) -> Dict[str, str]:
    """``options`` with the real ends wherever they say latest (Tansu: see the module doc)."""
    given = json.loads(options["endingOffsets"]) if options.get("endingOffsets", "latest") != "latest" else {}
    ends: Dict[str, Dict[str, int]] = {}
    for t, p in _partitions(data, options):
        e = given.get(t, {}).get(str(p), -1)
        ends.setdefault(t, {})[str(p)] = data.end(t, p) if e == -1 else e
    return {**options, "endingOffsets": json.dumps(ends)}


def _references(spark, release, data: Data, options: Dict[str, str]) -> Dict[str, Any]:
    """The same read through ``format("kafka")`` and ``format("kwire")``, where the release has them."""
    out = {}
    if release["jars"]:
        reader = spark.read.format("kafka")
        for k, v in _connector_options(data, options).items():
            reader = reader.option(k, v)
        out["kafka"] = reader.load()
    if kwire.spark.FEATURES.data_source:
        reader = spark.read.format("kwire")
        for k, v in options.items():
            reader = reader.option(k, v)
        out["kwire"] = reader.load()
    assert out, f"PySpark {release['pyspark']}: neither format(\"kafka\") nor format(\"kwire\") to compare with"
    return out


def _check_read(spark, release, data: Data, expected: int, **options: str) -> None:
    options = _options(data, **options)
    df = kwire.spark.read(spark, **options)
    got = rows(df)
    assert len(got) == expected
    for name, ref in _references(spark, release, data, options).items():
        assert df.schema == ref.schema, name
        assert got == rows(ref), name


def test_read_equals_the_connector_and_format_kwire(spark, release, data):
    """Every record of both topics, headers included; and without headers
    (a subscribe list): row for row, column for column."""
    _check_read(spark, release, data, 60 * 3, subscribe=data.a, includeHeaders="true", startingOffsets="earliest")
    _check_read(spark, release, data, 60 * 3 + 40 * 2, subscribe=f"{data.a},{data.b}")


def test_offsets_json_assign_and_subscribe_pattern(spark, release, data):
    start = {data.a: {"0": 7, "2": -2}, data.b: {"1": 3}}
    end = {data.a: {"0": 50, "2": -1}, data.b: {"1": 33}}
    _check_read(spark, release, data, 43 + 60 + 30, assign=json.dumps({data.a: [0, 2], data.b: [1]}),
                startingOffsets=json.dumps(start), endingOffsets=json.dumps(end), includeHeaders="true")
    _check_read(spark, release, data, 60 * 3 + 40 * 2, subscribePattern=f"{data.prefix}-.*")


def test_one_spark_partition_per_range(spark, data):
    """minPartitions and maxRecordsPerPartition split as the data source
    splits them (``split_ranges``), one Spark partition per range."""
    df = kwire.spark.read(spark, **_options(data, subscribe=data.a, maxRecordsPerPartition="25"))
    assert df.rdd.getNumPartitions() == 3 * 3          # 60 offsets a partition: 25 + 25 + 10... as 20 + 20 + 20
    assert df.rdd.glom().map(len).collect() == [20] * 9
    assert kwire.spark.read(spark, **_options(data, subscribe=data.b, minPartitions="5")).rdd.getNumPartitions() >= 5


def test_the_plan_is_made_by_read_and_runs_no_job(spark, kafka_bootstrap):
    """read() resolves the offsets and starts no Spark job; every action on
    its DataFrame reads those offsets, records produced since included
    only by a new read(). An empty topic gives no rows, with the schema."""
    options = {"kafka.bootstrap.servers": kafka_bootstrap, "subscribe": new_topic(kafka_bootstrap, 2, prefix="jobs-plan")}
    sc = spark.sparkContext
    group = f"kwire-plan-{uuid.uuid4().hex}"
    sc.setJobGroup(group, "kwire.spark.read's planning")
    try:
        empty = kwire.spark.read(spark, **options)
        produce(kafka_bootstrap, options["subscribe"], 20, 2)
        df = kwire.spark.read(spark, **options, includeHeaders="true")
        assert list(sc.statusTracker().getJobIdsForGroup(group)) == []
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert empty.schema == kwire.spark.spark_schema(False) and empty.count() == 0
    produce(kafka_bootstrap, options["subscribe"], 10, 2, start=20)
    assert df.count() == 20
    assert kwire.spark.read(spark, **options).count() == 30


def _write_back(spark, broker: str, df, count: int, topics: Dict[str, int], **options: str) -> List[Tuple[Any, ...]]:
    assert kwire.spark.write(df, **{"kafka.bootstrap.servers": broker, **options}) == count
    back = kwire.spark.read(spark, **{"kafka.bootstrap.servers": broker, "subscribe": ",".join(topics),
                                      "includeHeaders": "true"})
    return [(t, p, k, v, h) for t, p, _, k, v, _, _, h in rows(back)]


def test_write_then_read_back(spark, broker):
    """Keys (string or binary, some null), values, headers (on some rows
    only: the first half's Spark partitions have none), the partition
    column, the topic column, and the topic option overriding it."""
    a, b = new_topic(broker, 3, prefix="jobs-sink"), new_topic(broker, 1, prefix="jobs-sink")
    data = [(a if i % 4 else b, None if i % 5 == 0 else f"k{i}", f"v{i}".encode(), i % 3 if i % 4 else 0,
             [("h", f"{i}".encode()), ("e", b"")] if i >= 100 and i % 2 else None) for i in range(200)]
    schema = "topic string, key string, value binary, partition int, headers array<struct<key string, value binary>>"
    df = spark.createDataFrame(data[:100], schema).union(spark.createDataFrame(data[100:], schema))
    got = _write_back(spark, broker, df, 200, {a: 3, b: 1})
    want = [(t, p, None if k is None else k.encode(), v, None if h is None else tuple(h)) for t, k, v, p, h in data]
    assert sorted(got, key=lambda r: r[3]) == sorted(want, key=lambda r: r[3])

    c = new_topic(broker, 2, prefix="jobs-sink")
    binary = spark.createDataFrame([(b"\x00k%d" % i, None if i == 3 else "s%d" % i, "elsewhere") for i in range(8)],
                                   "key binary, value string, topic string")
    got = _write_back(spark, broker, binary, 8, {c: 2}, topic=c)        # the option wins over the column
    assert sorted((k, v) for _, _, k, v, _ in got) == sorted(
        (b"\x00k%d" % i, None if i == 3 else b"s%d" % i) for i in range(8))
    assert {p for _, p, _, _, _ in got} <= {0, 1}


def _raises_as_format_kwire(spark, error: SparkOptionError, load) -> None:
    """``format("kwire")`` (where the release has it) fails with ``error``'s message too."""
    if not kwire.spark.FEATURES.data_source:
        return
    with pytest.raises(Exception) as info:
        load()
    assert str(error) in str(info.value)


def test_option_errors_as_format_kwire(spark, kafka_bootstrap):
    """The same SparkOptionError messages as format("kwire") (and as the
    connector: the message is Spark's), raised by read() and write()
    themselves, before any job."""
    cases = [({}, "One of the following options must be specified for Kafka source"),
             ({"subscribe": "t", "startingOffsets": "latest"}, "starting offset can't be latest for batch queries"),
             ({"subscribe": "t", "kafka.auto.offset.reset": "earliest"}, "'auto.offset.reset' is not supported"),
             ({"subscribe": "t", "endingOffsets": '{"t": {"0": -2}}'}, "can't be earliest for batch queries")]
    for options, message in cases:
        options = {"kafka.bootstrap.servers": kafka_bootstrap, **options}
        with pytest.raises(SparkOptionError, match=re.escape(message)) as info:
            kwire.spark.read(spark, **options)
        _raises_as_format_kwire(spark, info.value,
                                lambda: spark.read.format("kwire").options(**options).load().collect())
    frames = [("value string", {}, "topic option required when no 'topic' attribute is present"),
              ("key string", {"topic": "t"}, "Required attribute 'value' not found"),
              ("key int, value string", {"topic": "t"}, "key attribute unsupported type int"),
              ("value string", {"topic": "t", "kafka.value.serializer": "x"}, "'value.serializer' is not supported")]
    for schema, options, message in frames:
        df = spark.createDataFrame([], schema)
        options = {"kafka.bootstrap.servers": kafka_bootstrap, **options}
        with pytest.raises(SparkOptionError, match=re.escape(message)) as info:
            kwire.spark.write(df, **options)
        _raises_as_format_kwire(spark, info.value,
                                lambda: df.write.mode("append").format("kwire").options(**options).save())


def test_foreach_batch_writes_each_micro_batch(spark, kafka_bootstrap, tmp_path):
    """A stream's sink on any release: foreachBatch with write (three
    files, one a micro-batch, under Trigger.AvailableNow)."""
    topic = new_topic(kafka_bootstrap, 2, prefix="jobs-stream")
    source = tmp_path / "in"
    source.mkdir()
    for f in range(3):
        (source / f"{f}.json").write_text("".join(json.dumps({"k": f"k{f}-{i}", "v": f"v{f}-{i}"}) + "\n"
                                                  for i in range(10)))
    sink = {"kafka.bootstrap.servers": kafka_bootstrap, "topic": topic}
    counts = []

    def each(batch, batch_id):
        counts.append(kwire.spark.write(batch.selectExpr("k AS key", "v AS value"), **sink))

    stream = spark.readStream.schema("k string, v string").option("maxFilesPerTrigger", 1).json(str(source))
    with pytest.raises(ValueError, match="foreachBatch"):        # a stream itself is refused, pointing here
        kwire.spark.write(stream.selectExpr("v AS value"), **sink)
    q = (stream
         .writeStream.foreachBatch(each).option("checkpointLocation", str(tmp_path / "ckpt"))
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert not q.isActive and q.exception() is None, q.exception()
    assert counts == [10, 10, 10]
    back = kwire.spark.read(spark, **{"kafka.bootstrap.servers": kafka_bootstrap, "subscribe": topic})
    assert sorted((bytes(r.key), bytes(r.value)) for r in back.collect()) == sorted(
        (f"k{f}-{i}".encode(), f"v{f}-{i}".encode()) for f in range(3) for i in range(10))


def test_foreach_batch_exactly_once(spark, kafka_bootstrap, tmp_path):
    """Exactly once on any release through foreachBatch: each micro-batch
    written with its id (a micro-batch written again writes nothing), and a
    batch job visible whole."""
    from compat_util import committed_values

    topic = new_topic(kafka_bootstrap, 2, prefix="jobs-eos")
    sink = {"kafka.bootstrap.servers": kafka_bootstrap, "topic": topic, "deliveryGuarantee": "exactly-once"}
    source = tmp_path / "in"
    source.mkdir()
    for f in range(2):
        (source / f"{f}.json").write_text("".join(json.dumps({"v": f"v{f}-{i}"}) + "\n" for i in range(10)))
    counts = []

    def each(batch, batch_id):
        rows = batch.selectExpr("v AS value")
        counts.append(kwire.spark.write(rows, batch_id=batch_id, transactionalIdPrefix=f"compat-{topic}", **sink))
        counts.append(kwire.spark.write(rows, batch_id=batch_id, transactionalIdPrefix=f"compat-{topic}", **sink))

    stream = spark.readStream.schema("v string").option("maxFilesPerTrigger", 1).json(str(source))
    q = (stream.writeStream.foreachBatch(each).option("checkpointLocation", str(tmp_path / "ckpt"))
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert not q.isActive and q.exception() is None, q.exception()
    assert counts == [10, 0, 10, 0]
    df = spark.createDataFrame([(f"w{i}",) for i in range(30)], "value string")
    assert kwire.spark.write(df, **sink) == 30
    assert committed_values(kafka_bootstrap, topic, 2) == sorted(
        [f"v{f}-{i}".encode() for f in range(2) for i in range(10)] + [f"w{i}".encode() for i in range(30)])


def test_a_send_error_fails_the_job(spark, kafka_bootstrap):
    """A record for a partition the topic does not have fails the task,
    and the job, naming the partition."""
    df = spark.createDataFrame([("v", 7)], "value string, partition int")
    with pytest.raises(Exception, match="partition 7 does not exist"):
        kwire.spark.write(df, **{"kafka.bootstrap.servers": kafka_bootstrap, "kafka.delivery.timeout.ms": "1500",
                                 "topic": new_topic(kafka_bootstrap, 1, prefix="jobs-sink-error")})


def test_a_loop_of_reads_stands_in_for_a_stream(spark, kafka_bootstrap):
    """kwire.spark.jobs' recipe for 3.5 (no streaming source): each round
    reads from the offsets after the last round's rows, to the latest."""
    from pyspark.sql import functions as F

    topic = new_topic(kafka_bootstrap, 2, prefix="jobs-loop")
    opts = {"kafka.bootstrap.servers": kafka_bootstrap, "assign": json.dumps({topic: [0, 1]})}
    start = {topic: {"0": -2, "1": -2}}
    seen = []
    for first, count in ((0, 30), (30, 0), (30, 11)):
        produce(kafka_bootstrap, topic, count, 2, start=first)
        df = kwire.spark.read(spark, **opts, startingOffsets=json.dumps(start)).cache()
        seen.append(sorted(bytes(r.value) for r in df.collect()))
        for t, p, last in df.groupBy("topic", "partition").agg(F.max("offset")).collect():
            start[t][str(p)] = last + 1
        df.unpersist()
    assert [len(s) for s in seen] == [30, 0, 11]
    assert start == {topic: {"0": 21, "1": 20}}
