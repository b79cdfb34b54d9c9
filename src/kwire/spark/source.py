"""The ``kwire`` PySpark data source: Spark's Kafka source and sink
(``format("kafka")``) through the Python Data Source API (Spark 4.0 on),
with kwire's compiled decoder handing Arrow batches to Spark.

* batch read: :class:`KwireBatchReader` plans offset ranges on the driver
  (:mod:`kwire.spark.offsets`); each Spark task reads one range
  (:mod:`kwire.spark.ranges`); from Spark 4.1, :class:`KwirePushdownReader`
  takes pushed filters (:mod:`kwire.spark.pushdown`);
* streaming read: :mod:`kwire.spark.stream` (every 4.x), with read limits
  and kwire's ``Trigger.AvailableNow`` from 4.2 (:mod:`kwire.spark.admission`);
  before 4.2, ``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger`` and
  ``maxTriggerDelay`` are refused (:class:`SparkOptionError` naming Spark 4.2);
* batch and streaming write: :mod:`kwire.spark.sink`, Arrow batches in;
  on Spark 4.0, whose streaming writers get rows, :class:`KwireRowStreamWriter`
  turns them into Arrow batches first.

Which classes Spark gets is decided once, at import, by
:data:`kwire.spark.compat.FEATURES`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from kwire.spark import exactly_once
from kwire.spark.compat import FEATURES, require
from kwire.spark.formats import TypedColumns, check_typed_schema, pin, pin_source
from kwire.spark.offsets import OffsetRange, OffsetReader, plan_batch
from kwire.spark.options import (SinkOptions, SourceOptions, parse_format_options, parse_sink_options,
                                 parse_source_options)
from kwire.spark.pushdown import Bounds, bounds_from_filters, narrow
from kwire.spark.schema import spark_schema
from kwire.spark.stream import (KwireStreamReader, RangePartition, offsets_from_json, offsets_to_json, rate_limit,
                                read_partition)
from kwire.spark.sink import rows_to_batches, validate_sink_schema, write_batches
from kwire.types import TopicPartition

if TYPE_CHECKING:       # pragma: no cover
    from pyspark.sql.datasource import Filter
if FEATURES.admission_control:           # Spark 4.2+
    from kwire.spark.admission import KwireAdmissionStreamReader
if FEATURES.stream_arrow_writer:         # Spark 4.1+
    from pyspark.sql.datasource import DataSourceStreamArrowWriter

__all__ = ["KwireDataSource", "KwireDataSourceWithoutPushdown", "KwireBatchReader", "KwirePushdownReader",
           "KwireStreamReader", "KwireWriter", "KwireRowStreamWriter", "RangePartition", "LIMIT_OPTIONS",
           "offsets_to_json", "offsets_from_json", "rate_limit"]

log = logging.getLogger(__name__)

#: Streaming options that need Spark's read limits (4.2): refused before.
LIMIT_OPTIONS = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")


def _typed(schema: StructType, opts: SourceOptions) -> Optional[TypedColumns]:
    """The query's typed key and value (:func:`kwire.spark.formats.pin`),
    checked against the schema Spark was told."""
    typed = pin_source(opts)
    check_typed_schema(schema, typed, opts.include_headers)
    return typed


def _refuse_limits(options: Mapping[str, Any]) -> None:
    """On a Spark without read limits, each limit option given is refused."""
    given = {str(k).lower() for k in options}
    for name in LIMIT_OPTIONS:
        if name.lower() in given:
            require("admission_control", f"the source option {name!r}", FEATURES)


def _sink(options: Mapping[str, Any], schema: StructType) -> SinkOptions:
    """A write's options, checked with the DataFrame's schema (and, exactly
    once, the transaction timeout against the brokers')."""
    sink = parse_sink_options(options)
    validate_sink_schema(schema, sink)
    if sink.exactly_once:
        exactly_once.check_transaction_timeout(sink)
    return sink


class KwireDataSource(DataSource):
    """``spark.read.format("kwire")``, ``spark.readStream.format("kwire")``
    and the same for ``write`` / ``writeStream``."""

    @classmethod
    def name(cls) -> str:
        return "kwire"

    def schema(self) -> StructType:
        """Spark's Kafka schema; with ``valueFormat`` / ``keyFormat`` the
        typed columns' types (their reader schemas fixed now, on the
        driver: :func:`kwire.spark.formats.pin`)."""
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        if not {"keyformat", "valueformat"} & {str(k).lower() for k in self.options}:
            return spark_schema(include)           # the other options are checked when Spark asks for a reader
        typed = pin(*parse_format_options(self.options))
        return typed.spark_schema(include) if typed is not None else spark_schema(include)

    #: whether batch reads take pushed filters (see :func:`kwire.spark.register`); never before Spark 4.1
    pushdown = FEATURES.filter_pushdown

    def reader(self, schema: StructType) -> "KwireBatchReader":
        opts = parse_source_options(self.options, streaming=False)
        typed = _typed(schema, opts)
        return KwirePushdownReader(opts, typed) if self.pushdown else KwireBatchReader(opts, typed)

    def streamReader(self, schema: StructType) -> KwireStreamReader:
        opts = parse_source_options(self.options, streaming=True)
        typed = _typed(schema, opts)
        if FEATURES.admission_control:
            return KwireAdmissionStreamReader(opts, typed)
        _refuse_limits(self.options)
        return KwireStreamReader(opts, typed)

    def writer(self, schema: StructType, overwrite: bool) -> "KwireWriter":
        return KwireWriter(_sink(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        sink = _sink(self.options, schema)
        if FEATURES.stream_arrow_writer:
            return KwireStreamWriter(sink)
        return KwireRowStreamWriter(sink, schema)


class KwireDataSourceWithoutPushdown(KwireDataSource):
    """``format("kwire")`` for a session that turned Python filter pushdown
    off: batch reads plan without the filters."""

    pushdown = False


class KwireBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions, typed: Optional[TypedColumns] = None) -> None:
        self.opts = opts
        self.typed = typed
        self.bounds = Bounds()

    def partitions(self) -> Sequence[InputPartition]:
        ranges = plan_batch(self.opts, None if self.bounds.empty else self._narrow)
        log.info("kwire batch read: %d offset ranges, %d records", len(ranges), sum(r.size for r in ranges))
        return [RangePartition(r) for r in ranges]

    def _narrow(self, ranges: List[OffsetRange], reader: OffsetReader) -> List[OffsetRange]:
        """The planned ranges cut by the pushed filters, timestamps looked
        up with the planner's ``reader``. An answer without a record
        timestamp (Tansu 0.6.0 answers every lookup with offset 0 and
        timestamp -1) is not trusted: the partition is left out of the
        look-up's result, so its range is read whole."""
        def for_times(query: Dict[TopicPartition, int]) -> Dict[TopicPartition, Optional[int]]:
            got = reader.consumer.offsets_for_times(query)
            return {tp: (None if r is None else r.offset) for tp, r in got.items() if r is None or r.timestamp >= 0}

        out = narrow(ranges, self.bounds, for_times)
        log.info("kwire batch read: filters pushed (%s) leave %d of %d offsets to read",
                 self.bounds.describe(), sum(r.size for r in out), sum(r.size for r in ranges))
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.opts, partition, self.typed)


class KwirePushdownReader(KwireBatchReader):
    """A batch reader that takes Spark's pushed filters (see
    :mod:`kwire.spark.pushdown`): Spark asks this only with
    ``spark.sql.python.filterPushdown.enabled``, and refuses a reader that
    implements it without (hence two classes)."""

    def pushFilters(self, filters: List["Filter"]) -> Iterable["Filter"]:
        self.bounds = bounds_from_filters(filters)
        return filters        # Spark evaluates every predicate on the rows read as well


# --------------------------------------------------------------------- writes
@dataclass
class Written(WriterCommitMessage):
    """What one write task sent (:class:`kwire.spark.sink.WriteResult` as Spark's commit message)."""

    records: int


@dataclass
class Prepared(exactly_once.Prepared, WriterCommitMessage):
    """One task's open transaction (exactly once: :mod:`kwire.spark.exactly_once`) as Spark's commit message."""


def _written(iterator: Iterator[pa.RecordBatch], sink: SinkOptions,
             batch_prefix: Optional[str] = None) -> WriterCommitMessage:
    """A task's write: at least once, or (``sink.exactly_once``) its rows
    in a transaction left for the driver to commit (``batch_prefix``: the
    batch write's transactional id prefix; None in a streaming write)."""
    if sink.exactly_once:
        done = exactly_once.prepare(iterator, sink, exactly_once.task_identity(sink, batch_prefix))
        return Prepared(**vars(done))
    return Written(records=write_batches(iterator, sink).records)


def _acknowledged(messages: List[Optional[WriterCommitMessage]]) -> int:
    return sum(m.records for m in messages if isinstance(m, Written))


class KwireWriter(DataSourceArrowWriter):
    def __init__(self, sink: SinkOptions) -> None:
        self.sink = sink
        # exactly once: made on the driver, so every attempt of a task has the same transactional id
        self.batch_prefix = exactly_once.job_prefix(sink) if sink.exactly_once else None

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return _written(iterator, self.sink, self.batch_prefix)

    def commit(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        if self.sink.exactly_once:
            exactly_once.commit(messages, self.sink)
            return
        log.info("kwire write: %d records", _acknowledged(messages))

    def abort(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        if self.sink.exactly_once:
            exactly_once.abort(messages, self.sink, prefix=self.batch_prefix)
            return
        log.warning("kwire write aborted after %d records were acknowledged (at least once: a retry may repeat them)",
                    _acknowledged(messages))


class _StreamCommits:
    """The driver's side of a streaming write: a batch's transactions
    committed or aborted (exactly once), or its outcome logged."""

    sink: SinkOptions

    def commit(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        if self.sink.exactly_once:
            exactly_once.commit(messages, self.sink, batchId)
            return
        log.info("kwire stream write: batch %d, %d records", batchId, _acknowledged(messages))

    def abort(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        if self.sink.exactly_once:
            exactly_once.abort(messages, self.sink, batchId)
            return
        log.warning("kwire stream write: batch %d aborted (at least once: its retry may repeat records)", batchId)


class KwireRowStreamWriter(_StreamCommits, DataSourceStreamWriter):
    """Streaming writes on Spark 4.0, whose stream writers get rows: the
    rows become Arrow batches (:func:`kwire.spark.sink.rows_to_batches`)
    and go through ``Producer.send_arrow`` as the Arrow writers' do."""

    def __init__(self, sink: SinkOptions, schema: StructType) -> None:
        self.sink = sink
        self.schema = schema

    def write(self, iterator: Iterator[Sequence[Any]]) -> WriterCommitMessage:
        return _written(rows_to_batches(iterator, self.schema), self.sink)


if FEATURES.stream_arrow_writer:
    class KwireStreamWriter(_StreamCommits, DataSourceStreamArrowWriter):
        """Streaming writes on Spark 4.1+: Arrow batches in."""

        def __init__(self, sink: SinkOptions) -> None:
            self.sink = sink

        def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
            return _written(iterator, self.sink)
