"""Typed keys and values in Spark (``valueFormat`` / ``keyFormat``) against
a real schema registry (the session's Apicurio, its Confluent-compatible
API) and Spark's own functions: kwire's typed ``value`` column has the very
Spark type ``from_avro`` gives after the registry's header is stripped
(``format("kafka")`` + ``substring(value, 6)``), and the same rows;
Protobuf's has ``from_protobuf``'s type (its jar, spark-protobuf, is not on
Maven Central as this project reaches it: the type is written here from
Spark's rules and the values come from the protobuf package); values from
confluent-kafka's serializers; schema evolution; batch, streaming and
``kwire.spark.read``; from_avro's ``mode``; the sink, read back by
confluent-kafka's deserializers.

Budget: one Apache Kafka (the typed columns do not depend on the broker:
the two-broker runs are the byte columns' tests), the session's Spark and
Apicurio; a few small topics.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import decimal
import io
import json
import uuid
from typing import Any, Dict, Iterator, List

import fastavro
import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro
from pyspark.sql.types import (ArrayType, BinaryType, BooleanType, DayTimeIntervalType, DoubleType, FloatType,
                               IntegerType, LongType, MapType, StringType, StructField, StructType, TimestampType)

import kwire.spark
import kwire.spark.typed
from kwire.producer import Producer
from kwire.spark import SparkOptionError

from formats.avro.gen import DataGen, SchemaGen
from formats.protobuf import schemas as PB

from .conftest import kwire_read, kwire_write, new_topic

#: A record of every Avro type and logical type Spark can hold (unions of two numbers, of
#: several types, with null; enum, fixed, arrays, maps, nested records) and a decimal wider than Spark's.
EVERY_TYPE = {"type": "record", "name": "Every", "namespace": "kwire.spark", "fields": [
    {"name": "i", "type": "int"}, {"name": "l", "type": "long"}, {"name": "b", "type": "boolean"},
    {"name": "f", "type": "float"}, {"name": "d", "type": "double"}, {"name": "s", "type": "string"},
    {"name": "by", "type": "bytes"},
    {"name": "int_or_long", "type": ["int", "long"]}, {"name": "maybe_number", "type": ["null", "long", "int"]},
    {"name": "float_or_double", "type": ["float", "double"]},
    {"name": "either", "type": ["null", "int", "string", {"type": "record", "name": "Inner",
                                                          "fields": [{"name": "x", "type": "long"}]}]},
    {"name": "maybe_text", "type": ["null", "string"]},
    {"name": "e", "type": {"type": "enum", "name": "Suit", "symbols": ["HEARTS", "SPADES", "CLUBS"]}},
    {"name": "fx", "type": {"type": "fixed", "name": "Three", "size": 3}},
    {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3}},
    {"name": "dec_fixed", "type": {"type": "fixed", "name": "Dec8", "size": 8, "logicalType": "decimal",
                                   "precision": 18, "scale": 2}},
    {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "t_ms", "type": {"type": "int", "logicalType": "time-millis"}},
    {"name": "t_us", "type": {"type": "long", "logicalType": "time-micros"}},
    {"name": "ts_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "ts_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "ts_ns", "type": {"type": "long", "logicalType": "timestamp-nanos"}},
    {"name": "local_ms", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
    {"name": "local_us", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
    {"name": "dur", "type": {"type": "fixed", "name": "Dur", "size": 12, "logicalType": "duration"}},
    {"name": "tags", "type": {"type": "array", "items": ["null", "string"]}},
    {"name": "scores", "type": {"type": "map", "values": "double"}},
    {"name": "inner", "type": ["null", "Inner"]},
    {"name": "nothing", "type": "null"},
]}

UTC = datetime.timezone.utc


def every_type_row(i: int) -> Dict[str, Any]:
    return {
        "i": -i, "l": i * 10**12, "b": i % 2 == 0, "f": i / 4, "d": i / 3, "s": f"text {i} ✓", "by": bytes([i, 0, 255]),
        "int_or_long": i if i % 2 else 2**40 + i, "maybe_number": None if i % 3 == 0 else i,
        "float_or_double": i + 0.5,
        "either": [None, i, f"s{i}", {"x": i}][i % 4], "maybe_text": None if i % 2 else f"t{i}",
        "e": ["HEARTS", "SPADES", "CLUBS"][i % 3], "fx": bytes([i, i + 1, i + 2]),
        "dec": decimal.Decimal(i * 1001) / 1000, "dec_fixed": decimal.Decimal(-i * 12345) / 100,
        "uid": str(uuid.UUID(int=i * 7919 + 1)), "day": datetime.date(2000, 1, 1) + datetime.timedelta(days=i * 37),
        "t_ms": datetime.time(i % 24, i % 60, 7, (i * 1000) % 1_000_000),
        "t_us": datetime.time(i % 24, 5, i % 60, i * 13),
        "ts_ms": datetime.datetime(2024, 2, 29, 12, 0, 1, 1000 * i, tzinfo=UTC),
        "ts_us": datetime.datetime(1969, 7, 20, 20, 17, 40, i, tzinfo=UTC),
        "ts_ns": 1_700_000_000_123_456_789 + i,
        "local_ms": datetime.datetime(2030, 1, 1, 0, 0, 0, 2000 * i),
        "local_us": datetime.datetime(1999, 12, 31, 23, 59, 59, i),
        "dur": (i + 1).to_bytes(4, "little") + (2 * i).to_bytes(4, "little") + (3 * i + 7).to_bytes(4, "little"),
        "tags": [f"a{i}", None, ""][: i % 4], "scores": {f"k{j}": j / 2 for j in range(i % 3)},
        "inner": None if i % 2 else {"x": -i}, "nothing": None,
    }


@pytest.fixture(scope="module")
def bootstrap(kafka) -> str:
    return kafka.bootstrap("plaintext")


@pytest.fixture(scope="module")
def confluent(apicurio) -> ConfluentClient:
    return apicurio.confluent_client()


@pytest.fixture(scope="module")
def registry(apicurio) -> Dict[str, str]:
    """The sources' and sinks' registry options (a long timeout: under the
    full suite's load on two cores, Apicurio once took past the default 30 s)."""
    return {"schema.registry.url": apicurio.url, "schema.registry.timeout": "120"}


def send(bootstrap: str, topic: str, values: List[bytes], keys: List[Any] = None, partition: int = 0) -> None:
    with Producer(bootstrap_servers=bootstrap, linger_ms=2) as p:
        for i, v in enumerate(values):
            p.send(topic, v, key=None if keys is None else keys[i], partition=partition)
        p.flush()


def avro_values(confluent, topic: str, schema: Dict, rows: List[Dict], field=MessageField.VALUE) -> List[bytes]:
    """``rows`` as confluent-kafka's AvroSerializer writes them (registered under the topic's subject)."""
    ser = AvroSerializer(confluent, json.dumps(schema))
    ctx = SerializationContext(topic, field)
    return [ser(r, ctx) for r in rows]


def from_avro_peer(spark, bootstrap: str, topic: str, schema: Dict, column: str = "value", options=None):
    """Spark's own: ``format("kafka")``, the registry's 5-byte header stripped, ``from_avro``."""
    df = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
          .option("startingOffsets", "earliest").load())
    return df.select("offset", from_avro(F.expr(f"substring({column}, 6)"), json.dumps(schema),
                                         options or {}).alias(column))


