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
    return ConfluentClient({"url": apicurio.url})


@pytest.fixture(scope="module")
def registry(apicurio) -> Dict[str, str]:
    """The sources' and sinks' registry options."""
    return {"schema.registry.url": apicurio.url}


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
