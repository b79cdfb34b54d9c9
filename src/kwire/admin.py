"""Cluster administration: topics and partitions, cluster and topic
descriptions, offsets, configs, record deletion.

Every call is blocking and raises the broker's error (a
:class:`kwire.errors.KafkaError` subclass naming the topic) when one topic of
the request fails; calls that take many topics return per-topic results and
raise only after all were answered.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from kwire import protocol
from kwire.client import Broker, Client, ClusterMetadata, PartitionInfo
from kwire.config import ADMIN, resolve
from kwire.consumer import EARLIEST, LATEST, TopicPartition
from kwire.errors import KwireError

__all__ = ["Admin", "NewTopic", "TopicDescription", "ClusterDescription", "ConfigEntry"]

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4


@dataclass(frozen=True)
class NewTopic:
    name: str
    num_partitions: int = 1
    replication_factor: int = 1
    configs: Optional[Mapping[str, str]] = None


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


class Admin:
    """``Admin({"bootstrap.servers": ...})`` or ``Admin(bootstrap_servers=...)``."""

    def __init__(self, config: Optional[Mapping[str, Any]] = None, **kwargs: Any) -> None:
        self.cfg = resolve(ADMIN, config, kwargs, what="admin")
        self._client = Client(self.cfg)
        self._client.want_all_topics()

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "Admin":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------ helpers
    def _timeout(self, timeout: Optional[float]) -> float:
        return timeout if timeout is not None else self.cfg["request_timeout_ms"] / 1000.0

    def _to_controller(self, make: Any, timeout: Optional[float]) -> Any:
        """Send to the controller when the cluster names one (older Kafka
        requires it), else to any broker (KRaft brokers forward)."""
        client = self._client
        deadline = time.monotonic() + self._timeout(timeout)
        if not client.cluster.updated_at:
            client.refresh_metadata(timeout=self._timeout(timeout))
        node = client.cluster.controller_id
        if node is None or node < 0 or node not in client.cluster.brokers:
            return client.request_any(make, self._timeout(timeout))
        conn = client.wait_ready(node, deadline)
        return client.wait(client.send(node, make(conn.versions)), max(0.0, deadline - time.monotonic()))

    @staticmethod
    def _raise_first(errors: List[BaseException]) -> None:
        if errors:
            raise errors[0]

    # ------------------------------------------------------------- topics
    def create_topics(self, topics: Sequence[NewTopic], timeout: Optional[float] = None,
                      validate_only: bool = False) -> Dict[str, Any]:
        """Create ``topics``; returns {name: topic id (or None)}."""
        cls = protocol.message("CreateTopicsRequest")
        ms = int(self._timeout(timeout) * 1000)

        def make(versions: Dict[int, int]) -> Any:
            return cls(
                topics=[cls.CreatableTopic(
                    name=t.name, num_partitions=t.num_partitions, replication_factor=t.replication_factor,
                    assignments=[], configs=[cls.CreatableTopicConfig(name=k, value=v)
                                             for k, v in (t.configs or {}).items()])
                        for t in topics],
                timeout_ms=ms, validate_only=validate_only)

        resp = self._to_controller(make, timeout)
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

    def delete_topics(self, names: Sequence[str], timeout: Optional[float] = None) -> None:
        cls = protocol.message("DeleteTopicsRequest")
        ms = int(self._timeout(timeout) * 1000)

        def make(versions: Dict[int, int]) -> Any:
            return cls(topics=[cls.DeleteTopicState(name=n) for n in names], topic_names=list(names), timeout_ms=ms)

        resp = self._to_controller(make, timeout)
        errors = [protocol.error_for(r.error_code, api="DeleteTopics", topic=r.name,
                                     message=getattr(r, "error_message", None))
                  for r in resp.responses if r.error_code]
        self._client.request_metadata_update()
        self._raise_first(errors)

    def create_partitions(self, counts: Mapping[str, int], timeout: Optional[float] = None,
                          validate_only: bool = False) -> None:
        """Grow each topic to ``counts[topic]`` partitions."""
        cls = protocol.message("CreatePartitionsRequest")
        ms = int(self._timeout(timeout) * 1000)

        def make(versions: Dict[int, int]) -> Any:
            return cls(topics=[cls.CreatePartitionsTopic(name=n, count=c, assignments=None) for n, c in counts.items()],
                       timeout_ms=ms, validate_only=validate_only)

        resp = self._to_controller(make, timeout)
        errors = [protocol.error_for(r.error_code, api="CreatePartitions", topic=r.name, message=r.error_message)
                  for r in resp.results if r.error_code]
        self._client.request_metadata_update()
        self._raise_first(errors)

    def list_topics(self, include_internal: bool = False, timeout: Optional[float] = None) -> List[str]:
        md = self._client.refresh_metadata(timeout=self._timeout(timeout))
        return [t for t in md.topics() if include_internal or t not in md.internal_topics]

    def describe_topics(self, names: Optional[Sequence[str]] = None,
                        timeout: Optional[float] = None) -> Dict[str, TopicDescription]:
        md: ClusterMetadata = self._client.refresh_metadata(topics=names, timeout=self._timeout(timeout))
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

    def describe_cluster(self, timeout: Optional[float] = None) -> ClusterDescription:
        """DescribeCluster where the broker has it, else from Metadata."""
        client = self._client

        def make(versions: Dict[int, int]) -> Any:
            if 60 not in versions:
                return protocol.message("MetadataRequest")(topics=[], allow_auto_topic_creation=False)
            return protocol.message("DescribeClusterRequest")(include_cluster_authorized_operations=False)

        resp = client.request_any(make, self._timeout(timeout))
        if getattr(resp, "error_code", 0):
            raise protocol.error_for(resp.error_code, api="DescribeCluster", message=getattr(resp, "error_message", None))
        if hasattr(resp, "topics"):       # the Metadata fallback
            brokers = tuple(Broker(b.node_id, b.host, b.port, b.rack) for b in resp.brokers)
        else:
            brokers = tuple(Broker(b.broker_id, b.host, b.port, b.rack) for b in resp.brokers)
        return ClusterDescription(resp.cluster_id, resp.controller_id, tuple(sorted(brokers, key=lambda b: b.node_id)))

    # ------------------------------------------------------------ offsets
    def list_offsets(self, query: Mapping[Tuple[str, int], Any], timeout: Optional[float] = None,
                     isolation_level: str = "read_uncommitted") -> Dict[TopicPartition, Tuple[int, int]]:
        """Per partition: ``"earliest"``, ``"latest"`` or a timestamp (ms) ->
        (offset, timestamp); offset -1 when no record is that recent."""
        from kwire.consumer import Consumer

        spec = {}
        for tp, what in query.items():
            spec[TopicPartition(*tp)] = {"earliest": EARLIEST, "latest": LATEST}.get(what, what)
        with Consumer(dict(self._passthrough()), isolation_level=isolation_level) as c:
            return c._list_offsets(spec, self._timeout(timeout))

    def _passthrough(self) -> Dict[str, Any]:
        return {k: v for k, v in self.cfg.items() if k in ADMIN and v is not None}

    def delete_records(self, before: Mapping[Tuple[str, int], int], timeout: Optional[float] = None) -> Dict[TopicPartition, int]:
        """Delete the records of each partition before the given offset;
        returns the new low watermarks."""
        client = self._client
        deadline = time.monotonic() + self._timeout(timeout)
        client.add_topics({tp[0] for tp in before})
        client.refresh_metadata(timeout=self._timeout(timeout))
        by_node: Dict[int, Dict[TopicPartition, int]] = collections.defaultdict(dict)
        for tp, off in before.items():
            leader = client.cluster.leader_for(*tp)
            if leader is None:
                raise KwireError(f"no leader known for {tp[0]}[{tp[1]}]")
            by_node[leader][TopicPartition(*tp)] = off
        cls = protocol.message("DeleteRecordsRequest")
        futures = []
        for node, parts in by_node.items():
            topics: Dict[str, List[Any]] = collections.defaultdict(list)
            for tp, off in parts.items():
                topics[tp.topic].append(cls.DeleteRecordsPartition(partition_index=tp.partition, offset=off))
            client.wait_ready(node, deadline)
            futures.append(client.send(node, cls(
                topics=[cls.DeleteRecordsTopic(name=t, partitions=ps) for t, ps in topics.items()],
                timeout_ms=int(self._timeout(timeout) * 1000))))
        out, errors = {}, []
        for fut in futures:
            resp = client.wait(fut, max(0.0, deadline - time.monotonic()))
            for t in resp.topics:
                for p in t.partitions:
                    if p.error_code:
                        errors.append(protocol.error_for(p.error_code, api="DeleteRecords", topic=t.name,
                                                         partition=p.partition_index))
                    else:
                        out[TopicPartition(t.name, p.partition_index)] = p.low_watermark
        self._raise_first(errors)
        return out

    # ------------------------------------------------------------ configs
    def describe_configs(self, topics: Iterable[str] = (), brokers: Iterable[int] = (),
                         timeout: Optional[float] = None) -> Dict[Tuple[str, str], Dict[str, ConfigEntry]]:
        """Configs of topics and brokers: {("topic", name) or ("broker", id):
        {config name: ConfigEntry}}."""
        cls = protocol.message("DescribeConfigsRequest")
        resources = [(TOPIC_RESOURCE, t) for t in topics] + [(BROKER_RESOURCE, str(b)) for b in brokers]

        def make(versions: Dict[int, int]) -> Any:
            return cls(resources=[cls.DescribeConfigsResource(resource_type=rt, resource_name=n, configuration_keys=None)
                                  for rt, n in resources], include_synonyms=False, include_documentation=False)

        resp = self._client.request_any(make, self._timeout(timeout))
        out, errors = {}, []
        for r in resp.results:
            kind = "topic" if r.resource_type == TOPIC_RESOURCE else "broker"
            if r.error_code:
                errors.append(protocol.error_for(r.error_code, api="DescribeConfigs", topic=r.resource_name,
                                                 message=r.error_message))
                continue
            out[(kind, r.resource_name)] = {
                c.name: ConfigEntry(c.name, c.value, c.read_only,
                                    getattr(c, "is_default", False) or getattr(c, "config_source", -1) == 5,
                                    c.is_sensitive, getattr(c, "config_source", -1))
                for c in r.configs}
        self._raise_first(errors)
        return out
