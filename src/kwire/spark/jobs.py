"""Batch reads and writes of Kafka as plain Spark jobs, for every PySpark
from 3.5 on (classic or Spark Connect): ``format("kwire")``'s options,
schema and rows without the Python Data Source API, which PySpark 3.5 (the
Spark of most EMR, Dataproc and Databricks LTS runtimes) does not have.

::

    import kwire.spark
    df = kwire.spark.read(spark, **{"kafka.bootstrap.servers": "localhost:9092", "subscribe": "events",
                                    "startingOffsets": "earliest", "includeHeaders": "true"})
    n = kwire.spark.write(df.select("key", "value"), **{"kafka.bootstrap.servers": "localhost:9092",
                                                        "topic": "copy"})

* :func:`read` takes ``spark.read.format("kwire")``'s (and Spark's
  ``format("kafka")``'s) batch options, parsed and checked as the data
  source parses them (the same :class:`SparkOptionError` messages, raised
  by :func:`read` itself, before any job). It plans the offset ranges on
  the driver at once, as the data source does when Spark plans a query
  (and as Spark's own reader resolves JSON and timestamp bounds at
  planning; it leaves ``earliest`` and ``latest`` to its tasks), and
  returns a lazy DataFrame: ``spark.range(n, numPartitions=n)`` (row *i*,
  alone in Spark partition *i*, stands for range *i*) through
  ``mapInArrow``, whose tasks read their range with
  :func:`kwire.spark.ranges.read_range`, as the data source's tasks do. The
  schema is :func:`kwire.spark.schema.spark_schema`'s (``headers`` with
  ``includeHeaders``), the rows those of ``format("kwire")``; ``minPartitions``
  and ``maxRecordsPerPartition`` split the ranges as it does; ``valueFormat``
  / ``keyFormat`` type the columns as it does (:mod:`kwire.spark.formats`:
  the reader schemas fixed by this call). No Spark job
  runs until an action. The ranges are fixed by the call: every action on
  the DataFrame reads exactly those offsets (a recomputed or retried task
  reads the same records), where a ``format("kwire")`` DataFrame resolves
  ``latest`` again whenever a query on it is planned (and a
  ``format("kafka")`` one whenever its tasks run); call :func:`read` again
  for records written since.
* :func:`write` takes the sink options (``topic``, ``kafka.*``) and checks
  the DataFrame's schema as ``df.write.format("kwire")`` does (the same
  errors, raised by :func:`write` before any job), then runs the job (an
  action): each Spark partition of ``df`` sends its rows with
  :func:`kwire.spark.sink.write_batches` (``Producer.send_arrow``, flushed
  before the task ends); only the columns the sink takes go to the tasks.
  It returns the number of records written. At least once, as the data
  source sink and Spark's: a send error fails the task (and the job), and
  a retried task may send records twice. With
  ``deliveryGuarantee=exactly-once`` (:mod:`kwire.spark.exactly_once`)
  each task's rows go in a transaction that this call commits when the
  job succeeded and aborts when it failed: the whole DataFrame becomes
  visible at once, or nothing of it.

What Spark 3.5 cannot have, having no Python Data Source API (4.0 on):

* ``format("kwire")``: no ``spark.read.format("kwire")``,
  ``df.write.format("kwire")``, ``readStream`` or ``writeStream`` with kwire
  (``kwire.spark.register`` raises).
* A streaming source. Read in a loop instead: each round a batch read from
  where the last one ended, the offsets kept by you where a checkpoint
  would keep them. For example, with ``assign`` naming the partitions
  (add new ones to it yourself) and ``startingOffsets`` as Spark's JSON
  (-2: earliest)::

      start = {"events": {"0": -2, "1": -2}}
      opts = {"kafka.bootstrap.servers": servers, "assign": '{"events": [0, 1]}'}
      while True:
          df = kwire.spark.read(spark, **opts, startingOffsets=json.dumps(start)).cache()
          handle(df)                  # any actions: the same records each time
          for t, p, last in df.groupBy("topic", "partition").agg(F.max("offset")).collect():
              start[t][str(p)] = last + 1
          df.unpersist()

  (Spark's own ``format("kafka")`` streaming source, a JVM package, is the
  other way on 3.5.)
* A streaming sink. Write each micro-batch of any stream with Structured
  Streaming's ``foreachBatch`` (classic or Spark Connect)::

      stream.writeStream.foreachBatch(lambda batch, _: kwire.spark.write(batch, **sink_options)).start()

  At least once: a micro-batch replayed after a failure is written again.
  Exactly once: pass the micro-batch's id, and a ``transactionalIdPrefix``
  of the query's own (kept across its restarts)::

      stream.writeStream.foreachBatch(lambda batch, batch_id: kwire.spark.write(
          batch, batch_id=batch_id, deliveryGuarantee="exactly-once", transactionalIdPrefix="orders-clean",
          **sink_options)).start()

  A micro-batch run again after a restart writes only the partitions whose
  marker does not show it committed (the batch must be deterministic: the
  same rows in the same Spark partitions).

This module imports neither :mod:`kwire.spark.source` nor
``pyspark.sql.datasource``: it needs ``DataFrame.mapInArrow`` only (Spark
Connect's too from 3.5), so it works the same on 4.x.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Optional, Tuple

import pyarrow as pa

from kwire.spark import exactly_once
from kwire.spark.errors import SparkOptionError
from kwire.spark.formats import TypedColumns, pin_source
from kwire.spark.offsets import OffsetRange, plan_batch
from kwire.spark.options import SinkOptions, SourceOptions, parse_sink_options, parse_source_options
from kwire.spark.ranges import read_range
from kwire.spark.schema import spark_schema
from kwire.spark.sink import SINK_COLUMNS, validate_sink_schema, write_batches

if TYPE_CHECKING:       # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["read", "write", "RangeReader", "PartitionWriter"]

log = logging.getLogger(__name__)

_WRITTEN = pa.schema([pa.field("records", pa.int64()), pa.field("prepared", pa.string())])


@dataclass(frozen=True)
class RangeReader:
    """The read's ``mapInArrow`` function: the rows it gets are indexes
    into ``ranges``; it yields the records of each such range, in Spark's
    Kafka schema. Pickled to the executors, where the consumer's options
    are worked out (key stores become PEM files in that process)."""

    opts: SourceOptions
    ranges: Tuple[OffsetRange, ...]
    typed: Optional[TypedColumns] = None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        config = self.opts.consumer_config("executor")
        for batch in batches:
            for i in batch.column(0).to_pylist():
                yield from read_range(self.ranges[i], config, self.opts.include_headers,
                                      self.opts.fail_on_data_loss, self.opts.poll_timeout_ms, self.typed)


@dataclass(frozen=True)
class PartitionWriter:
    """The write's ``mapInArrow`` function: sends every row of its Spark
    partition, then yields one row: the number of records sent and, exactly
    once (``prefix`` given), the task's open transaction as JSON
    (:class:`kwire.spark.exactly_once.Prepared`)."""

    sink: SinkOptions
    prefix: Optional[str] = None         # exactly once: the job's (or the query's) transactional id prefix
    batch_id: Optional[int] = None       # exactly once in foreachBatch: the micro-batch

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        if self.prefix is None:
            records, prepared = write_batches(batches, self.sink).records, None
        else:
            from pyspark import TaskContext

            ident = exactly_once.TaskIdentity(self.prefix, TaskContext.get().partitionId(), self.batch_id)
            done = exactly_once.prepare(batches, self.sink, ident)
            records, prepared = done.records, json.dumps(vars(done))
        yield pa.RecordBatch.from_arrays([pa.array([records], pa.int64()), pa.array([prepared], pa.string())],
                                         schema=_WRITTEN)


def read(spark: "SparkSession", **options: Any) -> "DataFrame":
    """A batch read of Kafka with ``spark.read.format("kwire")``'s options,
    as a lazy DataFrame of ``format("kwire")``'s schema and rows; its
    offset ranges are resolved by this call (see the module's docstring)."""
    opts = parse_source_options(options, streaming=False)
    typed = pin_source(opts)
    ranges = tuple(plan_batch(opts))
    log.info("kwire.spark.read: %d offset ranges, %d records", len(ranges), sum(r.size for r in ranges))
    plan = spark.range(0, len(ranges), 1, max(len(ranges), 1))     # row i alone in Spark partition i
    schema = typed.spark_schema(opts.include_headers) if typed is not None else spark_schema(opts.include_headers)
    return plan.mapInArrow(RangeReader(opts, ranges, typed), schema)


def write(df: "DataFrame", batch_id: Optional[int] = None, **options: Any) -> int:
    """Write ``df`` to Kafka with ``df.write.format("kwire")``'s options and
    schema checks; runs the job, returns the number of records written (at
    least once, or exactly once with ``deliveryGuarantee=exactly-once``:
    see the module's docstring). A streaming DataFrame is refused: write
    its micro-batches with ``foreachBatch``, passing the micro-batch's id
    as ``batch_id`` for exactly once."""
    if df.isStreaming:
        raise ValueError("kwire.spark.write writes a batch DataFrame (an action); write a stream's micro-batches "
                         "with df.writeStream.foreachBatch(lambda batch, _: kwire.spark.write(batch, **options))")
    sink = parse_sink_options(options)
    validate_sink_schema(df.schema, sink)
    columns = [c for c in df.columns if c in SINK_COLUMNS and not (c == "topic" and sink.topic is not None)]
    writer = PartitionWriter(sink, *_exactly_once_ids(sink, batch_id))
    try:
        rows = df.select(*columns).mapInArrow(writer, "records long, prepared string").collect()
    except BaseException:
        if writer.prefix is not None:
            exactly_once.abort_job(sink, writer.prefix, batch_id)
        raise
    if writer.prefix is not None:
        written = exactly_once.commit([exactly_once.Prepared(**json.loads(r[1])) for r in rows], sink, batch_id)
    else:
        written = sum(row[0] for row in rows)
    log.info("kwire.spark.write: %d records in %d Spark partitions", written, len(rows))
    return written


def _exactly_once_ids(sink: SinkOptions, batch_id: Optional[int]) -> Tuple[Optional[str], Optional[int]]:
    """The write's transactional id prefix and micro-batch: none at least
    once; a fresh prefix for a batch job; the query's own
    (``transactionalIdPrefix``, the same in every run) for a micro-batch."""
    if not sink.exactly_once:
        if batch_id is not None:
            raise SparkOptionError("kwire.spark.write: batch_id is for deliveryGuarantee=exactly-once")
        return None, None
    exactly_once.check_transaction_timeout(sink)
    if batch_id is None:
        return exactly_once.job_prefix(sink), None
    if sink.transactional_id_prefix is None:
        raise SparkOptionError("kwire.spark.write(batch, batch_id=...) in foreachBatch needs transactionalIdPrefix, "
                               "the same in every run of the query (it names each partition's transactions and "
                               "markers)")
    return sink.transactional_id_prefix, int(batch_id)
