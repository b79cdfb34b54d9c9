"""The group protocol's bytes without a broker: the embedded consumer
protocol (as librdkafka/Java peers write it, including versions newer than
kwire knows), request layouts per version (a KIP-848 member in OffsetFetch
v9), and response parsing, including commit metadata in layouts no live
broker here answers with. Commit metadata coming back is tested live on
Apache Kafka (test_groups, test_groups_admin; Tansu 0.6.0 stores none)."""

from __future__ import annotations

import struct

import pytest

from kwire import protocol
from kwire.consumer import TopicPartition as TP
from kwire.errors import KwireError, ProtocolError
from kwire.commit import commit_errors, offset_commit_request, offset_fetch_request, offsets_from_response
from kwire.coordinator import coordinator_from_response, find_coordinator_request
from kwire.group import (OffsetAndMetadata, decode_assignment, decode_subscription, encode_assignment,
                         encode_subscription, leave_group_request)
from kwire.protocol.versions import capped_version


def test_subscription_round_trip_with_owned_partitions_generation_and_rack():
    data = encode_subscription(["b", "a"], [("a", 1), ("a", 0), ("b", 2)], 7, "rack-1", b"ud")
    assert struct.unpack(">h", data[:2])[0] == 3
    sub = decode_subscription("m1", "inst", data)
    assert sub.topics == ("a", "b")
    assert sub.owned_partitions == (TP("a", 0), TP("a", 1), TP("b", 2))
    assert (sub.generation, sub.rack_id, sub.user_data, sub.group_instance_id) == (7, "rack-1", b"ud", "inst")


def test_subscription_v0_as_old_clients_write_it():
    # kafka-python / aiokafka: version 0, topics, user data (null)
    data = struct.pack(">hih1sh1si", 0, 2, 1, b"x", 1, b"y", -1)
    sub = decode_subscription("m", None, data)
    assert sub.topics == ("x", "y") and sub.owned_partitions == () and sub.generation == -1


def test_subscription_newer_than_kwire_is_read_as_its_newest_version():
    cls = protocol.message("ConsumerProtocolSubscription")
    body = cls.encode_bytes(cls(topics=["t"], generation_id=3, rack_id="r"), cls.MAX_VERSION)
    data = struct.pack(">h", cls.MAX_VERSION + 1) + body + b"fields of a future version"
    sub = decode_subscription("m", None, data)
    assert sub.topics == ("t",) and sub.generation == 3 and sub.rack_id == "r"


def test_garbage_subscription_is_a_protocol_error():
    with pytest.raises(ProtocolError):
        decode_subscription("m", None, b"\x00")
    with pytest.raises(ProtocolError):
        decode_subscription("m", None, struct.pack(">hi", 0, 5))


def test_assignment_round_trip_and_empty():
    data = encode_assignment([("t", 2), ("t", 0), ("u", 1)])
    assert decode_assignment(data) == [TP("t", 0), TP("t", 2), TP("u", 1)]
    assert decode_assignment(b"") == []
    assert decode_assignment(None) == []


def test_offset_commit_request_carries_offsets_and_metadata():
    req = offset_commit_request("g", {TP("t", 0): OffsetAndMetadata(42, "note", 3), TP("t", 1): OffsetAndMetadata(7)},
                                generation=5, member_id="m", group_instance_id="i")
    cls = type(req)
    for version in (2, 7, 9):
        if version < 7:
            req.group_instance_id = None
        back = cls.decode(cls.encode_bytes(req, version), version)
        parts = {p.partition_index: p for p in back.topics[0].partitions}
        assert (parts[0].committed_offset, parts[0].committed_metadata) == (42, "note")
        assert parts[1].committed_offset == 7
        assert back.generation_id_or_member_epoch == 5 and back.member_id == "m"


def test_offset_fetch_request_layout_follows_the_version():
    old = offset_fetch_request({9: 6}, "g", [("t", 1), ("t", 0)])
    assert old.group_id == "g" and old.topics[0].partition_indexes == [0, 1] and old.require_stable is False
    new = offset_fetch_request({9: 12}, "g", None)      # capped at 9: groups, every partition
    assert capped_version({9: 12}, 9) == 9
    assert new.groups[0].group_id == "g" and new.groups[0].topics is None and new.require_stable is True


