"""Version negotiation: per API, the highest version both kwire and the
broker speak, from the broker's ApiVersions ranges.

Pure functions over plain data (``{api_key: (min, max)}``) so they can be
tested on their own; :func:`kwire.protocol.negotiate` feeds them kwire's own
ranges (those of the generated message classes).
"""

from __future__ import annotations

from typing import Dict, Iterable, Mapping, Optional, Tuple

from kwire.errors import KwireError

__all__ = ["API_NAMES", "NoCommonVersionError", "choose_versions", "require_version", "apiversions_retry_version"]

Ranges = Mapping[int, Tuple[int, int]]

#: Every client-facing API of Kafka 4.3 (apiKey -> name), from its JSON definitions.
API_NAMES: Dict[int, str] = {
    0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit", 9: "OffsetFetch",
    10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat", 13: "LeaveGroup", 14: "SyncGroup",
    15: "DescribeGroups", 16: "ListGroups", 17: "SaslHandshake", 18: "ApiVersions", 19: "CreateTopics",
    20: "DeleteTopics", 21: "DeleteRecords", 22: "InitProducerId", 23: "OffsetForLeaderEpoch",
    24: "AddPartitionsToTxn", 25: "AddOffsetsToTxn", 26: "EndTxn", 27: "WriteTxnMarkers", 28: "TxnOffsetCommit",
    29: "DescribeAcls", 30: "CreateAcls", 31: "DeleteAcls", 32: "DescribeConfigs", 33: "AlterConfigs",
    34: "AlterReplicaLogDirs", 35: "DescribeLogDirs", 36: "SaslAuthenticate", 37: "CreatePartitions",
    42: "DeleteGroups", 43: "ElectLeaders", 44: "IncrementalAlterConfigs", 45: "AlterPartitionReassignments",
    46: "ListPartitionReassignments", 47: "OffsetDelete", 48: "DescribeClientQuotas", 49: "AlterClientQuotas",
    50: "DescribeUserScramCredentials", 51: "AlterUserScramCredentials", 55: "DescribeQuorum",
    57: "UpdateFeatures", 60: "DescribeCluster", 61: "DescribeProducers", 65: "DescribeTransactions",
    66: "ListTransactions", 74: "ListConfigResources", 75: "DescribeTopicPartitions",
}

UNSUPPORTED_VERSION = 35


class NoCommonVersionError(KwireError):
    """kwire and the broker share no version of an API."""


def choose_versions(broker_ranges: Ranges, client_ranges: Ranges, apis: Optional[Iterable[int]] = None) -> Dict[int, int]:
    """Per API (all of ``client_ranges``, or ``apis``), the highest version in
    both ranges; an API with no common version is left out."""
    out = {}
    for key in (client_ranges if apis is None else apis):
        ours = client_ranges.get(key)
        theirs = broker_ranges.get(key)
        if ours is None or theirs is None:
            continue
        hi = min(ours[1], theirs[1])
        if hi >= max(ours[0], theirs[0]):
            out[key] = hi
    return out


def require_version(chosen: Mapping[int, int], api_key: int, broker_ranges: Ranges, client_ranges: Ranges) -> int:
    """The chosen version of ``api_key``, or :class:`NoCommonVersionError`
    naming the API and both ranges."""
    if api_key in chosen:
        return chosen[api_key]
    name = API_NAMES.get(api_key, f"API {api_key}")
    ours = client_ranges.get(api_key)
    theirs = broker_ranges.get(api_key)
    mine = "does not speak it" if ours is None else f"speaks {ours[0]}-{ours[1]}"
    other = "does not offer it" if theirs is None else f"offers {theirs[0]}-{theirs[1]}"
    raise NoCommonVersionError(f"no common version of {name} (key {api_key}): kwire {mine}, the broker {other}")


def apiversions_retry_version(error_code: int, broker_ranges: Ranges, tried_version: int) -> Optional[int]:
    """After an ApiVersions answer with ``error_code``: the version to ask
    again with, or None (no retry). A broker that does not know the version
    asked for answers v0 with UNSUPPORTED_VERSION and its own ApiVersions
    range (KIP-511); retry with the highest version it offers below the one
    tried, so the exchange always ends."""
    if error_code != UNSUPPORTED_VERSION:
        return None
    lo, hi = broker_ranges.get(18, (0, 0))
    retry = min(hi, tried_version - 1)
    return retry if retry >= max(lo, 0) else None
