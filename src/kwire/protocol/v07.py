"""The Kafka 0.7 wire protocol (before the 0.8 redesign), as the 0.7 wire
format documents describe it.

Requests start with REQUEST_LENGTH int32 and REQUEST_TYPE int16; single
requests (PRODUCE 0, FETCH 1, OFFSETS 4) go on with TOPIC_LENGTH int16, TOPIC,
PARTITION int32; multi-requests (MULTIFETCH 2, MULTIPRODUCE 3) with
TOPICPARTITION_COUNT int16 and then, per topic-partition, TOPIC_LENGTH,
TOPIC, PARTITION and the per-request fields. Every response starts with the
6-byte header RESPONSE_LENGTH int32 + ERROR_CODE int16. PRODUCE and
MULTIPRODUCE have no response. A MULTIFETCH response is the header followed
by one FETCH response (its own 6-byte header and messages) per
topic-partition asked, in order.

Message sets use kwire's 0.7 codec (:func:`kwire.encode_v07`,
:func:`kwire.decode_v07`): offsets are byte positions in the partition's log.
Parsers read untrusted bytes: any length that does not fit raises
:class:`kwire.errors.ProtocolError`; a nonzero error code raises the 0.7
error class (:func:`kwire.errors.error_for_v07_code`).
"""

from __future__ import annotations

import struct
from typing import List, NamedTuple, Sequence, Tuple

from kwire._codec import DecodeResult, decode_v07
from kwire.errors import ProtocolError, error_for_v07_code

__all__ = [
    "PRODUCE", "FETCH", "MULTIFETCH", "MULTIPRODUCE", "OFFSETS", "EARLIEST", "LATEST",
    "FetchRequest", "produce_request", "multiproduce_request", "fetch_request", "multifetch_request",
    "offsets_request", "parse_fetch_response", "parse_multifetch_response", "parse_offsets_response",
]

PRODUCE, FETCH, MULTIFETCH, MULTIPRODUCE, OFFSETS = 0, 1, 2, 3, 4
LATEST, EARLIEST = -1, -2

_h = struct.Struct(">h")
_i = struct.Struct(">i")
_q = struct.Struct(">q")
_head = struct.Struct(">ih")


class FetchRequest(NamedTuple):
    topic: str
    partition: int
    offset: int
    max_size: int


def _topic(topic: str) -> bytes:
    raw = topic.encode("ascii")
    if len(raw) > 32767:
        raise ValueError("topic name too long")
    return _h.pack(len(raw)) + raw


def _frame(request_type: int, body: bytes) -> bytes:
    return _i.pack(2 + len(body)) + _h.pack(request_type) + body


def produce_request(topic: str, partition: int, messages: bytes) -> bytes:
    """PRODUCE: ``messages`` is an encoded 0.7 message set (encode_v07)."""
    return _frame(PRODUCE, _topic(topic) + _i.pack(partition) + _i.pack(len(messages)) + bytes(messages))


def multiproduce_request(parts: Sequence[Tuple[str, int, bytes]]) -> bytes:
    """MULTIPRODUCE: (topic, partition, message set) per topic-partition."""
    body = bytearray(_h.pack(len(parts)))
    for topic, partition, messages in parts:
        body += _topic(topic) + _i.pack(partition) + _i.pack(len(messages)) + bytes(messages)
    return _frame(MULTIPRODUCE, bytes(body))


def fetch_request(topic: str, partition: int, offset: int, max_size: int) -> bytes:
    return _frame(FETCH, _topic(topic) + _i.pack(partition) + _q.pack(offset) + _i.pack(max_size))


def multifetch_request(fetches: Sequence[FetchRequest]) -> bytes:
    body = bytearray(_h.pack(len(fetches)))
    for f in fetches:
        body += _topic(f.topic) + _i.pack(f.partition) + _q.pack(f.offset) + _i.pack(f.max_size)
    return _frame(MULTIFETCH, bytes(body))


def offsets_request(topic: str, partition: int, time: int, max_number: int) -> bytes:
    """OFFSETS: ``time`` in ms since the epoch, or LATEST (-1) / EARLIEST (-2)."""
    return _frame(OFFSETS, _topic(topic) + _i.pack(partition) + _q.pack(time) + _i.pack(max_number))


def _header(buf: memoryview, pos: int, what: str) -> Tuple[int, int, int]:
    """(error code, start of the body, end of the response) at ``pos``."""
    if len(buf) - pos < 6:
        raise ProtocolError(f"truncated {what} response header", f"0.7 {what}")
    length, code = _head.unpack_from(buf, pos)
    if length < 2 or length > len(buf) - pos - 4:
        raise ProtocolError(f"{what} response length {length} does not fit the {len(buf) - pos - 4} bytes there",
                            f"0.7 {what}")
    return code, pos + 6, pos + 4 + length


def parse_fetch_response(data, start_offset: int, *, topic: str = None, partition: int = None,
                         check_crcs: bool = True) -> DecodeResult:
    """The messages of a FETCH response (whole frame, size included); the
    last message may be cut, as 0.7 brokers send them (see
    :func:`kwire.decode_v07`: ``next_offset`` says where to fetch next)."""
    buf = memoryview(data).cast("B")
    code, body, end = _header(buf, 0, "FETCH")
    if end != len(buf):
        raise ProtocolError(f"{len(buf) - end} bytes after the FETCH response", "0.7 FETCH")
    if code:
        raise error_for_v07_code(code)(f"topic {topic!r} partition {partition} offset {start_offset}")
    return decode_v07(buf[body:end], start_offset, check_crcs=check_crcs, topic=topic, partition=partition)


def parse_multifetch_response(data, fetches: Sequence[FetchRequest], *, check_crcs: bool = True) -> List[DecodeResult]:
    """One result per fetch asked, in order."""
    buf = memoryview(data).cast("B")
    code, pos, end = _header(buf, 0, "MULTIFETCH")
    if end != len(buf):
        raise ProtocolError(f"{len(buf) - end} bytes after the MULTIFETCH response", "0.7 MULTIFETCH")
    if code:
        raise error_for_v07_code(code)("MULTIFETCH")
    out = []
    for f in fetches:
        sub_code, body, sub_end = _header(buf[:end], pos, "MULTIFETCH part")
        if sub_code:
            raise error_for_v07_code(sub_code)(f"topic {f.topic!r} partition {f.partition} offset {f.offset}")
        out.append(decode_v07(buf[body:sub_end], f.offset, check_crcs=check_crcs, topic=f.topic, partition=f.partition))
        pos = sub_end
    if pos != end:
        raise ProtocolError(f"MULTIFETCH response holds more parts than the {len(fetches)} fetches asked",
                            "0.7 MULTIFETCH")
    return out


def parse_offsets_response(data) -> List[int]:
    """The offsets of an OFFSETS response (descending, as the broker sends them)."""
    buf = memoryview(data).cast("B")
    code, pos, end = _header(buf, 0, "OFFSETS")
    if end != len(buf):
        raise ProtocolError(f"{len(buf) - end} bytes after the OFFSETS response", "0.7 OFFSETS")
    if code:
        raise error_for_v07_code(code)("OFFSETS")
    if end - pos < 4:
        raise ProtocolError("truncated OFFSETS response", "0.7 OFFSETS")
    (n,) = _i.unpack_from(buf, pos)
    pos += 4
    if n < 0 or n * 8 != end - pos:
        raise ProtocolError(f"OFFSETS count {n} does not match the {end - pos} bytes that follow", "0.7 OFFSETS")
    return list(struct.unpack_from(f">{n}q", buf, pos))
