"""Version negotiation and the error-code table."""

from __future__ import annotations

import pickle

import pytest

from kwire import errors
from kwire.protocol import client_ranges, negotiate, no_common_version
from kwire.protocol.versions import (API_NAMES, NoCommonVersionError, apiversions_retry_version, choose_versions,
                                     require_version)


def test_highest_common_version():
    broker = {0: (3, 9), 1: (4, 11), 3: (0, 12), 99: (0, 1)}
    ours = {0: (3, 13), 1: (4, 18), 3: (0, 13), 18: (0, 4)}
    assert choose_versions(broker, ours) == {0: 9, 1: 11, 3: 12}
    assert choose_versions({0: (0, 2)}, {0: (3, 13)}) == {}           # Kafka 4 dropped Produce < 3
    with pytest.raises(NoCommonVersionError, match=r"Produce \(key 0\): kwire speaks 3-13, the broker offers 0-2"):
        require_version({}, 0, {0: (0, 2)}, {0: (3, 13)})
    with pytest.raises(NoCommonVersionError, match="does not offer it"):
        require_version({}, 1, {}, ours)
    assert "kwire speaks" in str(no_common_version(1, (0, 3)))


def test_kwire_ranges_and_negotiation_use_the_generated_classes():
    ranges = client_ranges()
    assert ranges[1] == (4, 18) and ranges[0] == (3, 13) and ranges[18] == (0, 4)
    assert negotiate({1: (0, 12), 18: (0, 3)}) == {1: 12, 18: 3}
    assert API_NAMES[75] == "DescribeTopicPartitions" and len(API_NAMES) == 52


def test_apiversions_fallback_never_loops():
    assert apiversions_retry_version(35, {18: (0, 2)}, 4) == 2
    assert apiversions_retry_version(35, {18: (0, 3)}, 3) == 2        # never the same version again
    assert apiversions_retry_version(35, {}, 0) is None
    assert apiversions_retry_version(0, {18: (0, 4)}, 4) is None
    v, seen = 4, []
    while v is not None:
        seen.append(v)
        v = apiversions_retry_version(35, {18: (0, 9)}, v)
    assert seen == [4, 3, 2, 1, 0]


@pytest.mark.parametrize("code,name,retriable,metadata", [
    (1, "OffsetOutOfRangeError", False, False), (3, "UnknownTopicOrPartitionError", True, True),
    (6, "NotLeaderOrFollowerError", True, True), (7, "RequestTimedOutError", True, False),
    (15, "CoordinatorNotAvailableError", True, False), (16, "NotCoordinatorError", True, False),
    (25, "UnknownMemberIdError", False, False), (27, "RebalanceInProgressError", False, False),
    (35, "UnsupportedVersionError", False, False), (36, "TopicAlreadyExistsError", False, False),
    (41, "NotControllerError", True, False), (47, "InvalidProducerEpochError", False, False),
    (58, "SaslAuthenticationFailedError", False, False), (74, "FencedLeaderEpochError", True, True),
    (79, "MemberIdRequiredError", False, False), (-1, "UnknownServerError", False, False),
    (133, "ShareSessionLimitReachedError", False, False),
])
def test_error_table(code, name, retriable, metadata):
    cls = errors.error_for_code(code)
    assert cls.__name__ == name and getattr(errors, name) is cls
    assert (cls.code, cls.retriable, cls.invalid_metadata) == (code, retriable, metadata)
    assert issubclass(cls, errors.KafkaError) and cls.message


def test_error_context_pickling_and_unknown_codes():
    e = errors.NotLeaderOrFollowerError("leader moved", api="Produce", topic="t", partition=3)
    assert "NOT_LEADER_OR_FOLLOWER (6)" in str(e) and "topic 't'" in str(e) and "leader moved" in str(e)
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is type(e) and (back.topic, back.partition, back.api) == ("t", 3, "Produce")
    odd = errors.error_for_code(4242)("?")
    assert odd.code == 4242 and not odd.retriable and "4242" in str(odd)
    assert isinstance(pickle.loads(pickle.dumps(odd)), errors.UnknownErrorCodeError)
    with pytest.raises(errors.TopicAuthorizationFailedError):
        errors.raise_for_code(29, topic="t")
    errors.raise_for_code(0)


def test_v07_error_table():
    assert errors.error_for_v07_code(1).name == "OffsetOutOfRange"
    assert errors.error_for_v07_code(2).name == "InvalidMessage"
    assert errors.error_for_v07_code(4).name == "InvalidFetchSize"
    assert errors.error_for_v07_code(77) is errors.error_for_v07_code(-1)
