"""Read limits and ``Trigger.AvailableNow`` for streaming reads, on Spark
4.2 and later (``pyspark.sql.streaming.datasource``: imported only where
:data:`kwire.spark.compat.FEATURES` has ``admission_control``).

Read limits, as the connector's ``KafkaMicroBatchStream``: the default
limit is ``ReadMinRows(minOffsetsPerTrigger)`` when that option is set,
else ``ReadMaxRows(maxOffsetsPerTrigger)``, else ``ReadAllAvailable``.
PySpark's Python API has no composite limit and no trigger delay, and the
JVM hands the Python limit back as it was (or ``ReadAllAvailable`` where
Spark overrides it, as for ``Trigger.Once``), so with ``ReadMinRows`` the
reader takes ``maxTriggerDelay`` and ``maxOffsetsPerTrigger`` from its
options: a batch is skipped (the start offsets returned: no new batch)
while fewer than ``minOffsetsPerTrigger`` offsets are available, until
``maxTriggerDelay`` has passed since the last batch (or since the reader
was made: the first trigger always runs, the connector's clock starting at
0); then ``maxOffsetsPerTrigger``, if set, caps the batch.

``Trigger.AvailableNow`` reads up to the latest offsets of the query's
start, ``maxOffsetsPerTrigger`` per batch. It does not wait for
``minOffsetsPerTrigger``: where the connector (4.2) applies that limit
here too, a skipped trigger ends an AvailableNow query with records it was
started to read left unread (Spark ends such a query at the first trigger
with no new data); PySpark's contract for ``prepareForTriggerAvailableNow``
asks the source to reach its target.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Dict, Optional

from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from kwire.spark.formats import TypedColumns
from kwire.spark.options import SourceOptions
from kwire.spark.stream import KwireStreamReader, Offsets, offsets_from_json, offsets_to_json, rate_limit

__all__ = ["KwireAdmissionStreamReader"]

log = logging.getLogger(__name__)


class KwireAdmissionStreamReader(KwireStreamReader, SupportsTriggerAvailableNow):
    """:class:`~kwire.spark.stream.KwireStreamReader` with read limits
    and ``Trigger.AvailableNow`` (see the module doc)."""

    def __init__(self, opts: SourceOptions, typed: Optional[TypedColumns] = None) -> None:
        super().__init__(opts, typed)
        self._target: Optional[Offsets] = None        # Trigger.AvailableNow: read up to here
        self._latest: Optional[Offsets] = None        # the broker's latest, for reportLatestOffset
        self._last_trigger_ms = 0.0                   # wall clock of the last batch (minOffsetsPerTrigger)

    def __getstate__(self) -> Dict[str, Any]:         # executors get the options only
        return {**super().__getstate__(), "_target": None, "_latest": None, "_last_trigger_ms": 0.0}

    def _available(self) -> Offsets:
        """The latest offsets: the broker's, or under Trigger.AvailableNow
        the target (also what :meth:`reportLatestOffset` gives then, as the
        connector's ``latestPartitionOffsets`` is)."""
        self._latest = dict(self._target) if self._target is not None else super()._available()
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

    def latestOffset(self, start: Dict[str, Dict[str, int]], limit: ReadLimit) -> Dict[str, Dict[str, int]]:  # type: ignore[override]
        begin = offsets_from_json(start)
        self._batch_done(begin)                        # where the query stands: every batch before is done
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
