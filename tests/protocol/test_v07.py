"""Kafka 0.7 requests and responses against byte layouts worked out by hand
from the 0.7 wire-format diagrams (seeds 001 and 000). No 0.7 broker exists
to test against, so every expected frame below is spelled out field by field;
only the CRC32 of a payload and gzip'd inner messages are computed (with the
standard library, not kwire)."""

from __future__ import annotations

import gzip
import struct
import zlib
from typing import List

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kwire import encode_v07
from kwire.errors import (CorruptRecordError, CrcMismatchError, Kafka07Error, KafkaError, KwireError,
                          ProtocolError)
from kwire.protocol import v07

# ----------------------------------------------------------------- messages
# A 0.7 message (MAGIC 1): LENGTH int32, MAGIC int8, COMPRESSION int8, CHECKSUM int32 (CRC32 of PAYLOAD), PAYLOAD
HELLO = (
    b"\x00\x00\x00\x0b"                        # LENGTH 11 = magic 1 + compression 1 + checksum 4 + payload 5
    + b"\x01"                                  # MAGIC 1: the COMPRESSION byte is there
    + b"\x00"                                  # COMPRESSION 0: none
    + zlib.crc32(b"hello").to_bytes(4, "big")  # CHECKSUM
    + b"hello"                                 # PAYLOAD
)
# A 0.6 message (MAGIC 0): no COMPRESSION byte
OLD = (
    b"\x00\x00\x00\x08"                        # LENGTH 8 = magic 1 + checksum 4 + payload 3
    + b"\x00"                                  # MAGIC 0
    + zlib.crc32(b"old").to_bytes(4, "big")    # CHECKSUM
    + b"old"                                   # PAYLOAD
)


def _message(payload: bytes, compression: int = 0) -> bytes:
    """A MAGIC 1 message, laid out as HELLO above."""
    return ((1 + 1 + 4 + len(payload)).to_bytes(4, "big") + b"\x01" + bytes([compression])
            + zlib.crc32(payload).to_bytes(4, "big") + payload)


def _response(body: bytes, error: int = 0) -> bytes:
    """RESPONSE_LENGTH (error code + body) and ERROR_CODE, then the body."""
    return (2 + len(body)).to_bytes(4, "big") + error.to_bytes(2, "big", signed=True) + body


def test_our_encoder_agrees_with_the_hand_made_messages():
    assert encode_v07([b"hello"]) == HELLO
    assert encode_v07([b"old"], magic=0) == OLD


# ----------------------------------------------------------------- requests
def test_produce_request_layout():
    assert v07.produce_request("dogs", 3, HELLO) == (
        b"\x00\x00\x00\x1f"          # REQUEST_LENGTH 31 = type 2 + topic length 2 + "dogs" 4 + partition 4
                                     #   + messages length 4 + messages 15
        + b"\x00\x00"                # REQUEST_TYPE 0 = PRODUCE
        + b"\x00\x04" + b"dogs"      # TOPIC_LENGTH 4, TOPIC
        + b"\x00\x00\x00\x03"        # PARTITION 3
        + b"\x00\x00\x00\x0f"        # MESSAGES_LENGTH 15
        + HELLO                      # MESSAGES
    )