def test_offset_fetch_request_carries_a_kip848_member_from_v9():
    cls = protocol.message("OffsetFetchRequest")
    req = offset_fetch_request({9: 9}, "g", [("t", 0)], member=("m-1", 7))
    back = cls.decode(cls.encode_bytes(req, 9), 9)
    assert (back.groups[0].member_id, back.groups[0].member_epoch) == ("m-1", 7)
    # the default (classic members, the admin client): no member, nothing checked
    back = cls.decode(cls.encode_bytes(offset_fetch_request({9: 9}, "g", None), 9), 9)
    assert (back.groups[0].member_id, back.groups[0].member_epoch) == (None, -1)
    # v8 has no such fields: left out
    req = offset_fetch_request({9: 8}, "g", [("t", 0)], member=("m-1", 7))
    assert (req.groups[0].member_id, req.groups[0].member_epoch) == (None, -1)
    cls.encode_bytes(req, 8)


def test_offsets_from_response_both_layouts_with_metadata():
    cls = protocol.message("OffsetFetchResponse")
    v7 = cls(topics=[cls.OffsetFetchResponseTopic(name="t", partitions=[
        cls.OffsetFetchResponsePartition(partition_index=0, committed_offset=10, metadata="m0",
                                         committed_leader_epoch=2),
        cls.OffsetFetchResponsePartition(partition_index=1, committed_offset=-1, metadata="")])])
    v7 = cls.decode(cls.encode_bytes(v7, 7), 7)
    assert offsets_from_response(v7, "g") == {TP("t", 0): OffsetAndMetadata(10, "m0", 2), TP("t", 1): None}
    v9 = cls(groups=[cls.OffsetFetchResponseGroup(group_id="g", topics=[cls.OffsetFetchResponseTopics(
        name="t", partitions=[cls.OffsetFetchResponsePartitions(partition_index=3, committed_offset=5,
                                                                metadata="x")])])])
    v9 = cls.decode(cls.encode_bytes(v9, 9), 9)
    assert offsets_from_response(v9, "g") == {TP("t", 3): OffsetAndMetadata(5, "x", -1)}
    failed = cls(groups=[cls.OffsetFetchResponseGroup(group_id="g", error_code=16, topics=[])])
    with pytest.raises(KwireError) as e:
        offsets_from_response(failed, "g")
    assert e.value.retriable


def test_commit_errors_are_located():
    cls = protocol.message("OffsetCommitResponse")
    resp = cls(topics=[cls.OffsetCommitResponseTopic(name="t", partitions=[
        cls.OffsetCommitResponsePartition(partition_index=0, error_code=0),
        cls.OffsetCommitResponsePartition(partition_index=1, error_code=22)])])
    errors = commit_errors(resp)
    assert list(errors) == [TP("t", 1)] and errors[TP("t", 1)].code == 22


def test_find_coordinator_both_layouts():
    v3 = find_coordinator_request({10: 3}, "g", 0)
    assert v3.key == "g" and not v3.coordinator_keys
    v4 = find_coordinator_request({10: 6}, "txn", 1)
    assert v4.coordinator_keys == ["txn"] and v4.key_type == 1
    cls = protocol.message("FindCoordinatorResponse")
    b = coordinator_from_response(cls(coordinators=[cls.Coordinator(key="g", node_id=3, host="h", port=9)]), "g")
    assert (b.node_id, b.host, b.port) == (3, "h", 9)
    b = coordinator_from_response(cls(node_id=1, host="x", port=2), "g")
    assert (b.node_id, b.host, b.port) == (1, "x", 2)
    with pytest.raises(KwireError):
        coordinator_from_response(cls(coordinators=[cls.Coordinator(key="g", error_code=15)]), "g")


def test_leave_group_request_per_version():
    assert leave_group_request({13: 2}, "g", "m", "bye").member_id == "m"
    new = leave_group_request({13: 5}, "g", "m", "bye", "inst")
    assert [(x.member_id, x.group_instance_id, x.reason) for x in new.members] == [("m", "inst", "bye")]
    assert leave_group_request({13: 4}, "g", "m", "bye").members[0].reason is None
