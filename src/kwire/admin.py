"""Cluster administration: topics and partitions, cluster and topic
descriptions, offsets, configs, record deletion, ACLs
(:class:`kwire.acl.AclBinding`), client quotas and delegation tokens
(:class:`DelegationToken`).

Every call is blocking and raises the broker's error (a
:class:`kwire.errors.KafkaError` subclass naming the topic) when one topic of
the request fails; calls that take many topics return per-topic results and
raise only after all were answered.
"""

from __future__ import annotations

import base64
import collections
import functools
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Generator, Iterable, List, Mapping, Optional, ParamSpec, Sequence, Tuple, TypeVar

from kwire import protocol
from kwire.acl import AclBinding
from kwire.admin_ops.cluster import (FeatureMetadata, FeatureUpdate, PartitionReassignment, QuorumInfo, ReplicaState,
                                     api_versions_request, describe_quorum_request, feature_metadata,
                                     list_reassignments_request, quorum_info, reassignments, update_features_errors,
                                     update_features_request)
from kwire.admin_ops.configs import (RESOURCE_TYPES, AlterConfigOp, ConfigResource, alter_request, by_node,
                                     incremental_alter_request, resource_errors, type_name)
from kwire.admin_ops.configs import resource as config_resource
from kwire.admin_ops.log_dirs import (LogDirDescription, ReplicaInfo, TopicPartitionReplica, alter_replica_log_dirs_errors,
                                      alter_replica_log_dirs_request, by_broker, describe_log_dirs_request,
                                      log_dirs_from_response)
from kwire.admin_ops.transactions import (AbortTransactionSpec, ProducerState, TransactionDescription,
                                          TransactionListing, abort_errors, abort_request, describe_producers_request,
                                          end_request, fence_request, list_transactions_request, producer_states,
                                          transaction_description, transaction_listings)
from kwire.admin_ops.scram import (ScramCredentialInfo, UserScramCredentialDeletion, UserScramCredentialsDescription,
                                   UserScramCredentialUpsertion)
from kwire.admin_ops.scram import alter_errors as alter_scram_errors
from kwire.admin_ops.scram import alter_request as alter_scram_request
from kwire.admin_ops.scram import describe_request as describe_scram_request
from kwire.admin_ops import share as share_ops
from kwire.admin_ops.share import ShareGroupDescription, SharePartitionOffset
from kwire.admin_ops.scram import descriptions as scram_descriptions
from kwire.classic import decode_assignment, decode_subscription
from kwire.client import Broker, Client, ClusterMetadata, PartitionInfo, Sleep, StepsOf
from kwire.commit import as_offsets, commit_errors, offset_commit_request, offset_fetch_request, offsets_from_response
from kwire.config import ADMIN, resolve
from kwire.coordinator import GROUP_KEY, TRANSACTION_KEY, coordinator_from_response, find_coordinator_request, remember_broker
from kwire.errors import KwireError, UnsupportedVersionError
from kwire.fetcher import list_offsets_steps
from kwire.future import KafkaTimeoutError
from kwire.metrics.names import Metric, client_network_metrics, fold
from kwire.metrics.events import ClientEvents
from kwire.metrics.report import brokers_doc, header_doc, stats_reporter
from kwire.metrics.telemetry import TelemetryReporter
from kwire.protocol.api_keys import ApiKey, ErrorCode
from kwire.protocol.versions import MAX_VERSIONS, TRANSACTION_V2_MAX_VERSIONS, capped_version
from kwire.types import EARLIEST, LATEST, OffsetAndMetadata, TopicPartition

log = logging.getLogger(__name__)

__all__ = ["Admin", "NewTopic", "TopicDescription", "ClusterDescription", "ConfigEntry", "GroupListing",
           "GroupDescription", "MemberDescription", "AclBinding", "DelegationToken", "ConfigResource", "AlterConfigOp",
           "LogDirDescription", "ReplicaInfo", "TopicPartitionReplica", "ScramCredentialInfo",
           "UserScramCredentialUpsertion", "UserScramCredentialDeletion", "UserScramCredentialsDescription",
           "ProducerState", "TransactionListing", "TransactionDescription", "AbortTransactionSpec", "QuorumInfo",
           "ReplicaState", "FeatureMetadata", "FeatureUpdate", "PartitionReassignment"]


@dataclass(frozen=True)
class NewTopic:
    """A topic to create. ``replica_assignment`` places each partition on
    the brokers named, the first its preferred leader ({partition: [broker
    ids]}, every partition from 0); with it, ``num_partitions`` and
    ``replication_factor`` are ignored (sent as -1, as Kafka requires)."""

    name: str
    num_partitions: int = 1
    replication_factor: int = 1
    configs: Optional[Mapping[str, str]] = None
    replica_assignment: Optional[Mapping[int, Sequence[int]]] = None


@dataclass(frozen=True)
class TopicDescription:
    name: str
    topic_id: Any
    internal: bool
    partitions: Tuple[PartitionInfo, ...]


@dataclass(frozen=True)
class ClusterDescription:
    cluster_id: Optional[str]
    controller_id: int
    brokers: Tuple[Broker, ...]


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: Optional[str]
    read_only: bool
    is_default: bool
    is_sensitive: bool
    source: int


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: Optional[str] = None         # ListGroups v4+
    group_type: Optional[str] = None    # ListGroups v5+ ("classic" from older brokers, which have no other)


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: Optional[str]
    client_id: str
    client_host: str
    assignment: Tuple[TopicPartition, ...]      # decoded for "consumer" groups, else empty
    subscription: Tuple[str, ...]
    member_epoch: int = -1                      # KIP-848 consumer groups' members only
    rack_id: Optional[str] = None               # the member's client_rack (classic: from its subscription)


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str                              # the assignor, for consumer groups
    members: Tuple[MemberDescription, ...]
    group_type: str = "classic"                # "consumer": a KIP-848 group (ConsumerGroupDescribe)
    epoch: int = -1                            # a KIP-848 group's epoch


@dataclass(frozen=True)
class DelegationToken:
    """A delegation token (KIP-48), as :meth:`Admin.create_delegation_token`
    and :meth:`Admin.describe_delegation_tokens` return it. Principals are
    ``"User:alice"`` strings; timestamps are ms since the epoch.

    ``hmac`` is the token's secret: a client authenticates with SCRAM
    (``sasl_scram_tokenauth``), ``token_id`` as the user name and
    :attr:`password` (the base64 of ``hmac``) as the password. Neither
    appears in the token's ``repr`` or ``str``."""

    token_id: str
    hmac: bytes = field(repr=False)
    owner: str
    requester: Optional[str]                    # who asked for it (Kafka 3.3+ brokers say; else None)
    renewers: Tuple[str, ...]
    issue_timestamp_ms: int
    expiry_timestamp_ms: int
    max_timestamp_ms: int

    @property
    def password(self) -> str:
        """The SCRAM password of the token: its HMAC in base64 (Kafka's
        ``hmacAsBase64String``). A secret."""
        return base64.b64encode(self.hmac).decode("ascii")


def principal_parts(principal: str) -> Tuple[str, str]:
    """("User", "alice") of ``"User:alice"``; a principal without its type is refused."""
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name:
        raise ValueError(f"a principal is 'Type:name' (e.g. 'User:alice'), not {principal!r}")
    return kind, name


def _principal(kind: str, name: str) -> Optional[str]:
    """The ``"Type:name"`` string of a response's principal; None when the broker sent none."""
    return f"{kind}:{name}" if kind else None


def group_description(g: Any) -> GroupDescription:
    """A DescribeGroups response's group, with the members' assignments and
    subscriptions decoded for consumer groups."""
    members = []
    for m in g.members:
        assignment: Tuple[TopicPartition, ...] = ()
        subscription: Tuple[str, ...] = ()
        rack: Optional[str] = None
        if g.protocol_type == "consumer":
            try:
                assignment = tuple(decode_assignment(m.member_assignment))
                if m.member_metadata:
                    sub = decode_subscription(m.member_id, None, m.member_metadata)
                    subscription, rack = sub.topics, sub.rack_id
            except KwireError as e:      # a member whose bytes cannot be read: say so, show the rest
                log.warning("group %s member %s: %s", g.group_id, m.member_id, e)
        members.append(MemberDescription(m.member_id, getattr(m, "group_instance_id", None), m.client_id,
                                         m.client_host, assignment, subscription, rack_id=rack))
    return GroupDescription(g.group_id, g.group_state, g.protocol_type, g.protocol_data, tuple(members))


