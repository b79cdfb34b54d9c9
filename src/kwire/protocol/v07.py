"""The Kafka 0.7 wire protocol (before the 0.8 redesign), as the 0.7 wire
format documents lay it out.

Requests
    Every request starts with REQUEST_LENGTH int32 (the bytes after it) and
    REQUEST_TYPE int16. Single requests (PRODUCE 0, FETCH 1, OFFSETS 4) go on
    with TOPIC_LENGTH int16, TOPIC (ASCII) and PARTITION int32, then their own
    fields. Multi-requests (MULTIFETCH 2, MULTIPRODUCE 3) go on with
    TOPICPARTITION_COUNT int16 and then, per topic-partition, TOPIC_LENGTH,
    TOPIC, PARTITION and the fields of the single request.

    ========  ===================================================
    PRODUCE   MESSAGES_LENGTH int32, MESSAGES (a 0.7 message set)
    FETCH     OFFSET int64, MAX_SIZE int32
    OFFSETS   TIME int64 (ms, or LATEST -1 / EARLIEST -2), MAX_NUMBER int32
    ========  ===================================================

Responses
    Every response starts with the 6-byte header RESPONSE_LENGTH int32 (the
    bytes after it) + ERROR_CODE int16. PRODUCE and MULTIPRODUCE get no
    response. A FETCH response is the header and then messages, the last one
    possibly cut short where MAX_SIZE ended. An OFFSETS response is the header,
    NUMBER_OFFSETS int32 and that many int64 offsets. A MULTIFETCH response is
    a header for the whole (its error code covering the request) followed by
    one FETCH response per topic-partition asked, back to back, in the order
    asked (so each carries its own 6-byte header and error code).

Message sets use kwire's 0.7 codec (:func:`kwire.encode_v07`,
:func:`kwire.decode_v07`); offsets are byte positions in the partition's log.

Builders return the whole request as bytes, size prefix included. Parsers take
the whole response (size prefix included) as untrusted bytes: anything that
does not fit raises :class:`kwire.errors.ProtocolError`, a nonzero error code
raises its 0.7 error class (:class:`kwire.errors.Kafka07Error` subclasses),
and corrupt messages raise the codec's :class:`kwire.errors.CorruptRecordError`.
A reader of a socket checks the size prefix with :func:`response_length`
before reading the rest.
"""

from __future__ import annotations

import struct
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

from kwire._codec import DecodeResult, decode_v07
from kwire.errors import ProtocolError, raise_for_v07_code

__all__ = [
    "PRODUCE",
    "FETCH",
    "MULTIFETCH",
    "MULTIPRODUCE",
    "OFFSETS",
    "REQUEST_NAMES",
    "LATEST",
    "EARLIEST",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "FetchRequest",
    "ProduceRequest",
    "produce_request",
    "multiproduce_request",
    "fetch_request",
    "multifetch_request",
    "offsets_request",
    "response_length",
    "parse_fetch_response",
    "parse_multifetch_response",
    "parse_offsets_response",
]

Buffer = Union[bytes, bytearray, memoryview]

PRODUCE, FETCH, MULTIFETCH, MULTIPRODUCE, OFFSETS = 0, 1, 2, 3, 4
#: REQUEST_TYPE -> name, as the 0.7 documents call them.
REQUEST_NAMES: Dict[int, str] = {PRODUCE: "PRODUCE", FETCH: "FETCH", MULTIFETCH: "MULTIFETCH",
                 MULTIPRODUCE: "MULTIPRODUCE", OFFSETS: "OFFSETS"}
#: OFFSETS ``time`` values: the offset the next message will get, and the first offset kept.
LATEST, EARLIEST = -1, -2
#: The largest response :func:`response_length` accepts unless told otherwise.
DEFAULT_MAX_RESPONSE_BYTES = 100 * 1024 * 1024

_i16 = struct.Struct(">h")
_i32 = struct.Struct(">i")
_head = struct.Struct(">ih")
_partition_fetch = struct.Struct(">iqi")     # PARTITION, OFFSET / TIME, MAX_SIZE / MAX_NUMBER
_partition_size = struct.Struct(">ii")       # PARTITION, MESSAGES_LENGTH


