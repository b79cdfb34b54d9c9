"""The figures each kind of client keeps beyond its connections'.

:class:`FetchMetrics` (a consumer's records and bytes, per topic and
partition, counted per decode call from the compiled decoder's own
counters), :class:`ProduceMetrics` (a producer's batches, counted per
batch), :class:`GroupMetrics` (a group member's rebalances and
commits) and :class:`ShareMetrics` (a share group member's records and
acknowledgements, counted per answer). :mod:`kwire.metrics.names` names them as Java does.
"""

from __future__ import annotations

import time
from typing import Any, Dict, Optional, Tuple

from kwire.metrics.stats import DEFAULT_WINDOW, Sampled

__all__ = ["FetchMetrics", "PartitionFetched", "ProduceMetrics", "PartitionProduced", "GroupMetrics", "ShareMetrics"]

TP = Tuple[str, int]


class PartitionFetched:
    """What the decoder returned of one partition (cumulative)."""

    __slots__ = ("records", "bytes", "batches", "compressed", "decompressed")

    def __init__(self) -> None:
        self.records = self.bytes = self.batches = self.compressed = self.decompressed = 0


class FetchMetrics:
    """A consumer's decoded records: per call of the compiled decoder, the
    difference of its cumulative counters (``records_total``,
    ``bytes_total``, ``batches_total``, ``compressed_total``,
    ``decompressed_total``) before and after the call."""

    def __init__(self, window: float = DEFAULT_WINDOW) -> None:
        self.window = window
        self.records = Sampled(window)
        self.bytes = Sampled(window)
        self.topics: Dict[str, Tuple[Sampled, Sampled]] = {}
        self.parts: Dict[TP, PartitionFetched] = {}
        self.last_poll: Optional[float] = None
        self.between_polls = Sampled(window)

    def decoded(self, tp: TP, dec: Any, before: Tuple[int, int, int, int, int]) -> None:
        """``dec`` (a Decoder or ColumnarDecoder) made one call for ``tp``;
        ``before``: its counters before it (:func:`counters`)."""
        now = time.monotonic()
        records = dec.records_total - before[0]
        nbytes = dec.bytes_total - before[1]
        p = self.parts.get(tp)
        if p is None:
            p = self.parts[tp] = PartitionFetched()
        p.records += records
        p.bytes += nbytes
        p.batches += dec.batches_total - before[2]
        p.compressed += dec.compressed_total - before[3]
        p.decompressed += dec.decompressed_total - before[4]
        self.records.record(records, now)
        self.bytes.record(nbytes, now)
        t = self.topics.get(tp[0])
        if t is None:
            t = self.topics[tp[0]] = (Sampled(self.window), Sampled(self.window))
        t[0].record(records, now)
        t[1].record(nbytes, now)

    def polled(self) -> None:
        """The application called poll() (Java's time-between-poll, last-poll-seconds-ago)."""
        now = time.monotonic()
        if self.last_poll is not None:
            self.between_polls.record((now - self.last_poll) * 1000.0, now)
        self.last_poll = now


def counters(dec: Any) -> Tuple[int, int, int, int, int]:
    """A decoder's cumulative counters, for :meth:`FetchMetrics.decoded`."""
    return (dec.records_total, dec.bytes_total, dec.batches_total, dec.compressed_total, dec.decompressed_total)


class PartitionProduced:
    __slots__ = ("records", "batch_size")

    def __init__(self, window: float) -> None:
        self.records = 0
        self.batch_size = Sampled(window)


class TopicProduced:
    __slots__ = ("records", "bytes", "encoded", "retries", "errors")

    def __init__(self, window: float) -> None:
        self.records = Sampled(window)
        self.bytes = Sampled(window)
        self.encoded = 0
        self.retries = Sampled(window)
        self.errors = Sampled(window)


class ProduceMetrics:
    """A producer's batches, counted once per batch: built (records,
    encoded and written bytes, time queued), retried, failed."""

    def __init__(self, window: float = DEFAULT_WINDOW) -> None:
        self.window = window
        self.records = Sampled(window)        # per batch: its record count
        self.batch_size = Sampled(window)     # bytes written
        self.compression = Sampled(window)    # written / encoded, per batch
        self.queue_time = Sampled(window)     # ms from the batch's first record to its build
        self.retries = Sampled(window)
        self.errors = Sampled(window)
        self.topics: Dict[str, TopicProduced] = {}
        self.parts: Dict[TP, PartitionProduced] = {}
        self.encoded = 0
        self.written = 0

    def _topic(self, topic: str) -> TopicProduced:
        t = self.topics.get(topic)
        if t is None:
            t = self.topics[topic] = TopicProduced(self.window)
        return t

    def built(self, topic: str, partition: int, records: int, encoded: int, written: int, queued: float) -> None:
        """A batch of ``records`` records, ``encoded`` bytes before compression, was built as ``written``
        bytes ``queued`` seconds after its first record."""
        now = time.monotonic()
        self.records.record(records, now)
        self.batch_size.record(written, now)
        if encoded > 0:
            self.compression.record(written / encoded, now)
        self.queue_time.record(queued * 1000.0, now)
        self.encoded += encoded
        self.written += written
        t = self._topic(topic)
        t.records.record(records, now)
        t.bytes.record(written, now)
        t.encoded += encoded
        p = self.parts.get((topic, partition))
        if p is None:
            p = self.parts[(topic, partition)] = PartitionProduced(self.window)
        p.records += records
        p.batch_size.record(written, now)

    def retried(self, topic: str, records: int) -> None:
        now = time.monotonic()
        self.retries.record(records, now)
        self._topic(topic).retries.record(records, now)

    def failed(self, topic: str, records: int) -> None:
        now = time.monotonic()
        self.errors.record(records, now)
        self._topic(topic).errors.record(records, now)


class GroupMetrics:
    """A group member's rebalances: from the membership leaving its stable
    state (or its first join) to the assignment taken in."""

    def __init__(self, window: float = DEFAULT_WINDOW) -> None:
        self.rebalance = Sampled(window)      # ms per completed rebalance
        self.failed = Sampled(window)         # partitions lost (the member fell out of the group)
        self.since: Optional[float] = None    # the rebalance under way began (monotonic)
        self.last: Optional[float] = None     # the last rebalance ended

    def unstable(self, now: float) -> None:
        if self.since is None:
            self.since = now

    def assigned(self) -> None:
        now = time.monotonic()
        if self.since is not None:
            self.rebalance.record((now - self.since) * 1000.0, now)
            self.since = None
        self.last = now

    def lost(self) -> None:
        self.failed.record(1, time.monotonic())


class ShareMetrics:
    """A share group member's figures (Java's ``consumer-share-fetch-manager-metrics``): records and bytes
    returned (per buffered answer a poll takes), records per ShareFetch answer, and acknowledgements sent
    and failed (per request and per answer)."""

    def __init__(self, window: float = DEFAULT_WINDOW) -> None:
        self.records = Sampled(window)
        self.bytes = Sampled(window)
        self.per_request = Sampled(window)    # records acquired per ShareFetch answer with any
        self.acks = Sampled(window)           # acknowledgements sent
        self.ack_errors = Sampled(window)     # acknowledgements answered with an error (or not answered)

    def taken(self, records: int, nbytes: int) -> None:
        now = time.monotonic()
        self.records.record(records, now)
        self.bytes.record(nbytes, now)

    def fetched(self, records: int) -> None:
        self.per_request.record(records, time.monotonic())

    def acknowledged(self, n: int, failed: bool) -> None:
        (self.ack_errors if failed else self.acks).record(n, time.monotonic())