def typed(spark, bootstrap: str, topic: str, **options: str):
    return kwire_read(spark, bootstrap, subscribe=topic, startingOffsets="earliest", **options)


@contextlib.contextmanager
def time_type(spark) -> Iterator[None]:
    """``spark.sql.timeType.enabled`` on (Spark 4.2's TIME type, which from_avro gives
    time-micros as, and kwire with it, is refused by most queries without it)."""
    if kwire.spark.typed.TIME_TYPE is None:
        yield
        return
    spark.conf.set("spark.sql.timeType.enabled", "true")
    try:
        yield
    finally:
        spark.conf.unset("spark.sql.timeType.enabled")


def rows_by_offset(df, column: str = "value") -> List[Any]:
    return [r[column] for r in df.select("offset", column).orderBy("offset").collect()]


def test_avro_values_read_as_from_avro_gives_them(spark, bootstrap, confluent, registry):
    topic = new_topic(bootstrap, 1, "typed-avro")
    rows = [every_type_row(i) for i in range(40)]
    send(bootstrap, topic, avro_values(confluent, topic, EVERY_TYPE, rows) + [None])
    ours = typed(spark, bootstrap, topic, valueFormat="avro", **registry)
    theirs = from_avro_peer(spark, bootstrap, topic, EVERY_TYPE)
    assert ours.schema["value"] == theirs.schema["value"]      # names, types, nullability
    assert ours.schema["value"].dataType.simpleString() == theirs.schema["value"].dataType.simpleString()
    assert rows_by_offset(ours) == rows_by_offset(theirs)
    with time_type(spark):      # time-micros is Spark 4.2's TIME, which queries take only with the option on
        assert ours.where("value IS NULL").count() == 1
        assert [r["offset"] for r in ours.select("offset").collect()] == list(range(41))


