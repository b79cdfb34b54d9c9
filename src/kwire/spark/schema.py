"""The schema of Spark's Kafka source, as a Spark ``StructType`` and as the
Arrow schema Spark expects from a Python data source, and the step from
kwire's columnar decoder output to that Arrow layout (no copy of keys,
values or headers). With ``keyFormat`` / ``valueFormat`` the ``key`` /
``value`` column has its format's type instead of binary
(:mod:`kwire.spark.typed`)."""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

__all__ = ["spark_schema", "arrow_schema", "ARROW_HEADERS", "to_spark_batch"]

_HEADER = StructType([StructField("key", StringType()), StructField("value", BinaryType())])

#: ``headers``: Spark's Arrow form of ``array<struct<key string, value binary>>``.
ARROW_HEADERS = pa.list_(pa.field("element", pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])))
_TIMESTAMP_US = pa.timestamp("us", tz="UTC")


def spark_schema(include_headers: bool = False, key_type: Optional[DataType] = None,
                 value_type: Optional[DataType] = None) -> StructType:
    """``key binary, value binary, topic string, partition int, offset long,
    timestamp timestamp, timestampType int`` (+ ``headers``), every field
    nullable, exactly as ``format("kafka")`` has it; ``key_type`` /
    ``value_type``: a typed column's Spark type in place of binary."""
    fields = [
        StructField("key", key_type or BinaryType()),
        StructField("value", value_type or BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(_HEADER)))
    return StructType(fields)


_ARROW = {
    False: pa.schema([
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", _TIMESTAMP_US),
        pa.field("timestampType", pa.int32()),
    ]),
}
_ARROW[True] = _ARROW[False].append(pa.field("headers", ARROW_HEADERS))


def arrow_schema(include_headers: bool = False, key_type: Optional[pa.DataType] = None,
                 value_type: Optional[pa.DataType] = None) -> pa.Schema:
    """The Arrow schema Spark checks the batches of a Python data source
    against (``to_arrow_schema(spark_schema(...), timezone="UTC")``);
    ``key_type`` / ``value_type``: a typed column's Arrow type in Spark's
    layout."""
    schema = _ARROW[include_headers]
    for i, t in ((0, key_type), (1, value_type)):
        if t is not None:
            schema = schema.set(i, pa.field(schema.field(i).name, t))
    return schema


def to_spark_batch(rb: pa.RecordBatch, topic: str, partition: int, include_headers: bool,
                   key: Optional[pa.Array] = None, value: Optional[pa.Array] = None) -> pa.RecordBatch:
    """A :class:`kwire.ColumnarDecoder` batch (``offset, timestamp,
    timestamp_type, key, value, headers``) of one partition as Spark's
    Kafka rows: key and value buffers are passed through (or ``key`` /
    ``value``, typed columns already in Spark's layout, take their place),
    the timestamp becomes microseconds, ``topic`` and ``partition`` are
    filled in and the headers are re-typed to Spark's field names (same
    buffers)."""
    n = rb.num_rows
    ts = rb.column(1)
    columns = [
        rb.column(3) if key is None else key,
        rb.column(4) if value is None else value,
        _repeated(topic, pa.string(), n),
        _repeated(partition, pa.int32(), n),
        rb.column(0),
        ts if ts.type == _TIMESTAMP_US else ts.cast(_TIMESTAMP_US),
        rb.column(2),
    ]
    if include_headers:
        columns.append(rb.column(5).view(ARROW_HEADERS))
    schema = _ARROW[include_headers] if key is None and value is None else arrow_schema(
        include_headers, None if key is None else key.type, None if value is None else value.type)
    return pa.RecordBatch.from_arrays(columns, schema=schema)


_REPEATED: Dict[Tuple[Any, Any], pa.Array] = {}


def _repeated(value: Any, type_: pa.DataType, n: int) -> pa.Array:
    """``value`` ``n`` times: a slice of an array kept per value, made again
    only when a longer one is asked for (each batch of a partition repeats
    its topic and partition number)."""
    key = (value, type_)
    arr = _REPEATED.get(key)
    if arr is None or len(arr) < n:
        if len(_REPEATED) > 1024:
            _REPEATED.clear()
        arr = _REPEATED[key] = pa.repeat(pa.scalar(value, type_), max(n, 65_536))
    return arr.slice(0, n)
