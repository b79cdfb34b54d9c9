"""Every API at every version: property-generated messages survive
encode -> decode unchanged (unknown tagged fields included)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kwire.protocol import MESSAGES

from .schema import all_message_names, message_strategy

CASES = [(name, v) for name in all_message_names()
         for v in range(MESSAGES[name].MIN_VERSION, MESSAGES[name].MAX_VERSION + 1)]


def test_every_api_of_the_issue_is_generated():
    from kwire.protocol import APIS

    assert len(APIS) == 66           # issue 3's 29, KIP-848's ConsumerGroupHeartbeat and ConsumerGroupDescribe,
    #                                  issue 16's CreateAcls, DescribeAcls, DeleteAcls, AlterClientQuotas, DescribeClientQuotas,
    #                                  issue 17's ElectLeaders, AlterPartitionReassignments, UnregisterBroker,
    #                                  ListPartitionReassignments (kwire reassign-partitions),
    #                                  issue 30's Create/Renew/Expire/DescribeDelegationToken,
    #                                  issue 33's 13 admin APIs (configs to features),
    #                                  issue 35's GetTelemetrySubscriptions and PushTelemetry (KIP-714),
    #                                  and issue 36's 7 share group APIs (KIP-932)
    assert {"ConsumerGroupHeartbeatRequest", "ConsumerGroupDescribeResponse"} <= set(MESSAGES)
    assert {"CreateAclsResponse", "DescribeAclsResponse", "DeleteAclsResponse", "AlterClientQuotasResponse",
            "DescribeClientQuotasResponse", "ElectLeadersRequest", "ElectLeadersResponse",
            "AlterPartitionReassignmentsResponse", "UnregisterBrokerResponse"} <= set(MESSAGES)
    assert {f"{op}DelegationToken{kind}" for op in ("Create", "Renew", "Expire", "Describe")
            for kind in ("Request", "Response")} <= set(MESSAGES)
    assert {"ConsumerProtocolSubscription", "ConsumerProtocolAssignment"} <= set(MESSAGES)


@pytest.mark.parametrize("name,version", CASES, ids=[f"{n}-v{v}" for n, v in CASES])
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_round_trip(name, version, data):
    cls = MESSAGES[name]
    obj = data.draw(message_strategy(name, version))
    wire = cls.encode_bytes(obj, version)
    back = cls.decode(wire, version)
    assert back == obj
    assert cls.encode_bytes(back, version) == wire


def test_a_nullable_struct_has_its_marker_byte():
    """Kafka writes a nullable struct field (ConsumerGroupHeartbeatResponse's
    Assignment) after an int8: -1 for null, 1 when present."""
    import uuid

    cls = MESSAGES["ConsumerGroupHeartbeatResponse"]
    head = b"\x00\x00\x00\x00" + b"\x00\x00" + b"\x00" + b"\x02m" + b"\x00\x00\x00\x05" + b"\x00\x00\x13\x88"
    none = cls(throttle_time_ms=0, error_code=0, error_message=None, member_id="m", member_epoch=5,
               heartbeat_interval_ms=5000, assignment=None)
    assert cls.encode_bytes(none, 1) == head + b"\xff" + b"\x00"
    tid = uuid.UUID(int=7)
    some = cls(throttle_time_ms=0, error_code=0, error_message=None, member_id="m", member_epoch=5,
               heartbeat_interval_ms=5000, assignment=cls.Assignment(topic_partitions=[
                   cls.TopicPartitions(topic_id=tid, partitions=[0, 2])]))
    wire = head + b"\x01" + b"\x02" + tid.bytes + b"\x03" + b"\x00\x00\x00\x00\x00\x00\x00\x02" + b"\x00" + b"\x00" + b"\x00"
    assert cls.encode_bytes(some, 1) == wire
    assert cls.decode(wire, 1) == some and cls.decode(head + b"\xff\x00", 1) == none