def spark_decimals(schema: Any) -> Any:
    """``schema`` with every decimal at most 38 digits (from_avro refuses wider ones)."""
    if isinstance(schema, dict):
        out = {k: spark_decimals(v) for k, v in schema.items()}
        if out.get("logicalType") == "decimal" and out.get("precision", 0) > 38:
            out["precision"], out["scale"] = 38, min(out.get("scale", 0), 38)
            if out.get("type") == "fixed":
                out["size"] = max(out["size"], 16)
        return out
    if isinstance(schema, list):
        return [spark_decimals(v) for v in schema]
    return schema


def test_generated_schemas_read_as_from_avro_gives_them(spark, bootstrap, confluent, registry):
    """Seeded schemas of every type, nested (tests/formats/avro/gen.py), and
    random values: the types and rows from_avro gives."""
    for seed in (3, 8):
        schema = spark_decimals(SchemaGen(seed).record(fields=8))
        data = DataGen(seed)
        parsed = fastavro.parse_schema(copy.deepcopy(schema))
        rows = [data.value(parsed) for _ in range(25)]
        topic = new_topic(bootstrap, 1, "typed-gen")
        send(bootstrap, topic, avro_values(confluent, topic, schema, rows))
        ours = typed(spark, bootstrap, topic, valueFormat="avro", **registry)
        theirs = from_avro_peer(spark, bootstrap, topic, schema)
        assert ours.schema["value"] == theirs.schema["value"], seed
        assert rows_by_offset(ours) == rows_by_offset(theirs), seed


# ----------------------------------------------------------------- evolution, keys, every way to read
EVENT_V1 = {"type": "record", "name": "Event", "namespace": "kwire.spark", "fields": [
    {"name": "id", "type": "long"}, {"name": "name", "type": "string"}, {"name": "size", "type": "int"}]}
EVENT_V2 = {"type": "record", "name": "Event", "namespace": "kwire.spark", "fields": [
    {"name": "id", "type": "long"}, {"name": "name", "type": "string"},
    {"name": "size", "type": "long"},                                            # promoted from int
    {"name": "email", "type": ["null", "string"], "default": None},              # added, with a default
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["CLICK", "VIEW"]}, "default": "VIEW"}]}


@pytest.fixture(scope="module")
def evolved(spark, bootstrap, confluent):
    """A topic of 2 partitions: 12 values written with v1, then 12 with v2 (each subject's
    version registered by confluent-kafka's serializer), Avro string keys."""
    topic = new_topic(bootstrap, 2, "typed-evo")
    v1 = [{"id": i, "name": f"n{i}", "size": i * 3} for i in range(12)]
    v2 = [{"id": 100 + i, "name": f"m{i}", "size": 2**40 + i, "email": None if i % 2 else f"u{i}@x",
           "kind": "CLICK"} for i in range(12)]
    values = avro_values(confluent, topic, EVENT_V1, v1) + avro_values(confluent, topic, EVENT_V2, v2)
    keys = avro_values(confluent, topic, "string", [f"key-{i}" for i in range(24)], MessageField.KEY)
    for p in (0, 1):
        send(bootstrap, topic, values[p::2], keys[p::2], partition=p)
    ids = [confluent.lookup_schema(f"{topic}-value", _confluent_schema(s)).schema_id for s in (EVENT_V1, EVENT_V2)]
    return topic, ids


def _confluent_schema(schema: Any):
    from confluent_kafka.schema_registry import Schema
    return Schema(json.dumps(schema), "AVRO")


