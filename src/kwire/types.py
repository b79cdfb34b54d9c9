"""The plain values the client's modules pass each other: partitions,
offsets, committed positions, a group member's identity, where a produced
record landed, and the ListOffsets markers ``EARLIEST`` / ``LATEST``.

Every kwire module imports them from here; the modules users know them from
(:mod:`kwire.consumer`, :mod:`kwire.group`, :mod:`kwire.producer`) re-export
them. This module imports nothing of kwire's, so that no module needs
another concern's module only for a value type.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional, Tuple

__all__ = [
    "TopicPartition",
    "OffsetAndTimestamp",
    "OffsetAndMetadata",
    "ConsumerGroupMetadata",
    "RecordMetadata",
    "ProducerRecord",
    "ConsumerRecord",
    "EARLIEST",
    "LATEST",
]

#: ListOffsets' timestamps asking for the log start and the log end.
EARLIEST = -2
LATEST = -1


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int


class OffsetAndMetadata(NamedTuple):
    """A committed position: the next offset to consume, the metadata string
    stored with it and the leader epoch of the record before it (-1:
    unknown)."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1


class ConsumerGroupMetadata(NamedTuple):
    """What a transactional producer needs to commit offsets for a group
    member (``Producer.send_offsets_to_transaction``)."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: Optional[str] = None


class RecordMetadata(NamedTuple):
    """Where a record landed."""

    topic: str
    partition: int
    offset: int
    timestamp: int          # the record's timestamp, or the broker's LogAppendTime
    serialized_key_size: int
    serialized_value_size: int


class ProducerRecord(NamedTuple):
    """A record as sent: ``Producer.send``'s arguments, what a producer
    interceptor's ``on_send`` sees and returns (:mod:`kwire.interceptors`)."""

    topic: str
    value: Any = None
    key: Any = None
    headers: Any = None
    partition: Optional[int] = None
    timestamp_ms: Optional[int] = None


class ConsumerRecord(NamedTuple):
    """A record with the partition it came from: what iterating a consumer
    yields (``for record in consumer``, ``async for record in consumer``,
    ``AsyncConsumer.getone()``), where no partition key goes with it.
    ``poll`` and ``getmany`` give the plain records, by partition."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: Optional[bytes]
    value: Optional[bytes]
    headers: Tuple[Tuple[str, Optional[bytes]], ...]
    batch: Any              # the record's batch (kwire.BatchInfo)

    @classmethod
    def of(cls, tp: Tuple[str, int], r: Any) -> "ConsumerRecord":
        return cls(tp[0], tp[1], r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers, r.batch)

