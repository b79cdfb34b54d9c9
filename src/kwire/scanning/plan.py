"""Where a scan reads: each partition's offset range, from the caller's
``start`` and ``end``.

A bound is ``"earliest"``, ``"latest"``, an offset (an int), a time (a
``datetime`` with a time zone: the first offset whose timestamp is at or
after it, looked up with ListOffsets; none: the end), or a mapping
``{partition: bound}`` of those (a partition it does not name: ``start``
earliest, ``end`` latest). ``end`` is exclusive. Both are clamped to the
log as it is when the scan starts: offsets before its start are gone, and
a range past its end stops there (records written later are not waited
for).

A partition's end is the ListOffsets answer raised to the high watermark
of a Fetch of the last offset that answer implies: the same on Kafka, and
the real end on a broker whose ListOffsets trails its log (Tansu 0.6.0
answers the last batch's base offset + 1); with ``read_committed``,
ListOffsets' last stable offset as it is.

A broker's answer to a time lookup is checked against the record it names
(its offset and timestamp, fetched). One that does not match (Tansu 0.6.0
answers every lookup with offset 0 and the time of the request) is not
trusted, and the time is found in the records instead: the range starts at the log's
start and the reader skips to the first record at or after the start
time, or stops at the first record at or after the end time
(:class:`Range`'s ``start_ms``, ``end_ms``): the offset a Kafka broker
would have answered.
"""

from __future__ import annotations

import datetime
import numbers
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from kwire.formats.base import pa  # first: without pyarrow, its ImportError names kwire[arrow]

from kwire import protocol
from kwire.consumer import Consumer
from kwire.errors import KwireError
from kwire.types import TopicPartition

__all__ = ["Range", "plan", "check_bound"]

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_MS = datetime.timedelta(milliseconds=1)


@dataclass(frozen=True)
class Range:
    """Offsets ``start`` to ``end`` (exclusive) of one partition; where the
    broker could not look a time up, the reader begins at the first record
    at or after ``start_ms`` and ends before the first at or after
    ``end_ms``."""

    tp: TopicPartition
    start: int
    end: int
    start_ms: Optional[int] = None
    end_ms: Optional[int] = None


def check_bound(bound: Any, what: str) -> None:
    """Raise ``ValueError`` / ``TypeError`` for a bound that is none."""
    for value in (bound.values() if isinstance(bound, Mapping) else [bound]):
        if isinstance(value, str):
            if value not in ("earliest", "latest"):
                raise ValueError(f"{what} must be 'earliest', 'latest', an offset, a datetime or {{partition: ...}}, "
                                 f"not {value!r}")
        elif isinstance(value, datetime.datetime):
            if value.tzinfo is None:
                raise ValueError(f"{what}: a datetime without a time zone is ambiguous ({value.isoformat()}); "
                                 "give one (datetime.timezone.utc)")
        elif isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{what} must be 'earliest', 'latest', an offset, a datetime or {{partition: ...}}, "
                            f"not {type(value).__name__}")
        elif value < 0:
            raise ValueError(f"{what}: an offset is not negative ({value})")
    if isinstance(bound, Mapping):
        for key in bound:
            if isinstance(key, bool) or not isinstance(key, numbers.Integral):
                raise TypeError(f"{what}: a mapping's keys are partition numbers, not {key!r}")


def plan(consumer: Consumer, topic: str, start: Any, end: Any, partitions: Optional[Sequence[int]],
         timeout: float) -> List[Range]:
    """The ranges to read (empty ones included), with ``consumer``'s
    metadata and ListOffsets, each call within ``timeout`` seconds."""
    parts = _partitions(consumer, topic, partitions, start, end, timeout)
    tps = [TopicPartition(topic, p) for p in parts]
    first = consumer.beginning_offsets(tps, timeout)
    last = _ends(consumer, tps, first, timeout)
    starts, start_ms = _offsets(consumer, tps, start, "earliest", first, last, timeout)
    ends, end_ms = _offsets(consumer, tps, end, "latest", first, last, timeout)
    out = []
    for tp in tps:
        lo = min(max(starts[tp], first[tp]), last[tp])
        out.append(Range(tp, lo, max(lo, min(ends[tp], last[tp])), start_ms.get(tp), end_ms.get(tp)))
    return out