class FetchRequest(NamedTuple):
    """One topic-partition of a FETCH or MULTIFETCH request: read from byte
    ``offset`` of the partition's log, at most ``max_size`` bytes."""

    topic: str
    partition: int
    offset: int
    max_size: int


class ProduceRequest(NamedTuple):
    """One topic-partition of a MULTIPRODUCE request: ``messages`` is an
    encoded 0.7 message set (:func:`kwire.encode_v07`)."""

    topic: str
    partition: int
    messages: Buffer


# --------------------------------------------------------------- requests
def _pack(fmt: struct.Struct, what: str, *values: int) -> bytes:
    try:
        return fmt.pack(*values)
    except struct.error:
        raise ValueError(f"{what} {values} out of range for the 0.7 wire format") from None


def _topic(topic: str) -> bytes:
    """TOPIC_LENGTH and TOPIC."""
    try:
        raw = topic.encode("ascii")
    except UnicodeEncodeError:
        raise ValueError(f"0.7 topic names are ASCII: {topic!r}") from None
    return _pack(_i16, "topic length", len(raw)) + raw


def _frame(request_type: int, parts: List[Any]) -> bytes:
    """REQUEST_LENGTH, REQUEST_TYPE and the body."""
    body = b"".join(parts)
    return _pack(_i32, "request length", 2 + len(body)) + _i16.pack(request_type) + body


def _count(n: int) -> bytes:
    return _pack(_i16, "TOPICPARTITION_COUNT", n)


def _produce_part(topic: str, partition: int, messages: Buffer) -> List[Any]:
    size = memoryview(messages).nbytes
    return [_topic(topic), _pack(_partition_size, "partition, messages length", partition, size), messages]


def _fetch_part(topic: str, partition: int, offset: int, limit: int) -> List[Any]:
    return [_topic(topic), _pack(_partition_fetch, "partition, offset, size", partition, offset, limit)]


def produce_request(topic: str, partition: int, messages: Buffer) -> bytes:
    """PRODUCE ``messages`` (an encoded 0.7 message set) to ``topic``/``partition``.
    The broker sends no response."""
    return _frame(PRODUCE, _produce_part(topic, partition, messages))


def multiproduce_request(parts: Sequence[Union[ProduceRequest, Tuple[str, int, Buffer]]]) -> bytes:
    """MULTIPRODUCE: one ``(topic, partition, messages)`` per topic-partition.
    The broker sends no response."""
    chunks: List[Any] = [_count(len(parts))]
    for topic, partition, messages in parts:
        chunks += _produce_part(topic, partition, messages)
    return _frame(MULTIPRODUCE, chunks)


def fetch_request(topic: str, partition: int, offset: int, max_size: int) -> bytes:
    """FETCH at most ``max_size`` bytes of messages from byte ``offset`` of
    ``topic``/``partition``."""
    return _frame(FETCH, _fetch_part(topic, partition, offset, max_size))


def multifetch_request(fetches: Sequence[FetchRequest]) -> bytes:
    """MULTIFETCH: one FETCH per entry of ``fetches``, answered in that order
    (:func:`parse_multifetch_response`)."""
    chunks: List[Any] = [_count(len(fetches))]
    for f in fetches:
        chunks += _fetch_part(f.topic, f.partition, f.offset, f.max_size)
    return _frame(MULTIFETCH, chunks)


def offsets_request(topic: str, partition: int, time: int, max_number: int) -> bytes:
    """OFFSETS: up to ``max_number`` offsets of ``topic``/``partition``
    before ``time`` (ms since the epoch, or :data:`LATEST` / :data:`EARLIEST`)."""
    return _frame(OFFSETS, _fetch_part(topic, partition, time, max_number))


# -------------------------------------------------------------- responses
def response_length(prefix: Buffer, max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES) -> int:
    """RESPONSE_LENGTH from the first 4 bytes of a response: how many bytes
    follow. A socket reader calls this before reading (and allocating) the
    rest: a length below the 2-byte error code, or above ``max_bytes``,
    raises :class:`ProtocolError`."""
    if len(prefix) < 4:
        raise ProtocolError("truncated 0.7 response size", "0.7")
    length: int = _i32.unpack_from(prefix, 0)[0]
    if length < 2 or length > max_bytes:
        raise ProtocolError(f"0.7 response length {length} is not between 2 and {max_bytes}", "0.7")
    return length


