"""Executor side: read one offset range of one partition into Arrow
batches in Spark's Kafka schema.

Each Python worker keeps one consumer per configuration and reuses it for
the tasks it runs (Spark reuses Python workers), assigning it the task's
partition alone, with no consumer group. The range's end is exclusive: a
fetch that brings records past it is sliced, never returned whole.

Typed keys and values (``valueFormat`` / ``keyFormat``): each batch's are
decoded by the query's :class:`kwire.spark.formats.TypedColumns` before it
goes to Spark.

Data loss: when the range's first offsets were deleted (the partition now
begins later), the topic or partition vanished, or the log ends before the
range does, ``failOnDataLoss=true`` raises :class:`DataLossError`; false logs
a warning and returns what is still there.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Dict, Iterator, Optional

import pyarrow as pa
import pyarrow.compute as pc

from kwire.admin import Admin
from kwire.consumer import Consumer, NoOffsetForPartitionError
from kwire.errors import KafkaError
from kwire.future import KafkaTimeoutError
from kwire.protocol.api_keys import ErrorCode
from kwire.spark._cache import ClientCache
from kwire.spark.errors import DataLossError
from kwire.spark.formats import TypedColumns
from kwire.spark.offsets import OffsetRange, admin_config
from kwire.spark.schema import to_spark_batch
from kwire.types import TopicPartition

__all__ = ["read_range", "consumers"]

log = logging.getLogger(__name__)

#: After this long without progress the reader checks whether its range still exists.
STALL_CHECK_S = 2.0
#: Rows per Arrow batch handed to Spark: each poll decodes at most this
#: many. Spark's JVM side took more CPU for whole polls (about 230,000 of the
#: benchmark's records) than for batches of this size; decoding them at this
#: size, rather than slicing larger ones, spares pyarrow's IPC writer from
#: rebasing every sliced offset column (10M lz4 records on Apache Kafka, five
#: rounds in turns: 0.06 s less a count, every round).
ARROW_BATCH_ROWS = 65_536

#: This worker's consumers, one per configuration, reused across tasks and
#: queries: the group id is not part of the match, because an executor's
#: consumer only assigns and seeks, and never sends it. Each batch query has
#: a group id of its own, and with it in the match every query opened new
#: connections, started a cold decoder (its column memory faulted in afresh)
#: and left one more consumer open in every worker.
consumers: ClientCache[Consumer] = ClientCache(Consumer, Consumer.close, ignore=("group.id",))

_LOSS_HINT = ("Some data may have been lost because they are not available in Kafka any more; either the data was "
              "aged out by Kafka or the topic may have been deleted before all the data in the topic was processed. "
              'If you want your query to continue in such cases, set the source option "failOnDataLoss" to "false".')


def read_range(r: OffsetRange, config: Dict[str, Any], include_headers: bool, fail_on_data_loss: bool,
               poll_timeout_ms: int, typed: Optional[TypedColumns] = None) -> Iterator[pa.RecordBatch]:
    """The records of ``r`` (offsets ``r.start`` to ``r.end`` exclusive) as
    Spark-schema Arrow batches, read with a cached consumer for ``config``
    (``typed``: the query's typed key and value)."""
    if r.size <= 0:
        return
    consumer = consumers.get(config)
    tp = TopicPartition(r.topic, r.partition)
    consumer.assign([tp])
    consumer.seek(tp, r.start)
    try:
        yield from _read(consumer, tp, r, config, include_headers, fail_on_data_loss, poll_timeout_ms, typed)
    except BaseException:
        # a half-read task leaves the consumer in an unknown state: do not reuse it
        consumers.drop(config)
        raise
    consumer.assign([])


def _read(consumer: Consumer, tp: TopicPartition, r: OffsetRange, config: Dict[str, Any], include_headers: bool,
          fail_on_data_loss: bool, poll_timeout_ms: int, typed: Optional[TypedColumns]) -> Iterator[pa.RecordBatch]:
    position = r.start
    progress = time.monotonic()
    checked = progress
    while position < r.end:
        try:
            got = consumer.poll_columnar(100, timestamp_unit="us", max_records=ARROW_BATCH_ROWS)   # Spark's unit
        except NoOffsetForPartitionError:
            # the position is outside the log: its start moved past it, or the log ends before it
            position = _lost(tp, position, r, fail_on_data_loss, consumer)
            if position >= r.end:
                return
            consumer.seek(tp, position)
            progress = time.monotonic()
            continue
        rb = got.get(tp)
        now = time.monotonic()
        if rb is not None and rb.num_rows:
            offsets = rb.column(0)
            if offsets[rb.num_rows - 1].as_py() >= r.end:
                rb = rb.slice(0, pc.sum(pc.less(offsets, r.end)).as_py() or 0)
            if rb.num_rows:
                key, value = (None, None) if typed is None else typed.columns(rb, tp.topic, tp.partition)
                yield to_spark_batch(rb, tp.topic, tp.partition, include_headers, key, value)
        new_position = consumer.position(tp)
        if new_position > position:
            position, progress, checked = new_position, now, now
            continue
        if now - checked >= STALL_CHECK_S:
            checked = now
            position = _check_stalled(tp, position, r, config, fail_on_data_loss, consumer)
            if position >= r.end:
                return
            if position != consumer.position(tp):
                consumer.seek(tp, position)
        if now - progress >= poll_timeout_ms / 1000.0:
            raise KafkaTimeoutError(f"{tp.topic}[{tp.partition}]: no records at offset {position} within "
                                    f"kafkaConsumer.pollTimeoutMs={poll_timeout_ms} (reading offsets "
                                    f"{r.start} to {r.end})")


def _lost(tp: TopicPartition, position: int, r: OffsetRange, fail: bool, consumer: Consumer) -> int:
    """Where to go on from ``position`` once its offset is out of the log."""
    begin = consumer.beginning_offsets([tp])[tp]
    if position < begin:
        resume = min(begin, r.end)
        _report(fail, f"Cannot fetch offset {position} of {tp.topic}-{tp.partition}: the partition now starts at "
                      f"{begin}, offsets {position} to {resume} are gone.",
                f"skipping them, reading on from offset {resume}" if resume < r.end else "skipping them")
        return begin
    _report(fail, f"Cannot fetch offsets {position} to {r.end} of {tp.topic}-{tp.partition}: the partition ends "
                  f"before {position}.", "skipping them")
    return r.end


def _check_stalled(tp: TopicPartition, position: int, r: OffsetRange, config: Dict[str, Any], fail: bool,
                   consumer: Consumer) -> int:
    """No progress for a while: is the partition still there, and does it
    still hold ``position``? Returns where to go on from."""
    with Admin(admin_config(config)) as admin:
        try:
            parts = {p.partition for p in admin.describe_topics([tp.topic])[tp.topic].partitions}
        except KafkaError as e:
            if e.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise
            parts = set()
    if tp.partition not in parts:
        _report(fail, f"{tp.topic}-{tp.partition} does not exist any more; offsets {position} to {r.end} "
                      "cannot be read.", "skipping them")
        return r.end
    high = consumer.highwater(tp)
    if 0 <= high <= position:
        return _lost(tp, position, r, fail, consumer)
    return position


def _report(fail: bool, message: str, going_on: str) -> None:
    """Data loss: raise with Spark's hint, or (``failOnDataLoss`` false) warn,
    saying what the reader does instead (``going_on``)."""
    if fail:
        raise DataLossError(f"{message} {_LOSS_HINT}")
    log.warning("%s failOnDataLoss is false: %s.", message, going_on)