def _partitions(consumer: Consumer, topic: str, partitions: Optional[Sequence[int]], start: Any, end: Any,
                timeout: float) -> List[int]:
    cluster = consumer._client.refresh_metadata([topic], timeout)
    refused = cluster.refused(topic)
    if refused is not None:
        raise refused
    known = cluster.partitions_for(topic)
    if not known:
        code = cluster.topic_errors.get(topic, 0)
        if code:
            raise protocol.error_for(code, api="Metadata", topic=topic)
        raise KwireError(f"topic {topic!r} has no partitions (does it exist?)")
    if partitions is None:
        named = set()
        for bound in (start, end):
            if isinstance(bound, Mapping):
                named |= set(bound)
        partitions = sorted(named) if named else known
    missing = sorted(set(partitions) - set(known))
    if missing:
        raise ValueError(f"topic {topic!r} has no partition {', '.join(map(str, missing))} (it has {len(known)})")
    return sorted(set(int(p) for p in partitions))


def _ends(consumer: Consumer, tps: List[TopicPartition], first: Mapping[Any, int],
          timeout: float) -> Dict[TopicPartition, int]:
    """Each partition's end (see the module's doc)."""
    ends = dict(consumer.end_offsets(tps, timeout))
    if consumer.cfg["isolation_level"] == "read_committed":
        return ends
    # the last record ListOffsets implies: its Fetch carries the high watermark
    seen = _probe(consumer, {tp: ends[tp] - 1 for tp in tps if ends[tp] > first[tp]}, timeout)
    return {tp: max(end, seen[tp].high_watermark) if tp in seen else end for tp, end in ends.items()}


@dataclass(frozen=True)
class _Seen:
    """What a Fetch from an offset brought: the first record's offset and
    timestamp (ms; None: no record), and the high watermark."""

    offset: Optional[int]
    timestamp: Optional[int]
    high_watermark: int


def _probe(consumer: Consumer, offsets: Mapping[TopicPartition, int], timeout: float) -> Dict[TopicPartition, _Seen]:
    """Fetch each partition from its given offset (within ``timeout``)."""
    seen: Dict[TopicPartition, _Seen] = {}
    if not offsets:
        return seen
    consumer.assign(list(offsets))
    for tp, offset in offsets.items():
        consumer.seek(tp, offset)
    deadline = time.monotonic() + timeout
    while len(seen) < len(offsets) and time.monotonic() < deadline:
        got = consumer.poll_columnar(100, max_records=1)
        for tp, offset in offsets.items():
            batch = got.get(tp)
            if tp in seen or (batch is None and consumer.position(tp) <= offset):
                continue
            if batch is None:                              # past control records or a gap, none returned
                seen[tp] = _Seen(None, None, consumer.highwater(tp))
            else:                                           # timestamps in ms (poll_columnar's default unit)
                stamp = batch.column("timestamp").cast(pa.int64())[0].as_py()
                seen[tp] = _Seen(batch.column("offset")[0].as_py(), stamp, consumer.highwater(tp))
    consumer.assign([])
    return seen


def _ms(when: datetime.datetime) -> int:
    return (when - _EPOCH) // _MS


def _offsets(consumer: Consumer, tps: List[TopicPartition], bound: Any, default: str, first: Mapping[Any, int],
             last: Mapping[Any, int], timeout: float) -> Tuple[Dict[TopicPartition, int], Dict[TopicPartition, int]]:
    """Each partition's offset of ``bound`` (``default`` where a mapping
    does not name it), and the times the broker could not look up: for
    those, the offset is the log's (start for "earliest", end for "latest")."""
    per = {tp: (bound.get(tp.partition, default) if isinstance(bound, Mapping) else bound) for tp in tps}
    times = {tp: _ms(b) for tp, b in per.items() if isinstance(b, datetime.datetime)}
    found = consumer.offsets_for_times(times, timeout) if times else {}
    # an answer is the first record at or after the time: that record's offset and timestamp
    seen = _probe(consumer, {tp: at.offset for tp, at in found.items() if at is not None}, timeout)
    out, unknown = {}, {}
    for tp, b in per.items():
        if b == "earliest":
            out[tp] = first[tp]
        elif b == "latest":
            out[tp] = last[tp]
        elif tp in times:
            at = found.get(tp)
            if at is not None and (seen.get(tp) is None or (seen[tp].offset, seen[tp].timestamp) != tuple(at)):
                unknown[tp] = times[tp]                       # not the record the broker answered: not trusted
                out[tp] = first[tp] if default == "earliest" else last[tp]
            else:
                out[tp] = last[tp] if at is None else at.offset
        else:
            out[tp] = int(b)
    return out, unknown