def _view(data: Buffer) -> memoryview:
    view = memoryview(data)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def _header(buf: memoryview, pos: int, end: int, what: str) -> Tuple[int, int, int]:
    """The 6-byte response header at ``pos`` (the response must end by
    ``end``): (error code, start of the body, end of this response)."""
    if end - pos < 6:
        raise ProtocolError(f"truncated {what} response header: {end - pos} of 6 bytes", f"0.7 {what}")
    length, code = _head.unpack_from(buf, pos)
    if length < 2 or length > end - pos - 4:
        raise ProtocolError(f"{what} response length {length} does not fit the {end - pos - 4} bytes there",
                            f"0.7 {what}")
    return code, pos + 6, pos + 4 + length


def _whole(data: Buffer, what: str) -> Tuple[memoryview, int, int, int]:
    """The single response that ``data`` must be: (view, error code, start
    of the body, end)."""
    buf = _view(data)
    code, body, end = _header(buf, 0, len(buf), what)
    if end != len(buf):
        raise ProtocolError(f"{len(buf) - end} bytes after the {what} response", f"0.7 {what}")
    return buf, code, body, end


def _decode(part: memoryview, offset: int, topic: Optional[str], partition: Optional[int], check_crcs: bool,
            max_decompressed_bytes: Optional[int]) -> DecodeResult:
    if max_decompressed_bytes is None:
        return decode_v07(part, offset, check_crcs=check_crcs, topic=topic, partition=partition)
    return decode_v07(part, offset, check_crcs=check_crcs, topic=topic, partition=partition,
                      max_decompressed_bytes=max_decompressed_bytes)


def parse_fetch_response(data: Buffer, start_offset: int, *, topic: Optional[str] = None,
                         partition: Optional[int] = None, check_crcs: bool = True,
                         max_decompressed_bytes: Optional[int] = None) -> DecodeResult:
    """The messages of a FETCH response (the whole frame, size included) to
    a fetch from byte ``start_offset``.

    The last message may be cut short, as 0.7 brokers send them; the result
    (:func:`kwire.decode_v07`) says where to fetch next (``next_offset``).
    ``topic`` and ``partition`` only locate errors.
    """
    buf, code, body, end = _whole(data, "FETCH")
    raise_for_v07_code(code, api="FETCH", topic=topic, partition=partition, offset=start_offset)
    return _decode(buf[body:end], start_offset, topic, partition, check_crcs, max_decompressed_bytes)


def parse_multifetch_response(data: Buffer, fetches: Sequence[FetchRequest], *, check_crcs: bool = True,
                              max_decompressed_bytes: Optional[int] = None) -> List[DecodeResult]:
    """The messages of a MULTIFETCH response, one result per entry of
    ``fetches`` (the request it answers), in order. An error code, of the
    whole or of one part, raises its 0.7 error naming the part."""
    buf, code, pos, end = _whole(data, "MULTIFETCH")
    raise_for_v07_code(code, api="MULTIFETCH")
    out: List[DecodeResult] = []
    for f in fetches:
        part_code, body, part_end = _header(buf, pos, end, "MULTIFETCH part")
        raise_for_v07_code(part_code, api="MULTIFETCH", topic=f.topic, partition=f.partition, offset=f.offset)
        out.append(_decode(buf[body:part_end], f.offset, f.topic, f.partition, check_crcs, max_decompressed_bytes))
        pos = part_end
    if pos != end:
        raise ProtocolError(f"{end - pos} bytes after the {len(fetches)} parts of the MULTIFETCH response",
                            "0.7 MULTIFETCH")
    return out


def parse_offsets_response(data: Buffer) -> List[int]:
    """The offsets of an OFFSETS response, in the broker's order (descending)."""
    buf, code, pos, end = _whole(data, "OFFSETS")
    raise_for_v07_code(code, api="OFFSETS")
    if end - pos < 4:
        raise ProtocolError("truncated OFFSETS response: no NUMBER_OFFSETS", "0.7 OFFSETS")
    (n,) = _i32.unpack_from(buf, pos)
    pos += 4
    if n < 0 or n * 8 != end - pos:
        raise ProtocolError(f"NUMBER_OFFSETS {n} does not match the {end - pos} bytes that follow", "0.7 OFFSETS")
    return list(struct.unpack_from(f">{n}q", buf, pos))