def test_two_versions_in_a_topic_read_as_the_latest(spark, bootstrap, registry, evolved):
    topic, (v1_id, v2_id) = evolved
    ours = typed(spark, bootstrap, topic, valueFormat="avro", keyFormat="avro", **registry)
    raw = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
           .option("startingOffsets", "earliest").load())
    body = F.expr("substring(value, 6)")
    writer_id = F.expr("substring(value, 2, 4)")
    theirs = raw.select("partition", "offset", from_avro(F.expr("substring(key, 6)"), '"string"').alias("key"),
                        F.when(writer_id == F.lit(bytearray(v1_id.to_bytes(4, "big"))),
                               from_avro(body, json.dumps(EVENT_V1), {"avroSchema": json.dumps(EVENT_V2)}))
                        .otherwise(from_avro(body, json.dumps(EVENT_V2))).alias("value"))
    assert ours.schema["value"].dataType == theirs.schema["value"].dataType
    assert ours.schema["key"].dataType == StringType()
    cols = ["partition", "offset", "key", "value"]
    assert ours.select(*cols).orderBy("partition", "offset").collect() == \
        theirs.select(*cols).orderBy("partition", "offset").collect()
    got = {r["key"]: r["value"] for r in ours.collect()}
    assert got["key-0"].asDict() == {"id": 0, "name": "n0", "size": 0, "email": None, "kind": "VIEW"}
    assert got["key-13"].asDict() == {"id": 101, "name": "m1", "size": 2**40 + 1, "email": None, "kind": "CLICK"}


