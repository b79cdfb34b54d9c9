"""Untrusted response bytes: every truncation, hostile lengths and counts,
and random garbage give a ProtocolError naming the API and version; never
another exception, a hang or a large allocation."""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kwire.errors import ProtocolError
from kwire.protocol import MESSAGES, decode_response, messages as m


def _sample(name, version):
    cls = MESSAGES[name]
    if name == "FetchResponse":
        obj = cls(responses=[cls.FetchableTopicResponse(topic="topic", topic_id=None, partitions=[
            cls.PartitionData(partition_index=i, high_watermark=10, records=b"r" * 40,
                              aborted_transactions=[cls.AbortedTransaction(producer_id=1, first_offset=2)])
            for i in range(3)])])
    elif name == "MetadataResponse":
        obj = cls(brokers=[cls.MetadataResponseBroker(node_id=1, host="h", port=9092)], cluster_id="c",
                  topics=[cls.MetadataResponseTopic(name="t", partitions=[
                      cls.MetadataResponsePartition(partition_index=0, leader_id=1, replica_nodes=[1], isr_nodes=[1])])])
    elif name == "ApiVersionsResponse":
        obj = cls(api_keys=[cls.ApiVersion(api_key=k, min_version=0, max_version=5) for k in range(5)])
    elif name == "ProduceResponse":
        obj = cls(responses=[cls.TopicProduceResponse(name="t", partition_responses=[
            cls.PartitionProduceResponse(index=0, base_offset=5)])])
    else:
        obj = cls()
    return cls, cls.encode_bytes(obj, version)


CASES = [("FetchResponse", 4), ("FetchResponse", 11), ("FetchResponse", 12), ("FetchResponse", 18),
         ("MetadataResponse", 1), ("MetadataResponse", 9), ("MetadataResponse", 12),
         ("ApiVersionsResponse", 0), ("ApiVersionsResponse", 3), ("ProduceResponse", 3), ("ProduceResponse", 9)]


@pytest.mark.parametrize("name,version", CASES)
def test_every_truncation_is_a_protocol_error(name, version):
    cls, wire = _sample(name, version)
    cls.decode(wire, version)
    for cut in range(len(wire)):
        with pytest.raises(ProtocolError) as e:
            cls.decode(wire[:cut], version)
        assert f"v{version}" in str(e.value)
    with pytest.raises(ProtocolError, match="left over"):
        cls.decode(wire + b"\0", version)


@pytest.mark.parametrize("flexible", [False, True])
def test_huge_counts_and_lengths_fail_fast_without_allocating(flexible):
    version = 12 if flexible else 4
    cls = m.MetadataResponse
    for hostile in (b"\x7f\xff\xff\xff", b"\xff\xff\xff\xfe"):
        if flexible:
            # throttle, brokers count as an unsigned varint of 2**31
            wire = struct.pack(">i", 0) + b"\x80\x80\x80\x80\x08"
        else:
            wire = struct.pack(">i", 0) + hostile
        tracemalloc.start()
        with pytest.raises(ProtocolError):
            cls.decode(wire + b"\0" * 16, version)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert peak < 1 << 20
    # a string length past the end
    with pytest.raises(ProtocolError, match="truncated"):
        m.FindCoordinatorResponse.decode(struct.pack(">ihh", 0, 0, 30000) + b"x", 1)
    # an over-long varint
    with pytest.raises(ProtocolError, match="varint"):
        m.ApiVersionsResponse.decode(b"\0\0" + b"\xff" * 12, 3)


def test_bad_utf8_and_negative_lengths():
    with pytest.raises(ProtocolError, match="UTF-8"):
        m.FindCoordinatorResponse.decode(struct.pack(">ihh", 0, 0, 1) + b"\xff" + b"\0" * 20, 1)
    with pytest.raises(ProtocolError, match="length"):
        m.FindCoordinatorResponse.decode(struct.pack(">ihhih", 0, 0, -1, 1, -5) + b"\0" * 20, 1)


NAMES = ["FetchResponse", "MetadataResponse", "ProduceResponse", "JoinGroupResponse", "DescribeConfigsResponse",
         "OffsetFetchResponse", "ListOffsetsResponse"]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(NAMES), version=st.integers(0, 20), junk=st.binary(max_size=200))
def test_garbage_raises_only_protocol_errors(name, version, junk):
    cls = MESSAGES[name]
    version = cls.MIN_VERSION + version % (cls.MAX_VERSION - cls.MIN_VERSION + 1)
    try:
        cls.decode(junk, version)
    except ProtocolError:
        pass


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=64))
def test_garbage_frames(data):
    try:
        decode_response(data, m.FetchResponse, 12)
    except ProtocolError:
        pass
