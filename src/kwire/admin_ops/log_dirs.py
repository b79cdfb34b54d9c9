"""Brokers' log directories as Java's AdminClient shows and moves them:
DescribeLogDirs as {log dir: :class:`LogDirDescription`} (each replica's
:class:`ReplicaInfo`), AlterReplicaLogDirs of :class:`TopicPartitionReplica`
(a partition's replica on one broker) to another directory of its broker.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Tuple

from kwire import protocol
from kwire.types import TopicPartition

__all__ = ["TopicPartitionReplica", "ReplicaInfo", "LogDirDescription", "describe_log_dirs_request",
           "log_dirs_from_response", "alter_replica_log_dirs_request", "alter_replica_log_dirs_errors"]


class TopicPartitionReplica(NamedTuple):
    """A partition's replica on broker ``broker_id`` (Java's ``TopicPartitionReplica``)."""

    topic: str
    partition: int
    broker_id: int


@dataclass(frozen=True)
class ReplicaInfo:
    """A replica in a log dir: its size (bytes), how far it is behind the
    log end (of the current replica, for a future one), and whether it is
    the future replica of a move between dirs."""

    size: int
    offset_lag: int
    is_future: bool


@dataclass(frozen=True)
class LogDirDescription:
    """One log dir of a broker: ``error`` (the broker's, e.g.
    KafkaStorageError for an offline dir; else None), its replicas, and
    its total and usable bytes (-1 when the broker does not say: before
    v4)."""

    error: Optional[BaseException]
    replica_infos: Dict[TopicPartition, ReplicaInfo]
    total_bytes: int
    usable_bytes: int
    is_cordoned: bool = False          # KIP-1066 (v5+): takes no new replicas


def describe_log_dirs_request() -> Any:
    """DescribeLogDirs of every replica (``topics`` null)."""
    return protocol.message("DescribeLogDirsRequest")(topics=None)


def log_dirs_from_response(resp: Any, node: int) -> Dict[str, LogDirDescription]:
    """{path: LogDirDescription} of one broker's answer; its request-level error raises."""
    if getattr(resp, "error_code", 0):
        raise protocol.error_for(resp.error_code, api="DescribeLogDirs", broker=node)
    out = {}
    for d in resp.results:
        replicas = {TopicPartition(t.name, p.partition_index): ReplicaInfo(p.partition_size, p.offset_lag,
                                                                          p.is_future_key)
                    for t in d.topics for p in t.partitions}
        error = protocol.error_for(d.error_code, api="DescribeLogDirs", broker=node, log_dir=d.log_dir) \
            if d.error_code else None
        out[d.log_dir] = LogDirDescription(error, replicas, getattr(d, "total_bytes", -1),
                                           getattr(d, "usable_bytes", -1), getattr(d, "is_cordoned", False))
    return out


def by_broker(moves: Mapping[Tuple[str, int, int], str]) -> Dict[int, Dict[TopicPartitionReplica, str]]:
    """{broker: {replica: dir}} of ``moves`` ({(topic, partition, broker): dir})."""
    out: Dict[int, Dict[TopicPartitionReplica, str]] = collections.defaultdict(dict)
    for replica, path in moves.items():
        r = TopicPartitionReplica(*replica)
        out[r.broker_id][r] = path
    return out


def alter_replica_log_dirs_request(moves: Mapping[TopicPartitionReplica, str]) -> Any:
    """AlterReplicaLogDirs of one broker's replicas, grouped by dir and topic."""
    cls = protocol.message("AlterReplicaLogDirsRequest")
    dirs: Dict[str, Dict[str, List[int]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for r, path in moves.items():
        dirs[path][r.topic].append(r.partition)
    return cls(dirs=[cls.AlterReplicaLogDir(path=path, topics=[
        cls.AlterReplicaLogDirTopic(name=t, partitions=ps) for t, ps in topics.items()])
        for path, topics in dirs.items()])


def alter_replica_log_dirs_errors(resp: Any, node: int) -> List[BaseException]:
    """The failed replicas of one broker's AlterReplicaLogDirs answer."""
    return [protocol.error_for(p.error_code, api="AlterReplicaLogDirs", topic=t.topic_name,
                               partition=p.partition_index, broker=node)
            for t in resp.results for p in t.partitions if p.error_code]
