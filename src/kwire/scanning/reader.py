"""The batches of a scan: its consumer's ``poll_columnar``, rows past each
partition's end cut off, keys and values typed by their formats, a
``topic`` and a ``partition`` column put first.

Memory stays bounded: each poll decodes about ``max_poll_bytes``, and a
batch is made only when the reader asks for the next one. A partition
whose position reaches its end is unassigned (fetched no more); the
consumer is closed when every partition is done, when an error ends the
scan, or when the batches are released (the reader with them). No progress on any partition for
``timeout`` seconds raises :class:`kwire.KafkaTimeoutError`.
"""

from __future__ import annotations

import collections
import logging
import time
import weakref
from typing import Any, Deque, Dict, List, Optional

from kwire.formats.base import pa  # first: without pyarrow, its ImportError names kwire[arrow]

import pyarrow.compute as pc  # noqa: E402

from kwire._arrow import record_schema
from kwire.consumer import Consumer
from kwire.formats.base import Format, UndecodableValueError, decode_batch
from kwire.future import KafkaTimeoutError
from kwire.scanning.plan import Range
from kwire.types import TopicPartition

__all__ = ["scan_schema", "with_location", "Batches"]

log = logging.getLogger("kwire.scan")

#: How long one poll waits for records (a reader's next batch waits in turns of it).
POLL_MS = 200


def scan_schema(timestamp_unit: str, topic: str, key_format: Optional[Format],
                value_format: Optional[Format]) -> "pa.Schema":
    """``topic``, ``partition``, then kwire's columnar schema with the key
    and value of their formats' types (for ``topic``)."""
    fields = [pa.field("topic", pa.string(), nullable=False), pa.field("partition", pa.int32(), nullable=False)]
    for field in record_schema(timestamp_unit):
        fmt = key_format if field.name == "key" else value_format if field.name == "value" else None
        fields.append(field if fmt is None else pa.field(field.name, fmt.arrow_type(topic), nullable=True))
    return pa.schema(fields)


def with_location(batch: "pa.RecordBatch", tp: TopicPartition, schema: "pa.Schema") -> "pa.RecordBatch":
    """``batch`` (of ``tp``, keys and values typed) with its ``topic`` and
    ``partition`` columns first, as ``schema`` (:func:`scan_schema`) has it."""
    n = batch.num_rows
    columns: List[Any] = [pa.repeat(pa.scalar(tp.topic, pa.string()), n),
                          pa.repeat(pa.scalar(tp.partition, pa.int32()), n), *batch.columns]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _close(consumer: Consumer) -> None:
    try:
        consumer.close()
    except Exception as e:                 # a finalizer: nothing to raise it to
        log.warning("kwire.scan: closing its consumer failed: %s", e)


class Batches:
    """An iterator of a scan's record batches (see the module's doc)."""

    def __init__(self, consumer: Consumer, ranges: List[Range], schema: "pa.Schema", *, timestamp_unit: str,
                 key_format: Optional[Format], value_format: Optional[Format], timeout: float) -> None:
        self._consumer = consumer
        self._closer = weakref.finalize(self, _close, consumer)
        self._ends: Dict[TopicPartition, int] = {r.tp: r.end for r in ranges if r.end > r.start}
        self._schema, self._unit, self._timeout = schema, timestamp_unit, timeout
        self._key_format, self._value_format = key_format, value_format
        self._ready: Deque["pa.RecordBatch"] = collections.deque()
        self._error: Optional[BaseException] = None
        self._positions = {r.tp: r.start for r in ranges if r.tp in self._ends}
        self._start_ms = {r.tp: r.start_ms for r in ranges if r.tp in self._ends and r.start_ms is not None}
        self._end_ms = {r.tp: r.end_ms for r in ranges if r.tp in self._ends and r.end_ms is not None}
        self._progress = time.monotonic()
        consumer.assign(list(self._ends))
        for r in ranges:
            if r.tp in self._ends:
                consumer.seek(r.tp, r.start)

    def __iter__(self) -> "Batches":
        return self

    def __next__(self) -> "pa.RecordBatch":
        try:
            while not self._ready:
                if self._error is not None:
                    raise self._error
                if not self._ends:
                    raise StopIteration
                self._poll()
            return self._ready.popleft()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Close the consumer (once)."""
        self._closer()

    def _poll(self) -> None:
        for tp, batch in self._consumer.poll_columnar(POLL_MS, timestamp_unit=self._unit).items():
            end = self._ends.get(tp)
            if end is None:
                continue
            offsets = batch.column("offset")
            if offsets[batch.num_rows - 1].as_py() >= end:
                batch = batch.slice(0, pc.sum(pc.less(offsets, end)).as_py() or 0)
            if tp in self._start_ms or tp in self._end_ms:
                batch = self._by_time(tp, batch)
            if batch.num_rows:
                self._typed(tp, batch)
        self._check_progress()

    def _by_time(self, tp: TopicPartition, batch: "pa.RecordBatch") -> "pa.RecordBatch":
        """``batch`` from the first record at or after the start time (then
        every record), and before the first at or after the end time (the
        partition's end from then on): the times the broker did not look up."""
        per_ms = 1000 if self._unit == "us" else 1
        stamps = pc.cast(batch.column("timestamp"), pa.int64())
        if tp in self._start_ms:
            at = pc.indices_nonzero(pc.greater_equal(stamps, self._start_ms[tp] * per_ms))
            if not len(at):
                return batch.slice(0, 0)
            del self._start_ms[tp]
            batch, stamps = batch.slice(at[0].as_py()), stamps.slice(at[0].as_py())
        if tp in self._end_ms:
            at = pc.indices_nonzero(pc.greater_equal(stamps, self._end_ms[tp] * per_ms))
            if len(at):
                self._ends[tp] = batch.column("offset")[at[0].as_py()].as_py()
                batch = batch.slice(0, at[0].as_py())
        return batch

    def _typed(self, tp: TopicPartition, batch: "pa.RecordBatch") -> None:
        """Queue ``batch`` typed (with the rows before an undecodable value,
        whose error is raised after them)."""
        try:
            batch = decode_batch(batch, topic=tp.topic, partition=tp.partition, key_format=self._key_format,
                                 value_format=self._value_format)
        except UndecodableValueError as e:
            self._error = e
            if not e.row:
                return
            batch = decode_batch(batch.slice(0, e.row), topic=tp.topic, partition=tp.partition,
                                 key_format=self._key_format, value_format=self._value_format)
        self._ready.append(with_location(batch, tp, self._schema))

    def _check_progress(self) -> None:
        """Partitions at their end are done (unassigned); no progress on any
        for ``timeout`` seconds is an error."""
        now = time.monotonic()
        done = []
        for tp, end in self._ends.items():
            position = self._consumer.position(tp, self._timeout)
            if position > self._positions[tp]:
                self._positions[tp], self._progress = position, now
            if position >= end:
                done.append(tp)
        if done:
            for tp in done:
                del self._ends[tp]
            self._consumer.assign(list(self._ends))
        elif self._ends and now - self._progress > self._timeout:
            behind = ", ".join(f"{tp.partition} at {self._positions[tp]} of {end}" for tp, end in self._ends.items())
            raise KafkaTimeoutError(f"kwire.scan: no records for {self._timeout} s from partitions of "
                                    f"{next(iter(self._ends)).topic} not at their end ({behind})")
