"""The error-code tables as exception classes: Kafka's (0.8 to 4.x) and
Kafka 0.7's. Expected codes, names and flags are written out here from
Kafka's own table (``Errors`` and the exception classes' superclasses:
RetriableException, InvalidMetadataException), not read from kwire's."""

from __future__ import annotations

import pickle

import pytest

import kwire
from kwire import errors
from kwire.error_codes import ERROR_CODES, V07_ERROR_CODES


@pytest.mark.parametrize("code,name,retriable,invalid_metadata", [
    (-1, "UnknownServerError", False, False),
    (1, "OffsetOutOfRangeError", False, False),
    (2, "CorruptMessageError", True, False),
    (3, "UnknownTopicOrPartitionError", True, True),
    (5, "LeaderNotAvailableError", True, True),
    (6, "NotLeaderOrFollowerError", True, True),
    (7, "RequestTimedOutError", True, False),
    (8, "BrokerNotAvailableError", False, False),
    (13, "NetworkError", True, True),
    (15, "CoordinatorNotAvailableError", True, False),
    (16, "NotCoordinatorError", True, False),
    (17, "InvalidTopicError", False, False),
    (25, "UnknownMemberIdError", False, False),
    (27, "RebalanceInProgressError", False, False),
    (35, "UnsupportedVersionError", False, False),
    (36, "TopicAlreadyExistsError", False, False),
    (41, "NotControllerError", True, False),
    (47, "InvalidProducerEpochError", False, False),
    (51, "ConcurrentTransactionsError", True, False),
    (56, "KafkaStorageError", True, True),
    (58, "SaslAuthenticationFailedError", False, False),
    (74, "FencedLeaderEpochError", True, True),
    (75, "UnknownLeaderEpochError", True, False),
    (79, "MemberIdRequiredError", False, False),
    (84, "ElectionNotNeededError", True, True),      # Kafka files it under InvalidMetadataException
    (89, "ThrottlingQuotaExceededError", True, False),
    (100, "UnknownTopicIdError", True, True),
    (120, "TransactionAbortableError", False, False),
    (129, "RebootstrapRequiredError", False, False),
    (133, "ShareSessionLimitReachedError", True, False),
])
def test_error_table_spot_checks(code, name, retriable, invalid_metadata):
    cls = errors.error_for_code(code)
    assert cls.__name__ == name and getattr(errors, name) is cls and name in errors.__all__
    assert (cls.code, cls.retriable, cls.invalid_metadata) == (code, retriable, invalid_metadata)
    assert issubclass(cls, errors.KafkaError) and issubclass(cls, errors.KwireError)
    assert cls.message.endswith(".") and cls.__doc__


def test_table_is_complete_and_consistent():
    codes = [row[0] for row in ERROR_CODES]
    assert codes == list(range(-1, 134))                         # -1 to 133, each once, in order
    names = {errors.error_for_code(c).__name__ for c in codes}
    assert len(names) == len(codes)
    for code in codes:
        cls = errors.error_for_code(code)
        assert getattr(errors, cls.__name__) is cls and cls.code == code
        assert cls.retriable or not cls.invalid_metadata         # stale metadata is always retriable
    assert errors.error_for_code(6).name == "NOT_LEADER_OR_FOLLOWER"
    assert sum(errors.error_for_code(c).invalid_metadata for c in codes) == 13
    assert sum(errors.error_for_code(c).retriable for c in codes) == 32     # 13 + 19 retriable ones


def test_no_error():
    assert errors.error_for_code(0) is errors.NoError and errors.NoError.code == 0
    assert errors.raise_for_code(0, "ignored", topic="t") is None


def test_raise_for_code_with_context():
    with pytest.raises(errors.UnknownTopicOrPartitionError) as info:
        errors.raise_for_code(3, api="Metadata", topic="orders", partition=7)
    err = info.value
    assert isinstance(err, kwire.KafkaError) and err.retriable and err.invalid_metadata
    assert (err.api, err.topic, err.partition, err.error_message) == ("Metadata", "orders", 7, None)
    assert str(err) == ("UNKNOWN_TOPIC_OR_PARTITION (3): This server does not host this topic-partition. "
                        "(Metadata, topic 'orders', partition 7)")


def test_message_carries_the_brokers_text_and_any_context():
    err = errors.OffsetOutOfRangeError("asked 10, log starts at 20", api="Fetch", topic="t", partition=0,
                                       offset=10, node=2)
    text = str(err)
    assert text.startswith("OFFSET_OUT_OF_RANGE (1): The requested offset")
    assert "Broker says: asked 10, log starts at 20" in text
    assert "(Fetch, topic 't', partition 0, offset 10, node 2)" in text
    assert err.context == {"node": 2}
    assert str(errors.RequestTimedOutError()) == "REQUEST_TIMED_OUT (7): The request timed out."


