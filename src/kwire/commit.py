"""Offset commits: the OffsetCommit and OffsetFetch requests in the layout
of any version, the committed offsets and the per-partition errors read
from their responses, and :class:`CommitFailedError`.

Used by the group coordinator (:mod:`kwire.group`, a member's commits and
committed positions), the transaction manager (:mod:`kwire.transactions`,
TxnOffsetCommit's answer reads like OffsetCommit's) and the admin client
(:mod:`kwire.admin`, a group's offsets).
"""

from __future__ import annotations

import collections
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from kwire import protocol
from kwire.errors import KwireError
from kwire.protocol.api_keys import ApiKey
from kwire.protocol.versions import capped_version
from kwire.types import OffsetAndMetadata, TopicPartition

__all__ = [
    "CommitFailedError",
    "OffsetsArg",
    "grouped_partitions",
    "as_offsets",
    "offset_commit_request",
    "commit_errors",
    "offset_fetch_request",
    "offsets_from_response",
]


class CommitFailedError(KwireError):
    """The commit cannot succeed: the member is no longer part of the group
    in the generation that owned these partitions (they may belong to
    another member now). Not retriable; the member rejoins on the next
    ``poll()``."""

    retriable = False


#: Offsets to commit: {(topic, partition): offset or OffsetAndMetadata}.
OffsetsArg = Mapping[Tuple[str, int], Union[int, OffsetAndMetadata]]


def grouped_partitions(tps: Iterable[Tuple[str, int]]) -> Dict[str, List[int]]:
    out: Dict[str, List[int]] = collections.defaultdict(list)
    for t, p in tps:
        out[t].append(p)
    return {t: sorted(ps) for t, ps in sorted(out.items())}


def as_offsets(offsets: OffsetsArg) -> Dict[TopicPartition, OffsetAndMetadata]:
    out = {}
    for tp, o in offsets.items():
        out[TopicPartition(*tp)] = o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(int(o))
    return out


def offset_commit_request(group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata], generation: int = -1,
                          member_id: str = "", group_instance_id: Optional[str] = None) -> Any:
    cls = protocol.message("OffsetCommitRequest")
    topics = []
    for t, ps in grouped_partitions(offsets).items():
        topics.append(cls.OffsetCommitRequestTopic(name=t, partitions=[
            cls.OffsetCommitRequestPartition(
                partition_index=p, committed_offset=offsets[TopicPartition(t, p)].offset,
                committed_leader_epoch=offsets[TopicPartition(t, p)].leader_epoch, commit_timestamp=-1,
                committed_metadata=offsets[TopicPartition(t, p)].metadata)
            for p in ps]))
    return cls(group_id=group_id, generation_id_or_member_epoch=generation, member_id=member_id,
               group_instance_id=group_instance_id, retention_time_ms=-1, topics=topics)


def commit_errors(resp: Any, api: str = "OffsetCommit") -> Dict[TopicPartition, BaseException]:
    """The failed partitions of an OffsetCommit / TxnOffsetCommit response."""
    out = {}
    for t in resp.topics:
        for p in t.partitions:
            if p.error_code:
                out[TopicPartition(t.name, p.partition_index)] = protocol.error_for(
                    p.error_code, api=api, topic=t.name, partition=p.partition_index)
    return out


def offset_fetch_request(versions: Mapping[int, int], group_id: str,
                         partitions: Optional[Iterable[Tuple[str, int]]], require_stable: bool = True,
                         member: Tuple[Optional[str], int] = (None, -1)) -> Any:
    """OffsetFetch for ``partitions`` (None: every partition the group has
    offsets for), in the layout of the version that will be sent.

    ``member``: (member id, member epoch) of a member of a KIP-848 consumer
    group, sent from v9 on (the coordinator refuses a stale epoch with
    STALE_MEMBER_EPOCH, an unknown member with UNKNOWN_MEMBER_ID); (None,
    -1), the default, for a classic group's member or anyone else (the
    admin client): nothing is checked."""
    cls = protocol.message("OffsetFetchRequest")
    version = capped_version(versions, ApiKey.OFFSET_FETCH) or 0
    require_stable = require_stable and version >= 7
    grouped = None if partitions is None else grouped_partitions(partitions)
    if version >= 8:
        topics = None if grouped is None else [cls.OffsetFetchRequestTopics(name=t, partition_indexes=ps)
                                               for t, ps in grouped.items()]
        member_id, member_epoch = member if version >= 9 else (None, -1)
        return cls(groups=[cls.OffsetFetchRequestGroup(group_id=group_id, member_id=member_id,
                                                       member_epoch=member_epoch, topics=topics)],
                   require_stable=require_stable)
    topics = None if grouped is None else [cls.OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                                           for t, ps in grouped.items()]
    return cls(group_id=group_id, topics=topics, require_stable=require_stable)


def offsets_from_response(resp: Any, group_id: str) -> Dict[TopicPartition, Optional[OffsetAndMetadata]]:
    """{partition: committed offset or None} from an OffsetFetch response
    (any version); the group's or a partition's error raised."""
    groups = getattr(resp, "groups", None) or []
    topics, code = resp.topics, resp.error_code
    for g in groups:
        if g.group_id == group_id:
            topics, code = g.topics, g.error_code
    if code:
        raise protocol.error_for(code, api="OffsetFetch")
    out: Dict[TopicPartition, Optional[OffsetAndMetadata]] = {}
    for t in topics or ():
        for p in t.partitions:
            if p.error_code:
                raise protocol.error_for(p.error_code, api="OffsetFetch", topic=t.name, partition=p.partition_index)
            tp = TopicPartition(t.name, p.partition_index)
            out[tp] = None if p.committed_offset < 0 else OffsetAndMetadata(
                p.committed_offset, p.metadata or "", p.committed_leader_epoch)
    return out
