"""Micro-batch reads for every Spark with the Python Data Source API
(4.0 on): :class:`KwireStreamReader`, offsets as Spark's Kafka JSON
(``{"topic": {"0": 23}}``), new partitions picked up, lost ones reported
as ``failOnDataLoss`` says.

This reader has no read limits: Spark 4.0 and 4.1 ask a Python stream
reader for its latest offsets without the batch's start or a limit
(``latestOffset()``), so a limit cannot be applied soundly there (after a
restart the reader would not know where the query stands), and
:mod:`kwire.spark.source` refuses ``maxOffsetsPerTrigger``,
``minOffsetsPerTrigger`` and ``maxTriggerDelay`` on those releases.
``Trigger.AvailableNow`` works: Spark wraps a source without
``SupportsTriggerAvailableNow`` so that it asks ``latestOffset()`` once, as
the query starts, and every batch ends there (one batch with every record
available at the start, each read once). From 4.2 on,
:mod:`kwire.spark.admission` subclasses this reader with Spark's read
limits and its own ``Trigger.AvailableNow``.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Iterator, List, Optional, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from kwire.spark.errors import DataLossError
from kwire.spark.formats import TypedColumns
from kwire.spark.lag import LagCommitter
from kwire.spark.offsets import OffsetRange, OffsetReader, split_ranges
from kwire.spark.options import SourceOptions
from kwire.spark.ranges import read_range
from kwire.types import TopicPartition

__all__ = ["KwireStreamReader", "RangePartition", "read_partition", "offsets_to_json", "offsets_from_json",
           "rate_limit", "Offsets"]

log = logging.getLogger(__name__)

Offsets = Dict[TopicPartition, int]


class RangePartition(InputPartition):
    """One Spark partition: one offset range of one Kafka partition."""

    def __init__(self, range: OffsetRange) -> None:
        super().__init__(range)
        self.range = range


def read_partition(opts: SourceOptions, partition: InputPartition,
                   typed: Optional[TypedColumns] = None) -> Iterator[pa.RecordBatch]:
    """The records of one :class:`RangePartition` as Arrow batches in Spark's
    Kafka schema (``typed``: the query's typed key and value)."""
    if not isinstance(partition, RangePartition):     # Spark reads one placeholder partition when there are none
        return iter(())
    return read_range(partition.range, opts.consumer_config("executor"), opts.include_headers,
                      opts.fail_on_data_loss, opts.poll_timeout_ms, typed)


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


class KwireStreamReader(DataSourceStreamReader):
    """Micro-batch reads without read limits (see the module doc). Offsets
    are Spark's Kafka JSON; Spark keeps them in the checkpoint, so a
    restarted query goes on where it stopped and a replayed batch reads
    exactly the same ranges."""

    def __init__(self, opts: SourceOptions, typed: Optional[TypedColumns] = None) -> None:
        self.opts = opts
        self.typed = typed
        self._offsets: Optional[OffsetReader] = None
        self._lag: Optional[LagCommitter] = None
        self._planned: Optional[Offsets] = None       # the end of the last batch planned (done at the next trigger)

    def __getstate__(self) -> Dict[str, Any]:         # executors get the options only
        return {"opts": self.opts, "typed": self.typed, "_offsets": None, "_lag": None, "_planned": None}

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
        """The broker's latest offsets of every partition subscribed to."""
        r = self.offset_reader
        return r.latest(r.partitions())

    def latestOffset(self) -> Dict[str, Dict[str, int]]:       # type: ignore[override]  (4.0 and 4.1's signature)
        if self._planned is not None:                  # the next trigger: the batch planned last is done
            self._batch_done(self._planned)
        return offsets_to_json(self._available())

    def _new_partitions(self, begin: Offsets, until: Offsets) -> Offsets:
        """The first offsets of the partitions in ``until`` but not ``begin``
        (Spark's checks: each must start at offset 0, and exist)."""
        new = [tp for tp in until if tp not in begin]
        found = self.offset_reader.earliest_existing(new)
        for tp in new:
            if tp not in found:
                self._report(f"Cannot find earliest offsets of {tp.topic}-{tp.partition}. Some data may have been missed.")
            elif found[tp] != 0:
                self._report(f"Added partition {tp.topic}-{tp.partition} starts from {found[tp]} instead of 0. "
                             "Some data may have been missed.")
        return found

    def partitions(self, start: Dict[str, Dict[str, int]], end: Dict[str, Dict[str, int]]) -> Sequence[InputPartition]:
        begin, until = offsets_from_json(start), offsets_from_json(end)
        found = self._new_partitions(begin, until)
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
        self._planned = until
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.opts, partition, self.typed)

    def commit(self, end: Dict[str, Dict[str, int]]) -> None:
        """Spark's word that a batch is done (it says so as it plans the
        next one): see :meth:`_batch_done`."""
        if self.opts.lag_group is None:
            log.debug("batch done up to %s (offsets live in Spark's checkpoint; nothing is committed to Kafka)", end)
        self._batch_done(offsets_from_json(end))

    def _batch_done(self, end: Offsets) -> None:
        """A batch that ends at ``end`` is done (Spark's commit log has it):
        with ``commitOffsetsToGroup`` its end offsets are committed to the
        lag group (kwire.spark.lag; once, however often they are reported),
        never read back (the checkpoint has them); else nothing. The
        trigger after a batch reports it (:meth:`latestOffset`), so the
        last batch before a pause is committed too, not only when the next
        one is planned, as Spark's ``commit`` would."""
        if self.opts.lag_group is None:
            return
        if self._lag is None:
            self._lag = LagCommitter(self.opts.lag_group)
        self._lag.commit(self.offset_reader.admin, end)

    def stop(self) -> None:
        if self._offsets is not None:
            self._offsets.close()
            self._offsets = None
