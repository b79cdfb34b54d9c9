"""Typed values on the release: ``valueFormat=avro`` with the schema given
(``valueSchema``, bare Avro values written by kwire's own encoder: no
registry in a release's virtualenv), read with ``format("kwire")`` where the
release has the Python Data Source API and with ``kwire.spark.read`` (3.5):
the value column has the Spark type ``from_avro`` gives for the schema on
every release (written here from Spark's rules; the main suite, on 4.2,
compares with from_avro itself) and the rows written; the sink encodes
them back byte for byte. On Apache Kafka only: the typed columns do not
depend on the broker."""

from __future__ import annotations

import datetime
import json

import pyarrow as pa
from pyspark.sql.types import (ArrayType, DoubleType, IntegerType, LongType, StringType, StructField, StructType,
                               TimestampType)

import kwire.spark
from compat_util import new_topic, read
from kwire.consumer import Consumer
from kwire.formats import make_format
from kwire.producer import Producer
from kwire.spark import FEATURES
from kwire.types import TopicPartition

SCHEMA = {"type": "record", "name": "Event", "namespace": "compat", "fields": [
    {"name": "id", "type": "long"}, {"name": "user", "type": "string"},
    {"name": "score", "type": ["null", "double"], "default": None},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["CLICK", "VIEW"]}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "device", "type": {"type": "record", "name": "Device", "fields": [{"name": "v", "type": "int"}]}},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
#: from_avro's type of SCHEMA (Spark's SchemaConverters): fields not null but the union with null
SPARK_TYPE = StructType([
    StructField("id", LongType(), False), StructField("user", StringType(), False),
    StructField("score", DoubleType(), True), StructField("kind", StringType(), False),
    StructField("tags", ArrayType(StringType(), False), False),
    StructField("device", StructType([StructField("v", IntegerType(), False)]), False),
    StructField("ts", TimestampType(), False)])
UTC = datetime.timezone.utc


def _rows(n: int) -> list:
    return [{"id": i, "user": f"u{i}", "score": None if i % 3 == 0 else i / 4, "kind": ["CLICK", "VIEW"][i % 2],
             "tags": [f"t{j}" for j in range(i % 3)], "device": {"v": i * 7},
             "ts": datetime.datetime(2025, 1, 1, 0, 0, i, 1000 * i, tzinfo=UTC)} for i in range(n)]


def _typed_read(spark, bootstrap: str, topic: str, **options: str):
    options = {"subscribe": topic, "startingOffsets": "earliest", "valueFormat": "avro",
               "valueSchema": json.dumps(SCHEMA), **options}
    if FEATURES.data_source:
        return read(spark, "kwire", bootstrap, **options)
    return kwire.spark.read(spark, **{"kafka.bootstrap.servers": bootstrap}, **options)


def test_avro_values_typed_and_written_back(spark, kafka_bootstrap):
    fmt = make_format("avro", {"schema": json.dumps(SCHEMA)})
    rows = _rows(30)
    values = fmt.encode(pa.Table.from_pylist(rows).to_struct_array().combine_chunks(), topic="compat")
    topic = new_topic(kafka_bootstrap, 1, prefix="compat-typed")
    with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=2) as p:
        p.send_arrow(topic, pa.record_batch([values], names=["value"]), timestamp=None)
        p.flush()
    df = _typed_read(spark, kafka_bootstrap, topic)
    assert df.schema["value"].dataType == SPARK_TYPE
    got = [r["value"].asDict(recursive=True) for r in df.orderBy("offset").collect()]
    want = [{**r, "ts": TimestampType().fromInternal(int(r["ts"].timestamp() * 1_000_000))} for r in rows]
    assert got == want

    out = new_topic(kafka_bootstrap, 1, prefix="compat-typed-out")
    sink = {"kafka.bootstrap.servers": kafka_bootstrap, "topic": out, "valueFormat": "avro",
            "valueSchema": json.dumps(SCHEMA)}
    ordered = df.orderBy("offset").select("value").coalesce(1)
    if FEATURES.data_source:
        ordered.write.mode("append").format("kwire").options(**sink).save()
    else:
        kwire.spark.write(ordered, **sink)
    with Consumer(bootstrap_servers=kafka_bootstrap, enable_auto_commit=False) as c:
        c.assign([TopicPartition(out, 0)])
        c.seek(TopicPartition(out, 0), 0)
        written = []
        for _ in range(100):
            written += [r.value for rs in c.poll(500).values() for r in rs]
            if len(written) >= len(values):
                break
    assert written == values.to_pylist()
