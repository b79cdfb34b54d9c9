"""kwire.admin_ops offline: the requests of issue 33's admin calls through
the encode/decode of every version they are sent at, and answers no live
broker gives on demand (an offline log dir, a failed user among others,
a version without a filter). Their live behaviour: tests/kafka/test_admin_*.py."""

from __future__ import annotations

import hashlib

import pytest

from kwire.admin_ops import cluster, configs, log_dirs, scram, transactions
from kwire.errors import KafkaStorageError, ResourceNotFoundError, UnsupportedVersionError
from kwire.protocol import messages as m
from kwire.protocol.api_keys import ApiKey
from kwire.types import TopicPartition


def _wire(obj, version):
    cls = type(obj)
    return cls.decode(cls.encode_bytes(obj, version), version)


def _versions(cls):
    return range(cls.MIN_VERSION, cls.MAX_VERSION + 1)


def test_incremental_alter_configs_request_and_routing():
    ops = {configs.ConfigResource("topic", "t"): [configs.AlterConfigOp("retention.ms", "1"),
                                                  configs.AlterConfigOp("cleanup.policy", None, "delete")],
           configs.resource(("broker", 2)): [configs.AlterConfigOp("log.cleaner.threads", "2", "set")],
           configs.resource(("broker", "")): [configs.AlterConfigOp("x", "a", "append")]}
    assert configs.by_node(ops) == {None: [("topic", "t"), ("broker", "")], 2: [("broker", "2")]}
    for v in _versions(m.IncrementalAlterConfigsRequest):
        req = _wire(configs.incremental_alter_request(ops, True), v)
        assert req.validate_only
        t, b, d = req.resources
        assert (t.resource_type, b.resource_type, b.resource_name) == (2, 4, "2")
        assert [(c.name, c.config_operation, c.value) for c in t.configs] == [("retention.ms", 0, "1"),
                                                                              ("cleanup.policy", 1, None)]
        assert d.configs[0].config_operation == 2
    with pytest.raises(ValueError, match="needs a value"):
        configs.incremental_alter_request({configs.ConfigResource("topic", "t"): [configs.AlterConfigOp("a")]}, False)
    with pytest.raises(ValueError, match="type is one of"):
        configs.resource(("cluster", "x"))


def test_config_errors_name_their_resource():
    resp = m.IncrementalAlterConfigsResponse(responses=[
        m.IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(resource_type=32, resource_name="g"),
        m.IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(error_code=40, error_message="bad",
                                                                        resource_type=16, resource_name="sub")])
    (e,) = configs.resource_errors(_wire(resp, 1), "IncrementalAlterConfigs")
    assert "client_metrics" in str(e) and "sub" in str(e) and "bad" in str(e)


def test_log_dirs_request_and_an_offline_dir():
    moves = log_dirs.by_broker({("t", 0, 1): "/a", ("t", 1, 1): "/a", ("u", 0, 2): "/b"})
    assert sorted(moves) == [1, 2]
    for v in _versions(m.AlterReplicaLogDirsRequest):
        (d,) = _wire(log_dirs.alter_replica_log_dirs_request(moves[1]), v).dirs
        assert (d.path, [(t.name, t.partitions) for t in d.topics]) == ("/a", [("t", [0, 1])])
    R = m.DescribeLogDirsResponse
    resp = R(results=[R.DescribeLogDirsResult(error_code=56, log_dir="/bad", topics=[]),
                      R.DescribeLogDirsResult(log_dir="/ok", total_bytes=10, usable_bytes=5, topics=[
                          R.DescribeLogDirsTopic(name="t", partitions=[R.DescribeLogDirsPartition(
                              partition_index=0, partition_size=7, offset_lag=1, is_future_key=True)])])])
    for v in _versions(R):
        got = log_dirs.log_dirs_from_response(_wire(resp, v), 1)
        assert isinstance(got["/bad"].error, KafkaStorageError) and got["/ok"].error is None
        assert got["/ok"].replica_infos == {TopicPartition("t", 0): log_dirs.ReplicaInfo(7, 1, True)}
        assert (got["/ok"].total_bytes, got["/ok"].usable_bytes) == ((10, 5) if v >= 4 else (-1, -1))


def test_scram_upsertion_is_salted_here_and_a_failed_user():
    up = scram.UserScramCredentialUpsertion("u", scram.ScramCredentialInfo("SCRAM-SHA-512", 4096), "pw", salt=b"s")
    for v in _versions(m.AlterUserScramCredentialsRequest):
        req = _wire(scram.alter_request([up, scram.UserScramCredentialDeletion("d", "SCRAM-SHA-256")]), v)
        (u,), (d,) = req.upsertions, req.deletions
        assert (u.mechanism, u.iterations, bytes(u.salt), d.mechanism) == (2, 4096, b"s", 1)
        assert bytes(u.salted_password) == hashlib.pbkdf2_hmac("sha512", b"pw", b"s", 4096)
    salt = scram.random_salt()
    assert salt.isalnum() and salt != scram.random_salt()
    R = m.DescribeUserScramCredentialsResponse
    resp = R(results=[R.DescribeUserScramCredentialsResult(user="a", credential_infos=[
                          R.CredentialInfo(mechanism=1, iterations=8192)]),
                      R.DescribeUserScramCredentialsResult(user="b", error_code=91, error_message="none",
                                                           credential_infos=[])])
    got, (e,) = scram.descriptions(_wire(resp, 0))
    assert got["a"].credential_infos == (("SCRAM-SHA-256", 8192),)
    assert isinstance(e, ResourceNotFoundError) and "'b'" in str(e)


def test_list_transactions_filters_need_their_versions():
    v1 = {ApiKey.LIST_TRANSACTIONS: 1}
    with pytest.raises(UnsupportedVersionError, match="pattern"):
        transactions.list_transactions_request(v1, (), (), -1, "x.*")
    with pytest.raises(UnsupportedVersionError, match="duration"):
        transactions.list_transactions_request({ApiKey.LIST_TRANSACTIONS: 0}, (), (), 1000, None)
    req = _wire(transactions.list_transactions_request(v1, ["Ongoing"], [7], 1000, None), 1)
    assert (req.state_filters, req.producer_id_filters, req.duration_filter) == (["Ongoing"], [7], 1000)


def test_producer_states_without_a_transaction():
    R = m.DescribeProducersResponse
    resp = R(topics=[R.TopicResponse(name="t", partitions=[
        R.PartitionResponse(partition_index=0, active_producers=[R.ProducerState(
            producer_id=5, producer_epoch=1, last_sequence=3, last_timestamp=9, coordinator_epoch=-1,
            current_txn_start_offset=-1)]),
        R.PartitionResponse(partition_index=1, error_code=6, active_producers=[])])])
    got, (e,) = transactions.producer_states(_wire(resp, 0))
    assert got[TopicPartition("t", 0)] == [transactions.ProducerState(5, 1, 3, 9, None, None)]
    assert "NOT_LEADER" in str(e)


def test_update_features_by_version():
    up = {"f": cluster.FeatureUpdate(1, "safe_downgrade")}
    (k,) = _wire(cluster.update_features_request({ApiKey.UPDATE_FEATURES: 0}, up, False, 1000), 0).feature_updates
    assert k.allow_downgrade
    for v in (1, 2):
        (k,) = _wire(cluster.update_features_request({ApiKey.UPDATE_FEATURES: v}, up, True, 1000), v).feature_updates
        assert k.upgrade_type == 2
    with pytest.raises(UnsupportedVersionError):
        cluster.update_features_request({ApiKey.UPDATE_FEATURES: 0}, up, True, 1000)
