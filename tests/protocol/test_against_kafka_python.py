"""Byte-for-byte agreement with kafka-python 3.0.12's protocol classes (an
independent implementation generated from Kafka's JSON): kafka-python
decodes what kwire encodes and re-encodes it to the same bytes, and kwire
decodes kafka-python's bytes back to the original message."""

from __future__ import annotations

import importlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kwire.protocol import MESSAGES

from .schema import message_strategy

KP = {
    "ApiVersionsRequest": "kafka.protocol.metadata.api_versions", "ApiVersionsResponse": "kafka.protocol.metadata.api_versions",
    "MetadataRequest": "kafka.protocol.metadata.metadata", "MetadataResponse": "kafka.protocol.metadata.metadata",
    "FindCoordinatorRequest": "kafka.protocol.metadata.find_coordinator",
    "FindCoordinatorResponse": "kafka.protocol.metadata.find_coordinator",
}


def _kp_class(name):
    for mod in [KP.get(name)] + ["kafka.protocol.producer", "kafka.protocol.consumer", "kafka.protocol.admin",
                                 "kafka.protocol.sasl", "kafka.protocol.metadata"]:
        if mod is None:
            continue
        try:
            m = importlib.import_module(mod)
        except ImportError:
            continue
        if hasattr(m, name):
            return getattr(m, name)
    return None


SAMPLE = ["ApiVersionsRequest", "ApiVersionsResponse", "MetadataRequest", "MetadataResponse", "ProduceRequest",
          "ProduceResponse", "FetchRequest", "FetchResponse", "ListOffsetsRequest", "ListOffsetsResponse",
          "FindCoordinatorResponse", "JoinGroupRequest", "SyncGroupResponse", "OffsetCommitRequest",
          "OffsetFetchResponse", "CreateTopicsRequest", "DescribeConfigsResponse", "SaslAuthenticateRequest"]


def _cases():
    out = []
    for name in SAMPLE:
        kp = _kp_class(name)
        if kp is None:
            continue
        ours = MESSAGES[name]
        lo, hi = max(ours.MIN_VERSION, kp.min_version), min(ours.MAX_VERSION, kp.max_version)
        for v in sorted({lo, (lo + hi) // 2, hi}):
            if lo <= v <= hi:
                out.append((name, v))
    return out


CASES = _cases()


def test_the_sample_is_covered():
    assert len({n for n, _ in CASES}) >= 12, CASES


def _tagless(obj):
    """kafka-python drops unknown tagged fields: compare without them."""
    if hasattr(obj, "_FIELDS"):
        obj.unknown_tags = None
        for f in obj._FIELDS:
            _tagless(getattr(obj, f))
    elif isinstance(obj, list):
        for x in obj:
            _tagless(x)
    return obj


@pytest.mark.parametrize("name,version", CASES, ids=[f"{n}-v{v}" for n, v in CASES])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_kafka_python_agrees(name, version, data):
    ours = MESSAGES[name]
    kp = _kp_class(name)
    obj = _tagless(data.draw(message_strategy(name, version)))
    if name == "ApiVersionsResponse":
        obj.error_code = 0      # an error answer has a v0 body whatever was asked: test_apiversions_error_body_is_v0
    wire = ours.encode_bytes(obj, version)
    theirs = kp.decode(wire, version=version)
    again = theirs.encode()          # a decoded message keeps its version
    assert bytes(again) == wire
    assert ours.decode(bytes(again), version) == obj


def test_apiversions_error_body_is_v0():
    from kwire.protocol import decode_response, messages

    r = messages.ApiVersionsResponse
    body = r(error_code=35, api_keys=[r.ApiVersion(api_key=18, min_version=0, max_version=2)])
    frame = b"\0\0\0\x07" + r.encode_bytes(body, 0)          # correlation id 7, header v0
    corr, got = decode_response(frame, r, 3)                     # we asked for v3
    assert corr == 7 and got.error_code == 35 and got.api_keys[0].max_version == 2
    kp = _kp_class("ApiVersionsResponse").decode(r.encode_bytes(body, 0), version=3)
    assert kp.error_code == 35