def test_jobs_read_and_a_stream_give_the_same_rows(spark, bootstrap, registry, evolved, tmp_path):
    """kwire.spark.read (the jobs path of Spark 3.5) and a streaming read (Trigger.AvailableNow into
    a memory sink) type the columns as the batch read does."""
    topic, _ = evolved
    options = {"valueFormat": "avro", "keyFormat": "avro", **registry}
    batch = typed(spark, bootstrap, topic, **options)
    cols = ["partition", "offset", "key", "value"]
    want = batch.select(*cols).orderBy("partition", "offset").collect()
    jobs = kwire.spark.read(spark, **{"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                                      "startingOffsets": "earliest"}, **options)
    assert jobs.schema == batch.schema
    assert jobs.select(*cols).orderBy("partition", "offset").collect() == want
    stream = (spark.readStream.format("kwire").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest").options(**options).load())
    assert stream.schema == batch.schema
    q = (stream.writeStream.format("memory").queryName("typed_stream")
         .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    try:
        q.awaitTermination(120)
        assert q.exception() is None
    finally:
        q.stop()
    assert spark.sql("SELECT * FROM typed_stream").select(*cols).orderBy("partition", "offset").collect() == want


def test_a_schema_given_as_text_reads_bare_values_and_wide_decimals_are_text(spark, bootstrap):
    """No registry: ``valueSchema`` (Avro JSON) reads bare Avro values. A decimal wider than
    Spark's 38 digits, which from_avro refuses, is its text."""
    schema = {"type": "record", "name": "Wide", "fields": [
        {"name": "big", "type": {"type": "bytes", "logicalType": "decimal", "precision": 50, "scale": 5}},
        {"name": "n", "type": "int"}]}
    parsed = fastavro.parse_schema(copy.deepcopy(schema))
    numbers = [decimal.Decimal("123456789012345678901234567890123456789012.34567"), decimal.Decimal("-0.00001")]
    values = []
    for i, d in enumerate(numbers):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, {"big": d, "n": i})
        values.append(out.getvalue())
    topic = new_topic(bootstrap, 1, "typed-bare")
    send(bootstrap, topic, values)
    ours = typed(spark, bootstrap, topic, valueFormat="avro", valueSchema=json.dumps(schema))
    assert ours.schema["value"].dataType == StructType([StructField("big", StringType(), False),
                                                        StructField("n", IntegerType(), False)])
    assert [r["value"].asDict() for r in ours.orderBy("offset").collect()] == \
        [{"big": str(d), "n": i} for i, d in enumerate(numbers)]
    raw = spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic) \
        .option("startingOffsets", "earliest").load()
    with pytest.raises(Exception, match="DECIMAL_PRECISION_EXCEEDS_MAX_PRECISION"):
        raw.select(from_avro("value", json.dumps(schema))).collect()


# ----------------------------------------------------------------- undecodable values: from_avro's mode
def test_undecodable_values_fail_the_task_or_are_null(spark, bootstrap, confluent, registry):
    topic = new_topic(bootstrap, 1, "typed-bad")
    good = avro_values(confluent, topic, EVENT_V1, [{"id": i, "name": f"n{i}", "size": i} for i in range(4)])
    unknown_id = b"\x00" + (2**31 - 7).to_bytes(4, "big") + good[0][5:]
    truncated = good[1][:7]
    send(bootstrap, topic, [good[0], unknown_id, good[1], truncated, good[2], good[3]])
    failfast = typed(spark, bootstrap, topic, valueFormat="avro", **registry)
    with pytest.raises(Exception) as e:
        failfast.collect()
    assert f"(topic '{topic}', partition 0, offset 1)" in str(e.value)
    assert "is not in the schema registry" in str(e.value)
    permissive = typed(spark, bootstrap, topic, valueFormat="avro", mode="PERMISSIVE", **registry)
    got = [(r["offset"], r["value"] and r["value"]["id"]) for r in permissive.orderBy("offset").collect()]
    assert got == [(0, 0), (1, None), (2, 1), (3, None), (4, 2), (5, 3)]


# ----------------------------------------------------------------- writing
def test_the_sink_writes_what_confluent_kafka_reads(spark, bootstrap, confluent, registry):
    """Typed rows written with valueFormat=avro (the schema registered by the sink,
    auto.register.schemas) by format("kwire") and by kwire.spark.write: confluent-kafka's
    AvroDeserializer reads the values the rows came from."""
    source = new_topic(bootstrap, 1, "typed-src")
    rows = [every_type_row(i) for i in range(20)]
    originals = avro_values(confluent, source, EVERY_TYPE, rows)
    send(bootstrap, source, originals)
    deserialize = AvroDeserializer(confluent)
    want = [deserialize(v, SerializationContext(source, MessageField.VALUE)) for v in originals]
    with time_type(spark):
        df = typed(spark, bootstrap, source, valueFormat="avro", **registry).select("value")
        sink = {"valueFormat": "avro", "valueSchema": json.dumps(EVERY_TYPE), "auto.register.schemas": "true",
                **registry}
        by_source = new_topic(bootstrap, 1, "typed-out")
        kwire_write(df.orderBy("offset"), bootstrap, topic=by_source, **sink).save()
        by_jobs = new_topic(bootstrap, 1, "typed-out")
        assert kwire.spark.write(df.coalesce(1), **{"kafka.bootstrap.servers": bootstrap, "topic": by_jobs},
                                 **sink) == 20
    for topic in (by_source, by_jobs):
        values = read_values(bootstrap, topic, 20)
        got = [deserialize(v, SerializationContext(topic, MessageField.VALUE)) for v in values]
        assert sorted(got, key=lambda r: r["l"]) == sorted(want, key=lambda r: r["l"])


def read_values(bootstrap: str, topic: str, count: int) -> List[bytes]:
    from kwire.consumer import Consumer
    from kwire.types import TopicPartition

    out: List[bytes] = []
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False) as c:
        c.assign([TopicPartition(topic, 0)])
        for _ in range(200):
            for records in c.poll(500).values():
                out.extend(r.value for r in records)
            if len(out) >= count:
                return out
    raise AssertionError(f"{topic}: {len(out)} of {count} records")


# ----------------------------------------------------------------- Protobuf
def _struct(*fields) -> StructType:
    return StructType([StructField(name, t, nullable) for name, t, nullable in fields])


def _wrapper(t) -> StructType:
    return _struct(("value", t, True))


POINT = _struct(("x", IntegerType(), True), ("y", IntegerType(), True), ("label", StringType(), True))
LINE = _struct(("sku", StringType(), True), ("quantity", IntegerType(), True), ("at", POINT, True),
               ("tags", ArrayType(StringType(), False), True),
               ("attributes", MapType(StringType(), LongType(), False), True))
#: from_protobuf's type of tests/formats/protobuf/schemas.py's Order (Spark's SchemaConverters:
#: fields nullable, repeated elements and map values not; uint32/uint64 as int/bigint; enums as
#: strings; wrappers as struct<value>; Timestamp, Duration; google.protobuf.Empty left out).
ORDER = _struct(
    ("id", LongType(), True), ("customer", StringType(), True), ("lines", ArrayType(LINE, False), True),
    ("origin", POINT, True), ("destination", POINT, True), ("places", MapType(StringType(), POINT, False), True),
    ("names", MapType(IntegerType(), StringType(), False), True),
    ("colors", MapType(LongType(), StringType(), False), True),
    ("flags", MapType(BooleanType(), BinaryType(), False), True),
    ("counts", MapType(LongType(), _wrapper(LongType()), False), True),
    ("card", StringType(), True), ("account", LongType(), True), ("pickup", POINT, True),
    ("created", TimestampType(), True), ("ttl", DayTimeIntervalType(), True),
    ("history", ArrayType(TimestampType(), False), True),
    ("w_double", _wrapper(DoubleType()), True), ("w_float", _wrapper(FloatType()), True),
    ("w_int64", _wrapper(LongType()), True), ("w_uint64", _wrapper(LongType()), True),
    ("w_int32", _wrapper(IntegerType()), True), ("w_uint32", _wrapper(IntegerType()), True),
    ("w_bool", _wrapper(BooleanType()), True), ("w_string", _wrapper(StringType()), True),
    ("w_bytes", _wrapper(BinaryType()), True), ("w_strings", ArrayType(_wrapper(StringType()), False), True),
    ("color", StringType(), True), ("palette", ArrayType(StringType(), False), True),
    ("via", StringType(), True), ("express", LINE, True), ("maybe", POINT, True))


def spark_value(msg) -> Dict[str, Any]:
    """The row from_protobuf (with emit.default.values) gives for ``msg``, from
    the protobuf package's API and Spark's rules, in PySpark's Python values."""
    from google.protobuf.descriptor import FieldDescriptor as FD

    def one(fd, v, never_null=False):
        if fd.message_type is not None:
            name = fd.message_type.full_name
            if name == "google.protobuf.Timestamp":
                return TimestampType().fromInternal(v.seconds * 1_000_000 + int(v.nanos / 1000))
            if name == "google.protobuf.Duration":
                # floored: kwire's Protobuf decoder floors a negative Duration's nanoseconds, where
                # from_protobuf truncates them toward zero (1 µs apart, sub-microsecond negative ones)
                return DayTimeIntervalType().fromInternal(v.seconds * 1_000_000 + v.nanos // 1000)
            if name.startswith("google.protobuf.") and name.endswith("Value"):
                return {"value": one(fd.message_type.fields_by_name["value"], v.value)}
            return spark_value(v)
        if fd.type == FD.TYPE_ENUM:
            known = fd.enum_type.values_by_number.get(v)
            if known is None:
                return f"UNKNOWN_ENUM_VALUE_{fd.enum_type.name}" if never_null else None
            return known.name
        if fd.type in (FD.TYPE_UINT32, FD.TYPE_FIXED32):
            return v - 2**32 if v >= 2**31 else v
        if fd.type in (FD.TYPE_UINT64, FD.TYPE_FIXED64):
            return v - 2**64 if v >= 2**63 else v
        return v

    out: Dict[str, Any] = {}
    for fd in msg.DESCRIPTOR.fields:
        if fd.message_type is not None and not fd.message_type.fields:
            continue                                     # google.protobuf.Empty: no fields, left out
        value = getattr(msg, fd.name)
        entry = fd.message_type
        if fd.is_repeated and entry is not None and entry.GetOptions().map_entry:
            out[fd.name] = {one(entry.fields_by_number[1], k): one(entry.fields_by_number[2], value[k], True)
                            for k in value}
        elif fd.is_repeated:
            out[fd.name] = [one(fd, v, True) for v in value]
        elif fd.containing_oneof is not None and msg.WhichOneof(fd.containing_oneof.name) != fd.name:
            out[fd.name] = None
        elif fd.has_presence and not msg.HasField(fd.name):
            out[fd.name] = None
        else:
            out[fd.name] = one(fd, value)
    return out


def test_protobuf_values_read_with_from_protobufs_type_and_written_back(spark, bootstrap, confluent, registry):
    order_cls = PB.message_class(PB.schema(PB.NESTED).message([0]))
    messages = PB.random_messages(order_cls, 30, 31)
    topic = new_topic(bootstrap, 1, "typed-pb")
    ser = ProtobufSerializer(order_cls, confluent, {"use.deprecated.format": False})
    send(bootstrap, topic, [ser(m, SerializationContext(topic, MessageField.VALUE)) for m in messages])
    ours = typed(spark, bootstrap, topic, valueFormat="protobuf", **registry)
    assert ours.schema["value"].dataType == ORDER
    got = [r["value"].asDict(recursive=True) for r in ours.orderBy("offset").collect()]
    assert PB.normalize(got) == PB.normalize([spark_value(m) for m in messages])

    # written back (values Spark holds exactly: whole microseconds, declared enum numbers) with the
    # subject's latest version, as confluent-kafka's deserializer reads them
    exact = PB.random_messages(order_cls, 20, 32, exact=True)
    send(bootstrap, topic, [ser(m, SerializationContext(topic, MessageField.VALUE)) for m in exact])
    out = new_topic(bootstrap, 1, "typed-pb-out")
    kwire_write(ours.where("offset >= 30").orderBy("offset").select("value"), bootstrap, topic=out,
                valueFormat="protobuf", valueSubject=f"{topic}-value", valueMessageName="kwire.test.Order",
                **registry, **{"use.latest.version": "true"}).save()
    deserialize = ProtobufDeserializer(order_cls, {"use.deprecated.format": False})
    back = [deserialize(v, SerializationContext(out, MessageField.VALUE)) for v in read_values(bootstrap, out, 20)]
    for m in exact:                 # google.protobuf.Empty has no Spark type: from_protobuf's leaves it out
        if m.WhichOneof("payment") == "cash":
            m.ClearField("cash")
    assert back == exact


# ----------------------------------------------------------------- JSON, options
def test_json_values_with_a_json_schema(spark, bootstrap):
    schema = {"type": "object", "properties": {
        "id": {"type": "integer"}, "name": {"type": "string"}, "at": {"type": "string", "format": "date-time"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "uid": {"type": "string", "format": "uuid"}}, "required": ["id"]}
    topic = new_topic(bootstrap, 1, "typed-json")
    docs = [{"id": i, "name": f"n{i}", "at": f"2024-01-0{i + 1}T00:00:0{i}Z", "tags": ["a"] * i,
             "uid": str(uuid.UUID(int=i + 5))} for i in range(3)]
    send(bootstrap, topic, [json.dumps(d).encode() for d in docs])
    ours = typed(spark, bootstrap, topic, valueFormat="json", valueSchema=json.dumps(schema))
    value = ours.schema["value"].dataType
    assert value["id"].dataType == LongType() and value["at"].dataType == TimestampType()
    assert value["uid"].dataType == StringType() and value["tags"].dataType.elementType == StringType()
    got = [r["value"].asDict() for r in ours.orderBy("offset").collect()]
    assert [(g["id"], g["name"], g["tags"], g["uid"]) for g in got] == \
        [(d["id"], d["name"], d["tags"], d["uid"]) for d in docs]
    assert [g["at"] for g in got] == [TimestampType().fromInternal(
        int(datetime.datetime.fromisoformat(d["at"].replace("Z", "+00:00")).timestamp()) * 1_000_000) for d in docs]
    out = new_topic(bootstrap, 1, "typed-json-out")
    kwire_write(ours.orderBy("offset").select("value"), bootstrap, topic=out, valueFormat="json").save()
    written = [json.loads(v) for v in read_values(bootstrap, out, 3)]
    assert [{k: w[k] for k in ("id", "name", "tags", "uid")} for w in written] == \
        [{k: d[k] for k in ("id", "name", "tags", "uid")} for d in docs]


def test_typed_options_refused_as_they_are_parsed():
    from kwire.spark.options import parse_sink_options, parse_source_options, registry_options

    base = {"kafka.bootstrap.servers": "localhost:9", "subscribe": "t"}
    with pytest.raises(SparkOptionError, match="'valueFormat' must be one of avro, protobuf, json or binary"):
        parse_source_options({**base, "valueFormat": "xml"}, streaming=False)
    with pytest.raises(SparkOptionError, match="needs the schema: 'valueSchema'"):
        parse_source_options({**base, "valueFormat": "avro"}, streaming=False)
    with pytest.raises(SparkOptionError, match="'mode' must be FAILFAST or PERMISSIVE"):
        parse_source_options({**base, "valueFormat": "json", "mode": "DROPMALFORMED"}, streaming=False)
    with pytest.raises(SparkOptionError, match="'keySchemaId' must be a schema id"):
        parse_sink_options({**base, "topic": "t", "keyFormat": "avro", "keySchemaId": "x",
                            "schema.registry.url": "http://r"})
    with pytest.raises(SparkOptionError, match="given twice"):
        registry_options({"schema.registry.url": "http://a", "schemaregistryaddress": "http://b"}, {})
    # ABRiS / Confluent, Databricks: the same client options; SASL_INHERIT takes the Kafka client's login
    assert registry_options({"schema.registry.url": "http://r", "basic.auth.credentials.source": "USER_INFO",
                             "basic.auth.user.info": "u:p"}, {}) == {
        "schema.registry.url": "http://r", "basic.auth.credentials.source": "USER_INFO",
        "basic.auth.user.info": "u:p"}
    assert registry_options({"schemaregistryaddress": "http://r",
                             "confluent.schema.registry.basic.auth.credentials.source": "SASL_INHERIT"},
                            {"sasl.jaas.config": "j", "sasl.mechanism": "PLAIN", "acks": "all"}) == {
        "schema.registry.url": "http://r", "schema.registry.basic.auth.credentials.source": "SASL_INHERIT",
        "sasl.jaas.config": "j", "sasl.mechanism": "PLAIN"}
    spec = parse_source_options({**base, "valueFormat": "AVRO", "schema.registry.url": "http://r",
                                 "schema.registry.basic.auth.user.info": "user:secret-pw"}, False).value_format
    assert spec.kind == "avro" and "secret-pw" not in repr(spec)


def test_a_pattern_needs_the_schema_named(spark, bootstrap, registry):
    with pytest.raises(Exception, match="subscribePattern needs the schema named"):
        kwire_read(spark, bootstrap, subscribePattern="typed-.*", valueFormat="avro", **registry)


# ----------------------------------------------------------------- conversions alone (no Spark job)
def _round_trip(fmt, values: List[bytes]):
    """Decoded, in Spark's layout, and encoded back."""
    from kwire.spark.typed import conversion

    conv = conversion(fmt, "t")
    spark_column = conv.to_spark(fmt.decode(pa.array(values, pa.binary()), topic="t", partition=0,
                                            offsets=pa.array(range(len(values)), pa.int64())))
    assert spark_column.type == conv.arrow
    return conv, spark_column, fmt.encode(conv.to_format(spark_column), topic="t").to_pylist()


def test_avro_parts_spark_has_no_type_for_go_back_as_they_came():
    """A fixed uuid (its bytes), a decimal wider than Spark's (its text), a duration (its 12 bytes)."""
    from kwire.formats import make_format

    schema = {"type": "record", "name": "R", "fields": [
        {"name": "u", "type": {"type": "fixed", "name": "U", "size": 16, "logicalType": "uuid"}},
        {"name": "big", "type": {"type": "fixed", "name": "B", "size": 24, "logicalType": "decimal",
                                 "precision": 50, "scale": 3}},
        {"name": "dur", "type": {"type": "fixed", "name": "D", "size": 12, "logicalType": "duration"}}]}
    fmt = make_format("avro", {"schema": json.dumps(schema)})
    parsed = fastavro.parse_schema(copy.deepcopy(schema))
    rows = [{"u": uuid.UUID(int=i * 99991).bytes, "big": decimal.Decimal(f"-{i}1234567890123456789012345678901234.5{i}6"),
             "dur": bytes(range(i, i + 12))} for i in range(3)]
    values = []
    for r in rows:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, r)
        values.append(out.getvalue())
    conv, column, back = _round_trip(fmt, values)
    assert conv.spark.simpleString() == "struct<u:binary,big:string,dur:binary>"
    assert column.to_pylist() == [{"u": r["u"], "big": str(r["big"]), "dur": r["dur"]} for r in rows]
    assert back == values


def test_a_protobuf_timestamp_of_another_package_is_a_timestamp_as_from_protobuf_has_it():
    """from_protobuf types any message named Timestamp or Duration with seconds and nanos as
    Spark's timestamp / interval, not only Google's; and Protobuf's unsigned ints keep their bits."""
    from kwire.formats import make_format

    proto = """
syntax = "proto3";
package acme;
message Timestamp { int64 seconds = 1; int32 nanos = 2; }
message Duration { int64 seconds = 1; int32 nanos = 2; }
message Tick { Timestamp at = 1; Duration took = 2; uint32 n = 3; fixed64 big = 4; }
"""
    fmt = make_format("protobuf", {"schema": proto, "message.name": "acme.Tick"})
    cls = PB.message_class(fmt.reader_message("t"))
    messages = []
    for i, (secs, nanos) in enumerate([(1_700_000_000, 123_456_000), (-5, 999_000), (0, 0)]):
        m = cls(n=2**32 - 1 - i, big=2**64 - 1 - i)
        m.at.seconds, m.at.nanos = secs, nanos
        m.took.seconds, m.took.nanos = secs, nanos
        messages.append(m)
    values = [m.SerializeToString() for m in messages]
    conv, column, back = _round_trip(fmt, values)
    assert conv.spark == _struct(("at", TimestampType(), True), ("took", DayTimeIntervalType(), True),
                                 ("n", IntegerType(), True), ("big", LongType(), True))
    got = column.to_pylist()
    micros = [secs * 1_000_000 + nanos // 1000 for secs, nanos in [(1_700_000_000, 123_456_000), (-5, 999_000), (0, 0)]]
    assert [g["took"] for g in got] == [datetime.timedelta(microseconds=us) for us in micros]
    assert [g["at"].timestamp() for g in got] == [us / 1e6 for us in micros]
    assert [g["n"] for g in got] == [-1, -2, -3] and [g["big"] for g in got] == [-1, -2, -3]
    assert back == values
