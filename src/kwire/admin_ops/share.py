"""Share groups' admin calls (KIP-932, issue 36), without I/O: describing
share groups (ShareGroupDescribe), their start offsets (each partition's
share-partition start, with its lag: DescribeShareGroupOffsets), setting
them (AlterShareGroupOffsets) and deleting them per topic
(DeleteShareGroupOffsets), as Java's ``describeShareGroups``,
``listShareGroupOffsets``, ``alterShareGroupOffsets`` and
``deleteShareGroupOffsets``. Listing share groups is ListGroups with the
type ``share``, deleting them DeleteGroups (:class:`kwire.admin.Admin`'s
``list_groups`` and ``delete_groups``); their configs (``share.*``, the
dead-letter topic) are the GROUP resource's (``incremental_alter_configs``).
Altering or deleting offsets needs a group without members."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from kwire import protocol
from kwire.types import TopicPartition

__all__ = ["ShareMemberDescription", "ShareGroupDescription", "SharePartitionOffset", "describe_request",
           "descriptions", "offsets_request", "offsets_from_response", "alter_request", "alter_errors",
           "delete_request", "delete_errors"]


@dataclass(frozen=True)
class ShareMemberDescription:
    member_id: str
    client_id: str
    client_host: str
    rack_id: Optional[str]
    member_epoch: int
    subscribed_topics: Tuple[str, ...]
    assignment: Tuple[TopicPartition, ...]


@dataclass(frozen=True)
class ShareGroupDescription:
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: Tuple[ShareMemberDescription, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class SharePartitionOffset:
    """A share-partition's start offset (None: not initialised yet), its
    leader epoch (None: unknown) and the group's lag there (None: unknown)."""

    start_offset: Optional[int]
    leader_epoch: Optional[int]
    lag: Optional[int]


def describe_request(group_ids: Sequence[str]) -> Any:
    return protocol.message("ShareGroupDescribeRequest")(group_ids=list(group_ids),
                                                         include_authorized_operations=False)


def descriptions(resp: Any) -> Dict[str, Any]:
    """{group id: ShareGroupDescription, or the group's error}."""
    out: Dict[str, Any] = {}
    for g in resp.groups:
        if g.error_code:
            out[g.group_id] = protocol.error_for(g.error_code, api="ShareGroupDescribe", group_id=g.group_id,
                                                 message=g.error_message or None)
            continue
        members = tuple(ShareMemberDescription(
            m.member_id, m.client_id, m.client_host, m.rack_id or None, m.member_epoch,
            tuple(m.subscribed_topic_names or ()),
            tuple(TopicPartition(t.topic_name, p) for t in (m.assignment.topic_partitions if m.assignment else ())
                  for p in sorted(t.partitions))) for m in g.members)
        out[g.group_id] = ShareGroupDescription(g.group_id, g.group_state, g.group_epoch, g.assignment_epoch,
                                                g.assignor_name, members)
    return out


def _by_topic(partitions: Iterable[Tuple[str, int]]) -> Dict[str, List[int]]:
    out: Dict[str, List[int]] = collections.defaultdict(list)
    for topic, partition in partitions:
        out[topic].append(int(partition))
    return out


def offsets_request(group_id: str, partitions: Optional[Iterable[Tuple[str, int]]]) -> Any:
    cls = protocol.message("DescribeShareGroupOffsetsRequest")
    topics = None if partitions is None else [
        cls.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=sorted(ps))
        for t, ps in sorted(_by_topic(partitions).items())]
    return cls(groups=[cls.DescribeShareGroupOffsetsRequestGroup(group_id=group_id, topics=topics)])


def offsets_from_response(resp: Any, group_id: str) -> Tuple[Dict[TopicPartition, SharePartitionOffset], List[Any]]:
    """The group's offsets, and the errors of the group or of partitions."""
    out: Dict[TopicPartition, SharePartitionOffset] = {}
    errors: List[Any] = []
    for g in resp.groups:
        if g.error_code:
            errors.append(protocol.error_for(g.error_code, api="DescribeShareGroupOffsets", group_id=group_id,
                                             message=g.error_message or None))
            continue
        for t in g.topics:
            for p in t.partitions:
                if p.error_code:
                    errors.append(protocol.error_for(p.error_code, api="DescribeShareGroupOffsets",
                                                     topic=t.topic_name, partition=p.partition_index,
                                                     group_id=group_id, message=p.error_message or None))
                    continue
                lag = getattr(p, "lag", -1)
                out[TopicPartition(t.topic_name, p.partition_index)] = SharePartitionOffset(
                    p.start_offset if p.start_offset >= 0 else None,
                    p.leader_epoch if p.leader_epoch >= 0 else None, lag if lag >= 0 else None)
    return dict(sorted(out.items())), errors


def alter_request(group_id: str, offsets: Mapping[Tuple[str, int], int]) -> Any:
    cls = protocol.message("AlterShareGroupOffsetsRequest")
    by_topic: Dict[str, List[Any]] = collections.defaultdict(list)
    for (topic, partition), offset in sorted(offsets.items()):
        by_topic[topic].append(cls.AlterShareGroupOffsetsRequestPartition(partition_index=int(partition),
                                                                          start_offset=int(offset)))
    return cls(group_id=group_id, topics=[cls.AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
                                          for t, ps in by_topic.items()])


def alter_errors(resp: Any, group_id: str) -> List[Any]:
    errors = [protocol.error_for(p.error_code, api="AlterShareGroupOffsets", topic=t.topic_name,
                                 partition=p.partition_index, group_id=group_id, message=p.error_message or None)
              for t in resp.responses for p in t.partitions if p.error_code]
    return errors


def delete_request(group_id: str, topics: Iterable[str]) -> Any:
    cls = protocol.message("DeleteShareGroupOffsetsRequest")
    return cls(group_id=group_id, topics=[cls.DeleteShareGroupOffsetsRequestTopic(topic_name=t)
                                          for t in sorted(set(topics))])


def delete_errors(resp: Any, group_id: str) -> List[Any]:
    return [protocol.error_for(t.error_code, api="DeleteShareGroupOffsets", topic=t.topic_name, group_id=group_id,
                               message=t.error_message or None) for t in resp.responses if t.error_code]
