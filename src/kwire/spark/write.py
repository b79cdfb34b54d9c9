"""Writing DataFrames to Kafka, batch and streaming, as Spark's Kafka sink
does: columns ``value`` (required; binary or string), ``key`` (binary or
string), ``headers`` (``array<struct<key string, value binary>>``),
``topic`` (string; the ``topic`` option overrides it) and ``partition``
(int; null leaves the choice to the producer's partitioner).

At least once: every record of a task is sent, the producer is flushed
before the task reports success, and any send error fails the task (Spark
then retries it, which may write some records twice, as Spark's sink may).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Iterator, List, Optional

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from kwire.errors import KwireError
from kwire.producer import Producer, RecordFuture
from kwire.spark._cache import ClientCache
from kwire.spark.errors import SparkOptionError
from kwire.spark.options import SinkOptions

__all__ = ["validate_sink_schema", "write_batches", "WriteResult", "producers"]

log = logging.getLogger(__name__)

_HEADERS_TYPE = "array<struct<key:string,value:binary>>"
#: This worker's producers, one per configuration, reused across tasks.
producers: ClientCache[Producer] = ClientCache(Producer, lambda p: p.close(30.0))


@dataclass
class WriteResult(WriterCommitMessage):
    """What one task wrote."""

    records: int


def _check_type(schema: StructType, name: str, allowed: str, ok: Any) -> None:
    if name in schema.fieldNames():
        t: DataType = schema[name].dataType
        if not ok(t):
            raise SparkOptionError(f"{name} attribute unsupported type {t.simpleString()}. "
                                   f"{name} must be a(n) {allowed}")


def validate_sink_schema(schema: StructType, sink: SinkOptions) -> None:
    """Spark's checks of a DataFrame written to Kafka, on the driver."""
    names = schema.fieldNames()
    if sink.topic is None and "topic" not in names:
        raise SparkOptionError("topic option required when no 'topic' attribute is present. "
                               "Use the topic option for setting a topic.")
    if "value" not in names:
        raise SparkOptionError("Required attribute 'value' not found")
    if sink.topic is None:
        _check_type(schema, "topic", "string", lambda t: isinstance(t, StringType))
    _check_type(schema, "key", "string or binary", lambda t: isinstance(t, (StringType, BinaryType)))
    _check_type(schema, "value", "string or binary", lambda t: isinstance(t, (StringType, BinaryType)))
    _check_type(schema, "partition", "int", lambda t: isinstance(t, IntegerType))
    _check_type(schema, "headers", _HEADERS_TYPE, lambda t: t.simpleString() == _HEADERS_TYPE
                and isinstance(t, ArrayType))


def _binary_list(batch: pa.RecordBatch, name: str) -> Optional[List[Optional[bytes]]]:
    if name not in batch.schema.names:
        return None
    col = batch.column(name)
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        col = col.cast(pa.binary())                   # UTF-8 bytes, as Spark's sink writes strings
    return col.to_pylist()


def _check(pending: List[RecordFuture]) -> List[RecordFuture]:
    """Raise the first send error among ``pending``; keep those not done."""
    left = []
    for f in pending:
        if f.done():
            err = f.exception()
            if err is not None:
                raise err
        else:
            left.append(f)
    return left


def write_batches(batches: Iterator[pa.RecordBatch], sink: SinkOptions) -> WriteResult:
    """Send every row of ``batches``; flush; raise the first send error."""
    config = sink.producer_config()
    producer = producers.get(config)
    pending: List[RecordFuture] = []
    count = 0
    try:
        for batch in batches:
            n = batch.num_rows
            if not n:
                continue
            values = _binary_list(batch, "value")
            assert values is not None
            keys = _binary_list(batch, "key") or [None] * n
            if sink.topic is not None:
                topics: List[Optional[str]] = [sink.topic] * n
            else:
                topics = batch.column("topic").to_pylist()
            parts = batch.column("partition").to_pylist() if "partition" in batch.schema.names else [None] * n
            heads = batch.column("headers").to_pylist() if "headers" in batch.schema.names else [None] * n
            send = producer.send
            for topic, value, key, part, hs in zip(topics, values, keys, parts, heads):
                if topic is None:
                    raise KwireError("null topic present in the data. Use the topic option for setting a topic.")
                headers = [(h["key"], h["value"]) for h in hs] if hs else None
                pending.append(send(topic, value, key=key, headers=headers, partition=part))
            count += n
            pending = _check(pending)
        producer.flush()
        _check(pending)
    except BaseException:
        producers.drop(config)
        raise
    return WriteResult(records=count)
