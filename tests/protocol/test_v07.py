"""Kafka 0.7 requests and responses against byte layouts worked out by hand
from the 0.7 wire-format diagrams (seeds 001 and 000). No 0.7 broker exists
to test against, so every expected frame below is spelled out field by field."""

from __future__ import annotations

import zlib

import pytest

from kwire import encode_v07
from kwire.errors import Kafka07Error, ProtocolError
from kwire.protocol import v07

# One uncompressed 0.7 message with MAGIC 1: LENGTH, MAGIC, COMPRESSION, CRC32(payload), PAYLOAD
PAYLOAD = b"hello"
MSG = (
    (1 + 1 + 4 + 5).to_bytes(4, "big")        # LENGTH: magic + compression + crc + payload = 11
    + b"\x01"                                  # MAGIC 1
    + b"\x00"                                  # COMPRESSION none
    + zlib.crc32(PAYLOAD).to_bytes(4, "big")   # CRC32 of the payload
    + PAYLOAD
)


def test_our_message_encoding_is_the_hand_made_one():
    assert encode_v07([PAYLOAD]) == MSG


def test_produce_request_layout():
    frame = v07.produce_request("dogs", 3, MSG)
    expect = (
        (2 + 2 + 4 + 4 + 4 + len(MSG)).to_bytes(4, "big")   # REQUEST_LENGTH (all after this field)
        + b"\x00\x00"                                        # REQUEST_TYPE 0 = PRODUCE
        + b"\x00\x04" + b"dogs"                              # TOPIC_LENGTH, TOPIC
        + b"\x00\x00\x00\x03"                                # PARTITION 3
        + len(MSG).to_bytes(4, "big")                        # MESSAGES_LENGTH
        + MSG
    )
    assert frame == expect


def test_multiproduce_request_layout():
    frame = v07.multiproduce_request([("a", 0, MSG), ("bb", 1, MSG + MSG)])
    body = (
        b"\x00\x03"                                          # REQUEST_TYPE 3 = MULTIPRODUCE
        + b"\x00\x02"                                        # TOPICPARTITION_COUNT
        + b"\x00\x01a" + b"\x00\x00\x00\x00" + len(MSG).to_bytes(4, "big") + MSG
        + b"\x00\x02bb" + b"\x00\x00\x00\x01" + (2 * len(MSG)).to_bytes(4, "big") + MSG + MSG
    )
    assert frame == len(body).to_bytes(4, "big") + body


def test_fetch_and_multifetch_request_layout():
    assert v07.fetch_request("t", 2, 1234, 300_000) == (
        (2 + 2 + 1 + 4 + 8 + 4).to_bytes(4, "big")
        + b"\x00\x01"                                        # REQUEST_TYPE 1 = FETCH
        + b"\x00\x01t" + b"\x00\x00\x00\x02"
        + (1234).to_bytes(8, "big")                          # OFFSET int64
        + (300_000).to_bytes(4, "big")                       # MAX_SIZE int32
    )
    frame = v07.multifetch_request([v07.FetchRequest("t", 0, 0, 100), v07.FetchRequest("u", 1, 7, 200)])
    body = (b"\x00\x02" + b"\x00\x02"                        # MULTIFETCH, 2 topic-partitions
            + b"\x00\x01t" + b"\x00\x00\x00\x00" + (0).to_bytes(8, "big") + (100).to_bytes(4, "big")
            + b"\x00\x01u" + b"\x00\x00\x00\x01" + (7).to_bytes(8, "big") + (200).to_bytes(4, "big"))
    assert frame == len(body).to_bytes(4, "big") + body


def test_offsets_request_and_response():
    assert v07.offsets_request("t", 0, v07.EARLIEST, 1) == (
        (2 + 2 + 1 + 4 + 8 + 4).to_bytes(4, "big") + b"\x00\x04" + b"\x00\x01t" + b"\x00\x00\x00\x00"
        + b"\xff" * 7 + b"\xfe" + b"\x00\x00\x00\x01")
    response = (2 + 4 + 16).to_bytes(4, "big") + b"\x00\x00" + b"\x00\x00\x00\x02" \
        + (900).to_bytes(8, "big") + (0).to_bytes(8, "big")
    assert v07.parse_offsets_response(response) == [900, 0]
    with pytest.raises(ProtocolError):
        v07.parse_offsets_response(response[:-1])
    with pytest.raises(ProtocolError):                        # count says 3, bytes hold 2
        v07.parse_offsets_response(response[:6] + b"\x00\x00\x00\x03" + response[10:])


def _fetch_response(messages: bytes, error: int = 0) -> bytes:
    return (2 + len(messages)).to_bytes(4, "big") + error.to_bytes(2, "big", signed=True) + messages


def test_fetch_response_with_a_cut_last_message():
    second = encode_v07([b"world!"])
    res = v07.parse_fetch_response(_fetch_response(MSG + second[:7]), 1000, topic="t", partition=0)
    assert [(r.offset, r.value) for r in res.records] == [(1000, PAYLOAD)]
    assert res.next_offset == 1000 + len(MSG)                  # byte offsets: resume at the cut message


def test_fetch_response_errors():
    with pytest.raises(Kafka07Error, match="OffsetOutOfRange"):
        v07.parse_fetch_response(_fetch_response(b"", 1), 5, topic="t", partition=0)
    with pytest.raises(Kafka07Error, match="WrongPartition"):
        v07.parse_fetch_response(_fetch_response(b"", 3), 5)
    for cut in range(6):
        with pytest.raises(ProtocolError):
            v07.parse_fetch_response(_fetch_response(MSG)[:cut], 0)
    with pytest.raises(ProtocolError, match="does not fit"):
        v07.parse_fetch_response(b"\x7f\xff\xff\xff\x00\x00", 0)


def test_multifetch_response_is_one_fetch_response_per_request():
    parts = _fetch_response(MSG) + _fetch_response(MSG + MSG)
    frame = (2 + len(parts)).to_bytes(4, "big") + b"\x00\x00" + parts
    fetches = [v07.FetchRequest("t", 0, 0, 100), v07.FetchRequest("t", 1, 50, 100)]
    a, b = v07.parse_multifetch_response(frame, fetches)
    assert [r.offset for r in a.records] == [0]
    assert [r.offset for r in b.records] == [50, 50 + len(MSG)]
    with pytest.raises(ProtocolError, match="more parts"):
        v07.parse_multifetch_response(frame, fetches[:1])
    with pytest.raises(ProtocolError):
        v07.parse_multifetch_response(frame, fetches + [v07.FetchRequest("t", 2, 0, 1)])
    bad_parts = _fetch_response(b"", 4) + _fetch_response(MSG)
    bad = (2 + len(bad_parts)).to_bytes(4, "big") + b"\x00\x00" + bad_parts
    with pytest.raises(Kafka07Error, match="InvalidFetchSize"):
        v07.parse_multifetch_response(bad, fetches)