def consumer_group_description(g: Any) -> GroupDescription:
    """A ConsumerGroupDescribe response's group (KIP-848): the members'
    current assignments (topics named by the coordinator) and subscriptions
    (names, or the regular expression)."""
    members = []
    for m in g.members:
        assignment = tuple(sorted(TopicPartition(t.topic_name, p) for t in m.assignment.topic_partitions
                                  for p in t.partitions))
        subscription = tuple(m.subscribed_topic_names or ()) or ((m.subscribed_topic_regex,)
                                                                 if m.subscribed_topic_regex else ())
        members.append(MemberDescription(m.member_id, m.instance_id, m.client_id, m.client_host, assignment,
                                         subscription, m.member_epoch, m.rack_id))
    return GroupDescription(g.group_id, g.group_state, "consumer", g.assignor_name, tuple(members),
                            group_type="consumer", epoch=g.group_epoch)


#: The per-transaction errors of DescribeTransactions that mean "ask the coordinator again".
RETRIED_BY_COORDINATOR = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                          ErrorCode.COORDINATOR_NOT_AVAILABLE)

#: ListOffsets' marker of the record with the largest timestamp (KIP-734, v7+).
MAX_TIMESTAMP = -3


class _NoConsumerGroupDescribe(KwireError):
    """The coordinator does not speak ConsumerGroupDescribe (before Kafka
    3.7, or Tansu): its groups are all classic ones."""

    retriable = False


P = ParamSpec("P")
R = TypeVar("R")


#: A group's errors a request to its coordinator retries (the coordinator loading, moved or away); the
#: others are the answer's.
_COORDINATOR_RETRY = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR,
                                ErrorCode.COORDINATOR_NOT_AVAILABLE})


def _retriable_code(code: int) -> int:
    return code if code in _COORDINATOR_RETRY else 0


def waits(fn: Callable[P, Generator[Any, None, R]]) -> Callable[P, R]:
    """An admin call written as steps (:meth:`kwire.client.Client.run`):
    :class:`Admin`'s method runs them blocking, ``kwire.aio``'s
    ``AsyncAdmin`` awaits them (``Admin.<name>.steps``)."""
    @functools.wraps(fn)
    def blocking(self: Any, *args: Any, **kwargs: Any) -> Any:
        return self._client.run(fn(self, *args, **kwargs))

    blocking.steps = fn        # type: ignore[attr-defined]
    return blocking            # type: ignore[return-value]


