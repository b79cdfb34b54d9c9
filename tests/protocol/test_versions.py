"""Version negotiation over plain ranges, and the ApiVersions fallback of
KIP-511 (a broker that does not know the ApiVersions version asked for
answers v0, error UNSUPPORTED_VERSION, and its own ApiVersions range)."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kwire.errors import KwireError
from kwire.protocol.versions import (API_NAMES, NoCommonVersionError, api_name, apiversions_retry_version,
                                     choose_versions, client_ranges, require_version)

# A Kafka 4.x client's ranges (KIP-896 dropped Produce < 3, Fetch < 4) and an old 2.x broker's.
OURS = {0: (3, 13), 1: (4, 18), 3: (0, 13), 18: (0, 4), 32: (1, 4)}
OLD_BROKER = {0: (0, 8), 1: (0, 11), 3: (0, 9), 18: (0, 3), 99: (0, 1)}


def test_highest_common_version_per_api():
    assert choose_versions(OLD_BROKER, OURS) == {0: 8, 1: 11, 3: 9, 18: 3}   # 32 missing on the broker
    assert choose_versions(OLD_BROKER, OURS, apis=[1, 18]) == {1: 11, 18: 3}
    assert choose_versions(OLD_BROKER, OURS, apis=[99, 77]) == {}           # kwire lacks both
    assert choose_versions({1: (12, 20)}, OURS) == {1: 18}                   # a newer broker
    assert choose_versions({1: (18, 18)}, OURS) == {1: 18}                   # touching ends


def test_no_overlap_leaves_the_api_out():
    assert choose_versions({0: (0, 2)}, OURS, apis=[0]) == {}               # too old for Kafka 4 clients
    assert choose_versions({0: (14, 20)}, OURS, apis=[0]) == {}             # too new
    assert choose_versions({0: (9, 4)}, OURS, apis=[0]) == {}               # reversed range overlaps nothing


def test_require_version_names_the_api_and_both_ranges():
    chosen = choose_versions({0: (0, 2), 1: (4, 12)}, OURS)
    assert require_version(chosen, 1, {1: (4, 12)}, OURS) == 12
    with pytest.raises(NoCommonVersionError) as info:
        require_version(chosen, 0, {0: (0, 2)}, OURS)
    err = info.value
    assert str(err) == ("no common version of Produce (API key 0): kwire speaks versions 3-13, "
                        "the broker offers versions 0-2")
    assert (err.api_key, err.api_name, err.client_range, err.broker_range) == (0, "Produce", (3, 13), (0, 2))
    assert isinstance(err, KwireError) and not err.retriable
    with pytest.raises(NoCommonVersionError, match="DescribeConfigs .*the broker does not offer it"):
        require_version(chosen, 32, {}, OURS)
    with pytest.raises(NoCommonVersionError, match="API 99 .*kwire does not speak it, the broker offers versions 0-1"):
        require_version({}, 99, OLD_BROKER, OURS)


def test_no_common_version_error_pickles():
    err = NoCommonVersionError.for_api(1, (4, 18), (0, 3))
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is NoCommonVersionError and str(back) == str(err)
    assert (back.api_name, back.client_range, back.broker_range) == ("Fetch", (4, 18), (0, 3))
    plain = pickle.loads(pickle.dumps(NoCommonVersionError("kwire does not speak Foo")))
    assert str(plain) == "kwire does not speak Foo" and plain.api_key is None


def test_client_ranges_from_message_classes():
    def msg(lo, hi):
        return SimpleNamespace(MIN_VERSION=lo, MAX_VERSION=hi)

    apis = {0: (msg(3, 13), msg(3, 13)), 1: (msg(4, 18), msg(4, 17)), 2: (msg(5, 9), msg(0, 4)), 3: (msg(0, 13),)}
    assert client_ranges(apis) == {0: (3, 13), 1: (4, 17), 3: (0, 13)}      # 2: request and response disagree


def test_client_ranges_of_the_generated_messages():
    messages = pytest.importorskip("kwire.protocol.messages")
    ranges = client_ranges(messages.APIS)
    assert set(ranges) <= set(API_NAMES)
    assert ranges[18][0] == 0                                                # ApiVersions v0 is always spoken


def test_api_names():
    assert len(API_NAMES) == 68                # with UnregisterBroker (64), the delegation token APIs
    #                                            (38-41), KIP-714's (71, 72) and KIP-932's (76-79, 90-92),
    #                                            from the kafka-clients jar
    assert [API_NAMES[k] for k in range(38, 42)] == ["CreateDelegationToken", "RenewDelegationToken",
                                                     "ExpireDelegationToken", "DescribeDelegationToken"]
    assert (API_NAMES[68], API_NAMES[69]) == ("ConsumerGroupHeartbeat", "ConsumerGroupDescribe")
    assert (API_NAMES[71], API_NAMES[72]) == ("GetTelemetrySubscriptions", "PushTelemetry")
    assert (API_NAMES[0], API_NAMES[18], API_NAMES[36], API_NAMES[75]) == \
        ("Produce", "ApiVersions", "SaslAuthenticate", "DescribeTopicPartitions")
    assert api_name(60) == "DescribeCluster" and api_name(1000) == "API 1000"


# ------------------------------------------------------- ApiVersions fallback
def test_retry_with_the_version_the_broker_offers():
    assert apiversions_retry_version(35, {18: (0, 2)}, 4) == 2
    assert apiversions_retry_version(35, {18: (0, 3), 0: (0, 9)}, 4) == 3


def test_a_broker_before_kip_511_lists_nothing_so_retry_v0():
    assert apiversions_retry_version(35, {}, 3) == 0


def test_give_up():
    assert apiversions_retry_version(0, {18: (0, 4)}, 4) is None             # no error: nothing to retry
    assert apiversions_retry_version(58, {18: (0, 4)}, 4) is None            # another error
    assert apiversions_retry_version(35, {18: (0, 4)}, 0) is None            # v0 refused: nothing lower
    assert apiversions_retry_version(35, {18: (2, 3)}, 2) is None            # below the broker's minimum


def test_never_the_same_version_again():
    assert apiversions_retry_version(35, {18: (0, 3)}, 3) == 2               # the broker claims what it refused
    assert apiversions_retry_version(35, {18: (0, 9)}, 4) == 3


@settings(max_examples=200, deadline=None)
@given(lo=st.integers(-3, 10), hi=st.integers(-3, 10), start=st.integers(0, 10), listed=st.booleans())
def test_the_fallback_always_ends(lo, hi, start, listed):
    ranges = {18: (lo, hi)} if listed else {}
    tried, version = [], start
    while version is not None:
        assert not tried or version < tried[-1]
        tried.append(version)
        version = apiversions_retry_version(35, ranges, version)
    assert len(tried) <= start + 1
