"""Producers and transactions as Java's AdminClient inspects and ends them
(KIP-664): DescribeProducers (:class:`ProducerState` per partition),
ListTransactions (:class:`TransactionListing`), DescribeTransactions
(:class:`TransactionDescription`), WriteTxnMarkers to abort a hanging
transaction (:class:`AbortTransactionSpec`), and InitProducerId to fence a
transactional id's producers."""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Tuple

from kwire import protocol
from kwire.errors import UnsupportedVersionError
from kwire.protocol.api_keys import ApiKey
from kwire.types import TopicPartition

__all__ = ["ProducerState", "TransactionListing", "TransactionDescription", "AbortTransactionSpec",
           "describe_producers_request", "producer_states", "list_transactions_request", "transaction_listings",
           "transaction_description", "abort_request", "abort_errors", "fence_request", "end_request"]


@dataclass(frozen=True)
class ProducerState:
    """A producer writing to a partition, as its leader keeps it (Java's
    ``ProducerState``): ``coordinator_epoch`` and
    ``current_transaction_start_offset`` are None when it has no open
    transaction there."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: Optional[int]
    current_transaction_start_offset: Optional[int]


@dataclass(frozen=True)
class TransactionListing:
    """A transactional id a coordinator knows, its producer id and state ("Ongoing", "CompleteCommit", ...)."""

    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True)
class TransactionDescription:
    """A transactional id's transaction, as its coordinator (``coordinator_id``) has it."""

    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: Optional[int]          # None without an open transaction
    topic_partitions: FrozenSet[TopicPartition]


@dataclass(frozen=True)
class AbortTransactionSpec:
    """The open transaction to abort on one partition (Java's
    ``AbortTransactionSpec``): its producer id and epoch and the
    coordinator epoch, as :meth:`kwire.admin.Admin.describe_producers` shows them."""

    topic_partition: TopicPartition
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int


def describe_producers_request(partitions: Iterable[TopicPartition]) -> Any:
    cls = protocol.message("DescribeProducersRequest")
    by_topic: Dict[str, List[int]] = collections.defaultdict(list)
    for tp in partitions:
        by_topic[tp.topic].append(tp.partition)
    return cls(topics=[cls.TopicRequest(name=t, partition_indexes=ps) for t, ps in by_topic.items()])


def producer_states(resp: Any) -> Tuple[Dict[TopicPartition, List[ProducerState]], List[BaseException]]:
    """Each partition's producers, and the partitions' errors."""
    out, errors = {}, []
    for t in resp.topics:
        for p in t.partitions:
            if p.error_code:
                errors.append(protocol.error_for(p.error_code, api="DescribeProducers", topic=t.name,
                                                 partition=p.partition_index, message=p.error_message))
                continue
            out[TopicPartition(t.name, p.partition_index)] = [
                ProducerState(s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp,
                              None if s.coordinator_epoch < 0 else s.coordinator_epoch,
                              None if s.current_txn_start_offset < 0 else s.current_txn_start_offset)
                for s in p.active_producers]
    return out, errors


def list_transactions_request(versions: Mapping[int, int], states: Sequence[str], producer_ids: Sequence[int],
                              duration_ms: int, pattern: Optional[str]) -> Any:
    """ListTransactions with Java's filters; the duration needs v1 (Kafka
    3.8), the transactional id pattern v2 (Kafka 4.1)."""
    version = versions.get(ApiKey.LIST_TRANSACTIONS, 0)
    if duration_ms >= 0 and version < 1:
        raise UnsupportedVersionError("the broker's ListTransactions cannot filter on duration (v1+)")
    if pattern is not None and version < 2:
        raise UnsupportedVersionError("the broker's ListTransactions cannot filter on a transactional id pattern (v2+)")
    return protocol.message("ListTransactionsRequest")(state_filters=list(states), producer_id_filters=list(producer_ids),
                                                       duration_filter=duration_ms, transactional_id_pattern=pattern)


def transaction_listings(resp: Any) -> List[TransactionListing]:
    if resp.error_code:
        raise protocol.error_for(resp.error_code, api="ListTransactions")
    return [TransactionListing(t.transactional_id, t.producer_id, t.transaction_state) for t in resp.transaction_states]


def transaction_description(resp: Any, coordinator_id: int) -> TransactionDescription:
    """The one transaction of a DescribeTransactions answer; its error raises."""
    t = resp.transaction_states[0]
    if t.error_code:
        raise protocol.error_for(t.error_code, api="DescribeTransactions", transactional_id=t.transactional_id)
    return TransactionDescription(coordinator_id, t.transaction_state, t.producer_id, t.producer_epoch,
                                  t.transaction_timeout_ms,
                                  None if t.transaction_start_time_ms < 0 else t.transaction_start_time_ms,
                                  frozenset(TopicPartition(d.topic, p) for d in t.topics for p in d.partitions))


def abort_request(spec: AbortTransactionSpec) -> Any:
    """WriteTxnMarkers: an abort marker for the spec's producer on its partition."""
    cls = protocol.message("WriteTxnMarkersRequest")
    tp = spec.topic_partition
    return cls(markers=[cls.WritableTxnMarker(
        producer_id=spec.producer_id, producer_epoch=spec.producer_epoch, transaction_result=False,
        coordinator_epoch=spec.coordinator_epoch,
        topics=[cls.WritableTxnMarkerTopic(name=tp.topic, partition_indexes=[tp.partition])])])


def abort_errors(resp: Any) -> List[BaseException]:
    return [protocol.error_for(p.error_code, api="WriteTxnMarkers", topic=t.name, partition=p.partition_index,
                               producer_id=m.producer_id)
            for m in resp.markers for t in m.topics for p in t.partitions if p.error_code]


def fence_request(transactional_id: str, timeout_ms: int) -> Any:
    """InitProducerId for ``transactional_id`` without a producer id: the
    coordinator bumps the epoch, fencing its producers (and aborts an open
    transaction); ``timeout_ms`` is how long it may take to write that."""
    return protocol.message("InitProducerIdRequest")(transactional_id=transactional_id,
                                                     transaction_timeout_ms=max(1, timeout_ms),
                                                     producer_id=-1, producer_epoch=-1)


def end_request(transactional_id: str, producer_id: int, producer_epoch: int, committed: bool) -> Any:
    """EndTxn for another process's open transaction (``Admin.end_transaction``)."""
    return protocol.message("EndTxnRequest")(transactional_id=transactional_id, producer_id=producer_id,
                                             producer_epoch=producer_epoch, committed=committed)