def test_pickling_keeps_class_and_context():
    err = errors.NotLeaderOrFollowerError("leader moved", api="Produce", topic="t", partition=3, node=1)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is errors.NotLeaderOrFollowerError and str(back) == str(err)
    assert (back.error_message, back.api, back.topic, back.partition, back.context) == \
        ("leader moved", "Produce", "t", 3, {"node": 1})
    for other in (errors.ProtocolError("short frame", "Fetch", 12),
                  errors.CrcMismatchError("bad crc", "t", 1, 99)):
        again = pickle.loads(pickle.dumps(other))
        assert type(again) is type(other) and str(again) == str(other)


@pytest.mark.parametrize("code", [134, 999, -5, 32767])
def test_unknown_codes_keep_their_number(code):
    cls = errors.error_for_code(code)
    assert cls is errors.error_for_code(code)                    # one class per code
    assert issubclass(cls, errors.UnknownErrorCodeError) and issubclass(cls, errors.KafkaError)
    assert cls.code == code and not cls.retriable and not cls.invalid_metadata
    err = cls("from the future", topic="t")
    assert str(code) in str(err) and "does not know" in str(err)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is cls and back.code == code and str(back) == str(err)
    with pytest.raises(errors.UnknownErrorCodeError):
        errors.raise_for_code(code)


def test_names_not_in_the_table_are_missing():
    with pytest.raises(AttributeError):
        errors.NoSuchThingError
    assert not hasattr(errors, "UnknownErrorCode999Error")


def test_top_level_exports():
    assert kwire.KafkaError is errors.KafkaError and kwire.ProtocolError is errors.ProtocolError


# ---------------------------------------------------------------- Kafka 0.7
@pytest.mark.parametrize("code,name,cls_name", [
    (-1, "Unknown", "Kafka07UnknownError"),
    (1, "OffsetOutOfRange", "Kafka07OffsetOutOfRangeError"),
    (2, "InvalidMessage", "Kafka07InvalidMessageError"),
    (3, "WrongPartition", "Kafka07WrongPartitionError"),
    (4, "InvalidFetchSize", "Kafka07InvalidFetchSizeError"),
])
def test_v07_table(code, name, cls_name):
    cls = errors.error_for_v07_code(code)
    assert (cls.__name__, cls.name, cls.code) == (cls_name, name, code)
    assert getattr(errors, cls_name) is cls and issubclass(cls, errors.Kafka07Error)
    assert not issubclass(cls, errors.KafkaError) and not cls.retriable


def test_v07_codes_mean_other_things_than_the_later_ones():
    assert errors.error_for_v07_code(3).name == "WrongPartition"
    assert errors.error_for_code(3).name == "UNKNOWN_TOPIC_OR_PARTITION"
    assert [row[0] for row in V07_ERROR_CODES] == [-1, 0, 1, 2, 3, 4]


def test_v07_no_error_unknown_codes_and_pickling():
    assert errors.error_for_v07_code(0) is errors.Kafka07NoError
    assert errors.raise_for_v07_code(0) is None
    odd = errors.error_for_v07_code(77)
    assert issubclass(odd, errors.Kafka07UnknownError) and odd.code == 77
    with pytest.raises(errors.Kafka07OffsetOutOfRangeError) as info:
        errors.raise_for_v07_code(1, api="FETCH", topic="t", partition=0, offset=15)
    err = info.value
    assert str(err) == ("Kafka 0.7 OffsetOutOfRange (1): Offset requested is no longer available on the server "
                        "(FETCH, topic 't', partition 0, offset 15)")
    for e in (err, odd("detail")):
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is type(e) and str(back) == str(e)


def test_error_for_names_the_acl_or_quota_entity():
    """Admin's ACL and quota calls locate a refusal by what it was about
    (``acl=``, ``entity=``), as other calls do by topic and partition."""
    from kwire import protocol
    from kwire.errors import ClusterAuthorizationFailedError

    e = protocol.error_for(31, api="CreateAcls", message="denied", acl="topic orders for User:bob")
    assert isinstance(e, ClusterAuthorizationFailedError) and e.context == {"acl": "topic orders for User:bob"}
    assert "CreateAcls" in str(e) and "User:bob" in str(e)
    assert "'user': 'bob'" in str(protocol.error_for(31, api="AlterClientQuotas", entity={"user": "bob"}))
