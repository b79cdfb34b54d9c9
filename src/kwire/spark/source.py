"""The ``kwire`` PySpark data source: Spark's Kafka source and sink
(``format("kafka")``) through the Python Data Source API, with kwire's
compiled decoder handing Arrow batches to Spark.

* batch read: :class:`KwireBatchReader` plans offset ranges on the driver
  (:mod:`kwire.spark.offsets`); each Spark task reads one range
  (:mod:`kwire.spark.read`);
* streaming read: :class:`KwireStreamReader`, offsets as Spark's Kafka JSON
  (``{"topic": {"0": 23}}``), ``maxOffsetsPerTrigger``,
  ``minOffsetsPerTrigger`` and ``maxTriggerDelay`` through read limits (see
  the class), ``Trigger.AvailableNow``, new partitions picked up;
* batch and streaming write: :mod:`kwire.spark.write`.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    Filter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from kwire.spark.errors import DataLossError, SparkOptionError
from kwire.spark.offsets import OffsetRange, OffsetReader, plan_batch, split_ranges
from kwire.spark.options import SinkOptions, SourceOptions, parse_sink_options, parse_source_options
from kwire.spark.pushdown import Bounds, bounds_from_filters, narrow
from kwire.spark.read import read_range
from kwire.spark.schema import spark_schema
from kwire.spark.write import WriteResult, validate_sink_schema, write_batches
from kwire.types import TopicPartition

__all__ = ["KwireDataSource", "KwireDataSourceWithoutPushdown", "KwireBatchReader", "KwirePushdownReader",
           "KwireStreamReader", "RangePartition"]

log = logging.getLogger(__name__)

Offsets = Dict[TopicPartition, int]


class RangePartition(InputPartition):
    """One Spark partition: one offset range of one Kafka partition."""

    def __init__(self, range: OffsetRange) -> None:
        super().__init__(range)
        self.range = range


def _read(opts: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, RangePartition):     # Spark reads one placeholder partition when there are none
        return iter(())
    return read_range(partition.range, opts.consumer_config("executor"), opts.include_headers,
                      opts.fail_on_data_loss, opts.poll_timeout_ms)


def _check_schema(schema: StructType, opts: SourceOptions) -> None:
    expected = spark_schema(opts.include_headers)
    if schema != expected:
        raise SparkOptionError("Kafka source has a fixed schema and cannot be set with a custom one "
                               f"(expected {expected.simpleString()}, got {schema.simpleString()})")


class KwireDataSource(DataSource):
    """``spark.read.format("kwire")``, ``spark.readStream.format("kwire")``
    and the same for ``write`` / ``writeStream``."""

    @classmethod
    def name(cls) -> str:
        return "kwire"

    def schema(self) -> StructType:
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return spark_schema(include)

    #: whether batch reads take pushed filters (see :func:`kwire.spark.register`)
    pushdown = True

    def reader(self, schema: StructType) -> "KwireBatchReader":
        opts = parse_source_options(self.options, streaming=False)
        _check_schema(schema, opts)
        return KwirePushdownReader(opts) if self.pushdown else KwireBatchReader(opts)

    def streamReader(self, schema: StructType) -> "KwireStreamReader":
        opts = parse_source_options(self.options, streaming=True)
        _check_schema(schema, opts)
        return KwireStreamReader(opts)

    def writer(self, schema: StructType, overwrite: bool) -> "KwireWriter":
        sink = parse_sink_options(self.options)
        validate_sink_schema(schema, sink)
        return KwireWriter(sink)

    def streamWriter(self, schema: StructType, overwrite: bool) -> "KwireStreamWriter":
        sink = parse_sink_options(self.options)
        validate_sink_schema(schema, sink)
        return KwireStreamWriter(sink)


class KwireDataSourceWithoutPushdown(KwireDataSource):
    """``format("kwire")`` for a session that turned Python filter pushdown
    off: batch reads plan without the filters."""

    pushdown = False


class KwireBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
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
        return _read(self.opts, partition)


class KwirePushdownReader(KwireBatchReader):
    """A batch reader that takes Spark's pushed filters (see
    :mod:`kwire.spark.pushdown`): Spark asks this only with
    ``spark.sql.python.filterPushdown.enabled``, and refuses a reader that
    implements it without (hence two classes)."""

    def pushFilters(self, filters: List[Filter]) -> Iterable[Filter]:
        self.bounds = bounds_from_filters(filters)
        return filters        # Spark evaluates every predicate on the rows read as well


# ------------------------------------------------------------------ streaming
def offsets_to_json(offsets: Offsets) -> Dict[str, Dict[str, int]]:
    """``{TopicPartition("t", 0): 23}`` -> ``{"t": {"0": 23}}`` (Spark's Kafka offset JSON)."""
    out: Dict[str, Dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return out


def offsets_from_json(obj: Dict[str, Dict[str, int]]) -> Offsets:
    return {TopicPartition(t, int(p)): int(o) for t, parts in obj.items() for p, o in parts.items()}


def rate_limit(limit: int, start: Offsets, end: Offsets) -> Offsets:
    """Spark's split of ``maxOffsetsPerTrigger`` over partitions, in
    proportion to what each has available (a small partition's share is
    rounded up to at least one offset; never past ``end``)."""
    sizes = {tp: e - start[tp] for tp, e in end.items() if tp in start and e - start[tp] > 0}
    total = sum(sizes.values())
    if total < 1:
        return dict(end)
    out = {}
    for tp, e in end.items():
        if tp not in sizes:
            out[tp] = e
            continue
        share = limit * (sizes[tp] / total)
        step = int(share) if share >= 1 else (1 if share > 0 else 0)
        out[tp] = min(e, start[tp] + step)
    return out


class KwireStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reads. Offsets are Spark's Kafka JSON; Spark keeps them
    in the checkpoint, so a restarted query goes on where it stopped and a
    replayed batch reads exactly the same ranges.

    Read limits, as the connector's ``KafkaMicroBatchStream``: the default
    limit is ``ReadMinRows(minOffsetsPerTrigger)`` when that option is set,
    else ``ReadMaxRows(maxOffsetsPerTrigger)``, else ``ReadAllAvailable``.
    PySpark's Python API has no composite limit and no trigger delay, and
    the JVM hands the Python limit back as it was (or ``ReadAllAvailable``
    where Spark overrides it, as for ``Trigger.Once``), so with
    ``ReadMinRows`` the reader takes ``maxTriggerDelay`` and
    ``maxOffsetsPerTrigger`` from its options: a batch is skipped (the start
    offsets returned: no new batch) while fewer than
    ``minOffsetsPerTrigger`` offsets are available, until ``maxTriggerDelay``
    has passed since the last batch (or since the reader was made: the
    first trigger always runs, the connector's clock starting at 0); then
    ``maxOffsetsPerTrigger``, if set, caps the batch.

    ``Trigger.AvailableNow`` reads up to the latest offsets of the query's
    start, ``maxOffsetsPerTrigger`` per batch. It does not wait for
    ``minOffsetsPerTrigger``: where the connector (4.2) applies that limit
    here too, a skipped trigger ends an AvailableNow query with records it
    was started to read left unread (Spark ends such a query at the first
    trigger with no new data); PySpark's contract for
    ``prepareForTriggerAvailableNow`` asks the source to reach its target.
    """

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._offsets: Optional[OffsetReader] = None
        self._target: Optional[Offsets] = None        # Trigger.AvailableNow: read up to here
        self._latest: Optional[Offsets] = None        # the broker's latest, for reportLatestOffset
        self._last_trigger_ms = 0.0                   # wall clock of the last batch (minOffsetsPerTrigger)

    def __getstate__(self) -> Dict[str, Any]:         # executors get the options only
        return {"opts": self.opts, "_offsets": None, "_target": None, "_latest": None, "_last_trigger_ms": 0.0}

    @property
    def offset_reader(self) -> OffsetReader:
        if self._offsets is None:
            self._offsets = OffsetReader(self.opts)
        return self._offsets

    def _report(self, message: str) -> None:
        if self.opts.fail_on_data_loss:
            raise DataLossError(message + ' Set the source option "failOnDataLoss" to "false" to go on in such cases.')
        log.warning("%s failOnDataLoss is false: going on.", message)

    def initialOffset(self) -> Dict[str, Dict[str, int]]:
        r = self.offset_reader
        tps = r.partitions()
        return offsets_to_json(r.resolve(self.opts.starting, tps, starting=True))

    def _available(self) -> Offsets:
        """The latest offsets: the broker's, or under Trigger.AvailableNow
        the target (also what :meth:`reportLatestOffset` gives then, as the
        connector's ``latestPartitionOffsets`` is)."""
        if self._target is not None:
            self._latest = dict(self._target)
        else:
            r = self.offset_reader
            self._latest = r.latest(r.partitions())
        return dict(self._latest)

    def prepareForTriggerAvailableNow(self) -> None:
        r = self.offset_reader
        self._target = r.latest(r.partitions())
        log.info("Trigger.AvailableNow: reading up to %s", offsets_to_json(self._target))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        n = self.opts.max_offsets_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def _delay(self, begin: Offsets, end: Offsets) -> bool:
        """The connector's ``delayBatch``: skip this trigger while fewer than
        ``minOffsetsPerTrigger`` offsets are available (a partition not in
        ``begin`` counts from offset 0) and ``maxTriggerDelay`` has not
        passed since the last batch."""
        now = time.time() * 1000.0
        if now - self._last_trigger_ms >= self.opts.max_trigger_delay_ms:
            self._last_trigger_ms = now
            return False
        new = sum(e - begin.get(tp, 0) for tp, e in end.items())
        if new < (self.opts.min_offsets_per_trigger or 0):
            log.debug("delaying the batch: %d offsets available, minOffsetsPerTrigger=%s", new,
                      self.opts.min_offsets_per_trigger)
            return True
        self._last_trigger_ms = now
        return False

    def _rate_limit(self, limit: int, begin: Offsets, end: Offsets) -> Offsets:
        new = [tp for tp in end if tp not in begin]
        begin_all = {**self.offset_reader.earliest(new), **begin}
        return rate_limit(limit, begin_all, end)

    def latestOffset(self, start: Dict[str, Dict[str, int]], limit: ReadLimit) -> Dict[str, Dict[str, int]]:
        begin = offsets_from_json(start)
        end = self._available()
        if isinstance(limit, ReadMinRows):
            if self._target is None and self._delay(begin, end):
                return start
            if self.opts.max_offsets_per_trigger is not None:
                end = self._rate_limit(self.opts.max_offsets_per_trigger, begin, end)
        elif isinstance(limit, ReadMaxRows):
            end = self._rate_limit(limit.max_rows, begin, end)
        # a partition whose end went below the start (truncated) is reported by partitions()
        return offsets_to_json(end)

    def reportLatestOffset(self) -> Optional[Dict[str, Dict[str, int]]]:
        return None if self._latest is None else offsets_to_json(self._latest)

    def partitions(self, start: Dict[str, Dict[str, int]], end: Dict[str, Dict[str, int]]) -> Sequence[InputPartition]:
        begin, until = offsets_from_json(start), offsets_from_json(end)
        new = [tp for tp in until if tp not in begin]
        found = self.offset_reader.earliest_existing(new)
        for tp in new:
            if tp not in found:
                self._report(f"Cannot find earliest offsets of {tp.topic}-{tp.partition}. Some data may have been missed.")
            elif found[tp] != 0:
                self._report(f"Added partition {tp.topic}-{tp.partition} starts from {found[tp]} instead of 0. "
                             "Some data may have been missed.")
        gone = sorted(tp for tp in begin if tp not in until)
        if gone:
            self._report(f"{', '.join(f'{t}-{p}' for t, p in gone)} are gone. Some data may have been missed.")
        ranges: List[OffsetRange] = []
        for tp in sorted(until):
            first = begin.get(tp, found.get(tp))
            if first is None:
                continue
            if until[tp] < first:
                self._report(f"Partition {tp.topic}-{tp.partition}'s offset was changed from {first} to {until[tp]}, "
                             "some data may have been missed.")
            ranges.append(OffsetRange(tp.topic, tp.partition, first, until[tp]))
        ranges = split_ranges(ranges, self.opts.min_partitions, self.opts.max_records_per_partition)
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, partition)

    def commit(self, end: Dict[str, Dict[str, int]]) -> None:
        log.debug("batch done up to %s (offsets live in Spark's checkpoint; nothing is committed to Kafka)", end)

    def stop(self) -> None:
        if self._offsets is not None:
            self._offsets.close()
            self._offsets = None


# --------------------------------------------------------------------- writes
def _acknowledged(messages: List[Optional[WriterCommitMessage]]) -> int:
    return sum(m.records for m in messages if isinstance(m, WriteResult))


class KwireWriter(DataSourceArrowWriter):
    def __init__(self, sink: SinkOptions) -> None:
        self.sink = sink

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_batches(iterator, self.sink)

    def commit(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        log.info("kwire write: %d records", _acknowledged(messages))

    def abort(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        log.warning("kwire write aborted after %d records were acknowledged (at least once: a retry may repeat them)",
                    _acknowledged(messages))


class KwireStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, sink: SinkOptions) -> None:
        self.sink = sink

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_batches(iterator, self.sink)

    def commit(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        log.info("kwire stream write: batch %d, %d records", batchId, _acknowledged(messages))

    def abort(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        log.warning("kwire stream write: batch %d aborted (at least once: its retry may repeat records)", batchId)
