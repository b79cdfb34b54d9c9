"""Driver side: which partitions a query reads, their offsets resolved
against the broker, and the offset ranges that become Spark partitions.

``latest`` is the partition's end as a consumer sees it: the ListOffsets
answer, raised to the high watermark of a Fetch of the last offset that
answer implies. On Kafka the two agree (both are the high watermark), so the
Fetch changes nothing; a broker whose ListOffsets trails its log (Tansu
0.6.0 answers the last batch's base offset + 1) still gets read to its end.
With ``isolation.level=read_committed`` ListOffsets already gives the last
stable offset, which a Fetch's high watermark would overshoot, so it is used
as it is.

Retries: each public lookup of :class:`OffsetReader` is one attempt of up to
``fetchOffset.numRetries`` (3), ``fetchOffset.retryIntervalMs`` (1000) apart,
the clients closed and made anew between attempts, as the connector's
``KafkaOffsetReaderAdmin.withRetries`` does (its count is of attempts, not
retries after the first). A lookup made inside another is part of the
outer attempt. kwire's own verdicts (:class:`SparkOptionError`,
:class:`OffsetRangeError`, :class:`DataLossError`: the answer, not the
transport, is wrong) are raised at once, where the connector retries every
non-fatal error alike.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from functools import wraps
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, TypeVar

from kwire.admin import Admin
from kwire.config import ADMIN, ALIASES
from kwire.consumer import Consumer, NoOffsetForPartitionError
from kwire.spark.errors import DataLossError, OffsetRangeError, SparkOptionError
from kwire.spark.options import EARLIEST, LATEST, OffsetSpec, SourceOptions
from kwire.types import TopicPartition

__all__ = ["OffsetRange", "OffsetReader", "plan_batch", "split_ranges"]

log = logging.getLogger(__name__)

TP = Tuple[str, int]
F = TypeVar("F", bound=Callable[..., Any])

#: Errors that are kwire's verdict on the answer: retrying cannot change them.
_NOT_RETRIED = (SparkOptionError, OffsetRangeError, DataLossError)


def _retried(method: F) -> F:
    """Run ``method`` through :meth:`OffsetReader.with_retries`."""
    @wraps(method)
    def wrapper(self: "OffsetReader", *args: Any, **kwargs: Any) -> Any:
        return self.with_retries(method.__name__, lambda: method(self, *args, **kwargs))
    return wrapper  # type: ignore[return-value]


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``start`` (inclusive) to ``end`` (exclusive) of one partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


class OffsetReader:
    """Partitions and offsets for one query, through one driver-side
    consumer and admin client (opened on first use; :meth:`close` them)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._cfg = opts.consumer_config("driver")
        self._consumer: Optional[Consumer] = None
        self._admin: Optional[Admin] = None
        self._attempting = False          # inside an attempt: nested lookups are part of it

    def with_retries(self, what: str, body: Callable[[], Any]) -> Any:
        """``body()``, attempted up to ``fetchOffset.numRetries`` times,
        ``fetchOffset.retryIntervalMs`` apart, the clients made anew after
        each failure (see the module's docstring)."""
        if self._attempting:
            return body()
        attempts = self.opts.fetch_offset_num_retries
        interval = self.opts.fetch_offset_retry_interval_ms / 1000.0
        for attempt in range(1, attempts + 1):
            self._attempting = True
            try:
                return body()
            except _NOT_RETRIED:
                raise
            except Exception as e:
                if attempt == attempts:
                    raise
                log.warning("Error in attempt %d of %d getting Kafka offsets (%s): %s: %s; trying again in %s ms "
                            "(fetchOffset.numRetries, fetchOffset.retryIntervalMs)", attempt, attempts, what,
                            type(e).__name__, e, self.opts.fetch_offset_retry_interval_ms)
                time.sleep(interval)
                self.close()
            finally:
                self._attempting = False
        raise AssertionError("unreachable: fetchOffset.numRetries is at least 1")

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(self._cfg)
        return self._consumer

    @property
    def admin(self) -> Admin:
        if self._admin is None:
            self._admin = Admin(admin_config(self._cfg))
        return self._admin

    def close(self) -> None:
        for c in (self._consumer, self._admin):
            if c is not None:
                c.close()
        self._consumer = self._admin = None

    def __enter__(self) -> "OffsetReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------- partitions
    @_retried
    def partitions(self) -> List[TopicPartition]:
        """The partitions the subscription names that exist now, sorted.
        ``subscribe`` raises the broker's error for a topic that does not
        exist (as Spark's source does); ``assign`` leaves out what is absent
        (see :meth:`missing`)."""
        sub = self.opts.subscription
        if sub.kind == "subscribe":
            topics = list(sub.topics)
        elif sub.kind == "subscribePattern":
            topics = [t for t in self.admin.list_topics() if sub.matches(t)]
        else:
            topics = sorted({t for t, _ in sub.partitions})
        existing = self._describe(topics, strict=sub.kind == "subscribe")
        if sub.kind == "assign":
            return sorted(TopicPartition(t, p) for t, p in set(sub.partitions) if p in existing.get(t, ()))
        return sorted(TopicPartition(t, p) for t, ps in existing.items() for p in ps)

    def missing(self, found: Iterable[TP]) -> List[TP]:
        """Assigned partitions absent from ``found``."""
        have = set(found)
        return sorted(tp for tp in set(self.opts.subscription.partitions) if tp not in have)

    def _describe(self, topics: Sequence[str], strict: bool) -> Dict[str, List[int]]:
        if not topics:
            return {}
        if strict:
            return {n: [p.partition for p in d.partitions] for n, d in self.admin.describe_topics(topics).items()}
        present = set(self.admin.list_topics())
        wanted = [t for t in topics if t in present]
        if not wanted:
            return {}
        return {n: [p.partition for p in d.partitions] for n, d in self.admin.describe_topics(wanted).items()}

    # ------------------------------------------------------------- offsets
    @_retried
    def earliest(self, tps: Iterable[TP]) -> Dict[TopicPartition, int]:
        tps = [TopicPartition(*tp) for tp in tps]
        return dict(self.consumer.beginning_offsets(tps)) if tps else {}

    @_retried
    def earliest_existing(self, tps: Iterable[TP]) -> Dict[TopicPartition, int]:
        """Earliest offsets of those of ``tps`` that exist now."""
        existing = set(self.partitions())
        return self.earliest([tp for tp in tps if TopicPartition(*tp) in existing])

    @_retried
    def latest(self, tps: Iterable[TP]) -> Dict[TopicPartition, int]:
        """Each partition's end: ListOffsets latest, raised to the Fetch high
        watermark (see the module's docstring)."""
        tps = [TopicPartition(*tp) for tp in tps]
        if not tps:
            return {}
        listed = dict(self.consumer.end_offsets(tps))
        if self._cfg.get("isolation.level", "read_uncommitted") == "read_committed":
            return listed
        earliest = self.consumer.beginning_offsets(tps)
        probe = {tp: listed[tp] - 1 for tp in tps if listed[tp] > earliest[tp]}
        for tp, hw in self._high_watermarks(probe).items():
            if hw > listed[tp]:
                log.debug("%s[%s]: ListOffsets latest %s < Fetch high watermark %s; using the high watermark",
                          tp.topic, tp.partition, listed[tp], hw)
                listed[tp] = hw
        return listed

    def _high_watermarks(self, probe: Dict[TopicPartition, int]) -> Dict[TopicPartition, int]:
        """Fetch each partition at its given (existing) offset; the high
        watermark each answer carried."""
        if not probe:
            return {}
        c = self.consumer
        c.assign(list(probe))
        for tp, off in probe.items():
            c.seek(tp, off)
        out: Dict[TopicPartition, int] = {}
        deadline = time.monotonic() + c.cfg["request_timeout_ms"] / 1000.0
        pending = dict(probe)
        while pending and time.monotonic() < deadline:
            try:
                c.poll_columnar(100)
            except NoOffsetForPartitionError as e:       # deleted meanwhile: keep the listed offsets
                log.debug("high watermark probe: %s", e)
                break
            for tp in list(pending):
                if c.position(tp) > pending[tp]:
                    out[tp] = c.highwater(tp)
                    del pending[tp]
        c.assign([])
        return out

    @_retried
    def for_times(self, query: Dict[TopicPartition, int]) -> Dict[TopicPartition, Optional[int]]:
        """The first offset at or after each timestamp (ms); None if none.

        An answer without a record timestamp is no match too: Kafka answers
        a lookup that found a record with that record's timestamp, and no
        record with offset and timestamp -1 (Tansu 0.6.0 with offset 0 and
        timestamp -1)."""
        if not query:
            return {}
        got = self.consumer.offsets_for_times(query)
        return {tp: (None if r is None or r.timestamp < 0 else r.offset) for tp, r in got.items()}

    @_retried
    def resolve(self, spec: OffsetSpec, tps: Sequence[TopicPartition], starting: bool) -> Dict[TopicPartition, int]:
        """``spec`` as one offset per partition of ``tps``."""
        name = "starting" if starting else "ending"
        if spec.kind == "earliest":
            return self.earliest(tps)
        if spec.kind == "latest":
            return self.latest(tps)
        if spec.kind == "offsets":
            given = {TopicPartition(*tp): o for tp, o in (spec.offsets or {}).items()}
            if set(given) != set(tps):
                raise SparkOptionError(
                    f"If {name}Offsets contains specific offsets, you must specify all TopicPartitions.\n"
                    f"Use -1 for latest, -2 for earliest.\nSpecified: {_show(given)} Assigned: {_show(tps)}")
            return self._fill(given)
        if spec.kind == "timestamps":
            stamps = {TopicPartition(*tp): ts for tp, ts in (spec.offsets or {}).items()}
            if set(stamps) != set(tps):
                raise SparkOptionError(
                    f"If {name}OffsetsByTimestamp contains specific offsets, you must specify all topics. "
                    f"Specified: {_show(stamps)} Assigned: {_show(tps)}")
        else:
            stamps = {tp: int(spec.timestamp) for tp in tps}     # type: ignore[arg-type]
        found = self.for_times(stamps)
        out: Dict[TopicPartition, int] = {}
        for tp, off in found.items():
            if off is not None:
                out[tp] = off
            elif starting and spec.no_match == "error":
                raise OffsetRangeError(f"No offset matched from request of topic-partition {tp.topic}-{tp.partition} "
                                       f"and timestamp {stamps[tp]}.")
            else:
                out[tp] = LATEST
        return self._fill(out)

    def _fill(self, offsets: Dict[TopicPartition, int]) -> Dict[TopicPartition, int]:
        """Replace -2 / -1 with the partition's earliest / latest offset."""
        early = self.earliest([tp for tp, o in offsets.items() if o == EARLIEST])
        late = self.latest([tp for tp, o in offsets.items() if o == LATEST])
        return {tp: early.get(tp, late.get(tp, o)) if o in (EARLIEST, LATEST) else o for tp, o in offsets.items()}


