"""Writing DataFrames to Kafka, batch and streaming, as Spark's Kafka sink
does: columns ``value`` (required; binary or string), ``key`` (binary or
string), ``headers`` (``array<struct<key string, value binary>>``),
``topic`` (string; the ``topic`` option overrides it) and ``partition``
(int; null leaves the choice to the producer's partitioner).

Rows go to Kafka as Arrow: :meth:`kwire.producer.Producer.send_arrow`
encodes them from Spark's Arrow batches in the compiled core, with no
Python object per row. Where Spark hands rows instead (streaming writes on
Spark 4.0, which has no Arrow stream writer), :func:`rows_to_batches` puts
the sink's columns of each chunk of rows into Arrow arrays first (no
object made per row beyond the rows Spark made), and they take the same
way.

Typed keys and values (``valueFormat`` / ``keyFormat``): the column (a
struct, or whatever Spark type the schema has) is encoded by its format
first (:func:`kwire.spark.formats.encode_batch`: registry-framed, the
schema id found or registered as the options say), per topic.

Nothing here needs the Python Data Source API (``kwire.spark.jobs`` uses it
on PySpark 3.5): :class:`WriteResult` is a plain dataclass, wrapped into
Spark's ``WriterCommitMessage`` by :mod:`kwire.spark.source`.

At least once by default: every record of a task is sent, the producer is
flushed before the task reports success, and any send error fails the task
(Spark then retries it, which may write some records twice, as Spark's sink
may). Exactly once with ``deliveryGuarantee=exactly-once``: each task's rows
go in one Kafka transaction that the driver commits
(:mod:`kwire.spark.exactly_once`, which sends them with :func:`send_batches`).
"""

from __future__ import annotations

import logging
import itertools
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, List, Optional, Sequence, Tuple

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from kwire.errors import KwireError
from kwire.future import Future
from kwire.producer import Producer
from kwire.spark._cache import ClientCache
from kwire.spark.errors import SparkOptionError
from kwire.spark.formats import encode_batch
from kwire.spark.options import SinkOptions
from kwire.spark.typed import spark_arrow_type

__all__ = ["SINK_COLUMNS", "validate_sink_schema", "send_batches", "write_batches", "rows_to_batches", "WriteResult", "producers"]

log = logging.getLogger(__name__)

_HEADERS_TYPE = "array<struct<key:string,value:binary>>"
#: The Arrow type of each column the sink reads, as Spark's Arrow writers hand it.
_ARROW_TYPES = {
    "topic": pa.string(),
    "partition": pa.int32(),
    "headers": pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])),
}
#: Rows per Arrow batch made from rows (:func:`rows_to_batches`).
ROWS_PER_BATCH = 10_000
#: This worker's producers, one per configuration, reused across tasks.
producers: ClientCache[Producer] = ClientCache(Producer, lambda p: p.close(30.0))


@dataclass
class WriteResult:
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
    if sink.key_format is None:
        _check_type(schema, "key", "string or binary", lambda t: isinstance(t, (StringType, BinaryType)))
    if sink.value_format is None:
        _check_type(schema, "value", "string or binary", lambda t: isinstance(t, (StringType, BinaryType)))
    _check_type(schema, "partition", "int", lambda t: isinstance(t, IntegerType))
    _check_type(schema, "headers", _HEADERS_TYPE, lambda t: t.simpleString() == _HEADERS_TYPE
                and isinstance(t, ArrayType))


def _check(pending: List[Future]) -> List[Future]:
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


def _by_topic(batch: pa.RecordBatch, sink: SinkOptions) -> Iterator[Tuple[str, pa.RecordBatch]]:
    """``batch``'s rows per topic: the ``topic`` option's, or the ``topic``
    column's (one run per topic, in order of first appearance)."""
    if sink.topic is not None:
        yield sink.topic, batch
        return
    col = batch.column("topic")
    if col.null_count:
        raise KwireError("null topic present in the data. Use the topic option for setting a topic.")
    topics = pc.unique(col).to_pylist()
    if len(topics) == 1:
        yield topics[0], batch
        return
    for topic in topics:
        yield topic, batch.filter(pc.equal(col, topic))


def send_batches(producer: Producer, batches: Iterator[pa.RecordBatch], sink: SinkOptions,
                 topics: Optional[List[str]] = None) -> int:
    """Send every row of ``batches`` with ``producer``
    (``Producer.send_arrow``: encoded from the Arrow buffers by the
    compiled core); flush; raise the first send error. Returns the rows
    sent; each topic written is added to ``topics`` (in order of first
    appearance) when given."""
    pending: List[Future] = []
    count = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        for topic, rows in _by_topic(batch, sink):
            if topics is not None and topic not in topics:
                topics.append(topic)
            if sink.key_format is not None or sink.value_format is not None:
                rows = encode_batch(rows, topic, sink)
            pending.append(producer.send_arrow(topic, rows, timestamp=None))
        count += batch.num_rows
        pending = _check(pending)
    producer.flush()
    _check(pending)
    return count


def write_batches(batches: Iterator[pa.RecordBatch], sink: SinkOptions) -> WriteResult:
    """At least once: every row of ``batches`` sent by this worker's
    producer for the sink's configuration (:func:`send_batches`)."""
    config = sink.producer_config()
    producer = producers.get(config)
    try:
        count = send_batches(producer, batches, sink)
    except BaseException:
        producers.drop(config)
        raise
    return WriteResult(records=count)


def _arrow_type(name: str, t: DataType) -> pa.DataType:
    if name in ("key", "value"):
        if isinstance(t, (StringType, BinaryType)):
            return pa.string() if isinstance(t, StringType) else pa.binary()
        return spark_arrow_type(t)          # a typed column (keyFormat / valueFormat)
    return _ARROW_TYPES[name]


#: The columns the sink reads; any other column of a DataFrame is not sent.
SINK_COLUMNS = ("topic", "key", "value", "headers", "partition")


def rows_to_batches(rows: Iterable[Sequence[Any]], schema: StructType,
                    size: int = ROWS_PER_BATCH) -> Iterator[pa.RecordBatch]:
    """Spark's rows (tuples in the order of ``schema``, already checked by
    :func:`validate_sink_schema`) as Arrow batches of the columns the sink
    reads, ``size`` rows each."""
    names = schema.fieldNames()
    wanted = [(i, n, _arrow_type(n, schema[n].dataType)) for i, n in enumerate(names) if n in SINK_COLUMNS]
    it = iter(rows)
    while True:
        chunk = list(itertools.islice(it, size))
        if not chunk:
            return
        columns = list(zip(*chunk))
        yield pa.record_batch([pa.array(columns[i], type=t) for i, _, t in wanted], names=[n for _, n, _ in wanted])
