"""The KRaft metadata quorum and the cluster's features as Java's
AdminClient shows and changes them: DescribeQuorum (:class:`QuorumInfo`
with each voter's and observer's :class:`ReplicaState`), ApiVersions'
features (:class:`FeatureMetadata`), UpdateFeatures (:class:`FeatureUpdate`:
a feature's new maximum level and how it may move)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Tuple

from kwire import protocol
from kwire.channel import kwire_version
from kwire.errors import UnsupportedVersionError
from kwire.protocol.api_keys import ApiKey

__all__ = ["PartitionReassignment", "list_reassignments_request", "reassignments", "ReplicaState", "QuorumInfo", "FeatureMetadata", "FeatureUpdate", "UPGRADE_TYPES", "describe_quorum_request",
           "quorum_info", "api_versions_request", "feature_metadata", "update_features_request",
           "update_features_errors"]

@dataclass(frozen=True)
class PartitionReassignment:
    """A partition's reassignment in progress, as Java's: its replicas now,
    those being added and those being removed (broker ids)."""

    replicas: Tuple[int, ...]
    adding_replicas: Tuple[int, ...]
    removing_replicas: Tuple[int, ...]


def list_reassignments_request(partitions: Optional[Any], timeout_ms: int) -> Any:
    """ListPartitionReassignments for ``partitions`` ((topic, partition)
    pairs; None: every reassignment in progress)."""
    cls = protocol.message("ListPartitionReassignmentsRequest")
    topics = None
    if partitions is not None:
        by_topic: Dict[str, List[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        topics = [cls.ListPartitionReassignmentsTopics(name=t, partition_indexes=sorted(ps))
                  for t, ps in sorted(by_topic.items())]
    return cls(timeout_ms=timeout_ms, topics=topics)


def reassignments(resp: Any) -> Dict[Tuple[str, int], PartitionReassignment]:
    """The reassignments a ListPartitionReassignments answer lists, by (topic, partition)."""
    if resp.error_code:
        raise protocol.error_for(resp.error_code, api="ListPartitionReassignments", message=resp.error_message)
    return {(t.name, p.partition_index): PartitionReassignment(tuple(p.replicas), tuple(p.adding_replicas),
                                                               tuple(p.removing_replicas))
            for t in resp.topics for p in t.partitions}


#: The metadata log's topic and partition (DescribeQuorum asks about it).
METADATA_TOPIC = "__cluster_metadata"

#: Kafka's ``FeatureUpdate.UpgradeType`` codes.
UPGRADE_TYPES: Dict[str, int] = {"upgrade": 1, "safe_downgrade": 2, "unsafe_downgrade": 3}


@dataclass(frozen=True)
class ReplicaState:
    """A voter or observer of the metadata log: how far its log reaches,
    and when it last fetched and was last caught up (ms; None when the
    leader does not know)."""

    replica_id: int
    replica_directory_id: Any                  # a UUID (KIP-853), zero before
    log_end_offset: int
    last_fetch_timestamp: Optional[int]
    last_caught_up_timestamp: Optional[int]


@dataclass(frozen=True)
class QuorumInfo:
    """The metadata quorum (Java's ``QuorumInfo``); ``nodes``: each
    voter's listeners {name: (host, port)} (v2+, Kafka 3.9)."""

    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: Tuple[ReplicaState, ...]
    observers: Tuple[ReplicaState, ...]
    nodes: Dict[int, Dict[str, Tuple[str, int]]]


@dataclass(frozen=True)
class FeatureMetadata:
    """The cluster's finalized features and one broker's supported ones
    (Java's ``FeatureMetadata``), each {name: (min, max) level}."""

    finalized_features: Dict[str, Tuple[int, int]]
    finalized_features_epoch: Optional[int]
    supported_features: Dict[str, Tuple[int, int]]


class FeatureUpdate(NamedTuple):
    """A feature's new finalized level (Java's ``FeatureUpdate``):
    ``upgrade_type`` ``"upgrade"``, ``"safe_downgrade"`` (no metadata lost)
    or ``"unsafe_downgrade"``; level 0 removes the feature."""

    max_version_level: int
    upgrade_type: str = "upgrade"


def _optional(ms: int) -> Optional[int]:
    return None if ms < 0 else ms


def describe_quorum_request() -> Any:
    cls = protocol.message("DescribeQuorumRequest")
    return cls(topics=[cls.TopicData(topic_name=METADATA_TOPIC, partitions=[cls.PartitionData(partition_index=0)])])


def _replica(r: Any) -> ReplicaState:
    return ReplicaState(r.replica_id, r.replica_directory_id, r.log_end_offset, _optional(r.last_fetch_timestamp),
                        _optional(r.last_caught_up_timestamp))


def quorum_info(resp: Any) -> QuorumInfo:
    """The quorum of a DescribeQuorum answer; its errors raise."""
    if resp.error_code:
        raise protocol.error_for(resp.error_code, api="DescribeQuorum", message=resp.error_message)
    p = resp.topics[0].partitions[0]
    if p.error_code:
        raise protocol.error_for(p.error_code, api="DescribeQuorum", topic=METADATA_TOPIC, partition=0,
                                 message=p.error_message)
    nodes = {n.node_id: {lst.name: (lst.host, lst.port) for lst in n.listeners} for n in getattr(resp, "nodes", None) or ()}
    return QuorumInfo(p.leader_id, p.leader_epoch, p.high_watermark, tuple(map(_replica, p.current_voters)),
                      tuple(map(_replica, p.observers)), nodes)


def api_versions_request() -> Any:
    return protocol.message("ApiVersionsRequest")(client_software_name="kwire", client_software_version=kwire_version())


def feature_metadata(resp: Any) -> FeatureMetadata:
    if resp.error_code:
        raise protocol.error_for(resp.error_code, api="ApiVersions")
    return FeatureMetadata({f.name: (f.min_version_level, f.max_version_level) for f in resp.finalized_features or ()},
                           _optional(resp.finalized_features_epoch),
                           {f.name: (f.min_version, f.max_version) for f in resp.supported_features or ()})


def update_features_request(versions: Mapping[int, int], updates: Mapping[str, FeatureUpdate], validate_only: bool,
                            timeout_ms: int) -> Any:
    """UpdateFeatures of ``updates``; an unsafe downgrade and
    ``validate_only`` need v1 (Kafka 3.3)."""
    cls = protocol.message("UpdateFeaturesRequest")
    for name, u in updates.items():
        if u.upgrade_type not in UPGRADE_TYPES:
            raise ValueError(f"{name}: upgrade_type is one of {sorted(UPGRADE_TYPES)}, not {u.upgrade_type!r}")
    v0 = versions.get(ApiKey.UPDATE_FEATURES, 0) < 1        # a flag, allow_downgrade, where v1+ has the type
    if v0 and (validate_only or any(u.upgrade_type == "unsafe_downgrade" for u in updates.values())):
        raise UnsupportedVersionError("the broker's UpdateFeatures has no validate_only or unsafe downgrade (v1+)")
    return cls(timeout_ms=timeout_ms, validate_only=validate_only, feature_updates=[
        cls.FeatureUpdateKey(feature=name, max_version_level=u.max_version_level,
                             allow_downgrade=v0 and u.upgrade_type != "upgrade",
                             upgrade_type=UPGRADE_TYPES["upgrade" if v0 else u.upgrade_type])
        for name, u in updates.items()])


def update_features_errors(resp: Any) -> List[BaseException]:
    """The request's error, or else the failed features'."""
    if resp.error_code:
        return [protocol.error_for(resp.error_code, api="UpdateFeatures", message=resp.error_message)]
    return [protocol.error_for(r.error_code, api="UpdateFeatures", message=r.error_message, feature=r.feature)
            for r in resp.results if r.error_code]