class Admin:
    """``Admin({"bootstrap.servers": ...})`` or ``Admin(bootstrap_servers=...)``."""

    _client_class = Client          # kwire.aio's admin runs the same calls on an event loop's client

    def __init__(self, config: Optional[Mapping[str, Any]] = None, **kwargs: Any) -> None:
        self.cfg = resolve(ADMIN, config, kwargs, what="admin")
        self._client = self._client_class(self.cfg)
        self._client.want_all_topics()
        self._started = time.monotonic()
        self._client.reporter = stats_reporter(self.cfg, self._stats_doc)
        self._client.events = ClientEvents.from_config(self.cfg)
        self._client.telemetry = TelemetryReporter(self._client, self._metric_list, dict)

    def metrics(self) -> Dict[str, Dict[str, float]]:
        """The admin client's metrics, named as Java's (``admin-client-metrics``,
        ``admin-client-node-metrics,node-id=node-1``; :mod:`kwire.metrics`)."""
        return fold(self._metric_list(time.monotonic()))

    _metrics_kind = "admin"

    def _metric_list(self, now: float) -> List[Metric]:
        return client_network_metrics("admin-client", [self._client], now)

    def _stats_doc(self) -> Dict[str, Any]:
        """``stats_cb``'s document (called while a call drives the admin client's I/O)."""
        now = time.monotonic()
        doc = header_doc("admin", self.cfg, self._started, now)
        doc["brokers"] = brokers_doc([self._client], now)
        doc["metrics"] = self.metrics()
        return doc

    def close(self, timeout: Optional[float] = None) -> None:
        """Close the connections, after KIP-714's last telemetry push (when a
        subscription asked for this client's metrics), waited for at most
        ``timeout`` seconds (default ``request_timeout_ms``)."""
        if not self._client._closed:
            self._client.run(self._close_steps(timeout))
        self._client.close()

    def _close_steps(self, timeout: Optional[float] = None) -> StepsOf[None]:
        """KIP-714's last push (kwire.metrics.telemetry), within ``timeout``."""
        telemetry = self._client.telemetry
        if telemetry is not None:
            deadline = time.monotonic() + self._timeout(timeout)
            try:
                yield from telemetry.terminate_steps(deadline)
            except Exception as e:  # noqa: BLE001 - closing anyway
                log.debug("the terminating telemetry push failed: %r", e)

    def client_instance_id(self) -> Optional[Any]:
        """The client instance id the brokers assigned for client telemetry (KIP-714), or None."""
        return self._client.telemetry.instance_id if self._client.telemetry is not None else None

    def __enter__(self) -> "Admin":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------ helpers
    def _timeout(self, timeout: Optional[float]) -> float:
        return timeout if timeout is not None else self.cfg["request_timeout_ms"] / 1000.0

    def _to_controller(self, make: Any, timeout: Optional[float]) -> StepsOf[Any]:
        """Send to the controller when the cluster names one (older Kafka
        requires it), else to any broker (KRaft brokers forward)."""
        client = self._client
        deadline = time.monotonic() + self._timeout(timeout)
        if not client.cluster.updated_at:
            yield from client.refresh_metadata_steps(timeout=self._timeout(timeout))
        node = client.cluster.controller_id
        if node is None or node < 0 or node not in client.cluster.brokers:
            return (yield from client.request_any_steps(make, self._timeout(timeout)))
        return (yield from self._to_node(node, make, deadline))

    def _to_node(self, node: Optional[int], make: Any, deadline: float) -> StepsOf[Any]:
        """Send ``make(versions)`` to broker ``node`` (None: any broker) by ``deadline``."""
        client = self._client
        if node is None:
            return (yield from client.request_any_steps(make, max(0.0, deadline - time.monotonic())))
        if node not in client.cluster.brokers:         # not known yet (or new): where it listens is in the metadata
            yield from client.refresh_metadata_steps(timeout=max(0.0, deadline - time.monotonic()))
        conn = yield from client.wait_ready_steps(node, deadline)
        return (yield from client.wait_steps(client.send(node, make(conn.versions)), max(0.0, deadline - time.monotonic())))

    def _to_nodes(self, parts: Mapping[Optional[int], Any], make: Callable[[Any, Dict[int, int]], Any],
                  timeout: Optional[float]) -> StepsOf[List[Any]]:
        """One request per node (``make(part, versions)`` for each part of
        ``parts``, None: any broker), their responses in that order."""
        deadline = time.monotonic() + self._timeout(timeout)
        out = []
        for node, part in parts.items():
            out.append((yield from self._to_node(node, functools.partial(make, part), deadline)))
        return out

    @staticmethod
    def _raise_first(errors: List[BaseException]) -> None:
        if errors:
            raise errors[0]

    # ------------------------------------------------------------- topics
    @waits
    def create_topics(self, topics: Sequence[NewTopic], timeout: Optional[float] = None,
                      validate_only: bool = False) -> StepsOf[Dict[str, Any]]:
        """Create ``topics``; returns {name: topic id (or None)}."""
        cls = protocol.message("CreateTopicsRequest")
        ms = int(self._timeout(timeout) * 1000)

        def creatable(t: NewTopic) -> Any:
            configs = [cls.CreatableTopicConfig(name=k, value=v) for k, v in (t.configs or {}).items()]
            if t.replica_assignment is None:
                return cls.CreatableTopic(name=t.name, num_partitions=t.num_partitions,
                                          replication_factor=t.replication_factor, assignments=[], configs=configs)
            assignments = [cls.CreatableReplicaAssignment(partition_index=p, broker_ids=list(ids))
                           for p, ids in sorted(t.replica_assignment.items())]
            return cls.CreatableTopic(name=t.name, num_partitions=-1, replication_factor=-1,
                                      assignments=assignments, configs=configs)

        def make(versions: Dict[int, int]) -> Any:
            return cls(topics=[creatable(t) for t in topics], timeout_ms=ms, validate_only=validate_only)

        resp = yield from self._to_controller(make, timeout)
        errors, out = [], {}
        for r in resp.topics:
            if r.error_code:
                errors.append(protocol.error_for(r.error_code, api="CreateTopics", topic=r.name,
                                                 message=getattr(r, "error_message", None)))
            else:
                out[r.name] = getattr(r, "topic_id", None)
        self._client.request_metadata_update()
        self._raise_first(errors)
        return out

    @waits
    def delete_topics(self, names: Sequence[str], timeout: Optional[float] = None) -> StepsOf[None]:
        """Delete the topics ``names``; raises the first refusal after all were answered."""
        cls = protocol.message("DeleteTopicsRequest")
        ms = int(self._timeout(timeout) * 1000)

        def make(versions: Dict[int, int]) -> Any:
            return cls(topics=[cls.DeleteTopicState(name=n) for n in names], topic_names=list(names), timeout_ms=ms)

        resp = yield from self._to_controller(make, timeout)
        errors = [protocol.error_for(r.error_code, api="DeleteTopics", topic=r.name,
                                     message=getattr(r, "error_message", None))
                  for r in resp.responses if r.error_code]
        self._client.request_metadata_update()
        self._raise_first(errors)

    @waits
    def create_partitions(self, counts: Mapping[str, int], timeout: Optional[float] = None,
                          validate_only: bool = False) -> StepsOf[None]:
        """Grow each topic to ``counts[topic]`` partitions."""
        cls = protocol.message("CreatePartitionsRequest")
        ms = int(self._timeout(timeout) * 1000)

        def make(versions: Dict[int, int]) -> Any:
            return cls(topics=[cls.CreatePartitionsTopic(name=n, count=c, assignments=None) for n, c in counts.items()],
                       timeout_ms=ms, validate_only=validate_only)

        resp = yield from self._to_controller(make, timeout)
        errors = [protocol.error_for(r.error_code, api="CreatePartitions", topic=r.name, message=r.error_message)
                  for r in resp.results if r.error_code]
        self._client.request_metadata_update()
        self._raise_first(errors)

    @waits
    def list_topics(self, include_internal: bool = False, timeout: Optional[float] = None) -> StepsOf[List[str]]:
        """The cluster's topic names (``__consumer_offsets`` and the other internal ones with ``include_internal``)."""
        md = yield from self._client.refresh_metadata_steps(timeout=self._timeout(timeout))
        return [t for t in md.topics() if include_internal or t not in md.internal_topics]

    @waits
    def describe_topics(self, names: Optional[Sequence[str]] = None,
                        timeout: Optional[float] = None) -> StepsOf[Dict[str, TopicDescription]]:
        """{name: TopicDescription} of ``names`` (default: every topic): topic id, internal or not, and each
        partition's leader, leader epoch, replicas and in-sync replicas."""
        md: ClusterMetadata = yield from self._client.refresh_metadata_steps(topics=names, timeout=self._timeout(timeout))
        out = {}
        errors = []
        for name in (names if names is not None else md.topics()):
            code = md.topic_errors.get(name, 0)
            if code:
                errors.append(protocol.error_for(code, api="Metadata", topic=name))
                continue
            parts = md.partitions.get(name, {})
            out[name] = TopicDescription(name, md.topic_ids.get(name), name in md.internal_topics,
                                         tuple(parts[p] for p in sorted(parts)))
        self._raise_first(errors)
        return out

    @waits
    def describe_cluster(self, timeout: Optional[float] = None) -> StepsOf[ClusterDescription]:
        """DescribeCluster where the broker has it, else from Metadata."""
        client = self._client

        def make(versions: Dict[int, int]) -> Any:
            if ApiKey.DESCRIBE_CLUSTER not in versions:
                return protocol.message("MetadataRequest")(topics=[], allow_auto_topic_creation=False)
            return protocol.message("DescribeClusterRequest")(include_cluster_authorized_operations=False)

        resp = yield from client.request_any_steps(make, self._timeout(timeout))
        if getattr(resp, "error_code", 0):
            raise protocol.error_for(resp.error_code, api="DescribeCluster", message=getattr(resp, "error_message", None))
        if hasattr(resp, "topics"):       # the Metadata fallback
            brokers = tuple(Broker(b.node_id, b.host, b.port, b.rack) for b in resp.brokers)
        else:
            brokers = tuple(Broker(b.broker_id, b.host, b.port, b.rack) for b in resp.brokers)
        return ClusterDescription(resp.cluster_id, resp.controller_id, tuple(sorted(brokers, key=lambda b: b.node_id)))

    # ------------------------------------------------------------ offsets
    @waits
    def list_offsets(self, query: Mapping[Tuple[str, int], Any], timeout: Optional[float] = None,
                     isolation_level: str = "read_uncommitted") -> StepsOf[Dict[TopicPartition, Tuple[int, int]]]:
        """Per partition: ``"earliest"``, ``"latest"``, ``"max_timestamp"``
        (the record with the largest timestamp, ListOffsets v7+) or a
        timestamp (ms) -> (offset, timestamp); offset -1 when no record is
        that recent."""
        spec = {}
        for tp, what in query.items():
            spec[TopicPartition(*tp)] = {"earliest": EARLIEST, "latest": LATEST,
                                         "max_timestamp": MAX_TIMESTAMP}.get(what, what)
        return (yield from list_offsets_steps(self._client, spec, self._timeout(timeout),
                                              read_committed=isolation_level == "read_committed"))

    def _leaders(self, partitions: Iterable[Tuple[str, int]],
                 timeout: Optional[float]) -> StepsOf[Dict[int, List[TopicPartition]]]:
        """{leader: its partitions} of ``partitions``, from fresh metadata."""
        client = self._client
        tps = [TopicPartition(*tp) for tp in partitions]
        client.add_topics({tp.topic for tp in tps})
        yield from client.refresh_metadata_steps(timeout=self._timeout(timeout))
        by_node: Dict[int, List[TopicPartition]] = collections.defaultdict(list)
        for tp in tps:
            leader = client.cluster.leader_for(*tp)
            if leader is None:
                raise KwireError(f"no leader known for {tp.topic}[{tp.partition}]")
            by_node[leader].append(tp)
        return by_node

    @waits
    def delete_records(self, before: Mapping[Tuple[str, int], int], timeout: Optional[float] = None) -> StepsOf[Dict[TopicPartition, int]]:
        """Delete the records of each partition before the given offset;
        returns the new low watermarks."""
        client = self._client
        deadline = time.monotonic() + self._timeout(timeout)
        by_node: Dict[int, Dict[TopicPartition, int]] = {
            node: {tp: before[tp] for tp in tps} for node, tps in (yield from self._leaders(before, timeout)).items()}
        cls = protocol.message("DeleteRecordsRequest")
        futures = []
        for node, parts in by_node.items():
            topics: Dict[str, List[Any]] = collections.defaultdict(list)
            for tp, off in parts.items():
                topics[tp.topic].append(cls.DeleteRecordsPartition(partition_index=tp.partition, offset=off))
            yield from client.wait_ready_steps(node, deadline)
            futures.append(client.send(node, cls(
                topics=[cls.DeleteRecordsTopic(name=t, partitions=ps) for t, ps in topics.items()],
                timeout_ms=int(self._timeout(timeout) * 1000))))
        out, errors = {}, []
        for fut in futures:
            resp = yield from client.wait_steps(fut, max(0.0, deadline - time.monotonic()))
            for t in resp.topics:
                for p in t.partitions:
                    if p.error_code:
                        errors.append(protocol.error_for(p.error_code, api="DeleteRecords", topic=t.name,
                                                         partition=p.partition_index))
                    else:
                        out[TopicPartition(t.name, p.partition_index)] = p.low_watermark
        self._raise_first(errors)
        return out

    @waits
    def elect_leaders(self, partitions: Optional[Iterable[Tuple[str, int]]] = None, election_type: str = "preferred",
                      timeout: Optional[float] = None) -> StepsOf[Dict[TopicPartition, Optional[KwireError]]]:
        """Elect leaders (ElectLeaders): ``"preferred"`` moves each partition's
        leadership to its first replica; ``"unclean"`` elects, for a partition
        without a leader and with no in-sync replica alive, the first live
        replica, which loses what only the dead replicas had (the topic's
        ``unclean.leader.election.enable`` need not be set). ``partitions``
        None means every partition (preferred elections only, as Kafka
        allows). Returns each partition's outcome: None when elected, else
        the broker's error (ELECTION_NOT_NEEDED when the leader already is
        the one asked for; ELIGIBLE_LEADERS_NOT_AVAILABLE when no replica
        may lead); a request-level error raises."""
        kinds = {"preferred": 0, "unclean": 1}
        if election_type not in kinds:
            raise ValueError(f"election_type must be one of {sorted(kinds)}, not {election_type!r}")
        if partitions is None and election_type != "preferred":
            raise ValueError("an unclean election needs the partitions named")
        cls = protocol.message("ElectLeadersRequest")
        ms = int(self._timeout(timeout) * 1000)
        by_topic: Dict[str, List[int]] = collections.defaultdict(list)
        for topic, partition in partitions or ():
            by_topic[topic].append(partition)

        def make(versions: Dict[int, int]) -> Any:
            if versions.get(ApiKey.ELECT_LEADERS, 0) < 1 and election_type != "preferred":
                raise UnsupportedVersionError("the broker's ElectLeaders has only preferred elections (v0)")
            named = None if partitions is None else [cls.TopicPartitions(topic=t, partitions=ps)
                                                     for t, ps in by_topic.items()]
            return cls(election_type=kinds[election_type], topic_partitions=named, timeout_ms=ms)

        resp = yield from self._to_controller(make, timeout)
        if getattr(resp, "error_code", 0):
            raise protocol.error_for(resp.error_code, api="ElectLeaders")
        out: Dict[TopicPartition, Optional[KwireError]] = {}
        for r in resp.replica_election_results:
            for p in r.partition_result:
                out[TopicPartition(r.topic, p.partition_id)] = protocol.error_for(
                    p.error_code, api="ElectLeaders", topic=r.topic, partition=p.partition_id,
                    message=p.error_message) if p.error_code else None
        self._client.request_metadata_update()
        return out

    @waits
    def alter_partition_reassignments(self, moves: Mapping[Tuple[str, int], Optional[Sequence[int]]],
                                      timeout: Optional[float] = None) -> StepsOf[None]:
        """Move each partition's replicas to the brokers given, the first
        its preferred leader (AlterPartitionReassignments; None cancels a
        move in progress). Returns once the controller has taken the moves
        (the data is copied afterwards: ``describe_topics`` shows the
        replicas change); raises the first partition's error."""
        cls = protocol.message("AlterPartitionReassignmentsRequest")
        by_topic: Dict[str, List[Any]] = collections.defaultdict(list)
        for (topic, partition), replicas in sorted(moves.items()):
            by_topic[topic].append(cls.ReassignablePartition(
                partition_index=partition, replicas=None if replicas is None else list(replicas)))
        ms = int(self._timeout(timeout) * 1000)

        def make(versions: Dict[int, int]) -> Any:
            return cls(timeout_ms=ms, topics=[cls.ReassignableTopic(name=t, partitions=ps) for t, ps in by_topic.items()])

        resp = yield from self._to_controller(make, timeout)
        if resp.error_code:
            raise protocol.error_for(resp.error_code, api="AlterPartitionReassignments", message=resp.error_message)
        errors = [protocol.error_for(p.error_code, api="AlterPartitionReassignments", topic=t.name,
                                     partition=p.partition_index, message=p.error_message)
                  for t in resp.responses for p in t.partitions if p.error_code]
        self._client.request_metadata_update()
        self._raise_first(errors)

    @waits
    def list_partition_reassignments(self, partitions: Optional[Iterable[Tuple[str, int]]] = None,
                                     timeout: Optional[float] = None
                                     ) -> StepsOf[Dict[Tuple[str, int], PartitionReassignment]]:
        """The reassignments in progress (ListPartitionReassignments, Java's
        ``listPartitionReassignments``) of ``partitions``, or of every
        partition (None): {(topic, partition): PartitionReassignment}."""
        wanted = None if partitions is None else list(partitions)
        ms = int(self._timeout(timeout) * 1000)
        resp = yield from self._to_controller(lambda v: list_reassignments_request(wanted, ms), timeout)
        return reassignments(resp)

    @waits
    def unregister_broker(self, node_id: int, timeout: Optional[float] = None) -> StepsOf[None]:
        """Remove a KRaft broker's registration for good (UnregisterBroker),
        once it is shut down and holds no replica: the cluster stops listing
        it. A broker that is not registered raises
        ``BrokerIdNotRegisteredError``."""
        cls = protocol.message("UnregisterBrokerRequest")
        resp = yield from self._to_controller(lambda versions: cls(broker_id=node_id), timeout)
        if resp.error_code:
            raise protocol.error_for(resp.error_code, api="UnregisterBroker", message=resp.error_message)
        self._client.request_metadata_update()

    # ----------------------------------------------- quorum and features
    @waits
    def describe_metadata_quorum(self, timeout: Optional[float] = None) -> StepsOf[QuorumInfo]:
        """The KRaft metadata quorum: its leader, epoch, high watermark,
        voters and observers (DescribeQuorum, Java's
        ``describeMetadataQuorum``; a broker forwards it to the controllers)."""
        resp = yield from self._client.request_any_steps(lambda v: describe_quorum_request(), self._timeout(timeout))
        return quorum_info(resp)

    describe_quorum = describe_metadata_quorum

    @waits
    def describe_features(self, timeout: Optional[float] = None) -> StepsOf[FeatureMetadata]:
        """The cluster's finalized features and a broker's supported ones
        (ApiVersions, as Java's ``describeFeatures``)."""
        resp = yield from self._client.request_any_steps(lambda v: api_versions_request(), self._timeout(timeout))
        return feature_metadata(resp)

    @waits
    def update_features(self, updates: Mapping[str, FeatureUpdate], validate_only: bool = False,
                        timeout: Optional[float] = None) -> StepsOf[None]:
        """Change finalized feature levels (UpdateFeatures, Java's
        ``updateFeatures``): {"transaction.version": FeatureUpdate(2)}, a
        downgrade as ``"safe_downgrade"`` or ``"unsafe_downgrade"``.
        ``validate_only``: the controller checks, changes nothing. Raises
        the request's error or the first feature's."""
        ms = int(self._timeout(timeout) * 1000)
        resp = yield from self._to_controller(
            lambda v: update_features_request(v, updates, validate_only, ms), timeout)
        self._raise_first(update_features_errors(resp))

    # ------------------------------------------------------------ configs
    @waits
    def describe_configs(self, topics: Iterable[str] = (), brokers: Iterable[int] = (),
                         timeout: Optional[float] = None, resources: Iterable[Tuple[str, Any]] = (),
                         ) -> StepsOf[Dict[Tuple[str, str], Dict[str, ConfigEntry]]]:
        """Configs of topics, brokers and any other ``resources``
        (:class:`ConfigResource`: ``("group", "g")``, ``("client_metrics",
        name)``, ``("broker_logger", "1")``...): {(type, name): {config
        name: ConfigEntry}}, e.g. ``("topic", name)`` or ``("broker", "1")``.
        A broker's configs are asked of that broker."""
        cls = protocol.message("DescribeConfigsRequest")
        wanted = ([ConfigResource("topic", t) for t in topics] + [ConfigResource("broker", str(b)) for b in brokers]
                  + [config_resource(r) for r in resources])

        def make(part: List[ConfigResource], versions: Dict[int, int]) -> Any:
            return cls(resources=[cls.DescribeConfigsResource(resource_type=RESOURCE_TYPES[r.type], resource_name=r.name,
                                                              configuration_keys=None) for r in part],
                       include_synonyms=False, include_documentation=False)

        out, errors = {}, []
        for resp in (yield from self._to_nodes(by_node(wanted), make, timeout)):
            for r in resp.results:
                key = ConfigResource(type_name(r.resource_type), r.resource_name)
                if r.error_code:
                    errors.append(protocol.error_for(r.error_code, api="DescribeConfigs", message=r.error_message,
                                                     **({"topic": r.resource_name} if key.type == "topic"
                                                        else {"resource": key})))
                    continue
                out[key] = {c.name: ConfigEntry(c.name, c.value, c.read_only,
                                                getattr(c, "is_default", False) or getattr(c, "config_source", -1) == 5,
                                                c.is_sensitive, getattr(c, "config_source", -1))
                            for c in r.configs}
        self._raise_first(errors)
        return out

    @waits
    def incremental_alter_configs(self, configs: Mapping[Tuple[str, Any], Sequence[AlterConfigOp]],
                                  validate_only: bool = False, timeout: Optional[float] = None) -> StepsOf[None]:
        """Change configs one by one (IncrementalAlterConfigs, as Java's
        ``incrementalAlterConfigs``): {ConfigResource: [AlterConfigOp, ...]}
        for topics, brokers (``""``: the cluster-wide default), broker
        loggers, groups and client metrics; configs not named keep their
        values. ``validate_only``: the brokers check without changing.
        Raises the first resource's error after all were answered."""
        todo = {config_resource(r): list(ops) for r, ops in configs.items()}
        parts = {node: {r: todo[r] for r in rs} for node, rs in by_node(todo).items()}
        responses = yield from self._to_nodes(parts, lambda part, v: incremental_alter_request(part, validate_only),
                                              timeout)
        self._raise_first([e for resp in responses for e in resource_errors(resp, "IncrementalAlterConfigs")])

    @waits
    def alter_configs(self, configs: Mapping[Tuple[str, Any], Mapping[str, Optional[str]]],
                      validate_only: bool = False, timeout: Optional[float] = None) -> StepsOf[None]:
        """Replace each resource's dynamic configs with those given
        (AlterConfigs, Java's deprecated ``alterConfigs``): {ConfigResource:
        {name: value}}; every dynamic config left out goes back to its
        default. Prefer :meth:`incremental_alter_configs`. Raises the first
        resource's error after all were answered."""
        todo = {config_resource(r): dict(entries) for r, entries in configs.items()}
        parts = {node: {r: todo[r] for r in rs} for node, rs in by_node(todo).items()}
        responses = yield from self._to_nodes(parts, lambda part, v: alter_request(part, validate_only), timeout)
        self._raise_first([e for resp in responses for e in resource_errors(resp, "AlterConfigs")])

    # ----------------------------------------------------------- log dirs
    @waits
    def describe_log_dirs(self, brokers: Iterable[int],
                          timeout: Optional[float] = None) -> StepsOf[Dict[int, Dict[str, LogDirDescription]]]:
        """Each broker's log dirs and the replicas in them (DescribeLogDirs,
        Java's ``describeLogDirs``): {broker: {path: LogDirDescription}}.
        A broker's request-level error raises."""
        nodes = {int(b): None for b in brokers}
        responses = yield from self._to_nodes(nodes, lambda part, v: describe_log_dirs_request(), timeout)
        return {node: log_dirs_from_response(resp, node) for node, resp in zip(nodes, responses)}

    @waits
    def alter_replica_log_dirs(self, moves: Mapping[Tuple[str, int, int], str],
                               timeout: Optional[float] = None) -> StepsOf[None]:
        """Move replicas between the log dirs of their brokers
        (AlterReplicaLogDirs, Java's ``alterReplicaLogDirs``):
        {TopicPartitionReplica(topic, partition, broker): absolute dir}. The
        broker copies the replica into a future one there and swaps them
        when it has caught up (``describe_log_dirs`` shows it). Raises the
        first replica's error (KafkaStorageError: no such dir;
        ReplicaNotAvailableError: no such replica) after all were answered."""
        parts = by_broker(moves)
        responses = yield from self._to_nodes(parts, lambda part, v: alter_replica_log_dirs_request(part), timeout)
        self._raise_first([e for node, resp in zip(parts, responses) for e in alter_replica_log_dirs_errors(resp, node)])

    # ------------------------------------------------------------- groups
    def _group_request(self, group_id: str, make: Any, api: str, timeout: Optional[float],
                       code_of: Any = lambda r: getattr(r, "error_code", 0)) -> StepsOf[Any]:
        """Send ``make(versions)`` to ``group_id``'s coordinator (found
        first, and again when it moved); retriable errors retried until the
        timeout."""
        _, resp = yield from self._coordinator_request(group_id, GROUP_KEY, make, api, timeout, code_of)
        return resp

    def _coordinator_request(self, key: str, key_type: int, make: Any, api: str, timeout: Optional[float],
                             code_of: Any = lambda r: getattr(r, "error_code", 0),
                             caps: Mapping[int, int] = MAX_VERSIONS) -> StepsOf[Tuple[int, Any]]:
        """:meth:`_group_request` for the coordinator of a group
        (``GROUP_KEY``) or a transactional id (``TRANSACTION_KEY``):
        (coordinator id, response)."""
        client = self._client
        deadline = time.monotonic() + self._timeout(timeout)
        while True:
            try:
                found = yield from client.request_any_steps(lambda v: find_coordinator_request(v, key, key_type),
                                           max(0.1, deadline - time.monotonic()))
                broker = coordinator_from_response(found, key, key_type)
                remember_broker(client, broker)
                # fail_over: a coordinator that cannot be reached (killed, its node not yet fenced)
                # sends us back to FindCoordinator, which names its successor once there is one,
                # instead of the whole deadline going on the dead one
                conn = yield from client.wait_ready_steps(broker.node_id, deadline, fail_over=True)
                request = make(conn.versions)
                version = capped_version(conn.versions, type(request).API_KEY, caps)
                resp = yield from client.wait_steps(client.send(broker.node_id, request, version), max(0.0, deadline - time.monotonic()))
                code = code_of(resp)
                if code:
                    raise protocol.error_for(code, api=api, message=getattr(resp, "error_message", None))
                return broker.node_id, resp
            except KwireError as e:
                if not getattr(e, "retriable", False) or time.monotonic() >= deadline:
                    raise
                yield Sleep(self.cfg["retry_backoff_ms"] / 1000.0)

    @waits
    def list_groups(self, states: Optional[Sequence[str]] = None, types: Optional[Sequence[str]] = None,
                    timeout: Optional[float] = None) -> StepsOf[List[GroupListing]]:
        """The groups of every broker (each lists those it coordinates).
        ``states`` filters by state on brokers that support it (ListGroups
        v4+); ``types`` by group type ("classic", "consumer", ...; v5+, as
        ``types_filter``). A broker older than v5 has classic groups only:
        its groups are listed as ``group_type`` "classic", and left out when
        ``types`` does not name it."""
        client = self._client
        deadline = time.monotonic() + self._timeout(timeout)
        md = yield from client.refresh_metadata_steps(timeout=self._timeout(timeout))
        cls = protocol.message("ListGroupsRequest")
        wanted_types = [t.lower() for t in types or ()]
        futures = []
        for node in sorted(md.brokers):
            conn = yield from client.wait_ready_steps(node, deadline)
            v = conn.versions.get(ApiKey.LIST_GROUPS, 0)
            futures.append((v, client.send(node, cls(states_filter=list(states or []) if v >= 4 else [],
                                                     types_filter=wanted_types if v >= 5 else []))))
        out: Dict[str, GroupListing] = {}
        errors = []
        for v, fut in futures:
            resp = yield from client.wait_steps(fut, max(0.0, deadline - time.monotonic()))
            if resp.error_code:
                errors.append(protocol.error_for(resp.error_code, api="ListGroups"))
                continue
            for g in resp.groups:
                group_type = (getattr(g, "group_type", None) or None) if v >= 5 else "classic"
                if v < 5 and wanted_types and group_type not in wanted_types:
                    continue
                out[g.group_id] = GroupListing(g.group_id, g.protocol_type, getattr(g, "group_state", None) or None,
                                               group_type)
        self._raise_first(errors)
        return [out[g] for g in sorted(out)]

    @waits
    def describe_groups(self, group_ids: Sequence[str], timeout: Optional[float] = None) -> StepsOf[Dict[str, GroupDescription]]:
        """State, assignor and members (with their decoded assignments, for
        consumer groups) of each group. As Kafka's admin client: a KIP-848
        group (``group_type`` "consumer") is described by
        ConsumerGroupDescribe; a group it does not know as one (a classic
        group, or a coordinator without the API) by DescribeGroups."""
        cls = protocol.message("DescribeGroupsRequest")
        out = {}
        for gid in group_ids:
            desc = yield from self._describe_consumer_group(gid, timeout)
            if desc is None:
                resp = yield from self._group_request(gid, lambda v, gid=gid: cls(groups=[gid]), "DescribeGroups", timeout,
                                           lambda r: r.groups[0].error_code if r.groups else 0)
                desc = group_description(resp.groups[0])
            out[gid] = desc
        return out

    def _describe_consumer_group(self, group_id: str, timeout: Optional[float]) -> StepsOf[Optional[GroupDescription]]:
        """The KIP-848 group ``group_id``; None when it is none (or the
        coordinator does not speak ConsumerGroupDescribe)."""
        cls = protocol.message("ConsumerGroupDescribeRequest")

        def make(v: Mapping[int, int]) -> Any:
            if ApiKey.CONSUMER_GROUP_DESCRIBE not in v:
                raise _NoConsumerGroupDescribe("no ConsumerGroupDescribe")
            return cls(group_ids=[group_id], include_authorized_operations=False)

        try:
            resp = yield from self._group_request(group_id, make, "ConsumerGroupDescribe", timeout,
                                       lambda r: r.groups[0].error_code if r.groups else 0)
        except _NoConsumerGroupDescribe:
            return None
        except KwireError as e:
            if getattr(e, "code", None) in (ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.UNSUPPORTED_VERSION):
                return None         # a classic group (or none): DescribeGroups says which
            raise
        g = resp.groups[0]
        if g.group_epoch < 0:
            # no KIP-848 group has a negative epoch: Tansu (0.6) answers so for its classic groups, with no
            # error and the wrong fields, where Kafka says GROUP_ID_NOT_FOUND
            return None
        return consumer_group_description(g)

    @waits
    def delete_groups(self, group_ids: Sequence[str], timeout: Optional[float] = None) -> StepsOf[None]:
        """Delete empty groups (and their committed offsets); raises the
        first failure (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, ...) after trying all."""
        cls = protocol.message("DeleteGroupsRequest")
        errors = []
        for gid in group_ids:
            try:
                yield from self._group_request(gid, lambda v, gid=gid: cls(groups_names=[gid]), "DeleteGroups", timeout,
                                    lambda r: r.results[0].error_code if r.results else 0)
            except KwireError as e:
                errors.append(e)
        self._raise_first(errors)

    @waits
    def list_group_offsets(self, group_id: str, partitions: Optional[Iterable[Tuple[str, int]]] = None,
                           timeout: Optional[float] = None,
                           require_stable: bool = False) -> StepsOf[Dict[TopicPartition, Any]]:
        """The group's committed offsets ({partition: OffsetAndMetadata});
        all of them, or those of ``partitions`` (None where none is).
        ``require_stable`` (Java's ``ListConsumerGroupOffsetsOptions.requireStable``):
        offsets a transaction still holds are waited for (the broker's
        UNSTABLE_OFFSET_COMMIT retried until the timeout) instead of left out.
        Retriable errors (the coordinator loading or moved) are retried until
        the timeout."""
        tps = None if partitions is None else [TopicPartition(*tp) for tp in partitions]
        deadline = time.monotonic() + self._timeout(timeout)
        last: Optional[KwireError] = None
        while True:
            try:
                resp = yield from self._group_request(
                    group_id, lambda v: offset_fetch_request(v, group_id, tps, require_stable=require_stable),
                    "OffsetFetch", max(0.0, deadline - time.monotonic()), lambda r: 0)
            except KafkaTimeoutError:
                if last is None:
                    raise
                raise last from None      # what the broker kept answering, not the last try cut short
            try:
                got = offsets_from_response(resp, group_id)
                break
            except KwireError as e:
                if not getattr(e, "retriable", False) or time.monotonic() >= deadline:
                    raise
                last = e
                yield Sleep(self.cfg["retry_backoff_ms"] / 1000.0)
        if tps is None:
            return {tp: om for tp, om in sorted(got.items()) if om is not None}
        return {tp: got.get(tp) for tp in tps}

    @waits
    def alter_group_offsets(self, group_id: str, offsets: Mapping[Tuple[str, int], Any],
                            timeout: Optional[float] = None) -> StepsOf[None]:
        """Set the group's committed offsets ({partition: offset or
        OffsetAndMetadata}); brokers accept this only while the group has no
        active members."""
        todo = as_offsets(offsets)
        # a coordinator still loading (or no longer the group's) says so per partition: retried as a whole
        resp = yield from self._group_request(group_id, lambda v: offset_commit_request(group_id, todo), "OffsetCommit",
                                   timeout, lambda r: next((e.code for e in commit_errors(r).values()
                                                            if getattr(e, "retriable", False)), 0))
        self._raise_first(list(commit_errors(resp).values()))

    @waits
    def delete_consumer_group_offsets(self, group_id: str, partitions: Iterable[Tuple[str, int]],
                                      timeout: Optional[float] = None) -> StepsOf[None]:
        """Delete the group's committed offsets of ``partitions`` (OffsetDelete,
        Java's ``deleteConsumerGroupOffsets``): the group may have members,
        but none subscribed to those topics (GroupSubscribedToTopicError).
        Raises the group's error, or the first partition's after all were
        answered."""
        cls = protocol.message("OffsetDeleteRequest")
        by_topic: Dict[str, List[int]] = collections.defaultdict(list)
        for topic, partition in partitions:
            by_topic[topic].append(partition)

        def make(versions: Dict[int, int]) -> Any:
            return cls(group_id=group_id, topics=[cls.OffsetDeleteRequestTopic(
                name=t, partitions=[cls.OffsetDeleteRequestPartition(partition_index=p) for p in ps])
                for t, ps in by_topic.items()])

        resp = yield from self._group_request(group_id, make, "OffsetDelete", timeout)
        self._raise_first([protocol.error_for(p.error_code, api="OffsetDelete", topic=t.name,
                                              partition=p.partition_index, group_id=group_id)
                           for t in resp.topics for p in t.partitions if p.error_code])

    # ------------------------------------------------------------ share groups (KIP-932)
    @waits
    def describe_share_groups(self, group_ids: Sequence[str],
                              timeout: Optional[float] = None) -> StepsOf[Dict[str, ShareGroupDescription]]:
        """State, epochs, assignor and members (their subscriptions and assignments) of share groups
        (ShareGroupDescribe; list them with ``list_groups(types=["share"])``). Raises the first group's
        error after all were asked."""
        out, errors = {}, []
        for gid in group_ids:
            resp = yield from self._group_request(gid, lambda v, gid=gid: share_ops.describe_request([gid]),
                                                  "ShareGroupDescribe", timeout,
                                                  lambda r: _retriable_code(r.groups[0].error_code if r.groups else 0))
            got = share_ops.descriptions(resp).get(gid)
            if isinstance(got, BaseException):
                errors.append(got)
            elif got is not None:
                out[gid] = got
        self._raise_first(errors)
        return out

    @waits
    def list_share_group_offsets(self, group_id: str, partitions: Optional[Iterable[Tuple[str, int]]] = None,
                                 timeout: Optional[float] = None) -> StepsOf[Dict[TopicPartition, SharePartitionOffset]]:
        """Each share-partition's start offset, leader epoch and lag (DescribeShareGroupOffsets): all the
        group's, or those of ``partitions``."""
        resp = yield from self._group_request(
            group_id, lambda v: share_ops.offsets_request(group_id, partitions), "DescribeShareGroupOffsets", timeout,
            lambda r: _retriable_code(r.groups[0].error_code if r.groups else 0))
        out, errors = share_ops.offsets_from_response(resp, group_id)
        self._raise_first(errors)
        return out

    @waits
    def alter_share_group_offsets(self, group_id: str, offsets: Mapping[Tuple[str, int], int],
                                  timeout: Optional[float] = None) -> StepsOf[None]:
        """Set the share-partitions' start offsets ({partition: offset}); the group must have no members."""
        resp = yield from self._group_request(group_id, lambda v: share_ops.alter_request(group_id, offsets),
                                              "AlterShareGroupOffsets", timeout)
        self._raise_first(share_ops.alter_errors(resp, group_id))

    @waits
    def delete_share_group_offsets(self, group_id: str, topics: Iterable[str],
                                   timeout: Optional[float] = None) -> StepsOf[None]:
        """Forget the group's state of whole ``topics`` (the next member starts them afresh, as
        ``share.auto.offset.reset`` says); the group must have no members."""
        topics = list(topics)
        resp = yield from self._group_request(group_id, lambda v: share_ops.delete_request(group_id, topics),
                                              "DeleteShareGroupOffsets", timeout)
        self._raise_first(share_ops.delete_errors(resp, group_id))

    @waits
    def group_lag(self, group_id: str, timeout: Optional[float] = None,
                  committed: Optional[Mapping[TopicPartition, OffsetAndMetadata]] = None,
                  ) -> StepsOf[Dict[TopicPartition, Tuple[int, int, int]]]:
        """Per partition with a committed offset: (committed, log end, lag);
        ``committed``: the group's offsets when the caller has them already
        (from :meth:`list_group_offsets`)."""
        if committed is None:
            committed = yield from Admin.list_group_offsets.steps(self, group_id, timeout=timeout)
        if not committed:
            return {}
        ends = yield from Admin.list_offsets.steps(self, {tp: "latest" for tp in committed}, timeout)
        return {tp: (om.offset, ends[tp][0], max(0, ends[tp][0] - om.offset)) for tp, om in committed.items()}


    # ------------------------------------------- producers, transactions
    @waits
    def describe_producers(self, partitions: Iterable[Tuple[str, int]], broker_id: Optional[int] = None,
                           timeout: Optional[float] = None) -> StepsOf[Dict[TopicPartition, List[ProducerState]]]:
        """The active producers of each partition, as its leader (or
        ``broker_id``, a follower) keeps them (DescribeProducers, Java's
        ``describeProducers``). Raises the first partition's error after
        all were answered."""
        tps = [TopicPartition(*tp) for tp in partitions]
        parts = {broker_id: tps} if broker_id is not None else (yield from self._leaders(tps, timeout))
        responses = yield from self._to_nodes(parts, lambda part, v: describe_producers_request(part), timeout)
        out: Dict[TopicPartition, List[ProducerState]] = {}
        errors: List[BaseException] = []
        for resp in responses:
            got, failed = producer_states(resp)
            out.update(got)
            errors.extend(failed)
        self._raise_first(errors)
        return out

    @waits
    def list_transactions(self, filter_states: Sequence[str] = (), filter_producer_ids: Sequence[int] = (),
                          filter_on_duration_ms: int = -1, filter_on_transactional_id_pattern: Optional[str] = None,
                          timeout: Optional[float] = None) -> StepsOf[List[TransactionListing]]:
        """The transactional ids every broker coordinates (ListTransactions,
        Java's ``listTransactions``), filtered by state ("Ongoing",
        "PrepareCommit", ...), producer id, running longer than a duration
        (ms, Kafka 3.8+) or a regular expression of the id (Kafka 4.1+)."""
        client = self._client
        md = yield from client.refresh_metadata_steps(timeout=self._timeout(timeout))
        nodes = {node: None for node in sorted(md.brokers)}
        responses = yield from self._to_nodes(nodes, lambda part, v: list_transactions_request(
            v, filter_states, filter_producer_ids, filter_on_duration_ms, filter_on_transactional_id_pattern), timeout)
        return sorted((t for resp in responses for t in transaction_listings(resp)), key=lambda t: t.transactional_id)

    @waits
    def describe_transactions(self, transactional_ids: Iterable[str],
                              timeout: Optional[float] = None) -> StepsOf[Dict[str, TransactionDescription]]:
        """Each transactional id's transaction as its coordinator has it
        (DescribeTransactions, Java's ``describeTransactions``). Raises the
        first id's error (TransactionalIdNotFoundError) after all were asked."""
        cls = protocol.message("DescribeTransactionsRequest")
        deadline = time.monotonic() + self._timeout(timeout)
        out, errors = {}, []
        for tid in transactional_ids:
            try:
                node, resp = yield from self._coordinator_request(
                    tid, TRANSACTION_KEY, lambda v, tid=tid: cls(transactional_ids=[tid]), "DescribeTransactions",
                    max(0.0, deadline - time.monotonic()), lambda r: next((t.error_code for t in r.transaction_states
                                             if t.error_code in RETRIED_BY_COORDINATOR), 0))
                out[tid] = transaction_description(resp, node)
            except KwireError as e:
                errors.append(e)
        self._raise_first(errors)
        return out

    @waits
    def abort_transaction(self, spec: AbortTransactionSpec, timeout: Optional[float] = None) -> StepsOf[None]:
        """Abort a hanging transaction on one partition (KIP-664; Java's
        ``abortTransaction``): an abort marker written by the partition's
        leader for the spec's producer (WriteTxnMarkers), so the last stable
        offset can move on. Only for a transaction its coordinator has lost:
        :meth:`describe_producers` gives the producer id, epoch and
        coordinator epoch."""
        (node, _), = (yield from self._leaders([spec.topic_partition], timeout)).items()
        resp, = yield from self._to_nodes({node: spec}, lambda part, v: abort_request(part), timeout)
        self._raise_first(abort_errors(resp))

    @waits
    def fence_producers(self, transactional_ids: Iterable[str],
                        timeout: Optional[float] = None) -> StepsOf[Dict[str, Tuple[int, int]]]:
        """Fence the producers of each transactional id (Java's
        ``fenceProducers``): its coordinator bumps the epoch (InitProducerId)
        and aborts an open transaction, so a producer still using the old
        epoch fails (ProducerFencedError). Returns {id: (producer id, new
        epoch)}; raises the first id's error after all were asked."""
        ms = int(self._timeout(timeout) * 1000)
        deadline = time.monotonic() + self._timeout(timeout)
        out, errors = {}, []
        for tid in transactional_ids:
            try:
                _, resp = yield from self._coordinator_request(tid, TRANSACTION_KEY, lambda v, tid=tid: fence_request(tid, ms),
                                                               "InitProducerId", max(0.0, deadline - time.monotonic()))
                out[tid] = (resp.producer_id, resp.producer_epoch)
            except KwireError as e:
                errors.append(e)
        self._raise_first(errors)
        return out

    @waits
    def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, committed: bool,
                        transaction_version: int = 1, timeout: Optional[float] = None) -> StepsOf[Tuple[int, int]]:
        """Commit (or abort) the open transaction of another process's
        producer, known by its transactional id, producer id and epoch
        (EndTxn), as a two-phase-commit coordinator does (Flink's Kafka
        sink; :mod:`kwire.spark.exactly_once`): the producer flushed its
        records and left without ending the transaction. A repeated call
        after an answer was lost is answered as the first was.
        ``transaction_version``: the protocol the producer spoke (its
        ``transaction_version``): 2 sends EndTxn v5, whose answer bumps the
        epoch (KIP-890). Returns the producer id and epoch the coordinator
        answered (-1, -1 before v5); a producer fenced since (its id taken
        by a newer one, or its transaction timed out) raises
        ProducerFencedError or InvalidProducerEpochError."""
        caps = TRANSACTION_V2_MAX_VERSIONS if transaction_version >= 2 else MAX_VERSIONS
        make = lambda v: end_request(transactional_id, producer_id, producer_epoch, committed)  # noqa: E731
        _, resp = yield from self._coordinator_request(transactional_id, TRANSACTION_KEY, make, "EndTxn", timeout,
                                                       caps=caps)
        return getattr(resp, "producer_id", -1), getattr(resp, "producer_epoch", -1)

    # --------------------------------------------------------------- ACLs
    @waits
    def create_acls(self, acls: Sequence[AclBinding], timeout: Optional[float] = None) -> StepsOf[None]:
        """Create ``acls`` (needs ALTER on the cluster); raises the first
        failure after the broker answered for all."""
        cls = protocol.message("CreateAclsRequest")

        def make(versions: Dict[int, int]) -> Any:
            return cls(creations=[cls.AclCreation(**a.wire()) for a in acls])

        resp = yield from self._client.request_any_steps(make, self._timeout(timeout))
        self._raise_first([protocol.error_for(r.error_code, api="CreateAcls", message=r.error_message, acl=a)
                           for a, r in zip(acls, resp.results) if r.error_code])

    @waits
    def describe_acls(self, acl_filter: Optional[AclBinding] = None,
                      timeout: Optional[float] = None) -> StepsOf[List[AclBinding]]:
        """The ACLs ``acl_filter`` matches (every ACL without one; needs
        DESCRIBE on the cluster)."""
        f = acl_filter or AclBinding("any", None, "any", None, None, "any", "any")
        cls = protocol.message("DescribeAclsRequest")

        def make(versions: Dict[int, int]) -> Any:
            return cls(**f.wire(as_filter=True))

        resp = yield from self._client.request_any_steps(make, self._timeout(timeout))
        if resp.error_code:
            raise protocol.error_for(resp.error_code, api="DescribeAcls", message=resp.error_message)
        return [AclBinding.from_response(r, a) for r in resp.resources for a in r.acls]

    @waits
    def delete_acls(self, filters: Sequence[AclBinding], timeout: Optional[float] = None) -> StepsOf[List[AclBinding]]:
        """Delete the ACLs each of ``filters`` matches; returns those deleted."""
        cls = protocol.message("DeleteAclsRequest")

        def make(versions: Dict[int, int]) -> Any:
            return cls(filters=[cls.DeleteAclsFilter(**f.wire(as_filter=True)) for f in filters])

        resp = yield from self._client.request_any_steps(make, self._timeout(timeout))
        deleted, errors = [], []
        for f, r in zip(filters, resp.filter_results):
            if r.error_code:
                errors.append(protocol.error_for(r.error_code, api="DeleteAcls", message=r.error_message, acl=f))
            for m in r.matching_acls:
                if m.error_code:
                    errors.append(protocol.error_for(m.error_code, api="DeleteAcls", message=m.error_message, acl=f))
                else:
                    deleted.append(AclBinding.from_codes(m.resource_type, m.resource_name, m.pattern_type,
                                                         m.principal, m.host, m.operation, m.permission_type))
        self._raise_first(errors)
        return deleted

    # ------------------------------------------------------------- quotas
    @waits
    def alter_client_quotas(self, entity: Mapping[str, Optional[str]], quotas: Mapping[str, Optional[float]],
                            timeout: Optional[float] = None, validate_only: bool = False) -> StepsOf[None]:
        """Set (a number) or remove (None) ``quotas`` of one entity, in
        Kafka's names: ``entity`` {"user": "alice"} (and/or "client-id",
        "ip"; None is the default entity), ``quotas``
        {"producer_byte_rate": 1048576, "consumer_byte_rate": None, ...}."""
        cls = protocol.message("AlterClientQuotasRequest")

        def make(versions: Dict[int, int]) -> Any:
            return cls(entries=[cls.EntryData(
                entity=[cls.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()],
                ops=[cls.OpData(key=k, value=0.0 if v is None else float(v), remove=v is None)
                     for k, v in quotas.items()])], validate_only=validate_only)

        resp = yield from self._client.request_any_steps(make, self._timeout(timeout))
        self._raise_first([protocol.error_for(r.error_code, api="AlterClientQuotas", message=r.error_message,
                                              entity=dict(entity)) for r in resp.entries if r.error_code])

    @waits
    def describe_client_quotas(self, entity: Mapping[str, Optional[str]], strict: bool = False,
                               timeout: Optional[float] = None
                               ) -> StepsOf[Dict[Tuple[Tuple[str, Optional[str]], ...], Dict[str, float]]]:
        """The quotas of the entities ``entity`` matches ({"user": "alice"};
        None matches the default entity): {((type, name), ...): {key:
        value}}. ``strict``: only entities with exactly those types."""
        cls = protocol.message("DescribeClientQuotasRequest")

        def make(versions: Dict[int, int]) -> Any:
            return cls(components=[cls.ComponentData(entity_type=t, match_type=1 if n is None else 0, match=n)
                                   for t, n in entity.items()], strict=strict)

        resp = yield from self._client.request_any_steps(make, self._timeout(timeout))
        if resp.error_code:
            raise protocol.error_for(resp.error_code, api="DescribeClientQuotas", message=resp.error_message)
        return {tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)):
                {v.key: v.value for v in entry.values} for entry in resp.entries or []}

    # --------------------------------------------------- SCRAM credentials
    @waits
    def describe_user_scram_credentials(self, users: Optional[Iterable[str]] = None, timeout: Optional[float] = None,
                                        ) -> StepsOf[Dict[str, UserScramCredentialsDescription]]:
        """The SCRAM credentials (mechanism and iterations) of ``users``
        (None: every user that has one; DescribeUserScramCredentials, Java's
        ``describeUserScramCredentials``). A named user without any raises
        ResourceNotFoundError, after all were answered."""
        wanted = None if users is None else list(users)
        resp = yield from self._client.request_any_steps(lambda v: describe_scram_request(wanted), self._timeout(timeout))
        out, errors = scram_descriptions(resp)
        self._raise_first(errors)
        return out

    @waits
    def alter_user_scram_credentials(self, alterations: Sequence[Any], timeout: Optional[float] = None) -> StepsOf[None]:
        """Add or replace (:class:`UserScramCredentialUpsertion`: the
        password salted with PBKDF2 here, as Java does) and remove
        (:class:`UserScramCredentialDeletion`) users' SCRAM credentials
        (AlterUserScramCredentials, Java's ``alterUserScramCredentials``).
        The brokers take a change from the metadata log a moment after the
        call returns. Raises the first user's error after all were
        answered (UnacceptableCredentialError: e.g. iterations out of
        4096..16384; ResourceNotFoundError: no such credential to delete)."""
        request = alter_scram_request(alterations)
        resp = yield from self._client.request_any_steps(lambda v: request, self._timeout(timeout))
        self._raise_first(alter_scram_errors(resp))

    # -------------------------------------------------- delegation tokens
    # Sent to any broker (as Kafka's admin client does; KRaft brokers forward
    # them to the controller). A broker refuses them over an unauthenticated
    # (PLAINTEXT, one-way TLS) or token-authenticated connection
    # (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED), and without
    # delegation.token.secret.key (DELEGATION_TOKEN_AUTH_DISABLED).
    def _token_request(self, make: Callable[[Dict[int, int]], Any], api: str,
                       timeout: Optional[float]) -> StepsOf[Any]:
        resp = yield from self._client.request_any_steps(make, self._timeout(timeout))
        if resp.error_code:
            raise protocol.error_for(resp.error_code, api=api)
        return resp

    @waits
    def create_delegation_token(self, renewers: Iterable[str] = (), max_lifetime_ms: int = -1,
                                owner: Optional[str] = None,
                                timeout: Optional[float] = None) -> StepsOf[DelegationToken]:
        """A new delegation token for ``owner`` (default: the principal this
        client authenticated as; naming another needs CreateTokens on it, and
        a Kafka 3.3+ broker), renewable by ``renewers`` ("User:bob", ...) as
        well as its owner; ``max_lifetime_ms`` -1 is the broker's
        ``delegation.token.max.lifetime.ms``. Its expiry is the broker's
        ``delegation.token.expiry.time.ms`` from now, until renewed. The
        brokers learn of it from the metadata log a moment later (about 0.1
        s): until then it neither authenticates nor is renewed or expired."""
        cls = protocol.message("CreateDelegationTokenRequest")
        renewing = [principal_parts(r) for r in renewers]
        owner_type, owner_name = principal_parts(owner) if owner is not None else (None, None)

        def make(versions: Dict[int, int]) -> Any:
            if owner is not None and versions.get(ApiKey.CREATE_DELEGATION_TOKEN, 0) < 3:
                raise UnsupportedVersionError("the broker's CreateDelegationToken cannot name the owner (v3+, Kafka 3.3)")
            return cls(owner_principal_type=owner_type, owner_principal_name=owner_name,
                       renewers=[cls.CreatableRenewers(principal_type=t, principal_name=n) for t, n in renewing],
                       max_lifetime_ms=max_lifetime_ms)

        resp = yield from self._token_request(make, "CreateDelegationToken", timeout)
        return DelegationToken(resp.token_id, bytes(resp.hmac), f"{resp.principal_type}:{resp.principal_name}",
                               _principal(resp.token_requester_principal_type, resp.token_requester_principal_name),
                               tuple(f"{t}:{n}" for t, n in renewing), resp.issue_timestamp_ms,
                               resp.expiry_timestamp_ms, resp.max_timestamp_ms)

    @waits
    def renew_delegation_token(self, hmac: bytes, renew_period_ms: int = -1,
                               timeout: Optional[float] = None) -> StepsOf[int]:
        """Extend the expiry of the token whose HMAC is ``hmac`` to
        ``renew_period_ms`` from now (-1: the broker's
        ``delegation.token.expiry.time.ms``), never past its maximum
        lifetime; only its owner and renewers may. Returns the new expiry
        timestamp (ms)."""
        cls = protocol.message("RenewDelegationTokenRequest")
        resp = yield from self._token_request(lambda v: cls(hmac=bytes(hmac), renew_period_ms=renew_period_ms),
                                              "RenewDelegationToken", timeout)
        return resp.expiry_timestamp_ms

    @waits
    def expire_delegation_token(self, hmac: bytes, expiry_period_ms: int = -1,
                                timeout: Optional[float] = None) -> StepsOf[int]:
        """Make the token whose HMAC is ``hmac`` expire ``expiry_period_ms``
        from now (-1, the default: at once, and the broker forgets it);
        only its owner and renewers may. Returns its expiry timestamp (ms)."""
        cls = protocol.message("ExpireDelegationTokenRequest")
        resp = yield from self._token_request(
            lambda v: cls(hmac=bytes(hmac), expiry_time_period_ms=expiry_period_ms), "ExpireDelegationToken", timeout)
        return resp.expiry_timestamp_ms

    @waits
    def describe_delegation_tokens(self, owners: Optional[Iterable[str]] = None,
                                   timeout: Optional[float] = None) -> StepsOf[List[DelegationToken]]:
        """The tokens owned by ``owners`` ("User:alice", ...; None: every
        owner) that this client may see (its own, those it may renew, and
        those it has Describe on), oldest first."""
        cls = protocol.message("DescribeDelegationTokenRequest")
        wanted = None if owners is None else [principal_parts(o) for o in owners]

        def make(versions: Dict[int, int]) -> Any:
            return cls(owners=None if wanted is None else
                       [cls.DescribeDelegationTokenOwner(principal_type=t, principal_name=n) for t, n in wanted])

        resp = yield from self._token_request(make, "DescribeDelegationToken", timeout)
        tokens = [DelegationToken(t.token_id, bytes(t.hmac), f"{t.principal_type}:{t.principal_name}",
                                  _principal(t.token_requester_principal_type, t.token_requester_principal_name),
                                  tuple(f"{r.principal_type}:{r.principal_name}" for r in t.renewers),
                                  t.issue_timestamp, t.expiry_timestamp, t.max_timestamp) for t in resp.tokens]
        return sorted(tokens, key=lambda t: (t.issue_timestamp_ms, t.token_id))