def admin_config(cfg: Dict[str, object]) -> Dict[str, object]:
    """The options of a consumer configuration that an admin client takes
    (connection, security, timeouts)."""
    out = {}
    for k, v in cfg.items():
        name = k.strip().replace(".", "_").replace("-", "_").lower()
        if ALIASES.get(name, name) in ADMIN or name == "ssl_endpoint_identification_algorithm":
            out[k] = v
    return out


def _show(tps: Iterable[TP]) -> str:
    return "{" + ", ".join(f"{t}-{p}" for t, p in sorted(tps)) + "}"


def split_ranges(ranges: Sequence[OffsetRange], min_partitions: Optional[int],
                 max_records: Optional[int]) -> List[OffsetRange]:
    """Spark's split of offset ranges into Spark partitions: empty ranges
    dropped; with ``max_records`` each range cut into equal pieces of at most
    that many offsets; then, while fewer pieces than ``min_partitions``,
    the large ones cut in proportion to their size (a range whose share
    rounds to one piece stays whole, and so does every other piece of its
    Kafka partition: Spark's ``KafkaOffsetRangeCalculator`` keeps its
    unsplit ranges as a set of topic-partitions)."""
    out = [r for r in ranges if r.size > 0]
    if max_records is not None:
        out = [piece for r in out for piece in _cut(r, -(-r.size // max_records))]
    if min_partitions is None or len(out) >= min_partitions:
        return out
    total = sum(r.size for r in out)

    def parts(size: int, of: int, n: int) -> int:
        return max(int(size / of * n + 0.5), 1)         # Scala's math.round

    whole = [r for r in out if parts(r.size, total, min_partitions) == 1]
    whole_tps = {(r.topic, r.partition) for r in whole}
    split_total = total - sum(r.size for r in whole)
    split_min = max(min_partitions - len(whole), 1)
    result = []
    for r in out:
        n = 1 if (r.topic, r.partition) in whole_tps else parts(r.size, split_total, split_min)
        result.extend(_cut(r, n))
    return result


def _cut(r: OffsetRange, n: int) -> List[OffsetRange]:
    """``r`` in ``n`` consecutive pieces; the last one takes the remainder."""
    pieces = []
    start, remaining = r.start, r.size
    for i in range(n):
        size = remaining // (n - i)
        remaining -= size
        end = min(start + size, r.end)
        if end > start:
            pieces.append(OffsetRange(r.topic, r.partition, start, end))
        start = end
    return pieces


def plan_batch(opts: SourceOptions,
               cut: Optional[Callable[[List[OffsetRange], "OffsetReader"], List[OffsetRange]]] = None
               ) -> List[OffsetRange]:
    """The offset ranges of a batch read (one per Spark partition): each
    partition's resolved range, given to ``cut`` (filter pushdown: it may
    narrow or drop ranges, with the planner's reader for its look-ups)
    before ``minPartitions`` and ``maxRecordsPerPartition`` split them, so
    those apply to what is read."""
    assert opts.ending is not None
    with OffsetReader(opts) as reader:
        tps = reader.partitions()
        if opts.subscription.kind == "assign":
            gone = reader.missing(tps)
            if gone:
                if opts.fail_on_data_loss:
                    raise DataLossError(f"assigned partitions {_show(gone)} do not exist")
                log.warning("assigned partitions %s do not exist; reading the others", _show(gone))
        start = reader.resolve(opts.starting, tps, starting=True)
        end = reader.resolve(opts.ending, tps, starting=False)
        ranges = []
        for tp in tps:
            if start[tp] > end[tp]:
                raise OffsetRangeError(f"The resolved start offset {start[tp]} for {tp.topic}-{tp.partition} is greater "
                                       f"than the resolved end offset {end[tp]}")
            ranges.append(OffsetRange(tp.topic, tp.partition, start[tp], end[tp]))
        if cut is not None:
            ranges = cut(ranges, reader)
    return split_ranges(ranges, opts.min_partitions, opts.max_records_per_partition)
