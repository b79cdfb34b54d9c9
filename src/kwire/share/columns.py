"""A share group's records as Arrow columns (:meth:`kwire.share.ShareConsumer.poll_columnar`).

One ShareFetch answer's batches are decoded by :class:`kwire.ColumnarDecoder`
(no Python object per record), then :func:`kwire._core.acquired.acquired_rows`
picks the rows inside the ranges the broker acquired for the member: the
decoded batch is taken whole when every row is (the usual case), else the
rows are gathered with ``take``. The ``delivery_count`` column (int16, as
Kafka's field) is added last. Needs ``kwire[arrow]``.
"""

from __future__ import annotations

from typing import Any, List, Mapping, Tuple

import kwire._arrow  # noqa: F401  (without pyarrow: the ImportError naming kwire[arrow])
import pyarrow as pa

from kwire._core.acquired import acquired_rows
from kwire._core.columnar import ColumnarDecoder

__all__ = ["Columns", "DELIVERY_COUNT"]

#: The column a share group's rows add to the decoder's.
DELIVERY_COUNT = "delivery_count"


class Columns:
    """Columnar takes of one timestamp unit, with a decoder of their own."""

    def __init__(self, cfg: Mapping[str, Any], timestamp_unit: str) -> None:
        self._decoder = ColumnarDecoder(check_crcs=cfg["check_crcs"],
                                        max_decompressed_bytes=cfg["max_decompressed_bytes"],
                                        timestamp_unit=timestamp_unit)

    def take(self, f: Any) -> Tuple["pa.RecordBatch", List[int], List[Tuple[int, int]]]:
        """One buffered answer (a ``_Fetched``): its acquired rows with their delivery counts, the offsets of
        those rows, and the acquired offsets without a record."""
        batch = self._decoder.decode(f.data, topic=f.tp.topic, partition=f.tp.partition,
                                     min_offset=f.ranges[0][0]).record_batch
        rows, counts, gaps = acquired_rows(_int64s(batch.column(0)), f.ranges)
        n = len(counts) // 2
        if rows is not None:
            batch = batch.take(pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(rows)]))
        count = pa.Array.from_buffers(pa.int16(), n, [None, pa.py_buffer(counts)])
        batch = pa.RecordBatch.from_arrays(batch.columns + [count], names=batch.schema.names + [DELIVERY_COUNT])
        return batch, batch.column(0).to_pylist(), gaps

    @staticmethod
    def concat(batches: List["pa.RecordBatch"]) -> "pa.RecordBatch":
        """One partition's batches of one poll as one."""
        if len(batches) == 1:
            return batches[0]
        concat = getattr(pa, "concat_batches", None)         # pyarrow 19+
        if concat is not None:
            return concat(batches)
        return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def _int64s(arr: "pa.Array") -> memoryview:
    """An int64 array without nulls, as a memoryview of its values (no copy)."""
    if not len(arr):
        return memoryview(b"").cast("q")
    at = 8 * arr.offset
    return memoryview(arr.buffers()[1]).cast("B")[at:at + 8 * len(arr)].cast("q")