def test_produce_request_takes_any_buffer_and_an_empty_message_set():
    assert v07.produce_request("dogs", 3, memoryview(bytearray(HELLO))) == v07.produce_request("dogs", 3, HELLO)
    assert v07.produce_request("t", 0, b"") == (
        b"\x00\x00\x00\x0d"          # REQUEST_LENGTH 13 = 2 + 2 + 1 + 4 + 4
        + b"\x00\x00" + b"\x00\x01t" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00")


def test_multiproduce_request_layout():
    frame = v07.multiproduce_request([("a", 0, HELLO), v07.ProduceRequest("bb", 1, HELLO + OLD)])
    assert frame == (
        b"\x00\x00\x00\x45"          # REQUEST_LENGTH 69 = 2 + 2 + (2+1+4+4+15) + (2+2+4+4+27)
        + b"\x00\x03"                # REQUEST_TYPE 3 = MULTIPRODUCE
        + b"\x00\x02"                # TOPICPARTITION_COUNT 2
        + b"\x00\x01" + b"a"         # TOPIC_LENGTH, TOPIC
        + b"\x00\x00\x00\x00"        # PARTITION 0
        + b"\x00\x00\x00\x0f"        # MESSAGES_LENGTH 15
        + HELLO
        + b"\x00\x02" + b"bb"
        + b"\x00\x00\x00\x01"        # PARTITION 1
        + b"\x00\x00\x00\x1b"        # MESSAGES_LENGTH 27 = 15 + 12
        + HELLO + OLD
    )


def test_fetch_request_layout():
    assert v07.fetch_request("t", 2, 1234, 300_000) == (
        b"\x00\x00\x00\x15"                      # REQUEST_LENGTH 21 = 2 + 2 + 1 + 4 + 8 + 4
        + b"\x00\x01"                            # REQUEST_TYPE 1 = FETCH
        + b"\x00\x01" + b"t"                     # TOPIC_LENGTH, TOPIC
        + b"\x00\x00\x00\x02"                    # PARTITION 2
        + b"\x00\x00\x00\x00\x00\x00\x04\xd2"    # OFFSET 1234 (int64)
        + b"\x00\x04\x93\xe0"                    # MAX_SIZE 300000
    )


def test_multifetch_request_layout():
    frame = v07.multifetch_request([v07.FetchRequest("t", 0, 0, 100), v07.FetchRequest("uv", 1, 7, 200)])
    assert frame == (
        b"\x00\x00\x00\x2b"                      # REQUEST_LENGTH 43 = 2 + 2 + (2+1+4+8+4) + (2+2+4+8+4)
        + b"\x00\x02"                            # REQUEST_TYPE 2 = MULTIFETCH
        + b"\x00\x02"                            # TOPICPARTITION_COUNT 2
        + b"\x00\x01" + b"t" + b"\x00\x00\x00\x00"
        + b"\x00\x00\x00\x00\x00\x00\x00\x00"    # OFFSET 0
        + b"\x00\x00\x00\x64"                    # MAX_SIZE 100
        + b"\x00\x02" + b"uv" + b"\x00\x00\x00\x01"
        + b"\x00\x00\x00\x00\x00\x00\x00\x07"    # OFFSET 7
        + b"\x00\x00\x00\xc8"                    # MAX_SIZE 200
    )


def test_offsets_request_layout():
    assert v07.offsets_request("t", 0, v07.EARLIEST, 1) == (
        b"\x00\x00\x00\x15"                      # REQUEST_LENGTH 21
        + b"\x00\x04"                            # REQUEST_TYPE 4 = OFFSETS
        + b"\x00\x01" + b"t" + b"\x00\x00\x00\x00"
        + b"\xff\xff\xff\xff\xff\xff\xff\xfe"    # TIME -2 = EARLIEST
        + b"\x00\x00\x00\x01"                    # MAX_NUMBER 1
    )
    assert v07.offsets_request("t", 0, v07.LATEST, 2)[-12:] == b"\xff" * 8 + b"\x00\x00\x00\x02"
    assert v07.offsets_request("t", 0, 1_300_000_000_000, 10)[-12:-4] == struct.pack(">q", 1_300_000_000_000)


def test_request_builders_refuse_what_the_format_cannot_carry():
    with pytest.raises(ValueError, match="ASCII"):
        v07.fetch_request("café", 0, 0, 1)
    with pytest.raises(ValueError, match="out of range"):
        v07.fetch_request("t", 2**31, 0, 1)
    with pytest.raises(ValueError, match="out of range"):
        v07.offsets_request("t", 0, 2**63, 1)
    with pytest.raises(ValueError, match="topic length"):
        v07.produce_request("t" * 40_000, 0, b"")
    with pytest.raises(ValueError, match="TOPICPARTITION_COUNT"):
        v07.multifetch_request([v07.FetchRequest("t", 0, 0, 1)] * 32_768)


# ---------------------------------------------------------------- responses
def test_fetch_response_messages_and_their_byte_offsets():
    frame = (
        b"\x00\x00\x00\x1d"          # RESPONSE_LENGTH 29 = error code 2 + HELLO 15 + OLD 12
        + b"\x00\x00"                # ERROR_CODE 0 = NoError
        + HELLO + OLD
    )
    res = v07.parse_fetch_response(frame, 1000, topic="t", partition=0)
    assert [(r.offset, r.value) for r in res.records] == [(1000, b"hello"), (1015, b"old")]
    assert res.next_offset == 1027 and res.incomplete_size == 0


def test_fetch_response_with_a_cut_last_message():
    cut = _message(b"world!")[:7]                # MAX_SIZE ended inside the next message: not an error
    res = v07.parse_fetch_response(_response(HELLO + cut), 1000)
    assert [(r.offset, r.value) for r in res.records] == [(1000, b"hello")]
    assert res.next_offset == 1015                # resume at the cut message
    empty = v07.parse_fetch_response(b"\x00\x00\x00\x02\x00\x00", 55)
    assert empty.records == [] and empty.next_offset is None   # the codec's "nothing read": fetch at 55 again


def test_fetch_response_with_a_gzip_message_set():
    inner = _message(b"one") + _message(b"two")
    wrapper = _message(gzip.compress(inner), compression=1)   # COMPRESSION 1 = gzip, PAYLOAD = gzip'd messages
    res = v07.parse_fetch_response(_response(wrapper + HELLO), 0)
    # the inner messages have the offset of their wrapper: offsets are on the wrapper's boundaries
    assert [(r.offset, r.value) for r in res.records] == [(0, b"one"), (0, b"two"), (len(wrapper), b"hello")]


def test_fetch_response_with_a_bad_checksum():
    bad = HELLO[:-1] + b"!"
    with pytest.raises(CrcMismatchError) as info:
        v07.parse_fetch_response(_response(bad), 40, topic="t", partition=1)
    assert info.value.topic == "t" and info.value.partition == 1
    assert v07.parse_fetch_response(_response(bad), 40, check_crcs=False).records[0].value == b"hell!"


@pytest.mark.parametrize("code,cls,name", [
    (1, "Kafka07OffsetOutOfRangeError", "OffsetOutOfRange"),
    (2, "Kafka07InvalidMessageError", "InvalidMessage"),
    (3, "Kafka07WrongPartitionError", "WrongPartition"),
    (4, "Kafka07InvalidFetchSizeError", "InvalidFetchSize"),
    (-1, "Kafka07UnknownError", "Unknown"),
])
def test_fetch_response_error_codes(code, cls, name):
    frame = b"\x00\x00\x00\x02" + code.to_bytes(2, "big", signed=True)    # the header alone
    with pytest.raises(Kafka07Error) as info:
        v07.parse_fetch_response(frame, 5, topic="t", partition=9)
    err = info.value
    assert type(err).__name__ == cls and err.code == code and err.name == name
    assert (err.api, err.topic, err.partition, err.offset) == ("FETCH", "t", 9, 5)
    assert "topic 't'" in str(err) and "partition 9" in str(err) and "offset 5" in str(err)
    assert not isinstance(err, KafkaError)      # 0.7 codes are not the 0.8+ codes


def test_fetch_response_with_an_unknown_error_code_keeps_the_number():
    with pytest.raises(Kafka07Error) as info:
        v07.parse_fetch_response(b"\x00\x00\x00\x02\x00\x63", 0)            # ERROR_CODE 99
    assert info.value.code == 99 and "99" in str(info.value)


def test_truncated_and_hostile_fetch_responses():
    frame = _response(HELLO)
    for cut in range(len(frame)):                # every cut of the frame: the length no longer fits
        with pytest.raises(ProtocolError):
            v07.parse_fetch_response(frame[:cut], 0)
    with pytest.raises(ProtocolError, match="does not fit"):
        v07.parse_fetch_response(b"\x7f\xff\xff\xff\x00\x00", 0)            # RESPONSE_LENGTH 2**31-1
    with pytest.raises(ProtocolError, match="does not fit"):
        v07.parse_fetch_response(b"\x80\x00\x00\x00\x00\x00", 0)            # RESPONSE_LENGTH negative
    with pytest.raises(ProtocolError, match="does not fit"):
        v07.parse_fetch_response(b"\x00\x00\x00\x01\x00\x00", 0)            # shorter than the error code
    with pytest.raises(ProtocolError, match="bytes after"):
        v07.parse_fetch_response(frame + b"\x00", 0)


def test_response_length_guards_the_socket_read():
    assert v07.response_length(b"\x00\x00\x00\x1d") == 29
    assert v07.response_length(memoryview(b"\x00\x00\x01\x00\xff"), max_bytes=256) == 256
    for prefix in (b"\x00\x00\x00", b"\x00\x00\x00\x01", b"\xff\xff\xff\xff", b"\x00\x00\x01\x01"):
        with pytest.raises(ProtocolError):
            v07.response_length(prefix, max_bytes=256)


FETCHES = [v07.FetchRequest("t", 0, 0, 100), v07.FetchRequest("u", 1, 50, 100)]


def test_multifetch_response_is_one_fetch_response_per_request():
    frame = (
        b"\x00\x00\x00\x40"                      # RESPONSE_LENGTH 64 = 2 + part one 21 + part two 41
        + b"\x00\x00"                            # ERROR_CODE 0 for the whole
        + b"\x00\x00\x00\x11" + b"\x00\x00"      # part one: RESPONSE_LENGTH 17, ERROR_CODE 0
        + HELLO
        + b"\x00\x00\x00\x25" + b"\x00\x00"      # part two: RESPONSE_LENGTH 37 = 2 + 35, ERROR_CODE 0
        + HELLO + OLD + HELLO[:8]                # ends inside a message
    )
    a, b = v07.parse_multifetch_response(frame, FETCHES)
    assert [(r.offset, r.value) for r in a.records] == [(0, b"hello")]
    assert [(r.offset, r.value) for r in b.records] == [(50, b"hello"), (65, b"old")]
    assert b.next_offset == 77


def test_multifetch_response_errors():
    one, two = _response(HELLO), _response(HELLO)
    with pytest.raises(ProtocolError, match="bytes after"):                 # a part more than asked
        v07.parse_multifetch_response(_response(one + two), FETCHES[:1])
    with pytest.raises(ProtocolError, match="truncated"):                   # a part fewer than asked
        v07.parse_multifetch_response(_response(one), FETCHES)
    with pytest.raises(ProtocolError, match="does not fit"):                # a part longer than the whole
        v07.parse_multifetch_response(_response(one + two[:-1]), FETCHES)
    with pytest.raises(Kafka07Error, match="InvalidFetchSize") as info:     # an error in the second part
        v07.parse_multifetch_response(_response(one + _response(b"", 4)), FETCHES)
    assert (info.value.topic, info.value.partition, info.value.offset) == ("u", 1, 50)
    with pytest.raises(Kafka07Error, match="Unknown"):                      # an error for the whole
        v07.parse_multifetch_response(_response(b"", -1), FETCHES)
    assert v07.parse_multifetch_response(_response(b""), []) == []


def test_offsets_response():
    frame = (
        b"\x00\x00\x00\x16"                      # RESPONSE_LENGTH 22 = 2 + 4 + 2 * 8
        + b"\x00\x00"                            # ERROR_CODE 0
        + b"\x00\x00\x00\x02"                    # NUMBER_OFFSETS 2
        + b"\x00\x00\x00\x00\x00\x00\x03\x84"    # 900
        + b"\x00\x00\x00\x00\x00\x00\x00\x00"    # 0
    )
    assert v07.parse_offsets_response(frame) == [900, 0]
    assert v07.parse_offsets_response(b"\x00\x00\x00\x06\x00\x00\x00\x00\x00\x00") == []
    with pytest.raises(Kafka07Error, match="WrongPartition"):
        v07.parse_offsets_response(b"\x00\x00\x00\x02\x00\x03")


@pytest.mark.parametrize("frame", [
    b"\x00\x00\x00\x02\x00\x00",                                        # no NUMBER_OFFSETS
    b"\x00\x00\x00\x0e\x00\x00" + b"\x00\x00\x00\x02" + b"\x00" * 8,    # says 2, holds 1
    b"\x00\x00\x00\x0e\x00\x00" + b"\x7f\xff\xff\xff" + b"\x00" * 8,    # says 2**31-1: nothing allocated
    b"\x00\x00\x00\x0e\x00\x00" + b"\xff\xff\xff\xff" + b"\x00" * 8,    # negative count
    b"\x00\x00\x00\x0d\x00\x00" + b"\x00\x00\x00\x01" + b"\x00" * 7,    # an offset cut short
])
def test_hostile_offsets_responses(frame):
    with pytest.raises(ProtocolError):
        v07.parse_offsets_response(frame)


# ------------------------------------------------------------- properties
payload_lists = st.lists(st.binary(max_size=40), max_size=6)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(st.tuples(payload_lists, st.integers(0, 2**40)), max_size=4), cut=st.integers(0, 12))
def test_multifetch_round_trip(parts, cut):
    fetches = [v07.FetchRequest(f"topic{i}", i, offset, 1 << 20) for i, (_, offset) in enumerate(parts)]
    bodies = [b"".join(_message(p) for p in payloads) for payloads, _ in parts]
    if bodies:
        bodies[-1] += _message(b"cut short")[:cut]                          # a cut message at the end
    frame = _response(b"".join(_response(body) for body in bodies))
    results = v07.parse_multifetch_response(frame, fetches)
    for (payloads, offset), body, res in zip(parts, bodies, results):
        starts: List[int] = []
        pos = offset
        for p in payloads:
            starts.append(pos)
            pos += 10 + len(p)                                                # LENGTH + 6 header bytes + payload
        assert [(r.offset, r.value) for r in res.records] == list(zip(starts, payloads))
        assert res.next_offset == (pos if payloads else None)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_mangled_responses_raise_only_kwire_errors(data):
    frame = bytearray(_response(_response(HELLO + OLD) + _response(HELLO, 0)))
    for _ in range(data.draw(st.integers(1, 4))):
        frame[data.draw(st.integers(0, len(frame) - 1))] = data.draw(st.integers(0, 255))
    frame = frame[: data.draw(st.integers(0, len(frame)))]
    for parse in (lambda: v07.parse_multifetch_response(frame, FETCHES),
                  lambda: v07.parse_fetch_response(frame, 0),
                  lambda: v07.parse_offsets_response(frame)):
        try:
            parse()
        except (ProtocolError, Kafka07Error, CorruptRecordError) as e:
            assert isinstance(e, KwireError)


@settings(max_examples=60, deadline=None)
@given(topic=st.text(st.characters(max_codepoint=127), max_size=20), partition=st.integers(-2**31, 2**31 - 1),
       offset=st.integers(-2**63, 2**63 - 1), size=st.integers(-2**31, 2**31 - 1))
def test_fetch_and_offsets_requests_read_back(topic, partition, offset, size):
    for build, kind in ((v07.fetch_request, v07.FETCH), (v07.offsets_request, v07.OFFSETS)):
        frame = build(topic, partition, offset, size)
        length, request_type, topic_length = struct.unpack_from(">ihh", frame)
        assert (length, request_type, topic_length) == (len(frame) - 4, kind, len(topic))
        assert frame[8:8 + topic_length].decode("ascii") == topic
        assert struct.unpack_from(">iqi", frame, 8 + topic_length) == (partition, offset, size)
