"""Filter pushdown for batch reads: predicates on ``partition``, ``offset``
and ``timestamp`` become the partitions and offset ranges actually
fetched, where Spark's own connector reads every planned range and filters
afterwards.

What Spark hands the reader (``DataSourceReader.pushFilters``, an AND of
simple predicates) is read as bounds:

* ``partition``: ``=``, ``IN``, ``<``, ``<=``, ``>``, ``>=``: partitions
  outside them are not read at all;
* ``offset``: the same: each range is cut to the offsets they allow
  (``IN`` to the span of its values);
* ``timestamp``: ``=``, ``IN``, ``>``, ``>=`` give a lower bound, turned
  into a start offset per partition through ListOffsets (the earliest
  offset whose timestamp is at or after it: every record before it is
  earlier, so nothing the predicate wants is skipped). Upper bounds
  (``<``, ``<=``) are not pushed: Kafka's timestamps (CreateTime) may go
  back within a log, so records past the first later one can still match.

Every predicate is also left for Spark to evaluate on the rows read
(``pushFilters`` returns them all): pushdown only decides what is fetched,
so a bound kwire cannot use costs nothing but the read it would have saved.

Spark passes filters to Python data sources from 4.1 on: before that
(:data:`kwire.spark.compat.FEATURES` without ``filter_pushdown``) Spark's
filter classes do not exist, this module imports without them and
:func:`bounds_from_filters` is never called (no reader takes filters).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Dict, Iterable, List, Optional, Set

from pyspark.sql.types import TimestampType

from kwire.spark.compat import FEATURES
from kwire.spark.offsets import OffsetRange
from kwire.types import TopicPartition

if FEATURES.filter_pushdown:          # Spark 4.1+ (see the module doc)
    from pyspark.sql.datasource import (EqualTo, GreaterThan, GreaterThanOrEqual, In, LessThan,
                                        LessThanOrEqual)

    _RANGE: tuple = (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual, In)
if TYPE_CHECKING:       # pragma: no cover
    from pyspark.sql.datasource import Filter

__all__ = ["Bounds", "bounds_from_filters", "narrow"]

_TS = TimestampType()


@dataclass
class Bounds:
    """What the pushed predicates allow (None: no bound)."""

    partitions: Optional[Set[int]] = None     # only these (from = / IN)
    partition_lo: Optional[int] = None        # inclusive
    partition_hi: Optional[int] = None        # inclusive
    offset_lo: Optional[int] = None           # inclusive
    offset_hi: Optional[int] = None           # inclusive
    timestamp_lo_ms: Optional[int] = None     # records at or after this (ms)
    used: List["Filter"] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.used

    def describe(self) -> str:
        parts = []
        if self.partitions is not None:
            parts.append(f"partition in {sorted(self.partitions)}")
        if self.partition_lo is not None or self.partition_hi is not None:
            parts.append(f"partition {self.partition_lo}..{self.partition_hi}")
        if self.offset_lo is not None or self.offset_hi is not None:
            parts.append(f"offset {self.offset_lo}..{self.offset_hi}")
        if self.timestamp_lo_ms is not None:
            parts.append(f"timestamp >= {self.timestamp_lo_ms} ms")
        return ", ".join(parts) or "none"


def _int(v: object) -> Optional[int]:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _micros(v: object) -> Optional[int]:
    """A timestamp literal as Spark's microseconds (the inverse of how
    Spark made the Python value)."""
    try:
        return _TS.toInternal(v)
    except (TypeError, AttributeError, ValueError, OverflowError):
        return None


def _lower_ms(f: "Filter") -> Optional[int]:
    """The earliest record timestamp (ms) a timestamp predicate allows."""
    if isinstance(f, In):
        micros = [_micros(v) for v in f.value]
        if not micros or any(m is None for m in micros):
            return None
        return min(math.ceil(m / 1000) for m in micros)          # type: ignore[operator]
    if isinstance(f, (EqualTo, GreaterThanOrEqual)):
        m = _micros(f.value)
        return None if m is None else math.ceil(m / 1000)
    if isinstance(f, GreaterThan):
        m = _micros(f.value)
        return None if m is None else m // 1000 + 1
    return None


def _tighten(b: Bounds, name: str, f: "Filter") -> bool:
    """Narrow ``b`` by ``f`` on integer column ``name`` (partition, offset); False if unusable."""
    lo_attr, hi_attr = f"{name}_lo", f"{name}_hi"
    if isinstance(f, In):
        values = [_int(v) for v in f.value]
        if not values or any(v is None for v in values):
            return False
        lo, hi = min(values), max(values)                          # type: ignore[type-var]
        if name == "partition":
            b.partitions = set(values) if b.partitions is None else b.partitions & set(values)  # type: ignore[arg-type]
    else:
        v = _int(f.value)
        if v is None:
            return False
        lo = {EqualTo: v, GreaterThan: v + 1, GreaterThanOrEqual: v}.get(type(f))   # type: ignore[call-overload]
        hi = {EqualTo: v, LessThan: v - 1, LessThanOrEqual: v}.get(type(f))         # type: ignore[call-overload]
        if name == "partition" and isinstance(f, EqualTo):
            b.partitions = {v} if b.partitions is None else b.partitions & {v}
    if lo is not None:
        cur = getattr(b, lo_attr)
        setattr(b, lo_attr, lo if cur is None else max(cur, lo))
    if hi is not None:
        cur = getattr(b, hi_attr)
        setattr(b, hi_attr, hi if cur is None else min(cur, hi))
    return True


def bounds_from_filters(filters: Iterable["Filter"]) -> Bounds:
    """The bounds of the predicates kwire can use among ``filters``."""
    b = Bounds()
    for f in filters:
        if not isinstance(f, _RANGE) or len(f.attribute) != 1:
            continue
        name = f.attribute[0].lower()
        if name in ("partition", "offset"):
            if _tighten(b, name, f):
                b.used.append(f)
        elif name == "timestamp":
            ms = _lower_ms(f)
            if ms is not None:
                b.timestamp_lo_ms = ms if b.timestamp_lo_ms is None else max(b.timestamp_lo_ms, ms)
                b.used.append(f)
    return b


def narrow(ranges: List[OffsetRange], b: Bounds,
           for_times: Callable[[Dict[TopicPartition, int]], Dict[TopicPartition, Optional[int]]]) -> List[OffsetRange]:
    """``ranges`` cut to what ``b`` allows (empty ones dropped);
    ``for_times`` looks up the earliest offset at or after a timestamp per
    partition (None: no such record; a partition left out: the broker's
    answer could not be trusted, so its range keeps its start), only when
    ``b`` has a timestamp bound."""
    def keep(p: int) -> bool:
        return ((b.partitions is None or p in b.partitions)
                and (b.partition_lo is None or p >= b.partition_lo)
                and (b.partition_hi is None or p <= b.partition_hi))

    out = [r for r in ranges if keep(r.partition)]
    starts: Dict[TopicPartition, Optional[int]] = {}
    if b.timestamp_lo_ms is not None and out:
        starts = for_times({TopicPartition(r.topic, r.partition): b.timestamp_lo_ms for r in out})
    narrowed = []
    for r in out:
        start, end = r.start, r.end
        if b.offset_lo is not None:
            start = max(start, b.offset_lo)
        if b.offset_hi is not None:
            end = min(end, b.offset_hi + 1)
        tp = TopicPartition(r.topic, r.partition)
        if tp in starts:
            first = starts[tp]
            start = max(start, end if first is None else first)
        if end > start:
            narrowed.append(OffsetRange(r.topic, r.partition, start, end))
    return narrowed
