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

    assert len(APIS) == 36           # issue 3's 29, KIP-848's ConsumerGroupHeartbeat and ConsumerGroupDescribe,
    #                                  and issue 16's CreateAcls, DescribeAcls, DeleteAcls, AlterClientQuotas, DescribeClientQuotas
    assert {"ConsumerGroupHeartbeatRequest", "ConsumerGroupDescribeResponse"} <= set(MESSAGES)
    assert {"CreateAclsResponse", "DescribeAclsResponse", "DeleteAclsResponse", "AlterClientQuotasResponse",
            "DescribeClientQuotasResponse"} <= set(MESSAGES)
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
