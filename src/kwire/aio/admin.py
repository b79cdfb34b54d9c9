"""The asyncio admin client: :class:`AsyncAdmin`, every call of
:class:`kwire.admin.Admin` as a coroutine.

Each call is the blocking admin's own code (written as steps: see
:func:`kwire.admin.waits`), awaited on the event loop's client, so the two
cannot drift apart: the same requests, retries, errors and results.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from kwire.acl import AclBinding
from kwire.admin import (AbortTransactionSpec, Admin, AlterConfigOp, ClusterDescription, ConfigEntry, DelegationToken,
                         FeatureMetadata, FeatureUpdate, GroupDescription, GroupListing, LogDirDescription, NewTopic,
                         ProducerState, QuorumInfo, TopicDescription, TransactionDescription, TransactionListing,
                         UserScramCredentialsDescription)
from kwire.admin_ops.share import ShareGroupDescription, SharePartitionOffset
from kwire.aio.client import AioClient, Observed
from kwire.client import Steps
from kwire.errors import KwireError
from kwire.group import OffsetAndMetadata
from kwire.types import TopicPartition

__all__ = ["AsyncAdmin"]


class _LoopAdmin(Admin):
    """:class:`kwire.admin.Admin` on the event loop's client."""

    _client_class = AioClient


class AsyncAdmin(Observed):
    """Cluster administration for asyncio: ``AsyncAdmin({"bootstrap.servers":
    ...})``, made inside a running event loop; ``async with``, or ``await``
    :meth:`close`. Every method is :class:`kwire.admin.Admin`'s, awaited."""

    _core_name = "_a"      # the blocking client driven (Observed)

    def __init__(self, config: Optional[Mapping[str, Any]] = None, **kwargs: Any) -> None:
        self._a = _LoopAdmin(config, **kwargs)
        self.cfg = self._a.cfg

    async def _run(self, steps: Steps) -> Any:
        return await self._a._client.arun(steps)

    async def close(self, timeout: Optional[float] = None) -> None:
        """As :meth:`kwire.admin.Admin.close`, awaited."""
        if not self._a._client._closed:
            await self._a._client.arun(self._a._close_steps(timeout))
        self._a._client.close()

    async def __aenter__(self) -> "AsyncAdmin":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def create_topics(self, topics: Sequence[NewTopic], timeout: Optional[float] = None,
                            validate_only: bool = False) -> Dict[str, Any]:
        """:meth:`kwire.admin.Admin.create_topics`."""
        return await self._run(Admin.create_topics.steps(self._a, topics, timeout, validate_only))

    async def delete_topics(self, names: Sequence[str], timeout: Optional[float] = None) -> None:
        """:meth:`kwire.admin.Admin.delete_topics`."""
        return await self._run(Admin.delete_topics.steps(self._a, names, timeout))

    async def create_partitions(self, counts: Mapping[str, int], timeout: Optional[float] = None,
                                validate_only: bool = False) -> None:
        """:meth:`kwire.admin.Admin.create_partitions`."""
        return await self._run(Admin.create_partitions.steps(self._a, counts, timeout, validate_only))

    async def list_topics(self, include_internal: bool = False, timeout: Optional[float] = None) -> List[str]:
        """:meth:`kwire.admin.Admin.list_topics`."""
        return await self._run(Admin.list_topics.steps(self._a, include_internal, timeout))

    async def describe_topics(self, names: Optional[Sequence[str]] = None,
                              timeout: Optional[float] = None) -> Dict[str, TopicDescription]:
        """:meth:`kwire.admin.Admin.describe_topics`."""
        return await self._run(Admin.describe_topics.steps(self._a, names, timeout))

    async def describe_cluster(self, timeout: Optional[float] = None) -> ClusterDescription:
        """:meth:`kwire.admin.Admin.describe_cluster`."""
        return await self._run(Admin.describe_cluster.steps(self._a, timeout))

    async def list_offsets(self, query: Mapping[Tuple[str, int], Any], timeout: Optional[float] = None,
                           isolation_level: str = "read_uncommitted") -> Dict[TopicPartition, Tuple[int, int]]:
        """:meth:`kwire.admin.Admin.list_offsets`."""
        return await self._run(Admin.list_offsets.steps(self._a, query, timeout, isolation_level))

    async def delete_records(self, before: Mapping[Tuple[str, int], int], timeout: Optional[float] = None) -> Dict[TopicPartition, int]:
        """:meth:`kwire.admin.Admin.delete_records`."""
        return await self._run(Admin.delete_records.steps(self._a, before, timeout))

    async def elect_leaders(self, partitions: Optional[Iterable[Tuple[str, int]]] = None, election_type: str = "preferred",
                            timeout: Optional[float] = None) -> Dict[TopicPartition, Optional[KwireError]]:
        """:meth:`kwire.admin.Admin.elect_leaders`."""
        return await self._run(Admin.elect_leaders.steps(self._a, partitions, election_type, timeout))

    async def alter_partition_reassignments(self, moves: Mapping[Tuple[str, int], Optional[Sequence[int]]],
                                            timeout: Optional[float] = None) -> None:
        """:meth:`kwire.admin.Admin.alter_partition_reassignments`."""
        return await self._run(Admin.alter_partition_reassignments.steps(self._a, moves, timeout))

    async def list_partition_reassignments(self, partitions: Optional[Iterable[Tuple[str, int]]] = None,
                                           timeout: Optional[float] = None) -> Dict[Tuple[str, int], Any]:
        """:meth:`kwire.admin.Admin.list_partition_reassignments`."""
        return await self._run(Admin.list_partition_reassignments.steps(self._a, partitions, timeout))

    async def unregister_broker(self, node_id: int, timeout: Optional[float] = None) -> None:
        """:meth:`kwire.admin.Admin.unregister_broker`."""
        return await self._run(Admin.unregister_broker.steps(self._a, node_id, timeout))

    async def describe_metadata_quorum(self, timeout: Optional[float] = None) -> QuorumInfo:
        """:meth:`kwire.admin.Admin.describe_metadata_quorum`."""
        return await self._run(Admin.describe_metadata_quorum.steps(self._a, timeout))

    describe_quorum = describe_metadata_quorum

    async def describe_features(self, timeout: Optional[float] = None) -> FeatureMetadata:
        """:meth:`kwire.admin.Admin.describe_features`."""
        return await self._run(Admin.describe_features.steps(self._a, timeout))

    async def update_features(self, updates: Mapping[str, FeatureUpdate], validate_only: bool = False,
                              timeout: Optional[float] = None) -> None:
        """:meth:`kwire.admin.Admin.update_features`."""
        return await self._run(Admin.update_features.steps(self._a, updates, validate_only, timeout))

    async def describe_configs(self, topics: Iterable[str] = (), brokers: Iterable[int] = (),
                               timeout: Optional[float] = None, resources: Iterable[Tuple[str, Any]] = (),
                               ) -> Dict[Tuple[str, str], Dict[str, ConfigEntry]]:
        """:meth:`kwire.admin.Admin.describe_configs`."""
        return await self._run(Admin.describe_configs.steps(self._a, topics, brokers, timeout, resources))

    async def incremental_alter_configs(self, configs: Mapping[Tuple[str, Any], Sequence[AlterConfigOp]],
                                        validate_only: bool = False, timeout: Optional[float] = None) -> None:
        """:meth:`kwire.admin.Admin.incremental_alter_configs`."""
        return await self._run(Admin.incremental_alter_configs.steps(self._a, configs, validate_only, timeout))

    async def alter_configs(self, configs: Mapping[Tuple[str, Any], Mapping[str, Optional[str]]],
                            validate_only: bool = False, timeout: Optional[float] = None) -> None:
        """:meth:`kwire.admin.Admin.alter_configs`."""
        return await self._run(Admin.alter_configs.steps(self._a, configs, validate_only, timeout))

    async def describe_log_dirs(self, brokers: Iterable[int],
                                timeout: Optional[float] = None) -> Dict[int, Dict[str, LogDirDescription]]:
        """:meth:`kwire.admin.Admin.describe_log_dirs`."""
        return await self._run(Admin.describe_log_dirs.steps(self._a, brokers, timeout))

    async def alter_replica_log_dirs(self, moves: Mapping[Tuple[str, int, int], str],
                                     timeout: Optional[float] = None) -> None:
        """:meth:`kwire.admin.Admin.alter_replica_log_dirs`."""
        return await self._run(Admin.alter_replica_log_dirs.steps(self._a, moves, timeout))

    async def list_groups(self, states: Optional[Sequence[str]] = None, types: Optional[Sequence[str]] = None,
                          timeout: Optional[float] = None) -> List[GroupListing]:
        """:meth:`kwire.admin.Admin.list_groups`."""
        return await self._run(Admin.list_groups.steps(self._a, states, types, timeout))

    async def describe_groups(self, group_ids: Sequence[str], timeout: Optional[float] = None) -> Dict[str, GroupDescription]:
        """:meth:`kwire.admin.Admin.describe_groups`."""
        return await self._run(Admin.describe_groups.steps(self._a, group_ids, timeout))

    async def delete_groups(self, group_ids: Sequence[str], timeout: Optional[float] = None) -> None:
        """:meth:`kwire.admin.Admin.delete_groups`."""
        return await self._run(Admin.delete_groups.steps(self._a, group_ids, timeout))

    async def describe_share_groups(self, group_ids: Sequence[str],
                                    timeout: Optional[float] = None) -> Dict[str, ShareGroupDescription]:
        """:meth:`kwire.admin.Admin.describe_share_groups`."""
        return await self._run(Admin.describe_share_groups.steps(self._a, group_ids, timeout))

    async def list_share_group_offsets(self, group_id: str, partitions: Optional[Iterable[Tuple[str, int]]] = None,
                                       timeout: Optional[float] = None) -> Dict[TopicPartition, SharePartitionOffset]:
        """:meth:`kwire.admin.Admin.list_share_group_offsets`."""
        return await self._run(Admin.list_share_group_offsets.steps(self._a, group_id, partitions, timeout))

    async def alter_share_group_offsets(self, group_id: str, offsets: Mapping[Tuple[str, int], int],
                                        timeout: Optional[float] = None) -> None:
        """:meth:`kwire.admin.Admin.alter_share_group_offsets`."""
        return await self._run(Admin.alter_share_group_offsets.steps(self._a, group_id, offsets, timeout))

    async def delete_share_group_offsets(self, group_id: str, topics: Iterable[str],
                                         timeout: Optional[float] = None) -> None:
        """:meth:`kwire.admin.Admin.delete_share_group_offsets`."""
        return await self._run(Admin.delete_share_group_offsets.steps(self._a, group_id, topics, timeout))

    async def list_group_offsets(self, group_id: str, partitions: Optional[Iterable[Tuple[str, int]]] = None,
                                 timeout: Optional[float] = None,
                                 require_stable: bool = False) -> Dict[TopicPartition, Any]:
        """:meth:`kwire.admin.Admin.list_group_offsets`."""
        return await self._run(Admin.list_group_offsets.steps(self._a, group_id, partitions, timeout, require_stable))

    async def alter_group_offsets(self, group_id: str, offsets: Mapping[Tuple[str, int], Any],
                                  timeout: Optional[float] = None) -> None:
        """:meth:`kwire.admin.Admin.alter_group_offsets`."""
        return await self._run(Admin.alter_group_offsets.steps(self._a, group_id, offsets, timeout))

    async def delete_consumer_group_offsets(self, group_id: str, partitions: Iterable[Tuple[str, int]],
                                            timeout: Optional[float] = None) -> None:
        """:meth:`kwire.admin.Admin.delete_consumer_group_offsets`."""
        return await self._run(Admin.delete_consumer_group_offsets.steps(self._a, group_id, partitions, timeout))

    async def group_lag(self, group_id: str, timeout: Optional[float] = None,
                        committed: Optional[Mapping[TopicPartition, OffsetAndMetadata]] = None,
                  ) -> Dict[TopicPartition, Tuple[int, int, int]]:
        """:meth:`kwire.admin.Admin.group_lag`."""
        return await self._run(Admin.group_lag.steps(self._a, group_id, timeout, committed))

    async def describe_producers(self, partitions: Iterable[Tuple[str, int]], broker_id: Optional[int] = None,
                                 timeout: Optional[float] = None) -> Dict[TopicPartition, List[ProducerState]]:
        """:meth:`kwire.admin.Admin.describe_producers`."""
        return await self._run(Admin.describe_producers.steps(self._a, partitions, broker_id, timeout))

    async def list_transactions(self, filter_states: Sequence[str] = (), filter_producer_ids: Sequence[int] = (),
                                filter_on_duration_ms: int = -1, filter_on_transactional_id_pattern: Optional[str] = None,
                                timeout: Optional[float] = None) -> List[TransactionListing]:
        """:meth:`kwire.admin.Admin.list_transactions`."""
        return await self._run(Admin.list_transactions.steps(self._a, filter_states, filter_producer_ids,
                                                             filter_on_duration_ms, filter_on_transactional_id_pattern,
                                                             timeout))

    async def describe_transactions(self, transactional_ids: Iterable[str],
                                    timeout: Optional[float] = None) -> Dict[str, TransactionDescription]:
        """:meth:`kwire.admin.Admin.describe_transactions`."""
        return await self._run(Admin.describe_transactions.steps(self._a, transactional_ids, timeout))

    async def abort_transaction(self, spec: AbortTransactionSpec, timeout: Optional[float] = None) -> None:
        """:meth:`kwire.admin.Admin.abort_transaction`."""
        return await self._run(Admin.abort_transaction.steps(self._a, spec, timeout))

    async def fence_producers(self, transactional_ids: Iterable[str],
                              timeout: Optional[float] = None) -> Dict[str, Tuple[int, int]]:
        """:meth:`kwire.admin.Admin.fence_producers`."""
        return await self._run(Admin.fence_producers.steps(self._a, transactional_ids, timeout))

    async def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, committed: bool,
                              transaction_version: int = 1, timeout: Optional[float] = None) -> Tuple[int, int]:
        """:meth:`kwire.admin.Admin.end_transaction`."""
        return await self._run(Admin.end_transaction.steps(self._a, transactional_id, producer_id, producer_epoch,
                                                           committed, transaction_version, timeout))

    async def create_acls(self, acls: Sequence[AclBinding], timeout: Optional[float] = None) -> None:
        """:meth:`kwire.admin.Admin.create_acls`."""
        return await self._run(Admin.create_acls.steps(self._a, acls, timeout))

    async def describe_acls(self, acl_filter: Optional[AclBinding] = None,
                            timeout: Optional[float] = None) -> List[AclBinding]:
        """:meth:`kwire.admin.Admin.describe_acls`."""
        return await self._run(Admin.describe_acls.steps(self._a, acl_filter, timeout))

    async def delete_acls(self, filters: Sequence[AclBinding], timeout: Optional[float] = None) -> List[AclBinding]:
        """:meth:`kwire.admin.Admin.delete_acls`."""
        return await self._run(Admin.delete_acls.steps(self._a, filters, timeout))

    async def alter_client_quotas(self, entity: Mapping[str, Optional[str]], quotas: Mapping[str, Optional[float]],
                                  timeout: Optional[float] = None, validate_only: bool = False) -> None:
        """:meth:`kwire.admin.Admin.alter_client_quotas`."""
        return await self._run(Admin.alter_client_quotas.steps(self._a, entity, quotas, timeout, validate_only))

    async def describe_client_quotas(self, entity: Mapping[str, Optional[str]], strict: bool = False,
                                     timeout: Optional[float] = None
                               ) -> Dict[Tuple[Tuple[str, Optional[str]], ...], Dict[str, float]]:
        """:meth:`kwire.admin.Admin.describe_client_quotas`."""
        return await self._run(Admin.describe_client_quotas.steps(self._a, entity, strict, timeout))

    async def describe_user_scram_credentials(self, users: Optional[Iterable[str]] = None,
                                              timeout: Optional[float] = None,
                                              ) -> Dict[str, UserScramCredentialsDescription]:
        """:meth:`kwire.admin.Admin.describe_user_scram_credentials`."""
        return await self._run(Admin.describe_user_scram_credentials.steps(self._a, users, timeout))

    async def alter_user_scram_credentials(self, alterations: Sequence[Any], timeout: Optional[float] = None) -> None:
        """:meth:`kwire.admin.Admin.alter_user_scram_credentials`."""
        return await self._run(Admin.alter_user_scram_credentials.steps(self._a, alterations, timeout))

    async def create_delegation_token(self, renewers: Iterable[str] = (), max_lifetime_ms: int = -1,
                                      owner: Optional[str] = None, timeout: Optional[float] = None) -> DelegationToken:
        """:meth:`kwire.admin.Admin.create_delegation_token`."""
        return await self._run(Admin.create_delegation_token.steps(self._a, renewers, max_lifetime_ms, owner, timeout))

    async def renew_delegation_token(self, hmac: bytes, renew_period_ms: int = -1,
                                     timeout: Optional[float] = None) -> int:
        """:meth:`kwire.admin.Admin.renew_delegation_token`."""
        return await self._run(Admin.renew_delegation_token.steps(self._a, hmac, renew_period_ms, timeout))

    async def expire_delegation_token(self, hmac: bytes, expiry_period_ms: int = -1,
                                      timeout: Optional[float] = None) -> int:
        """:meth:`kwire.admin.Admin.expire_delegation_token`."""
        return await self._run(Admin.expire_delegation_token.steps(self._a, hmac, expiry_period_ms, timeout))

    async def describe_delegation_tokens(self, owners: Optional[Iterable[str]] = None,
                                         timeout: Optional[float] = None) -> List[DelegationToken]:
        """:meth:`kwire.admin.Admin.describe_delegation_tokens`."""
        return await self._run(Admin.describe_delegation_tokens.steps(self._a, owners, timeout))
